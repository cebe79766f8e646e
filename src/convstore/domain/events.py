"""Events: the immutable facts a conversation's log is made of, named in the past tense.

Every event carries the ``originator_id`` (the conversation) and ``originator_version`` (its
position in that conversation, from 1, gapless) that eventsourcing's recorders key on.
"""

from __future__ import annotations

import functools
import sys
from datetime import UTC, datetime
from typing import Annotated, ClassVar, Literal, TypeAlias
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from convstore.domain.blocks import DEFERRED, Block, union_members

Role: TypeAlias = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant")

UNKNOWN_TOOL = "unknown"
"""The tool name recorded for a result whose call cannot be found."""


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def happened(event: _Event) -> datetime:
    """When an event's fact happened: the source's time when it has one, else when it was
    recorded. Shown to people, and the time the listing's activity and retention go by.

    A source time later than the event's recording is not believed (nothing recorded can
    have happened after it was recorded): the recording time stands, and the source's time
    stays in the event as its claim (:func:`claimed`). So a history dated in the far future
    neither lists first forever nor escapes retention."""
    at = event.happened_at
    return at if at is not None and at <= event.timestamp else event.timestamp


def claimed(event: _Event) -> datetime | None:
    """The source's time for an event when it is later than the event's recording, and so
    is shown as what the source says, not used (see :func:`happened`); else ``None``."""
    at = event.happened_at
    return at if at is not None and at > event.timestamp else None


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", **DEFERRED)

    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: Annotated[int, Field(ge=1)]
    timestamp: AwareDatetime  # every event is stamped in UTC; a time with no zone is refused
    happened_at: AwareDatetime | None = Field(default=None, exclude_if=lambda value: value is None)
    """When the source says the fact happened, for an event copied from elsewhere (an
    imported transcript's message, a fork's copy): ``timestamp`` stays the moment the store
    recorded it. ``None`` for an event that happened when it was recorded: then it is left out
    of the event's JSON, so such an event is written (in dumps, in a format-1 store's states)
    byte for byte as before the field existed. See :func:`happened`."""


class ConversationStarted(_Event):
    """A conversation was created (always version 1).

    ``parent_id`` names the conversation this one branched from (a subagent's sidechain, a
    fork); ``source`` names where its history came from when it was imported (a stable key
    such as ``claude-code:<session id>`` or ``sha256:<hex of the bytes>``), so the same
    history is not imported twice by mistake. ``forked_at`` is set on a fork: the parent's
    message its copied history ends with.
    """

    type: Literal["conversation_started"] = "conversation_started"
    title: str | None = None
    parent_id: UUID | None = None
    source: str | None = None
    forked_at: UUID | None = None


class MessageStarted(_Event):
    """A message was opened for a role; blocks may now be appended to it."""

    type: Literal["message_started"] = "message_started"
    message_id: UUID
    role: Role


class BlockAppended(_Event):
    """One block landed in an open message at position ``index`` (from 0).

    ``tool_name`` is set for tool results only: the name given on the block, else the name of
    the matching call recorded earlier, else ``"unknown"``. It is fixed when the result lands
    so that replay of any later window (after compaction, say) needs no lookup.
    """

    type: Literal["block_appended"] = "block_appended"
    message_id: UUID
    index: Annotated[int, Field(ge=0)]
    block: Block
    tool_name: str | None = None


class BlockRecorded(_Event):
    """One block of a message, carrying its message's boundaries (store format 3).

    A message of N blocks is N of these: the one at ``index`` 0 opens the message (unless a
    :class:`MessageStarted` already did: an empty message, or one whose start another event
    followed before its first block), ``closes`` says the message ended with this block, and
    ``meta`` (on the opening block only) is what :class:`MessageMetaRecorded` would record.
    Every one carries its message's ``role`` and, for a tool result, the resolved
    ``tool_name``, so each replays on its own (see docs/design/format-3.md). The same message
    in format 2 is a :class:`MessageStarted`, its :class:`BlockAppended` events and a
    :class:`MessageEnded`; every fold reads both.
    """

    type: Literal["block_recorded"] = "block_recorded"
    message_id: UUID
    role: Role
    index: Annotated[int, Field(ge=0)]
    block: Block
    tool_name: str | None = None
    closes: Literal[True] | None = None
    meta: MessageMeta | None = None


class MessageEnded(_Event):
    """The message is complete; it takes no more blocks."""

    type: Literal["message_ended"] = "message_ended"
    message_id: UUID


class MessageInterrupted(_Event):
    """The message was cut short on purpose (user stop, timeout); it takes no more blocks."""

    type: Literal["message_interrupted"] = "message_interrupted"
    message_id: UUID
    reason: str | None = None


class Compacted(_Event):
    """Replay now starts with ``summary`` in place of every message up to ``through``.

    The log keeps everything; only replay changes. The newest compaction wins.
    """

    type: Literal["compacted"] = "compacted"
    summary: Annotated[str, Field(min_length=1)]
    through: UUID


class Rewound(_Event):
    """Every message recorded after ``to`` is withdrawn (all of them when ``to`` is ``None``).

    Replay, pressure and live rounds leave withdrawn messages out; the log keeps them. Messages
    started after the rewind are visible as usual.
    """

    type: Literal["rewound"] = "rewound"
    to: UUID | None = None


