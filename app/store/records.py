"""A chat and a message as plain records, and the rows they are read from.

Qt-free. `ChatStore` (chats.py) and the bulk reader (bulk_write.py) make
them from SQLite rows; a damaged JSON cell reads as None, never an error,
so the message stays.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, frozen=True)
class Chat:
    id: int
    title: str
    system_prompt: str
    params: dict[str, Any]
    created_at: float
    updated_at: float


@dataclass(slots=True, frozen=True)
class Message:
    id: int
    chat_id: int
    role: str
    content: str
    complete: bool
    stats: dict[str, Any] | None
    created_at: float
    parent_id: int | None = None  # the message it follows (None: a first message)
    reasoning: str = ""  # a reasoning model's thinking before this answer
    # Tool turns (schema 4): an answer's calls {"calls": [...]}, or a tool
    # result's call {"id", "name", "server", "arguments", "status", "error"}.
    tool: dict[str, Any] | None = None


def message_of(r: sqlite3.Row) -> Message:
    return Message(r["id"], r["chat_id"], r["role"], r["content"], bool(r["complete"]),
                   object_cell(r["stats"]), r["created_at"], r["parent_id"], r["reasoning"],
                   object_cell(r["tool"]))


def chat_of(row: sqlite3.Row) -> Chat:
    return Chat(row["id"], row["title"], row["system_prompt"], json.loads(row["params"]),
                row["created_at"], row["updated_at"])


def json_cell(value: dict[str, Any] | None) -> str | None:
    """A JSON object for a cell (None when empty)."""
    return json.dumps(value, ensure_ascii=False) if value else None


def object_cell(raw: str | None) -> dict[str, Any] | None:
    """A JSON object cell (a message's tool call, its stats), or None."""
    try:
        value = json.loads(raw) if raw else None
    except (ValueError, TypeError, RecursionError):  # a damaged cell: the message stays
        return None
    return value if isinstance(value, dict) else None
