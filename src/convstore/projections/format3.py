"""A conversation's events as store format 3 records them: one event per block.

Format 2 records a message as its start, one :class:`~convstore.domain.events.BlockAppended`
per block and its end. Format 3 records the same message as one
:class:`~convstore.domain.events.BlockRecorded` per block, the first opening the message and
the last closing it (docs/design/format-3.md). :func:`format3_events` rewrites a format-2 log
into format 3 without changing anything any fold reads from it: every replay, the messages, the
writer's rules and the listing come out the same, which ``tests/test_format3.py`` holds it to
over generated histories and the 0.3.0 fixture. It is what ``convstore upgrade`` and a load of
an older dump do to each conversation; :func:`format3_stream` does it to a whole store's log as
it is read (the conversations interleaved, as a dump holds them), holding back at most one event
of each conversation.

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

from collections.abc import Iterable, Iterator, Sequence
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
    rewriter = _Rewriter()
    out = [new for event in events for new in rewriter.feed(event)]
    return [*out, *rewriter.end()]


def format3_stream(events: Iterable[Event]) -> Iterator[Event]:
    """A log of many conversations (each one's events whole and in version order, the
    conversations interleaved, as a dump holds them) as format 3 records it: each
    conversation's events as :func:`format3_events` gives them, in the order they become
    known. An event that may fold into the next of its conversation waits for it, so the
    order across conversations can change; the events still held when the log ends follow
    it, in the order their conversations began."""
    rewriters: dict[UUID, _Rewriter] = {}
    for event in events:
        rewriter = rewriters.get(event.originator_id)
        if rewriter is None:
            rewriter = rewriters[event.originator_id] = _Rewriter()
        yield from rewriter.feed(event)
    for rewriter in rewriters.values():
        yield from rewriter.end()


class _Rewriter:
    """One conversation's rewrite, an event at a time: a start waits for the event after it
    (its first block folds it), a block for the event after it (its end folds into it).
    What it keeps is small: the one waiting event, the roles of the messages still open and
    the new versions of the rewinds (the only versions another event names)."""

    __slots__ = ("held", "rewinds", "roles", "seen", "written")

    def __init__(self) -> None:
        self.held: MessageStarted | BlockAppended | None = None
        self.roles: dict[UUID, Role] = {}
        self.rewinds: dict[int, int] = {}
        self.seen = 0
        self.written = 0

    def feed(self, event: Event) -> list[Event]:
        """The events ``event`` lets out (none while it waits for the next)."""
        self.seen += 1
        if event.originator_version != self.seen:
            msg = f"event version {event.originator_version} where {self.seen} was due"
            raise ValueError(msg)
        out: list[Event] = []
        held, self.held = self.held, None
        match held:
            case MessageStarted():
                if not (
                    isinstance(event, BlockAppended)
                    and event.message_id == held.message_id
                    and event.index == 0
                ):
                    out.append(self._numbered(held))
                # else its first block, right after it, opens the message
            case BlockAppended():
                closes = isinstance(event, MessageEnded) and event.message_id == held.message_id
                out.append(self._block(held, closes=closes))
                if closes:
                    self.roles.pop(held.message_id, None)
                    return out  # the end is the block's
            case None:
                pass
            case _:
                assert_never(held)
        match event:
            case MessageStarted():
                self.roles[event.message_id] = event.role
                self.held = event
            case BlockAppended():
                self.held = event
            case BlockRecorded():
                if event.closes:
                    self.roles.pop(event.message_id, None)
                elif event.index == 0:
                    self.roles.setdefault(event.message_id, event.role)
                out.append(self._numbered(event))
            case Rewound():
                self.rewinds[event.originator_version] = self.written + 1
                out.append(self._numbered(event))
            case RewindUndone():
                rewind = self.rewinds.get(event.rewind)
                if rewind is None:
                    msg = f"the rewind undone at version {self.seen} names no rewind"
                    raise ValueError(msg)
                out.append(self._numbered(event.model_copy(update={"rewind": rewind})))
            case MessageEnded() | MessageInterrupted():
                self.roles.pop(event.message_id, None)
                out.append(self._numbered(event))
            case (
                ConversationStarted()
                | Compacted()
                | EntriesRecorded()
                | EntriesDeleted()
                | ConversationRenamed()
                | LabelsSet()
                | LabelsRemoved()
                | MessageMetaRecorded()
            ):
                out.append(self._numbered(event))
            case _:
                assert_never(event)
        return out

    def end(self) -> list[Event]:
        """The event still waiting when the log ends."""
        held, self.held = self.held, None
        match held:
            case MessageStarted():
                return [self._numbered(held)]
            case BlockAppended():
                return [self._block(held, closes=False)]
            case None:
                return []
            case _:
                assert_never(held)

    def _block(self, event: BlockAppended, *, closes: bool) -> BlockRecorded:
        role = self.roles.get(event.message_id)
        if role is None:
            msg = f"block {event.index} of message {event.message_id} before its start"
            raise ValueError(msg)
        self.written += 1
        return BlockRecorded(
            originator_id=event.originator_id,
            originator_version=self.written,
            timestamp=event.timestamp,
            happened_at=event.happened_at,
            message_id=event.message_id,
            role=role,
            index=event.index,
            block=event.block,
            tool_name=event.tool_name,
            closes=True if closes else None,
        )

    def _numbered(self, event: Event) -> Event:
        self.written += 1
        if event.originator_version == self.written:
            return event
        return event.model_copy(update={"originator_version": self.written})
