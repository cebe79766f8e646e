"""Checking the log: what `convstore verify` reports. It reads and never writes.

The checks: every event decodes; each conversation's versions run 1, 2, 3 … with no gap and
start with ``ConversationStarted``; stored columns agree with the event inside; every block,
end and interruption belongs to a message that was started and was still open, and block
positions run 0, 1, 2 … in each message; a compaction names a message of its conversation;
and no read model's tracked position is past the end of the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import assert_never
from uuid import UUID

from convstore.domain.events import (
    BlockAppended,
    Compacted,
    ConversationStarted,
    Event,
    MessageEnded,
    MessageInterrupted,
    MessageStarted,
    Rewound,
)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the log, and where."""

    position: int | None
    conversation: str
    version: int | None
    problem: str


@dataclass(frozen=True, slots=True)
class Recorded:
    """One stored record: its place, and the event it decodes to (or why it does not)."""

    position: int
    originator_id: UUID | str | None
    originator_version: int | None
    event: Event | None
    error: str | None = None
    topic: str | None = None


@dataclass(slots=True)
class _Conversation:
    version: int = 0
    open: dict[UUID, int] = field(default_factory=dict)
    """Open messages and how many blocks each has."""
    closed: set[UUID] = field(default_factory=set)


@dataclass(slots=True)
class Verifier:
    """Feed it the log in order with :meth:`check`; read :attr:`problems` at the end."""

    problems: list[Problem] = field(default_factory=list)
    events: int = 0
    conversations: dict[str, _Conversation] = field(default_factory=dict)

    def check_all(self, records: Iterable[Recorded]) -> None:
        for record in records:
            self.check(record)

    def check(self, record: Recorded) -> None:
        self.events += 1
        conv_id = str(record.originator_id)
        state = self.conversations.setdefault(conv_id, _Conversation())

        def problem(text: str) -> None:
            self.problems.append(Problem(record.position, conv_id, record.originator_version, text))

        if record.originator_id is None or record.originator_version is None:
            problem(f"cannot be read: {record.error}")
            return
        if not isinstance(record.originator_version, int):
            problem(f"stored version {record.originator_version!r} is not a whole number")
            return
        if record.originator_version != state.version + 1:
            problem(f"version {record.originator_version} follows {state.version} (a gap)")
        state.version = record.originator_version
        event = record.event
        if event is None:
            problem(f"does not decode: {record.error}")
            return
        if record.topic is not None and record.topic != f"convstore:{event.type}":
            problem(f"stored topic {record.topic!r} disagrees with the event ({event.type})")
        if (str(event.originator_id), event.originator_version) != (
            conv_id,
            record.originator_version,
        ):
            problem("the stored id or version disagrees with the event inside")
        self._check_event(event, state, problem)

    @staticmethod
    def _check_event(event: Event, state: _Conversation, problem: Callable[[str], None]) -> None:
        if event.originator_version == 1 and not isinstance(event, ConversationStarted):
            problem(f"the conversation starts with {event.type}, not conversation_started")
        match event:
            case ConversationStarted():
                if event.originator_version != 1:
                    problem("ConversationStarted is not the first event")
            case MessageStarted():
                if event.message_id in state.open or event.message_id in state.closed:
                    problem(f"message {event.message_id} started twice")
                state.open[event.message_id] = 0
            case BlockAppended():
                if event.message_id not in state.open:
                    problem(f"block for message {event.message_id}, which is not open")
                    return
                if event.index != state.open[event.message_id]:
                    expected = state.open[event.message_id]
                    problem(f"block position {event.index}, expected {expected}")
                state.open[event.message_id] += 1
            case MessageEnded() | MessageInterrupted():
                if state.open.pop(event.message_id, None) is None:
                    problem(f"{event.type} for message {event.message_id}, which is not open")
                state.closed.add(event.message_id)
            case Compacted():
                if event.through not in state.open and event.through not in state.closed:
                    problem(f"compaction through unknown message {event.through}")
            case Rewound():
                known = event.to is None or event.to in state.open or event.to in state.closed
                if not known:
                    problem(f"rewind to unknown message {event.to}")
            case _:
                assert_never(event)
