"""Fold a conversation's events into its messages, in the order they were started."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never
from uuid import UUID

from convstore.domain.blocks import Block
from convstore.domain.conversation import MessageStatus, restored_ids, withdrawn_ids
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
    MessageMeta,
    MessageMetaRecorded,
    MessageStarted,
    RewindUndone,
    Rewound,
    Role,
    claimed,
    happened,
)


@dataclass(frozen=True, slots=True)
class RecordedBlock:
    """A block as it landed, with the tool name fixed for results."""

    block: Block
    tool_name: str | None


@dataclass(slots=True)
class RecordedMessage:
    """One stored message: its role, its blocks in order, and how it closed (if it did)."""

    message_id: UUID
    role: Role
    started_at: datetime
    """When the message started: the source's time for an imported or copied one (unless
    that is later than the store recorded it: see :func:`~convstore.domain.events.happened`)."""
    blocks: list[RecordedBlock] = field(default_factory=list)
    status: MessageStatus = "open"
    interrupt_reason: str | None = None
    withdrawn: bool = False
    """Taken back by a rewind: kept in the log, left out of replay."""
    meta: MessageMeta | None = None
    """What the runtime recorded about how it was produced (never replayed)."""
    claimed_at: datetime | None = None
    """The source's time for the message when it is later than the store recorded it: shown
    as the source's claim, never used as the message's time."""


@dataclass(slots=True)
class History:
    """A conversation folded in one pass: its messages, and its compactions in order."""

    messages: list[RecordedMessage]
    compactions: list[Compacted]


def collect_messages(events: Iterable[Event]) -> list[RecordedMessage]:
    """Every stored message in start order; blocks in the order they landed."""
    return collect_history(events).messages


def collect_history(events: Iterable[Event], *, tail: bool = False) -> History:
    """Fold events (read once, so a stream decoded row by row will do) into a history.

    ``tail``: the events are the end of a log from a message's start on (``Store.tail``), so
    events of messages started before them are skipped, and a rewind to a message before
    them withdraws every message they hold, as it did in the whole log.
    """
    messages: dict[UUID, RecordedMessage] = {}
    compactions: list[Compacted] = []
    rewinds: dict[int, list[UUID]] = {}
    for event in events:
        match event:
            case ConversationStarted():
                pass
            case MessageStarted():
                messages[event.message_id] = RecordedMessage(
                    event.message_id, event.role, happened(event), claimed_at=claimed(event)
                )
            case BlockAppended():
                if tail and event.message_id not in messages:
                    continue
                messages[event.message_id].blocks.append(
                    RecordedBlock(event.block, event.tool_name)
                )
            case BlockRecorded():
                _take_block(messages, event, tail=tail)
            case MessageEnded():
                if tail and event.message_id not in messages:
                    continue
                messages[event.message_id].status = "ended"
            case MessageInterrupted():
                if tail and event.message_id not in messages:
                    continue
                message = messages[event.message_id]
                message.status = "interrupted"
                message.interrupt_reason = event.reason
            case Compacted():
                compactions.append(event)  # replay decides what it hides; messages stay here
            case Rewound():
                earlier = tail and event.to is not None and event.to not in messages
                rewinds[event.originator_version] = (
                    list(messages) if earlier else withdrawn_ids(messages, event.to)
                )
                for message_id in rewinds[event.originator_version]:
                    messages[message_id].withdrawn = True
            case RewindUndone():
                for message_id in restored_ids(rewinds, event.rewind):
                    messages[message_id].withdrawn = False
            case EntriesRecorded() | EntriesDeleted():
                pass  # their messages are recorded as message events beside them
            case ConversationRenamed() | LabelsSet() | LabelsRemoved():
                pass
            case MessageMetaRecorded():
                if tail and event.message_id not in messages:
                    continue
                message = messages[event.message_id]
                message.meta = (
                    event.meta if message.meta is None else message.meta.merged(event.meta)
                )
            case _:
                assert_never(event)
    return History(list(messages.values()), compactions)


def _take_block(messages: dict[UUID, RecordedMessage], event: BlockRecorded, *, tail: bool) -> None:
    """A format-3 block folded in: the first opens its message (unless a start did), the last
    closes it, the opening one may carry its metadata. In a tail, a block of a message started
    before it is skipped, as the message's other events are."""
    message = messages.get(event.message_id)
    if message is None and event.index == 0:
        message = messages[event.message_id] = RecordedMessage(
            event.message_id, event.role, happened(event), claimed_at=claimed(event)
        )
    elif message is None:
        if tail:
            return
        message = messages[event.message_id]  # a log that is not whole: KeyError, as ever
    message.blocks.append(RecordedBlock(event.block, event.tool_name))
    if event.closes:
        message.status = "ended"
    if event.meta is not None:
        message.meta = event.meta
