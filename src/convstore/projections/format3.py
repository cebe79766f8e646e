"""A conversation's events as store format 3 records them: one event per block.

Format 2 records a message as its start, one :class:`~convstore.domain.events.BlockAppended`
per block and its end. Format 3 records the same message as one
:class:`~convstore.domain.events.BlockRecorded` per block, the first opening the message and
the last closing it (docs/design/format-3.md). :func:`format3_events` rewrites a format-2 log
into format 3 without changing anything any fold reads from it: every replay, the messages, the
writer's rules and the listing come out the same, which ``tests/test_format3.py`` holds it to
over generated histories and the 0.3.0 fixture. It is what ``convstore upgrade`` and a load of
an older dump do to each conversation.

A start is folded into the message's first block only when that block comes right after it,
and an end into the last block only when it comes right after that block: where another event
came between (a message opened, then another message appended whole, then its first block), the
start or the end stays an event of its own, so every message keeps its place in the order and
every event its place relative to the others. An empty message keeps its start and its end. A
message's metadata stays its own event. Versions are renumbered from 1 (fewer events), and the
one field that names a version, a rewind's undo, is mapped to the rewind's new version.

The message's start time becomes its first block's (a streamed message's start and first
block are a few milliseconds apart; a whole message's share one timestamp).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_never
from uuid import UUID

from convstore.domain.events import (
    BlockAppended,
    BlockRecorded,
    Compacted,
    ConversationRenamed,
    ConversationStarted,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    LabelsRemoved,
    LabelsSet,
    MessageEnded,
    MessageInterrupted,
    MessageMetaRecorded,
    MessageStarted,
    RewindUndone,
    Rewound,
    Role,
)


def format3_events(events: Sequence[Event]) -> list[Event]:
    """One conversation's whole log (versions from 1, in order), as format 3 records it.

    Events that are already format 3 are kept (renumbered); a log that is not whole raises
    ``ValueError``, as a fold does.
    """
    roles: dict[UUID, Role] = {}
    versions: dict[int, int] = {}
    out: list[Event] = []
    skip = -1
    for position, event in enumerate(events):
        if event.originator_version != position + 1:
            msg = f"event version {event.originator_version} where {position + 1} was due"
            raise ValueError(msg)
        if position == skip:
            versions[event.originator_version] = len(out)
            continue
        following = events[position + 1] if position + 1 < len(events) else None
        new: Event
        match event:
            case MessageStarted():
                roles[event.message_id] = event.role
                if (
                    isinstance(following, BlockAppended)
                    and following.message_id == event.message_id
                    and following.index == 0
                ):
                    versions[event.originator_version] = len(out) + 1
                    continue  # its first block, right after it, opens the message
                new = event
            case BlockAppended():
                closes = (
                    isinstance(following, MessageEnded) and following.message_id == event.message_id
                )
                if closes:
                    skip = position + 1
                new = BlockRecorded(
                    originator_id=event.originator_id,
                    originator_version=len(out) + 1,
                    timestamp=event.timestamp,
                    happened_at=event.happened_at,
                    message_id=event.message_id,
                    role=roles[event.message_id],
                    index=event.index,
                    block=event.block,
                    tool_name=event.tool_name,
                    closes=True if closes else None,
                )
            case BlockRecorded():
                if event.index == 0 and event.message_id not in roles:
                    roles[event.message_id] = event.role
                new = event
            case RewindUndone():
                new = event.model_copy(update={"rewind": versions[event.rewind]})
            case (
                ConversationStarted()
                | MessageEnded()
                | MessageInterrupted()
                | Compacted()
                | Rewound()
                | EntriesRecorded()
                | EntriesDeleted()
                | ConversationRenamed()
                | LabelsSet()
                | LabelsRemoved()
                | MessageMetaRecorded()
            ):
                new = event
            case _:
                assert_never(event)
        versions[event.originator_version] = len(out) + 1
        if new.originator_version != len(out) + 1:
            new = new.model_copy(update={"originator_version": len(out) + 1})
        out.append(new)
    return out
