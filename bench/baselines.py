"""Stores of the same messages outside convstore: a plain one-JSON-row-per-message table, and
the OpenAI Agents SDK's ``SQLiteSession`` file (the peer of ``peer`` and ``disk``).

Both are made once per directory and workload, in WAL mode like a convstore store, and
checkpointed, so a fresh process reads them from the main file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import checkpoint
from bench.workload import Message

RAW_MESSAGES_TABLE = (
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation TEXT NOT NULL, "
    "message TEXT NOT NULL)",
    "CREATE INDEX messages_conversation ON messages (conversation, id)",
)
"""The plain baseline: a rowid table and the index that finds one conversation's rows in order
(the Agents SDK's ``agent_messages`` table has the same index)."""

RAW_MESSAGES_SELECT = "SELECT message FROM messages WHERE conversation = ? ORDER BY id"

SESSION_ID = "bench-session"
"""The Agents SDK session id the peer's file holds."""


def json_text_bytes(messages: Sequence[Message]) -> int:
    """The bytes of the messages' JSON text alone, as the raw table stores it."""
    return sum(len(json.dumps(m).encode()) for m in messages)


def raw_messages_db(
    directory: Path, conversation: str, messages: Sequence[Message], tag: str
) -> Path:
    """A SQLite file holding ``messages`` as one JSON row each (made once per ``tag``)."""
    path = directory / f"raw-messages-{tag}.db"
    if path.exists():
        return path
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        for statement in RAW_MESSAGES_TABLE:
            conn.execute(statement)
        with conn:
            conn.executemany(
                "INSERT INTO messages (conversation, message) VALUES (?, ?)",
                ((conversation, json.dumps(m)) for m in messages),
            )
    checkpoint(path)
    return path


def sdk_item(message: Message) -> dict[str, Any]:
    """A workload message as a Responses input item, the shape the SDK's session keeps."""
    parts = [{"type": "input_text", "text": block["text"]} for block in message["content"]]
    return {"role": message["role"], "content": parts}


def sdk_session_db(directory: Path, messages: Sequence[Message], tag: str) -> Path:
    """An Agents SDK ``SQLiteSession`` file holding ``messages`` (made once per ``tag``), filled
    with ``add_items`` in batches of 500."""
    from agents import SQLiteSession  # noqa: PLC0415 - the SDK is a dev dependency only

    path = directory / f"sdk-session-{tag}.db"
    if path.exists():
        return path
    session = SQLiteSession(SESSION_ID, path)

    async def fill() -> None:
        for start in range(0, len(messages), 500):
            items: list[Any] = [sdk_item(m) for m in messages[start : start + 500]]
            await session.add_items(items)

    asyncio.run(fill())
    session.close()
    checkpoint(path)
    return path


def have_agents_sdk() -> bool:
    try:
        import agents  # noqa: F401, PLC0415 - present only with the dev extra
    except ImportError:
        return False
    return True
