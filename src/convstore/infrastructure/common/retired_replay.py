"""The tables of the replay model convstore kept before format 3, and the one thing still done
with them: an erasure deletes the erased conversation's rows from them.

Before format 3 a store kept a second copy of every message's text beside its log,
``convstore_replay_heads`` and ``convstore_replay_messages`` (docs/design/replay-model.md says
why it went). A store made by an earlier version still has them; this version never reads or
writes them (replay folds the log), and ``convstore upgrade`` drops them. Until then they hold
the text of every conversation an earlier version replayed, so an erasure must not leave its
conversation's rows behind: each backend's erasure calls the function here, in its own
transaction, and it deletes nothing when the tables are not there (a store made by this
version never has them).

An earlier version sharing the store may still write them (0.3.x keeps the model of a store
of format 2); on PostgreSQL its readers store the model under an advisory lock, taken here
too, so such a write either committed before the erasure (and is deleted) or sees the
tombstone after it (and writes nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from convstore.infrastructure.common.tables import RETIRED_HEADS, RETIRED_MESSAGES

Execute = Callable[[str, Sequence[Any]], Any]
"""How a statement is run inside the erasure's transaction: its text and its parameters."""

LOCK_CLASS = 0x72706C79
"""The first key of the PostgreSQL advisory locks earlier versions took to order a model write
against an erasure of the same conversation (``pg_advisory_xact_lock(int, int)``)."""


def _lock_key(conversation: UUID) -> int:
    return int.from_bytes(conversation.bytes[:4], "big", signed=True)


def forget_sqlite(execute: Execute, conversation: UUID) -> None:
    """Delete a conversation's rows from the retired tables of a SQLite file (a store's, or a
    NATS store's replica), when they are there."""
    found = execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (RETIRED_HEADS,)
    ).fetchone()
    if found:
        for table in (RETIRED_HEADS, RETIRED_MESSAGES):
            execute(f"DELETE FROM {table} WHERE originator_id = ?", (conversation.hex,))  # noqa: S608


def forget_postgres(execute: Execute, conversation: UUID, prefix: str) -> None:
    """Delete a conversation's rows from the retired tables of a PostgreSQL schema (``prefix``
    is the quoted schema and a dot), when they are there."""
    execute(
        "SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, _lock_key(conversation))
    ).fetchall()
    found = execute("SELECT to_regclass(%s) AS found", (prefix + RETIRED_MESSAGES,)).fetchone()
    if found is not None and _first(found) is not None:
        for table in (RETIRED_HEADS, RETIRED_MESSAGES):
            execute(f"DELETE FROM {prefix}{table} WHERE originator_id = %s", (conversation,))  # noqa: S608


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]
