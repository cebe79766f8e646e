"""The conversation aggregate: the little state a writer needs, and the rules for writing.

Commands (``start_message``, ``append_block`` …) check the rules against the current state and
return the events to record; they never change the state. :meth:`Conversation.apply` folds a
recorded event in. Keeping the two apart lets the store record first and apply after, so a
failed or contested write leaves the state exactly as the log is.

The state is deliberately small (message roles and statuses, tool names by call id): block
contents are never kept here, so appending is O(1) however long the conversation grows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeAlias, TypeVar, assert_never
from uuid import UUID, uuid4

from pydantic import BaseModel, JsonValue

from convstore.domain.assembly import assembled
from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidBlock, InvalidInput, MessageClosed, MessageNotFound
from convstore.domain.events import (
    UNKNOWN_TOOL,
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
    utcnow,
)
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_new_id, parse_role

MessageStatus = Literal["open", "ended", "interrupted"]


@dataclass
class MessageState:
    """What the rules need to know about one message."""

    role: Role
    status: MessageStatus = "open"
    block_count: int = 0
    withdrawn: bool = False
    """A rewind took the message back: it takes no more blocks and replay leaves it out."""


@dataclass
class Conversation:
    """State folded from a conversation's events, with command methods that decide new ones."""

    id: UUID
    version: int = 0
    title: str | None = None
    created_at: datetime | None = None
    messages: dict[UUID, MessageState] = field(default_factory=dict)
    tool_names: dict[str, str] = field(default_factory=dict)
    entry_uuids: set[str] = field(default_factory=set)
    labels: dict[str, str] = field(default_factory=dict)
    """``uuid`` of every runtime entry recorded since the last deletion (the idempotency key)."""
    rewinds: dict[int, list[UUID]] = field(default_factory=dict)
    """Each rewind still in force (by its version): the messages it withdrew."""
    first_user: UUID | None = None
    """The first user message ever started (what the listing previews an untitled one by)."""
    block_events: bool = field(default=False, compare=False)
    """Whether the store records a message as its block events (format 3): the commands then
    decide :class:`BlockRecorded` events, and a message's start and end ride on its first and
    last blocks; else a start, :class:`BlockAppended` events and an end (formats 1 and 2)."""

    # -- folding ---------------------------------------------------------------------------

    @classmethod
    def from_events(
        cls, conversation_id: UUID, events: list[Event], *, block_events: bool = False
    ) -> Conversation:
        """Fold recorded events, in order, into a fresh state (deciding in the form
        ``block_events`` says)."""
        state = cls(id=conversation_id, block_events=block_events)
        for event in events:
            state.apply(event)
        return state

    def apply(self, event: Event) -> None:
        """Fold one recorded event into the state."""
        if event.originator_version != self.version + 1:
            msg = f"event version {event.originator_version} does not follow {self.version}"
            raise ValueError(msg)
        match event:
            case ConversationStarted():
                self.title = event.title
                self.created_at = event.timestamp
            case MessageStarted():
                self._opened(event.message_id, event.role)
            case BlockAppended():
                self._add(self.messages[event.message_id], event.block)
            case BlockRecorded():
                if event.index == 0 and event.message_id not in self.messages:
                    self._opened(event.message_id, event.role)
                message = self.messages[event.message_id]
                self._add(message, event.block)
                if event.closes:
                    message.status = "ended"
            case MessageEnded():
                self.messages[event.message_id].status = "ended"
            case MessageInterrupted():
                self.messages[event.message_id].status = "interrupted"
            case Compacted():
                pass
            case Rewound():
                self.rewinds[event.originator_version] = withdrawn_ids(self.messages, event.to)
                for message_id in self.rewinds[event.originator_version]:
                    self.messages[message_id].withdrawn = True
            case RewindUndone():
                for message_id in restored_ids(self.rewinds, event.rewind):
                    self.messages[message_id].withdrawn = False
            case EntriesRecorded():
                self.entry_uuids.update(entry_uuids(event.entries))
            case EntriesDeleted():
                self.entry_uuids.clear()
            case ConversationRenamed():
                self.title = event.title
            case LabelsSet():
                self.labels.update(event.labels)
            case LabelsRemoved():
                for key in event.keys:
                    self.labels.pop(key, None)
            case MessageMetaRecorded():
                pass
            case _:
                assert_never(event)
        self.version = event.originator_version

    def recheck(self, event: Event) -> None:
        """Raise what the writer would have raised had it been asked, in this state, for the
        command that recorded ``event`` (an :class:`InvalidInput`); return if it would have
        recorded exactly that. ``convstore verify`` folds stored histories through this and
        :meth:`apply`, so it checks the same rules the writer enforces, with the same code."""
        if event.originator_version != self.version + 1:
            msg = f"event version {event.originator_version} does not follow {self.version}"
            raise InvalidInput(msg)
        if (self.version == 0) != isinstance(event, ConversationStarted):
            msg = f"{event.type} at version {event.originator_version}, but a conversation "
            msg += "starts with conversation_started and has it only there"
            raise InvalidInput(msg)
        match event:
            case ConversationStarted():
                pass
            case MessageStarted():
                if event.message_id in self.messages:
                    msg = f"message {event.message_id} was already started"
                    raise InvalidInput(msg)
            case BlockAppended():
                decided = self.append_block(event.message_id, event.block)
                if decided.index != event.index:
                    msg = f"block at position {event.index}; the writer puts it at {decided.index}"
                    raise InvalidInput(msg)
                if decided.tool_name != event.tool_name:
                    msg = f"tool name {event.tool_name!r}; the writer records {decided.tool_name!r}"
                    raise InvalidInput(msg)
            case BlockRecorded():
                self._recheck_block(event)
            case MessageEnded():
                self.end_message(event.message_id)
            case MessageInterrupted():
                self.interrupt_message(event.message_id, event.reason)
            case Compacted():
                self.compact(event.summary, event.through)
            case Rewound():
                self.rewind(event.to)
            case RewindUndone():
                self.undo_rewind(event.rewind)
            case EntriesRecorded() | EntriesDeleted():
                pass  # a runtime's entries, kept verbatim: no message rule applies to them
            case ConversationRenamed() | LabelsRemoved():
                pass
            case LabelsSet():
                self.set_labels(event.labels, Limits(max_labels=1 << 30))
            case MessageMetaRecorded():
                self.record_meta(event.message_id, event.meta)
            case _:
                assert_never(event)

    def _opened(self, message_id: UUID, role: Role) -> None:
        """A message opened: by its start, or by its first block."""
        self.messages[message_id] = MessageState(role=role)
        if role == "user" and self.first_user is None:
            self.first_user = message_id

    def _add(self, message: MessageState, block: Block) -> None:
        """A block landed in ``message``."""
        message.block_count += 1
        if isinstance(block, ToolUseBlock | HostedToolUseBlock):
            self.tool_names[block.id] = block.name

    def _recheck_block(self, event: BlockRecorded) -> None:
        """:meth:`recheck` of a block that may open or close its message."""
        known = self.messages.get(event.message_id)
        if known is None and event.index == 0:
            decided = self._decide_block(
                message_id=event.message_id,
                role=event.role,
                index=0,
                version=event.originator_version,
                block=event.block,
                pending_tool_ids={},
            )
        else:
            if known is not None and known.role != event.role:
                msg = f"a block of role {event.role}; its message {event.message_id} is "
                msg += f"{known.role}'s"
                raise InvalidInput(msg)
            if event.meta is not None:
                msg = "metadata on a block that does not open its message"
                raise InvalidInput(msg)
            decided = self.append_block(event.message_id, event.block)
        if decided.index != event.index:
            msg = f"block at position {event.index}; the writer puts it at {decided.index}"
            raise InvalidInput(msg)
        if decided.tool_name != event.tool_name:
            msg = f"tool name {event.tool_name!r}; the writer records {decided.tool_name!r}"
            raise InvalidInput(msg)

    # -- commands --------------------------------------------------------------------------

    @staticmethod
    def start(
        conversation_id: UUID,
        title: str | None = None,
        *,
        parent_id: UUID | None = None,
        source: str | None = None,
        forked_at: UUID | None = None,
    ) -> ConversationStarted:
        """The event that creates a conversation (refused for the nil UUID)."""
        return ConversationStarted(
            originator_id=parse_new_id(conversation_id, "conversation"),
            originator_version=1,
            timestamp=utcnow(),
            title=title,
            parent_id=parent_id,
            source=source,
            forked_at=forked_at,
        )

    def start_message(self, role: Role, message_id: UUID | None = None) -> MessageStarted:
        """Open a new message for ``role``."""
        return MessageStarted(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            message_id=message_id or uuid4(),
            role=role,
        )

    def append_block(self, message_id: UUID, block: Block) -> BlockAppended:
        """Add one block to the end of an open message."""
        message = self._open_message(message_id, "given more blocks")
        return self._decide_block(
            message_id=message_id,
            role=message.role,
            index=message.block_count,
            version=self.version + 1,
            block=block,
            pending_tool_ids={},
        )

    def end_message(self, message_id: UUID) -> MessageEnded:
        """Mark an open message complete."""
        self._open_message(message_id, "ended")
        return MessageEnded(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            message_id=message_id,
        )

    def interrupt_message(self, message_id: UUID, reason: str | None = None) -> MessageInterrupted:
        """Record that an open message was cut short."""
        self._open_message(message_id, "interrupted")
        return MessageInterrupted(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            message_id=message_id,
            reason=reason,
        )

    def rename(self, title: str | None) -> ConversationRenamed:
        """Give the conversation a new title (``None`` clears it)."""
        return ConversationRenamed(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            title=title,
        )

    def set_labels(self, labels: dict[str, str], limits: Limits) -> LabelsSet:
        """Set labels (checked keys and values); at most ``limits.max_labels`` at once."""
        held = len(self.labels.keys() | labels.keys())
        if held > limits.max_labels:
            msg = f"a conversation holds at most {limits.max_labels} labels; this would make {held}"
            raise InvalidInput(msg)
        return LabelsSet(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            labels=labels,
        )

    def remove_labels(self, keys: list[str]) -> LabelsRemoved:
        """Remove the labels under ``keys`` (keys not set are ignored)."""
        return LabelsRemoved(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            keys=keys,
        )

    def record_meta(
        self,
        message_id: UUID,
        meta: MessageMeta,
        *,
        version: int | None = None,
        timestamp: datetime | None = None,
    ) -> MessageMetaRecorded:
        """Record metadata about a message of this conversation (in any status)."""
        if message_id not in self.messages:
            msg = f"message {message_id} not found in conversation {self.id}"
            raise MessageNotFound(msg)
        return MessageMetaRecorded(
            originator_id=self.id,
            originator_version=version or self.version + 1,
            timestamp=timestamp or utcnow(),
            message_id=message_id,
            meta=meta,
        )

    def rewind(self, to: UUID | None) -> Rewound:
        """Withdraw every message after ``to`` (every message, when ``to`` is ``None``)."""
        if to is not None:
            self._visible_message(to, "rewound to")
        return Rewound(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            to=to,
        )

    def undo_rewind(self, rewind: int) -> RewindUndone:
        """Undo the rewind recorded at version ``rewind``: its messages are visible again."""
        if rewind not in self.rewinds:
            msg = (
                f"version {rewind} of conversation {self.id} is not a rewind in force "
                "(not a rewind, or already undone)"
            )
            raise InvalidInput(msg)
        return RewindUndone(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            rewind=rewind,
        )

    def compact(self, summary: str, through: UUID) -> Compacted:
        """Replace every message up to and including ``through`` with ``summary`` on replay."""
        self._visible_message(through, "compacted through")
        if not summary.strip():
            msg = "a compaction summary must not be blank"
            raise InvalidInput(msg)
        return Compacted(
            originator_id=self.id,
            originator_version=self.version + 1,
            timestamp=utcnow(),
            summary=summary,
            through=through,
        )

    def record_message(
        self,
        role: Role,
        blocks: list[Block],
        *,
        leave_open: bool = False,
        meta: MessageMeta | None = None,
    ) -> list[Event]:
        """Every event of a whole message: started, each block, ended unless left open, and
        its metadata when given.

        They are one write, so they share one timestamp: the moment it was recorded. In
        format 3 (:attr:`block_events`) a message with blocks is its block events alone, the
        metadata on the first and the end on the last.
        """
        if self.block_events and blocks:
            return self._record_blocks(role, blocks, leave_open=leave_open, meta=meta)
        started = self.start_message(role)
        events: list[Event] = [started]
        pending_tool_ids: dict[str, str] = {}
        for index, block in enumerate(blocks):
            version = started.originator_version + 1 + index
            try:
                events.append(
                    self._decide_block(
                        message_id=started.message_id,
                        role=role,
                        index=index,
                        version=version,
                        block=block,
                        pending_tool_ids=pending_tool_ids,
                        timestamp=started.timestamp,
                    )
                )
            except InvalidBlock as exc:
                msg = f"block {index}: {exc}"
                raise InvalidBlock(msg) from None
        if not leave_open:
            events.append(
                MessageEnded(
                    originator_id=self.id,
                    originator_version=started.originator_version + 1 + len(blocks),
                    timestamp=started.timestamp,
                    message_id=started.message_id,
                )
            )
        if meta is not None:
            events.append(
                MessageMetaRecorded(
                    originator_id=self.id,
                    originator_version=events[-1].originator_version + 1,
                    timestamp=started.timestamp,
                    message_id=started.message_id,
                    meta=meta,
                )
            )
        return events

    def _record_blocks(
        self, role: Role, blocks: list[Block], *, leave_open: bool, meta: MessageMeta | None
    ) -> list[Event]:
        message_id, timestamp = uuid4(), utcnow()
        pending_tool_ids: dict[str, str] = {}
        events: list[Event] = []
        last = len(blocks) - 1
        for index, block in enumerate(blocks):
            try:
                events.append(
                    self._record_block(
                        message_id=message_id,
                        role=role,
                        index=index,
                        version=self.version + 1 + index,
                        block=block,
                        pending_tool_ids=pending_tool_ids,
                        timestamp=timestamp,
                        closes=index == last and not leave_open,
                        meta=meta if index == 0 else None,
                    )
                )
            except InvalidBlock as exc:
                msg = f"block {index}: {exc}"
                raise InvalidBlock(msg) from None
        return events

    def add_block(
        self,
        message_id: UUID,
        block: Block,
        *,
        role: Role | None = None,
        closes: bool = False,
    ) -> list[Event]:
        """Add one block to a message: an open one, or (given its ``role``) one not in the
        log yet (a fork's copy), which this block opens (after a start of its own in formats
        1 and 2). With ``closes`` the message ends with it (an end after it in formats 1 and
        2)."""
        version, timestamp = self.version + 1, utcnow()
        events: list[Event] = []
        if message_id in self.messages or role is None:
            message = self._open_message(message_id, "given more blocks")
            role, index = message.role, message.block_count
        elif self.block_events:
            index = 0
        else:
            events.append(self.start_message(role, message_id))
            version, index = version + 1, 0
        decide = self._record_block if self.block_events else self._decide_block
        events.append(
            decide(
                message_id=message_id,
                role=role,
                index=index,
                version=version,
                block=block,
                pending_tool_ids={},
                timestamp=timestamp,
                closes=closes,
            )
        )
        if closes and not self.block_events:
            events.append(
                MessageEnded(
                    originator_id=self.id,
                    originator_version=version + 1,
                    timestamp=timestamp,
                    message_id=message_id,
                )
            )
        return events

    def new_entries(self, entries: Sequence[dict[str, JsonValue]]) -> list[dict[str, JsonValue]]:
        """The entries not recorded yet: those without a ``uuid``, and the first of each
        ``uuid`` not seen since the last deletion."""
        seen = set(self.entry_uuids)
        fresh: list[dict[str, JsonValue]] = []
        for entry in entries:
            uuid = entry.get("uuid")
            if isinstance(uuid, str):
                if uuid in seen:
                    continue
                seen.add(uuid)
            fresh.append(entry)
        return fresh

    def record_entries(
        self,
        entries: list[dict[str, JsonValue]],
        messages: Sequence[EntryMessage],
        compactions: Sequence[tuple[str, int]] = (),
    ) -> list[Event]:
        """The events of one batch of runtime entries: the entries verbatim, then the
        messages they carry, each ended (or interrupted), and the compactions they record.

        ``compactions`` pairs a summary with the index of the last message (of ``messages``)
        it replaces; ``-1`` means every message recorded before this batch. A ``tool_use``
        whose id is already recorded is left out of its message (a runtime repeating itself
        must not fail the whole batch); a message left with no block is not recorded.
        """
        if not entries:
            return []
        scratch = Conversation(
            id=self.id,
            version=self.version,
            messages=dict(self.messages),
            tool_names=dict(self.tool_names),
            block_events=self.block_events,
        )
        events: list[Event] = []

        def take(new: list[Event]) -> None:
            for event in new:
                scratch.apply(event)
            events.extend(new)

        take(
            [
                EntriesRecorded(
                    originator_id=self.id,
                    originator_version=self.version + 1,
                    timestamp=utcnow(),
                    entries=entries,
                )
            ]
        )
        summaries = {through: summary for summary, through in compactions}
        for index in range(-1, len(messages)):
            if index >= 0:
                role, blocks, status, reason = messages[index]
                kept = _fresh_calls(blocks, scratch.tool_names)
                if kept:
                    recorded = scratch.record_message(role, kept, leave_open=status != "ended")
                    take(recorded)
                    if status == "interrupted":
                        opened = recorded[0]
                        assert isinstance(opened, MessageStarted | BlockRecorded)
                        take([scratch.interrupt_message(opened.message_id, reason)])
            summary = summaries.get(index)
            if summary is None or not summary.strip():
                continue
            through = scratch.last_visible_message()
            if through is None:
                take(scratch.record_message("user", [TextBlock(text=summary)]))
            else:
                take([scratch.compact(summary, through)])
        return events

    def delete_entries(self) -> list[Event]:
        """Withdraw every message and mark the entries deleted (for a runtime's delete)."""
        rewound = self.rewind(None)
        return [
            rewound,
            EntriesDeleted(
                originator_id=self.id,
                originator_version=rewound.originator_version + 1,
                timestamp=rewound.timestamp,
            ),
        ]

    def last_visible_message(self) -> UUID | None:
        """The newest message not withdrawn by a rewind, if any."""
        for message_id in reversed(self.messages):
            if not self.messages[message_id].withdrawn:
                return message_id
        return None

    # -- rules -----------------------------------------------------------------------------

    def _visible_message(self, message_id: UUID, action: str) -> MessageState:
        message = self.messages.get(message_id)
        if message is None:
            msg = f"message {message_id} not found in conversation {self.id}"
            raise MessageNotFound(msg)
        if message.withdrawn:
            msg = f"message {message_id} was withdrawn by a rewind; it cannot be {action}"
            raise MessageClosed(msg)
        return message

    def _open_message(self, message_id: UUID, action: str) -> MessageState:
        message = self._visible_message(message_id, action)
        if message.status != "open":
            msg = f"message {message_id} was already {message.status}; it cannot be {action}"
            raise MessageClosed(msg)
        return message

    def _decide_block(
        self,
        *,
        message_id: UUID,
        role: Role,
        index: int,
        version: int,
        block: Block,
        pending_tool_ids: dict[str, str],
        timestamp: datetime | None = None,
        closes: bool = False,  # as _record_block takes it; format 2 ends with an event of its own
    ) -> BlockAppended:
        return BlockAppended(
            originator_id=self.id,
            originator_version=version,
            timestamp=timestamp or utcnow(),
            message_id=message_id,
            index=index,
            block=block,
            tool_name=self._tool_name(block, role, pending_tool_ids),
        )

    def _record_block(
        self,
        *,
        message_id: UUID,
        role: Role,
        index: int,
        version: int,
        block: Block,
        pending_tool_ids: dict[str, str],
        timestamp: datetime,
        closes: bool = False,
        meta: MessageMeta | None = None,
    ) -> BlockRecorded:
        """A format-3 block event, decided by the same rules as :meth:`_decide_block`.

        Assembled without validating it again: the block passed the edge
        (:func:`~convstore.domain.parsing.parse_block`), the metadata ``parse_meta``, and the
        rest is this state's own (see :mod:`convstore.domain.assembly`)."""
        role = parse_role(role)  # the one value no parser checked on every path here
        return assembled(
            BlockRecorded,
            originator_id=self.id,
            originator_version=version,
            timestamp=timestamp,
            message_id=message_id,
            role=role,
            index=index,
            block=block,
            tool_name=self._tool_name(block, role, pending_tool_ids),
            closes=True if closes else None,
            meta=meta,
        )

    def _tool_name(self, block: Block, role: Role, pending_tool_ids: dict[str, str]) -> str | None:
        """The tool name a result records (``None`` for every other kind), once the block is
        known to belong in a message of ``role``; raises :class:`InvalidBlock` otherwise."""
        tool_name: str | None = None
        match block:
            case ToolUseBlock() | HostedToolUseBlock():
                if role != "assistant":
                    msg = f"{block.type} blocks belong in assistant messages, not {role}"
                    raise InvalidBlock(msg)
                if block.id in self.tool_names:
                    msg = f"{block.type} id {block.id!r} is already recorded in this conversation"
                    raise InvalidBlock(msg)
                if block.id in pending_tool_ids:
                    msg = f"{block.type} id {block.id!r} appears twice in this message"
                    raise InvalidBlock(msg)
                pending_tool_ids[block.id] = block.name
            case ToolResultBlock():
                if role != "user":
                    msg = f"tool_result blocks belong in user messages, not {role}"
                    raise InvalidBlock(msg)
                tool_name = block.name or self.tool_names.get(block.tool_use_id, UNKNOWN_TOOL)
            case HostedToolResultBlock():
                # The provider ran the call inside the assistant's turn: its result is part of
                # that same message, usually right after the call.
                if role != "assistant":
                    msg = f"hosted_tool_result blocks belong in assistant messages, not {role}"
                    raise InvalidBlock(msg)
                tool_name = (
                    block.name
                    or pending_tool_ids.get(block.tool_use_id)
                    or self.tool_names.get(block.tool_use_id, UNKNOWN_TOOL)
                )
            case TextBlock() | ReasoningBlock() | ImageBlock() | DocumentBlock():
                pass
            case _:
                assert_never(block)
        return tool_name


