"""A full-text search hit as the pages show it: the block it found and a marked snippet."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

MARK_START = "\ue000"
MARK_END = "\ue001"
"""What a snippet puts around each matched term (private-use characters; the page escapes the
snippet first, then turns these into highlight tags)."""


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching block, with a snippet of its text around the match."""

    message_id: UUID | None
    version: int
    """The block's version in the conversation's log."""
    kind: str
    role: str | None
    position: int | None
    """The message's number in the conversation (1 for the first started)."""
    withdrawn: bool
    snippet: str
    """Text around the match, matches between :data:`MARK_START` and :data:`MARK_END`."""