class RewindUndone(_Event):
    """The rewind recorded at version ``rewind`` no longer applies: the messages it withdrew
    are visible again (unless another rewind still withdraws them)."""

    type: Literal["rewind_undone"] = "rewind_undone"
    rewind: Annotated[int, Field(ge=1)]


class EntriesRecorded(_Event):
    """Transcript entries an agent runtime handed over, kept verbatim (JSON objects, in order).

    The Claude Agent SDK's session store mirrors Claude Code transcript lines this way; their
    ``uuid`` is the idempotency key, so an entry whose ``uuid`` was already recorded (since the
    last :class:`EntriesDeleted`) is not recorded again. The entries that carry a message are
    also recorded as ordinary message events in the same write.
    """

    type: Literal["entries_recorded"] = "entries_recorded"
    entries: list[dict[str, JsonValue]]


class EntriesDeleted(_Event):
    """The runtime deleted the entries recorded so far: they no longer load, and a
    :class:`Rewound` written beside it withdraws their messages from replay. The log keeps the
    bytes."""

    type: Literal["entries_deleted"] = "entries_deleted"


class ConversationRenamed(_Event):
    """The conversation's title changed (``None`` clears it)."""

    type: Literal["conversation_renamed"] = "conversation_renamed"
    title: str | None = None


class LabelsSet(_Event):
    """Labels were set on the conversation: each key now holds its value (set again, it is
    replaced). Labels are for finding conversations; replay never sees them."""

    type: Literal["labels_set"] = "labels_set"
    labels: dict[str, str]


class LabelsRemoved(_Event):
    """The labels under these keys were removed (a key not set is simply not there)."""

    type: Literal["labels_removed"] = "labels_removed"
    keys: list[str]


class TokenUsage(BaseModel):
    """Tokens a provider reported for one model call."""

    model_config = ConfigDict(frozen=True, extra="forbid", **DEFERRED)

    input_tokens: Annotated[int, Field(ge=0)] | None = None
    output_tokens: Annotated[int, Field(ge=0)] | None = None
    cache_read_tokens: Annotated[int, Field(ge=0)] | None = None
    cache_write_tokens: Annotated[int, Field(ge=0)] | None = None
    reasoning_tokens: Annotated[int, Field(ge=0)] | None = None


class MessageMeta(BaseModel):
    """What a runtime knows about how a message was produced; never part of replay.

    Every field is optional; ``extra`` holds anything else a runtime wants kept (JSON values,
    bounded with the rest by the store's ``max_note_bytes``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", **DEFERRED)

    model: str | None = None
    provider_message_id: str | None = None
    stop_reason: str | None = None
    usage: TokenUsage | None = None
    latency_ms: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    def merged(self, newer: MessageMeta) -> MessageMeta:
        """This metadata updated by ``newer``: its fields that are set win, extras merge."""
        changes = {name: value for name, value in newer if value is not None and name != "extra"}
        return self.model_copy(update={**changes, "extra": {**self.extra, **newer.extra}})


class MessageMetaRecorded(_Event):
    """Metadata about a message (model, usage, latency …) was recorded. Replay ignores it;
    recorded again for the same message, the fields given replace the earlier ones."""

    type: Literal["message_meta_recorded"] = "message_meta_recorded"
    message_id: UUID
    meta: MessageMeta


Event: TypeAlias = Annotated[
    ConversationStarted
    | MessageStarted
    | BlockAppended
    | BlockRecorded
    | MessageEnded
    | MessageInterrupted
    | Compacted
    | Rewound
    | RewindUndone
    | EntriesRecorded
    | EntriesDeleted
    | ConversationRenamed
    | LabelsSet
    | LabelsRemoved
    | MessageMetaRecorded,
    Field(discriminator="type"),
]


def message_opened(event: Event) -> UUID | None:
    """The message ``event`` may open: a start's, or a block's at index 0 (store format 3,
    where a streamed message has a start before its first block: a reader of a whole log
    takes the first of the two)."""
    if isinstance(event, MessageStarted) or (isinstance(event, BlockRecorded) and event.index == 0):
        return event.message_id
    return None


EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event, config=DEFERRED)

EVENT_CLASSES: tuple[type[_Event], ...] = union_members(Event)
"""Every event class, derived from the :data:`Event` union."""


@functools.cache
def build_models() -> None:
    """Build the domain's validators and serializers now (once a process: a later call does
    nothing). They are built on first use (:data:`convstore.domain.blocks.DEFERRED`), so a
    process that decodes no event (one that only lists conversations, say) never builds them;
    a store's writer calls this before its first decision, outside the write lock, which the
    build (tens of milliseconds) would otherwise hold. A writer that wants its first append as
    quick as the rest calls it at start-up. Every pydantic model of the domain's modules, and
    their adapters."""
    from convstore.domain import blocks  # noqa: PLC0415 - the module itself, for its models

    for module in (blocks, sys.modules[__name__]):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel):
                if value.__module__ == module.__name__:
                    value.model_rebuild()
            elif isinstance(value, TypeAdapter):
                value.rebuild()