def message_events(blocks: int, status: MessageStatus, *, block_events: bool) -> int:
    """How many events :meth:`Conversation.record_message` (and, for an interrupted message,
    :meth:`Conversation.interrupt_message` after it) records for a message of ``blocks``
    blocks closed as ``status``: in format 3 a message with blocks is its block events (an
    interruption after them), else its start, its blocks and its end or interruption."""
    if block_events and blocks:
        return blocks + (1 if status == "interrupted" else 0)
    return 1 + blocks + (0 if status == "open" else 1)


_E = TypeVar("_E", bound=BaseModel)


def as_of(events: Sequence[_E], at: datetime | None) -> list[_E]:
    """The events, each saying it happened ``at`` (the source's time of what they record: an
    imported or copied message); as they are when ``at`` is ``None``. Their ``timestamp``
    stays the moment they are recorded."""
    if at is None:
        return list(events)
    return [event.model_copy(update={"happened_at": at}) for event in events]


EntryMessage: TypeAlias = tuple[Role, Sequence[Block], MessageStatus, str | None]
"""A message carried by runtime entries: role, blocks, how it closed, and why if cut short."""


def entry_uuids(entries: Iterable[dict[str, JsonValue]]) -> Iterator[str]:
    """The idempotency keys of runtime entries (entries without a string ``uuid`` have none)."""
    for entry in entries:
        uuid = entry.get("uuid")
        if isinstance(uuid, str):
            yield uuid


def _fresh_calls(blocks: Sequence[Block], recorded: dict[str, str]) -> list[Block]:
    """``blocks`` without tool calls whose id is already recorded (or repeated here)."""
    seen = set(recorded)
    kept: list[Block] = []
    for block in blocks:
        if isinstance(block, ToolUseBlock | HostedToolUseBlock):
            if block.id in seen:
                continue
            seen.add(block.id)
        kept.append(block)
    return kept


_M = TypeVar("_M")


def withdrawn_ids(messages: dict[UUID, _M], to: UUID | None) -> list[UUID]:
    """The ids (in start order) of the messages a rewind to ``to`` withdraws."""
    ordered = list(messages)
    start = 0 if to is None else ordered.index(to) + 1 if to in messages else len(ordered)
    return ordered[start:]


def restored_ids(rewinds: dict[int, list[UUID]], undone: int) -> list[UUID]:
    """Drop the rewind at version ``undone`` from ``rewinds`` (those in force); returns the
    messages it withdrew that no rewind still in force withdraws."""
    withdrawn = rewinds.pop(undone, [])
    still = {message_id for ids in rewinds.values() for message_id in ids}
    return [message_id for message_id in withdrawn if message_id not in still]
