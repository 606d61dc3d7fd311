"""The branch a chat shows, read with few queries: the chat's (id, parent)
pairs once, then its rows in one pass (or, for a short branch of a chat with
many versions, by id); the versions come from the same pairs.

Qt-free; app/store/chats.py calls it with its reader. Opening a 100,000-message
chat took 200 queries of 500 ids and a second read of every pair (issue 30).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable

from .tree import Links, shown_path, versions_of

Read = Callable[[str, tuple], list[sqlite3.Row]]
CHUNK = 500  # SQLite's bound-parameter limit, with room


def read_branch(read: Read, chat_id: int) -> tuple[list[sqlite3.Row], Links]:
    """The rows of the chat's shown path, first message first, and the
    chat's links (id -> parent id) they were found from."""
    links: Links = dict(read("SELECT id, parent_id FROM messages WHERE chat_id = ?",
                             (chat_id,)))
    leaf = read("SELECT COALESCE(leaf_id, (SELECT MAX(id) FROM messages WHERE "
                "chat_id = chats.id)) FROM chats WHERE id = ?", (chat_id,))
    path = shown_path(links, leaf[0][0] if leaf else None)
    if not path:
        return [], links
    if len(path) * 2 >= len(links):  # most of the chat: one pass, others skipped
        wanted = set(path)
        rows = [r for r in read("SELECT * FROM messages WHERE chat_id = ? ORDER BY id",
                                (chat_id,)) if r["id"] in wanted]
    else:  # a short branch among many versions: only its rows
        rows = []
        for start in range(0, len(path), CHUNK):
            chunk = tuple(path[start:start + CHUNK])
            rows += read(f"SELECT * FROM messages WHERE id IN ({','.join('?' * len(chunk))})"
                         " ORDER BY id", chunk)
    return rows, links


def branch_and_versions(read: Read, chat_id: int) -> tuple[list[sqlite3.Row],
                                                             dict[int, list[int]]]:
    """The shown path's rows and every message's versions, from one read of the links."""
    rows, links = read_branch(read, chat_id)
    return rows, versions(links)


def versions(links: Links) -> dict[int, list[int]]:
    """tree.versions_of, sorting only the messages that have siblings (in a
    long chat without edits: none)."""
    shared = {parent for parent, n in Counter(links.values()).items() if n > 1}
    return versions_of({i: p for i, p in links.items() if p in shared}) if shared else {}
