"""Persistence: the chat database (docs/ARCHITECTURE.md).

`ChatStore` (chats.py) is what the rest of the app uses; behind it the schema
and its migrations (schema.py), the writer thread that never blocks the GUI
(writer.py), the journal of changes not yet written (journal.py), the
read-only copy of a damaged database (readonly.py), and at start the checks
and the dialog for a database that cannot be used (db_open.py, db_dialog.py).
"""

from .chats import MIGRATIONS, ChatStore

__all__ = ["MIGRATIONS", "ChatStore"]
