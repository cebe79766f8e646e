"""Erasure: the one deliberate exception to "nothing is deleted".

Erasing a conversation deletes every stored event of it and its hash-chain head, in one
transaction, and leaves a *tombstone* row in ``convstore_erased`` beside the events: the id,
when, why, how many events went, and ``high``, the log's newest position at that moment. The
tombstone is what tells every reader that the gap is deliberate:

- writers refuse to record anything more under an erased id (the recorders look the id up in
  the same transaction as the insert, so an append racing the erasure either lands before it,
  and is erased with the rest, or is refused);
- on SQLite, new events are numbered after ``high`` even when the erased events were the newest
  in the log, so a position a projection has already passed is never handed out again;
- projections read the tombstones in ``seq`` order and delete what they derived from the
  conversation (see :meth:`convstore.audit.db.AuditDatabase.forget`);
- ``verify`` finds neither events nor a head for the id, so there is nothing to report.

An erasure may be conditional (retention): given ``idle_since``, the recorder reads the
conversation's listing row inside the erasing transaction, under the same lock an append
takes, and erases only if its newest event is older
(:func:`convstore.infrastructure.common.listing.refuse_if_active`). An append
acknowledged before that check makes it refuse; one after it finds the tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

ERASED_TABLE = "convstore_erased"
"""The tombstones' table, beside the events (in the same schema on PostgreSQL)."""


@dataclass(frozen=True, slots=True)
class Erasure:
    """The tombstone of an erased conversation."""

    seq: int
    """The tombstone's place among all erasures (increasing, from 1)."""
    id: UUID
    erased_at: datetime
    reason: str
    events: int
    """How many events were deleted."""
    high: int = 0
    """The log's newest position when it was erased: positions up to it may be gaps."""


SQLITE_ERASED_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {ERASED_TABLE} ("
    "seq INTEGER PRIMARY KEY AUTOINCREMENT, originator_id TEXT NOT NULL UNIQUE, "
    "erased_at TEXT NOT NULL, reason TEXT NOT NULL, events INTEGER NOT NULL, "
    "high INTEGER NOT NULL)"
)
