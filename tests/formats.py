"""What a store's format changes in its log, for tests that count or pick events: a message
with blocks is its block events in format 3, and its start, blocks and end in formats 1 and 2
(docs/design/format-3.md). Counts come from the domain's own rule, not a second copy."""

from __future__ import annotations

from typing import Protocol

from convstore.domain.conversation import MessageStatus, message_events
from convstore.domain.events import BlockAppended, BlockRecorded
from convstore.infrastructure.common.tables import BLOCK_EVENTS_FORMAT

BLOCK_EVENTS = (BlockAppended, BlockRecorded)
"""A block's event in either form."""

BLOCK_TYPES = frozenset({"block_appended", "block_recorded"})
"""Their ``type`` in an event's JSON."""


class _Formatted(Protocol):
    @property
    def store_format(self) -> int: ...


def events_of(store: _Formatted, blocks: int = 1, status: MessageStatus = "ended") -> int:
    """How many events ``store`` records for a message of ``blocks`` blocks closed as
    ``status`` (an ``append_message``, with an ``interrupt_message`` after it)."""
    return message_events(blocks, status, block_events=store.store_format >= BLOCK_EVENTS_FORMAT)
