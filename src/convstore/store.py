"""The store: record conversations block by block, read them back, replay them.

One :class:`Store` wraps one event log (a SQLite file or a PostgreSQL database). Writers keep a
small per-conversation state in memory (see :mod:`convstore.domain.conversation`) and save each
new event with the next version number. The recorder refuses a version that another writer took
first; the store then reads just the events it missed, re-checks the command against them and
tries again. So an append costs one insert however long the conversation is, and concurrent
writers never overwrite, duplicate or reorder each other's events.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Any, TypeAlias, TypeVar
from uuid import UUID, uuid4

from eventsourcing.persistence import (
    IntegrityError,
    MapperDeserialisationError,
    Notification,
    PersistenceError,
)
from pydantic import JsonValue, TypeAdapter, ValidationError

from convstore.convert.history import History
from convstore.domain.blocks import Block, TextBlock, ToolResultBlock
from convstore.domain.conversation import Conversation, EntryMessage
from convstore.domain.events import (
    BlockAppended,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    MessageMeta,
    MessageStarted,
    Role,
    utcnow,
)
from convstore.domain.limits import Limits
from convstore.domain.metadata import parse_label_keys, parse_labels, parse_meta
from convstore.domain.parsing import (
    describe_value,
    parse_block,
    parse_blocks,
    parse_count,
    parse_flag,
    parse_id,
    parse_optional_count,
    parse_optional_text,
    parse_role,
    parse_text,
)
from convstore.errors import (
    ConcurrencyError,
    ConversationNotFound,
    InvalidBlock,
    InvalidInput,
    MessageNotFound,
    StoreError,
)
from convstore.importing import ImportReport, import_histories
from convstore.infrastructure.application import EventLog
from convstore.infrastructure.chain import Head
from convstore.infrastructure.erasure import Erasure
from convstore.infrastructure.mapper import TOPIC_PREFIX, TOPICS, UnreadableEvent
from convstore.infrastructure.memory import paused_gc
from convstore.infrastructure.records import Recorded, failure_detail
from convstore.projections.listing import (
    ListedRow,
    ListingQuery,
    from_micros,
    listing_changes,
    micros,
)
from convstore.projections.live import live_request
from convstore.projections.messages import RecordedMessage, collect_history, collect_messages
from convstore.projections.pressure import Pressure, fit_keep, measure
from convstore.projections.replay import (
    SHAPES,
    JSONDict,
    PlannedMessage,
    ReplayOptions,
    Shape,
    plan,
    render,
)
from convstore.transfer import LoadReport, dump_lines, load_lines

MIN_WRITE_ATTEMPTS = 200
"""A write is re-decided after a lost version race at least this many times…"""

WRITE_RETRY_SECONDS = 30.0
"""…and for at least this long before it gives up: a writer starved of CPU on a busy host
loses many races in a row without anything being wrong."""

WAL_TRUNCATE_ATTEMPTS = 50
"""How often (every 0.1 s) an erasure tries to empty SQLite's write-ahead log."""

STATE_CACHE_SIZE = 256
"""How many conversations' writer states one store keeps in memory."""

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """A conversation as listed: its id, title and when it started (and, when set, the
    conversation it branched from and where it was imported from)."""

    id: UUID
    title: str | None
    created_at: datetime
    parent_id: UUID | None = None
    """The conversation this one branched from (a subagent's parent), if any."""
    source: str | None = None
    """Where its history came from (an import's key, a runtime's session key), if recorded."""
    last_active: datetime | None = None
    """When its newest event was recorded."""
    labels: dict[str, str] = field(default_factory=dict)
    """Its labels (see :meth:`Store.set_labels`)."""
    events: int = 0
    """How many events its log holds."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing: its conversations, and the cursor of the next page (``None``
    when this is the last). Pass ``next`` as ``after`` to get the next page."""

    conversations: list[ConversationInfo]
    next: str | None


class Store:
    """Conversations recorded as an event log. Build one with :func:`convstore.open_store`."""

    def __init__(
        self, log: EventLog, location: str, *, secret: str = "", limits: Limits | None = None
    ) -> None:
        self._log = log
        self.limits = limits or Limits()
        """The block and image size limits this store enforces."""
        self.location = location
        """Where the store is, safe to show: a file path, or a URL without its password."""
        self._secret = secret
        self._states: OrderedDict[UUID, Conversation] = OrderedDict()
        self._locks: dict[UUID, threading.Lock] = {}
        self._guard = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the backend's connections."""
        self._log.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def new_conversation(
        self,
        title: str | None = None,
        *,
        conversation_id: UUID | str | None = None,
        parent_id: UUID | str | None = None,
        source: str | None = None,
    ) -> UUID:
        """Start a conversation; returns its id (a new random one unless given).

        ``parent_id`` names the conversation it branched from; ``source`` where its history
        comes from (see :class:`~convstore.ConversationStarted`).
        """
        title = parse_optional_text(title, "title", self.limits.max_note_bytes)
        source = parse_optional_text(source, "source", self.limits.max_note_bytes)
        conversation_id = (
            uuid4() if conversation_id is None else parse_id(conversation_id, "conversation")
        )
        parent = None if parent_id is None else parse_id(parent_id, "parent conversation")
        started = Conversation.start(conversation_id, title, parent_id=parent, source=source)
        try:
            self._save([started])
        except IntegrityError:
            msg = f"conversation {conversation_id} already exists"
            raise InvalidInput(msg) from None
        state = Conversation(id=conversation_id)
        state.apply(started)
        self._remember(state)
        return conversation_id

    def start_message(self, conversation: UUID | str, role: Role | str) -> UUID:
        """Open a message for ``role``; returns the message id. Append blocks, then end it."""
        checked = parse_role(role)
        events = self._write(conversation, lambda c: [c.start_message(checked)])
        assert events[0].type == "message_started"
        return events[0].message_id

    def append_block(
        self, conversation: UUID | str, message: UUID | str, block: Block | Mapping[str, Any]
    ) -> int:
        """Append one block to an open message (streaming); returns its index in the message."""
        message_id = parse_id(message, "message")
        parsed = parse_block(block, self.limits)
        events = self._write(conversation, lambda c: [c.append_block(message_id, parsed)])
        assert events[0].type == "block_appended"
        return events[0].index

    def end_message(
        self,
        conversation: UUID | str,
        message: UUID | str,
        *,
        meta: MessageMeta | Mapping[str, Any] | None = None,
    ) -> None:
        """Mark an open message complete, recording its metadata (``meta``) in the same
        write when given (see :meth:`append_message`)."""
        message_id = parse_id(message, "message")
        checked = None if meta is None else parse_meta(meta, self.limits)

        def decide(c: Conversation) -> list[Event]:
            ended = c.end_message(message_id)
            if checked is None:
                return [ended]
            recorded = c.record_meta(
                message_id,
                checked,
                version=ended.originator_version + 1,
                timestamp=ended.timestamp,
            )
            return [ended, recorded]

        self._write(conversation, decide)

    def interrupt_message(
        self, conversation: UUID | str, message: UUID | str, reason: str | None = None
    ) -> None:
        """Record that an open message was cut short (and why, if known)."""
        message_id = parse_id(message, "message")
        reason = parse_optional_text(reason, "reason", self.limits.max_note_bytes)
        self._write(conversation, lambda c: [c.interrupt_message(message_id, reason)])

    def append_message(
        self,
        conversation: UUID | str,
        role: Role | str,
        blocks: Iterable[Block | Mapping[str, Any]],
        *,
        leave_open: bool = False,
        meta: MessageMeta | Mapping[str, Any] | None = None,
    ) -> UUID:
        """Record a whole message in one atomic write; returns its id.

        With ``leave_open`` the message is not ended, so more blocks may follow. ``meta``
        (a :class:`~convstore.MessageMeta` or its JSON object: model, provider message id,
        stop reason, token usage, latency, extras) is recorded in the same write; replay
        never shows it, ``messages()``, ``show`` and the audit do.
        """
        checked = parse_role(role)
        leave_open = parse_flag(leave_open, "leave_open")
        parsed = parse_blocks(blocks, self.limits)
        meta_checked = None if meta is None else parse_meta(meta, self.limits)
        events = self._write(
            conversation,
            lambda c: c.record_message(checked, parsed, leave_open=leave_open, meta=meta_checked),
        )
        assert events[0].type == "message_started"
        return events[0].message_id

    def record_entries(
        self,
        conversation: UUID | str,
        entries: Sequence[Mapping[str, Any]],
        carried: Callable[[list[dict[str, JsonValue]]], EntryBatch] | None = None,
    ) -> int:
        """Keep an agent runtime's transcript entries verbatim, in one write with the messages
        they carry; returns how many entries were new.

        An entry whose ``uuid`` was recorded before (since the last :meth:`delete_entries`) is
        left out. ``carried`` turns the new entries into messages and compactions (as
        ``(messages, [(summary, through_index), ...])``); the messages are recorded beside
        the entries, so replay, audit and pressure see them.
        """
        if not isinstance(entries, list | tuple):
            msg = f"entries must be a list of JSON objects, not {describe_value(entries)}"
            raise InvalidInput(msg)
        if carried is not None and not callable(carried):
            msg = f"carried must be a function or None, not {describe_value(carried)}"
            raise InvalidInput(msg)
        checked = [_entry(entry, index) for index, entry in enumerate(entries)]

        def decide(state: Conversation) -> list[Event]:
            fresh = state.new_entries(checked)
            messages, compactions = carried(fresh) if carried and fresh else ([], [])
            limited = [
                (role, [self._within_limits(block) for block in blocks], status, reason)
                for role, blocks, status, reason in messages
            ]
            return state.record_entries(fresh, limited, compactions)

        events = self._write(conversation, decide)
        return sum(len(e.entries) for e in events if isinstance(e, EntriesRecorded))

    def _within_limits(self, block: Block) -> Block:
        """A block carried by runtime entries, or a marker where it breaks this store's
        limits (the entry itself is kept whole either way)."""
        try:
            return parse_block(block, self.limits)
        except InvalidBlock as exc:
            return TextBlock(text=f"[Block not kept: {exc}]")

    def delete_entries(self, conversation: UUID | str) -> None:
        """Mark a conversation's runtime entries deleted and withdraw its messages: the
        entries no longer load and replay leaves the messages out. The log keeps the bytes."""
        self._write(conversation, lambda c: c.delete_entries())

    def entries(self, conversation: UUID | str) -> list[dict[str, JsonValue]] | None:
        """The runtime entries recorded since the last deletion, in order; ``None`` when
        there are none (never recorded, or deleted) or the conversation does not exist."""
        conversation_id = parse_id(conversation, "conversation")
        found: list[dict[str, JsonValue]] | None = None
        with paused_gc():
            for event in self._stream(conversation_id):
                if isinstance(event, EntriesRecorded):
                    found = [*(found or []), *event.entries]
                elif isinstance(event, EntriesDeleted):
                    found = None
        return found

    def last_event(self, conversation: UUID | str) -> Event | None:
        """The newest event of a conversation (``None`` when it does not exist); one read."""
        conversation_id = parse_id(conversation, "conversation")
        found = self._guarded(
            lambda: self._log.recorder.select_events(conversation_id, desc=True, limit=1)
        )
        if not found:
            return None
        return self._guarded(lambda: self._log.pydantic_mapper.decode(found[0]))

    # -- reading ---------------------------------------------------------------------------

    def events(self, conversation: UUID | str) -> list[Event]:
        """Every recorded event of a conversation, in order."""
        conversation_id = parse_id(conversation, "conversation")
        with paused_gc():
            events = list(self._stream(conversation_id))
        if not events:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return events

    def tail(
        self, conversation: UUID | str, *, messages: int, before: int | None = None
    ) -> list[Event]:
        """The end of a conversation's log, in order: every event after the start of the
        message before the ``messages``-th newest one started before version ``before``
        (before the end when ``None``) through the newest event. Read backwards from the end
        in growing pages, so the newest messages of a long log cost a few hundred decodes.

        When no message started before those, the whole log is returned: it begins with the
        conversation's start. Fold a tail that does not with
        ``collect_history(events, tail=True)``.
        """
        conversation_id = parse_id(conversation, "conversation")
        wanted = parse_count(messages, "messages", 1)
        limit = parse_optional_count(before, "before", 1)
        recorder, decode = self._log.recorder, self._log.pydantic_mapper.decode
        found: list[Event] = []
        started = 0
        top: int | None = None
        chunk = min(4 * wanted + 16, 100_000)  # a message is a few events; never a huge LIMIT
        with paused_gc():
            while True:
                rows = self._guarded(
                    lambda top=top, chunk=chunk: recorder.select_events(  # type: ignore[misc]
                        conversation_id, lte=top, desc=True, limit=chunk
                    )
                )
                for row in rows:
                    event = self._guarded(lambda row=row: decode(row))  # type: ignore[misc]
                    topic = row.topic.encode("utf-8", "surrogateescape")
                    if topic != _TOPIC_BYTES[event.type]:
                        raise _damaged_topic(conversation_id, event, topic)
                    if isinstance(event, MessageStarted) and (
                        limit is None or event.originator_version < limit
                    ):
                        if started == wanted:
                            return found[::-1]
                        started += 1
                    found.append(event)
                if len(rows) < chunk:
                    break
                top = rows[-1].originator_version - 1
                chunk = min(chunk * 2, 100_000)
        if not found:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return found[::-1]

    def raw_events(self, conversation: UUID | str) -> Iterator[bytes]:
        """Every recorded event of a conversation as the JSON it was stored as."""
        conversation_id = parse_id(conversation, "conversation")
        states = self._guarded(lambda: self._log.select_states(conversation_id))
        if not states:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return map(self._log.pydantic_mapper.plain, states)

    def messages(self, conversation: UUID | str) -> list[RecordedMessage]:
        """The stored messages of a conversation with their blocks and status."""
        return collect_messages(self.events(conversation))

    def compact(self, conversation: UUID | str, summary: str, *, through: UUID | str) -> None:
        """Record that replay now starts with ``summary`` instead of every message up to and
        including ``through``. The log keeps everything; ``replay(full=True)`` ignores it."""
        message_id = parse_id(through, "message")
        summary = parse_text(summary, "summary", self.limits.max_block_bytes)
        self._write(conversation, lambda c: [c.compact(summary, message_id)])

    def rename(self, conversation: UUID | str, title: str | None) -> None:
        """Give a conversation a new title (``None`` clears it)."""
        title = parse_optional_text(title, "title", self.limits.max_note_bytes)
        self._write(conversation, lambda c: [c.rename(title)])

    def set_labels(self, conversation: UUID | str, labels: Mapping[str, str]) -> None:
        """Set labels (key → text) on a conversation; a key set again takes the new value.

        Keys are 1 to ``limits.max_label_key_bytes`` characters from ``A-Z a-z 0-9 . _ - :
        /``; a conversation holds at most ``limits.max_labels``. List by them with
        :meth:`list_conversations`.
        """
        checked = parse_labels(labels, self.limits)
        self._write(conversation, lambda c: [c.set_labels(checked, self.limits)])

    def remove_labels(self, conversation: UUID | str, keys: Iterable[str]) -> None:
        """Remove the labels under ``keys`` (a key not set is ignored)."""
        checked = parse_label_keys(keys, self.limits)
        self._write(conversation, lambda c: [c.remove_labels(checked)])

    def rewind(self, conversation: UUID | str, *, to: UUID | str | None) -> int:
        """Withdraw every message recorded after ``to`` (every message, when ``to`` is
        ``None``): replay, pressure and live rounds leave them out; the log keeps them.
        Returns the rewind's version, which :meth:`undo_rewind` takes."""
        message_id = None if to is None else parse_id(to, "message")
        events = self._write(conversation, lambda c: [c.rewind(message_id)])
        return events[0].originator_version

    def undo_rewind(self, conversation: UUID | str, rewind: int) -> None:
        """Undo the rewind recorded at version ``rewind``: the messages it withdrew are
        visible again in replay, pressure and live rounds (unless another rewind in force
        still withdraws them)."""
        version = parse_count(rewind, "rewind", 1)
        self._write(conversation, lambda c: [c.undo_rewind(version)])

    def fork(self, conversation: UUID | str, *, at: UUID | str, title: str | None = None) -> UUID:
        """Start a new conversation whose history is a copy of this one's up to and including
        message ``at``; returns its id. It records its parent and the fork point, and appends
        independently.

        The copy is of what replay would see: messages a rewind withdrew are left out, and the
        newest compaction through a copied message is copied with it. Every copied message
        gets a new id. The copy is one transaction, read from one snapshot of the parent.
        """
        parent = parse_id(conversation, "conversation")
        point = parse_id(at, "message")
        title = parse_optional_text(title, "title", self.limits.max_note_bytes)
        history = collect_history(self.events(parent))
        visible = [m for m in history.messages if not m.withdrawn]
        ids = [m.message_id for m in visible]
        if point not in ids:
            known = any(m.message_id == point for m in history.messages)
            why = "was withdrawn by a rewind" if known else "is not"
            msg = f"message {point} {why} in conversation {parent}; it cannot be forked at"
            raise MessageNotFound(msg)
        copied = visible[: ids.index(point) + 1]
        fork_id = uuid4()
        state = Conversation(id=fork_id)
        events: list[Event] = []

        def record(event: Event) -> None:
            state.apply(event)
            events.append(event)

        record(Conversation.start(fork_id, title, parent_id=parent, forked_at=point))
        new_ids: dict[UUID, UUID] = {}
        for message in copied:
            started = state.start_message(message.role)
            record(started)
            new_ids[message.message_id] = started.message_id
            for recorded in message.blocks:
                record(state.append_block(started.message_id, recorded.block))
            if message.status == "ended":
                record(state.end_message(started.message_id))
            elif message.status == "interrupted":
                record(state.interrupt_message(started.message_id, message.interrupt_reason))
        kept = [c for c in history.compactions if c.through in new_ids]
        if kept:
            record(state.compact(kept[-1].summary, new_ids[kept[-1].through]))
        self._record_new(events)
        self._remember(state)
        return fork_id

    def erase(self, conversation: UUID | str, *, reason: str) -> Erasure:
        """Delete every event of a conversation for good, leaving only its tombstone (id, when,
        ``reason``, how many events); returns the tombstone.

        The one exception to "nothing is deleted". On SQLite the deleted bytes are overwritten
        and the write-ahead log emptied before this returns; on PostgreSQL the rows are
        deleted (their bytes stay in dead tuples until the table is vacuumed). Nothing more is
        recorded under the id afterwards. Read models drop what they derived from it at their
        next catch-up. Conversations that name it as their parent are not touched.
        """
        conversation_id = parse_id(conversation, "conversation")
        reason = parse_text(reason, "reason", self.limits.max_note_bytes)
        erase = getattr(self._log.recorder, "erase", None)
        if erase is None:
            msg = "this store's backend cannot erase"
            raise InvalidInput(msg)
        lock = self._locks.get(conversation_id) or self._locks.setdefault(
            conversation_id, threading.Lock()
        )
        at = utcnow()
        with lock:
            seq, _ = self._guarded(lambda: erase(conversation_id, reason, at.isoformat()))
            with self._guard:
                self._states.pop(conversation_id, None)
        for _ in range(WAL_TRUNCATE_ATTEMPTS):
            if self._guarded(self._log.recorder.truncate_wal):  # type: ignore[attr-defined]
                break
            time.sleep(0.1)
        else:
            msg = (
                f"conversation {conversation_id} was erased, but a reader kept the write-ahead "
                "log in use for 5 s: its old bytes leave that file at the next checkpoint, "
                "once readers are idle"
            )
            raise StoreError(msg)
        return self.erasures(seq - 1)[0]

    def erasures(self, after: int = 0) -> list[Erasure]:
        """The tombstones of erased conversations after ``seq`` ``after``, in order."""
        after = parse_count(after, "after")
        select = getattr(self._log.recorder, "select_erasures", None)
        if select is None:
            return []
        found: list[Erasure] = self._guarded(lambda: select(after))
        return found

    def replay(
        self,
        conversation: UUID | str,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """The conversation as provider wire messages (see :mod:`convstore.projections.replay`).

        ``vision`` says whether the model can see images. ``full`` ignores compaction;
        ``keep_tool_results`` clears the output of all but the newest N tool results.
        """
        options = _options(vision, full, keep_tool_results)
        checked = _parse_shape(shape)
        conversation_id = parse_id(conversation, "conversation")
        with paused_gc():
            planned = plan(self._stream(conversation_id), options)
            if not planned and not self._exists(conversation_id):
                msg = f"conversation {conversation_id} not found"
                raise ConversationNotFound(msg)
            return render(planned, checked)

    def fit_tool_results(
        self,
        conversation: UUID | str,
        max_tokens: int,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
    ) -> tuple[int | None, Pressure]:
        """Microcompact by budget: the most tool results replay can keep within ``max_tokens``
        (``None`` when everything fits), with the pressure at that setting. Oldest output is
        cleared first; pass the answer as ``keep_tool_results`` to :meth:`replay`."""
        from convstore.infrastructure.tokenizer import ENCODING, count_tokens  # noqa: PLC0415

        max_tokens = parse_count(max_tokens, "max_tokens", 1)
        _options(vision, full, None)
        checked = _parse_shape(shape)
        events = self.events(conversation)
        results = sum(
            1
            for e in events
            if isinstance(e, BlockAppended) and isinstance(e.block, ToolResultBlock)
        )

        def planner(keep: int | None) -> list[PlannedMessage]:
            return plan(events, _options(vision, full, keep))

        keep, pressure = fit_keep(planner, checked, count_tokens, max_tokens, results)
        return keep, replace(pressure, tokenizer=ENCODING)

    def live_request(
        self,
        conversation: UUID | str,
        live_message: UUID | str,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """Replay of the history before ``live_message``, then its tool round with real
        call-id linkage (see :mod:`convstore.projections.live`)."""
        live = parse_id(live_message, "message")
        options = _options(vision, full, keep_tool_results)
        events = self.events(conversation)
        return live_request(events, live, shape=_parse_shape(shape), options=options)

    def pressure(
        self,
        conversation: UUID | str,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
        keep_tool_results: int | None = None,
    ) -> Pressure:
        """Tokens of exactly what :meth:`replay` sends with these options, with a breakdown."""
        from convstore.infrastructure.tokenizer import ENCODING, count_tokens  # noqa: PLC0415

        options = _options(vision, full, keep_tool_results)
        planned = plan(self.events(conversation), options)
        return measure(planned, _parse_shape(shape), count_tokens, tokenizer=ENCODING)

    def conversations(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        title: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        active_after: datetime | None = None,
        active_before: datetime | None = None,
    ) -> list[ConversationInfo]:
        """Every conversation (matching the filters, as in :meth:`list_conversations`) in the
        order they were started, read from the listing index, never from the log."""
        query = self._listing_query(
            labels, title, started_after, started_before, active_after, active_before
        )
        found: list[ConversationInfo] = []
        query = replace(query, order="started", limit=1000)
        while True:
            rows, labels_of = self._select_listing(query)
            found += [_info(row, labels_of.get(row.id, {})) for row in rows]
            if len(rows) < 1000:
                return found
            query = replace(query, after=(rows[-1].created_at, rows[-1].id.hex))

    def list_conversations(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        title: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        active_after: datetime | None = None,
        active_before: datetime | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        """One page of conversations, newest activity first, from the listing index.

        ``labels`` keeps those holding every given key with that value; ``title`` those
        whose title contains the text (case-blind for ASCII); the four bounds compare with
        when a conversation started and when it was last active (exclusive). ``after`` is
        the ``next`` cursor of the previous page. Costs one indexed read however many
        conversations or events the store holds.
        """
        query = self._listing_query(
            labels, title, started_after, started_before, active_after, active_before
        )
        limit = parse_count(limit, "limit", 1)
        cursor = None if after is None else _parse_cursor(after)
        rows, labels_of = self._select_listing(replace(query, limit=limit + 1, after=cursor))
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = f"{rows[-1].last_active}.{rows[-1].id.hex}" if more else None
        return Page([_info(row, labels_of.get(row.id, {})) for row in rows], next_cursor)

    def conversation_info(self, conversation: UUID | str) -> ConversationInfo:
        """One conversation as :meth:`list_conversations` lists it (title, labels, last
        activity, events), from the listing index: one indexed read."""
        conversation_id = parse_id(conversation, "conversation")
        rows, labels_of = self._select_listing(ListingQuery(ids=(conversation_id,), limit=1))
        if not rows:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return _info(rows[0], labels_of.get(rows[0].id, {}))

    def rebuild_listing(self) -> int:
        """Refill the listing index from the log in one transaction (writers wait meanwhile);
        returns how many conversations it lists. Opening a store made before the index does
        this on its own."""
        rebuild = getattr(self._log.recorder, "rebuild_listing", None)
        if rebuild is None:
            msg = "this backend keeps no listing index"
            raise StoreError(msg)
        decode = self._log.pydantic_mapper.decode_state
        count: int = self._guarded(lambda: rebuild(decode))
        return count

    def _listing_query(  # noqa: PLR0917 - the public filters, passed on as they came
        self,
        labels: Mapping[str, str] | None,
        title: str | None,
        started_after: datetime | None,
        started_before: datetime | None,
        active_after: datetime | None,
        active_before: datetime | None,
    ) -> ListingQuery:
        wanted = () if labels is None else tuple(parse_labels(labels, self.limits).items())
        return ListingQuery(
            labels=wanted,
            title=parse_optional_text(title, "title", self.limits.max_note_bytes),
            started_after=_parse_moment(started_after, "started_after"),
            started_before=_parse_moment(started_before, "started_before"),
            active_after=_parse_moment(active_after, "active_after"),
            active_before=_parse_moment(active_before, "active_before"),
        )

    def _select_listing(
        self, query: ListingQuery
    ) -> tuple[list[ListedRow], dict[UUID, dict[str, str]]]:
        select = getattr(self._log.recorder, "select_listing", None)
        if select is None:
            msg = "this backend keeps no listing index"
            raise StoreError(msg)
        found: tuple[list[ListedRow], dict[UUID, dict[str, str]]] = self._guarded(
            lambda: select(query)
        )
        return found

    def notifications(self, after: int, limit: int) -> list[tuple[int, Event]]:
        """Up to ``limit`` events of every conversation recorded after log position ``after``.

        Positions are the log's notification ids: increasing in the order events committed.
        Every row is read, whatever its topic: a row whose stored topic disagrees with its
        event (damage ``verify`` reports and replay refuses) raises :class:`StoreError` naming
        the row instead of being skipped, so a projection never silently differs from replay.
        """
        after, limit = parse_count(after, "after"), parse_count(limit, "limit", 1)
        page = self._guarded(
            lambda: self._log.recorder.select_notifications(after, limit, inclusive_of_start=False)
        )
        decode = self._log.pydantic_mapper.decode
        found: list[tuple[int, Event]] = []
        for n in page:
            event = self._guarded(lambda n=n: decode(n))  # type: ignore[misc]
            topic = n.topic.encode("utf-8", "surrogateescape")
            if topic != _TOPIC_BYTES[event.type]:
                raise _damaged_topic(event.originator_id, event, topic, position=n.id)
            found.append((n.id, event))
        return found

    def scan(self, page_size: int = 1000) -> Iterator[Recorded]:
        """Every stored record in log order, decoded one by one.

        A record that does not decode, or whose columns cannot even be read (a damaged or
        tampered row), is yielded with the reason instead of stopping the scan. On SQLite the
        rows are read with TEXT columns as bytes, so text that is not UTF-8 is one more reason.
        """
        return self._scan(parse_count(page_size, "page_size", 1))

    def _scan(self, page_size: int) -> Iterator[Recorded]:
        raw = getattr(self._log.recorder, "select_raw_records", None)
        if raw is not None:
            yield from self._scan_raw(raw, page_size)
            return
        recorder = self._log.recorder
        end = self.log_position()
        after = 0
        while after < end:
            try:
                page = self._guarded(
                    lambda after=after: recorder.select_notifications(  # type: ignore[misc]
                        after, page_size, inclusive_of_start=False
                    )
                )
            except StoreError:
                raise
            except Exception:  # noqa: BLE001 - a damaged row; find it one position at a time
                yield from self._scan_one_by_one(after + 1, min(after + page_size, end))
                after = min(after + page_size, end)
                continue
            yield from map(self._recorded, page)
            if not page:
                return
            after = page[-1].id

    def _scan_raw(
        self, select: Callable[[int, int], list[tuple[Any, ...]]], page_size: int
    ) -> Iterator[Recorded]:
        after = 0
        while True:
            page = self._guarded(lambda after=after: select(after, page_size))  # type: ignore[misc]
            yield from map(self._recorded_row, page)
            if len(page) < page_size:
                return
            after = page[-1][0]

    def _recorded_row(self, row: tuple[Any, ...]) -> Recorded:
        """One raw stored row (position, id, version, topic, state; TEXT as bytes) decoded."""
        position, raw_id, version, raw_topic, state = row
        try:
            originator_id = UUID(bytes(raw_id).decode("utf-8"))
        except (TypeError, ValueError):
            detail = f"originator_id {_shown(raw_id)} is not a conversation id"
            return Recorded(position, None, None, None, detail)
        if version is None:
            return Recorded(position, originator_id, None, None, "the version is empty (NULL)")
        if not isinstance(state, bytes):
            return Recorded(position, originator_id, version, None, "the state is not bytes")
        unreadable = topic = None
        if not isinstance(raw_topic, bytes):
            unreadable, raw_topic = f"the topic {raw_topic!r} is not text", b""
        else:
            try:
                topic = raw_topic.decode("utf-8")
            except UnicodeDecodeError:
                unreadable = f"the topic column is not valid UTF-8 ({_shown(raw_topic)})"
        notification = Notification(
            originator_id=originator_id,
            originator_version=version,
            topic=topic or "",
            state=state,
            id=position,
        )
        recorded = self._recorded(notification)
        return replace(recorded, topic=topic, unreadable=unreadable, raw_topic=raw_topic)

    def _scan_one_by_one(self, first: int, last: int) -> Iterator[Recorded]:
        recorder = self._log.recorder
        for position in range(first, last + 1):
            try:
                [*found] = recorder.select_notifications(position, 1, stop=position)
            except PersistenceError as exc:
                raise self._failure(exc) from exc
            except Exception as exc:  # noqa: BLE001 - report the damaged row and go on
                yield Recorded(position, None, None, None, " ".join(str(exc).split())[:300])
                continue
            yield from map(self._recorded, found)

    def _recorded(self, n: Notification) -> Recorded:
        """One scanned record, with the reason instead of the event if it does not decode."""
        try:
            event: Event | None = self._log.pydantic_mapper.decode(n)
            error = None
        except MapperDeserialisationError as exc:
            event, error = None, " ".join(str(exc.__cause__ or exc).split())[:300]
        return Recorded(
            n.id,
            n.originator_id,
            n.originator_version,
            event,
            error,
            n.topic,
            raw_topic=n.topic.encode("utf-8", "surrogateescape"),
            state=n.state,
        )

    def heads(self) -> dict[UUID, Head] | None:
        """Every conversation's chained head (the start marker under the nil id), or ``None``
        for a backend that keeps none."""
        select = getattr(self._log.recorder, "select_heads", None)
        if select is None:
            return None
        heads: dict[UUID, Head] = self._guarded(select)
        return heads

    def log_position(self) -> int:
        """The position of the newest event in the log (0 when it is empty)."""
        return self._guarded(self._log.recorder.max_notification_id) or 0

    # -- moving whole logs (see convstore.transfer) -----------------------------------------

    def dump(self) -> Iterator[bytes]:
        """The whole log as dump lines (JSON, each ending in a newline), page by page."""
        return dump_lines(self)

    def load(self, lines: Iterable[bytes]) -> LoadReport:
        """Record a dump's events into this store, which must be empty or hold a prefix of it
        (an interrupted load), keeping ids, versions, timestamps and order."""
        return load_lines(self, lines, max_line_bytes=self.limits.max_input_bytes)

    def import_history(
        self, history: History, *, source: str | None = None, again: bool = False
    ) -> UUID:
        """Record a history read by a converter (:mod:`convstore.convert`) as one new
        conversation, all or nothing; returns its id. A ``source`` (default: the history's
        key) already in the store is refused unless ``again``."""
        if not isinstance(history, History):
            msg = f"history must be a History (convstore.convert), not {type(history).__name__}"
            raise InvalidInput(msg)
        sources = [history.key if source is None else source]
        return self.import_histories([history], sources=sources, again=again).ids[0]

    def import_histories(
        self,
        histories: Sequence[History],
        *,
        sources: Sequence[str | None] | None = None,
        again: bool = False,
    ) -> ImportReport:
        """Record several histories of one input (a session and its subagents) in one
        transaction; see :func:`convstore.importing.import_histories`."""
        return import_histories(self, histories, sources=sources, again=again)

    # -- internals -------------------------------------------------------------------------

    def _failure(self, exc: Exception) -> StoreError:
        """A backend failure as one line naming the store, never showing its password."""
        detail = failure_detail(exc, self._secret)
        if isinstance(exc, MapperDeserialisationError):
            return StoreError(detail)
        return StoreError(f"store failed at {self.location}: {detail}")

    def _guarded(self, call: Callable[[], _T]) -> _T:
        """Run a backend call, turning its failures into :class:`StoreError`."""
        try:
            return call()
        except (MapperDeserialisationError, PersistenceError) as exc:
            raise self._failure(exc) from exc

    def _stream(self, conversation_id: UUID, after: int = 0) -> Iterator[Event]:
        """A conversation's events after version ``after``, decoded one by one as they are
        consumed (replay folds them without holding a list)."""
        rows = self._guarded(lambda: self._log.select_topics_and_states(conversation_id, after))
        decode = self._log.pydantic_mapper.decode_state
        for topic, state in rows:
            try:
                event = decode(state)
            except ValueError as exc:  # a pydantic ValidationError, or a bad compressed state
                msg = f"a stored event of conversation {conversation_id} does not decode: {exc}"
                raise StoreError(" ".join(msg.split())[:500]) from exc
            if topic != _TOPIC_BYTES[event.type]:
                raise _damaged_topic(conversation_id, event, topic)
            yield event

    def _record_new(self, events: list[Event]) -> None:
        """Save the events of conversations that do not exist yet, in one transaction."""
        try:
            self._save(events)
        except IntegrityError:
            msg = "a conversation being created already exists (the import was not recorded)"
            raise StoreError(msg) from None

    def _exists(self, conversation_id: UUID) -> bool:
        found = self._guarded(lambda: self._log.recorder.select_events(conversation_id, limit=1))
        return bool(found)

    def _read(self, conversation_id: UUID, after: int = 0) -> list[Event]:
        return list(self._stream(conversation_id, after))

    def _save(self, events: list[Event]) -> None:
        """Record events atomically; lets ``IntegrityError`` (a lost version race) through.

        Straight to the recorder: eventsourcing's ``Application.save`` adds processing,
        snapshot and notification hooks convstore does not use, a quarter of an append's CPU.
        """
        to_stored = self._log.mapper.to_stored_event
        stored = []
        for event in events:
            try:
                stored.append(to_stored(event))
            except UnreadableEvent as exc:
                raise _unreadable(event, exc) from None
        try:
            self._log.recorder.insert_events(stored, listing=listing_changes(events))
        except IntegrityError:
            raise
        except PersistenceError as exc:
            raise self._failure(exc) from exc

    def _remember(self, state: Conversation) -> None:
        with self._guard:
            self._states[state.id] = state
            self._states.move_to_end(state.id)
            while len(self._states) > STATE_CACHE_SIZE:
                self._states.popitem(last=False)

    def _state(self, conversation_id: UUID) -> Conversation:
        with self._guard:
            state = self._states.get(conversation_id)
        if state is None:
            state = Conversation.from_events(conversation_id, self._read(conversation_id))
            if state.version == 0:
                msg = f"conversation {conversation_id} not found"
                raise ConversationNotFound(msg)
            self._remember(state)
        return state

    def _catch_up(self, conversation_id: UUID, state: Conversation) -> bool:
        """Fold into ``state`` the events other writers recorded since; whether there were any."""
        missed = self._read(conversation_id, after=state.version)
        for event in missed:
            state.apply(event)
        return bool(missed)

    def _write(
        self, conversation: UUID | str, decide: Callable[[Conversation], list[Event]]
    ) -> list[Event]:
        """Decide events against the newest state, save them, and fold them in.

        A lost version race means another writer got there first: read what it wrote, decide
        again (the command may now be refused), and retry.
        """
        conversation_id = parse_id(conversation, "conversation")
        lock = self._locks.get(conversation_id) or self._locks.setdefault(
            conversation_id, threading.Lock()
        )
        with lock:
            deadline = time.monotonic() + WRITE_RETRY_SECONDS
            attempt = 0
            while attempt < MIN_WRITE_ATTEMPTS or time.monotonic() < deadline:
                attempt += 1
                state = self._state(conversation_id)
                try:
                    events = decide(state)
                except InvalidInput:
                    # The cached state may be behind another process's writes (a message it
                    # started, say): catch up, and refuse only if the command is still wrong.
                    if not self._catch_up(conversation_id, state):
                        raise
                    events = decide(state)
                if not events:
                    return events
                try:
                    self._save(events)
                except IntegrityError:
                    self._catch_up(conversation_id, state)
                    # Back off at random, growing to 50 ms, so no writer loses every race.
                    ceiling = min(0.05, 0.001 * 2 ** min(attempt, 6))
                    time.sleep(random.uniform(0, ceiling))  # noqa: S311 - jitter, not crypto
                    continue
                for event in events:
                    state.apply(event)
                return events
        msg = (
            f"gave up writing to conversation {conversation_id} after {attempt} attempts "
            f"over {WRITE_RETRY_SECONDS:g} s or more: other writers kept taking the next version"
        )
        raise ConcurrencyError(msg)


_TOPIC_BYTES: dict[str, bytes] = {
    topic.removeprefix(TOPIC_PREFIX): topic.encode() for topic in TOPICS
}


def _damaged_topic(
    conversation_id: UUID, event: Event, topic: bytes, position: int | None = None
) -> StoreError:
    """Replay, ``project`` and ``dump`` refuse a row whose stored topic disagrees with its event:
    a reader selecting by topic would skip it, and the views must not differ silently.
    ``position`` (the row's place in the log) is named when the reader knows it."""
    shown = topic.decode("utf-8", "backslashreplace")[:80]
    where = "" if position is None else f" (log position {position})"
    return StoreError(
        f"stored event {conversation_id} v{event.originator_version}{where} is damaged: its "
        f"topic {shown!r} disagrees with the event ({TOPIC_PREFIX}{event.type}); "
        "convstore verify lists every such row"
    )


def _shown(value: object) -> str:
    """A damaged column's value, short and printable."""
    if isinstance(value, bytes):
        return repr(value[:40].decode("utf-8", "backslashreplace"))
    return repr(value)[:40]


def _unreadable(event: Event, exc: UnreadableEvent) -> InvalidInput:
    """The caller's error for an event whose JSON would not read back: what, and why."""
    if isinstance(event, BlockAppended):
        return InvalidBlock(f"block {event.index} cannot be stored: {exc}")
    return InvalidInput(f"the {event.type.replace('_', ' ')} event cannot be stored: {exc}")


EntryBatch: TypeAlias = tuple[list[EntryMessage], list[tuple[str, int]]]
"""What a batch of runtime entries carries: its messages, and its compactions."""


def _entry(entry: Mapping[str, Any], index: int) -> dict[str, JsonValue]:
    """A runtime entry checked as a JSON object (what ``json.dumps`` can write exactly)."""
    if not isinstance(entry, Mapping):
        msg = f"entry {index}: expected a JSON object, got {type(entry).__name__}"
        raise InvalidInput(msg)
    try:
        checked = _ENTRY.validate_python(entry)
    except ValidationError as exc:
        detail = exc.errors()[0]
        where = ".".join(map(str, detail["loc"]))
        msg = f"entry {index}: not JSON data at {where or 'top'} ({detail['msg']})"
        raise InvalidInput(msg) from None
    return checked


_ENTRY: TypeAdapter[dict[str, JsonValue]] = TypeAdapter(dict[str, JsonValue])


def _options(vision: bool, full: bool, keep_tool_results: int | None) -> ReplayOptions:
    return ReplayOptions(
        vision=parse_flag(vision, "vision"),
        full=parse_flag(full, "full"),
        keep_tool_results=parse_optional_count(keep_tool_results, "keep_tool_results"),
    )


def _info(row: ListedRow, labels: dict[str, str]) -> ConversationInfo:
    return ConversationInfo(
        row.id,
        row.title,
        from_micros(row.created_at),
        row.parent_id,
        row.source,
        last_active=from_micros(row.last_active),
        labels=labels,
        events=row.events,
    )


def _parse_moment(value: datetime | None, what: str) -> int | None:
    """A bound on a listing as microseconds since the epoch; a naive time is refused."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        msg = f"{what} must be a datetime, not {describe_value(value)}"
        raise InvalidInput(msg)
    if value.tzinfo is None or value.utcoffset() is None:
        msg = f"{what} must be timezone-aware (e.g. datetime.now(UTC)), not a naive time"
        raise InvalidInput(msg)
    return micros(value)


def _parse_cursor(value: str) -> tuple[int, str]:
    """A ``next`` cursor from :meth:`Store.list_conversations`: ``<microseconds>.<id hex>``."""
    if isinstance(value, str):
        stamp, _, hex_id = value.partition(".")
        if stamp.isascii() and stamp.lstrip("-").isdigit() and len(hex_id) == 32:
            try:
                return int(stamp), UUID(hex_id).hex
            except ValueError:
                pass
    msg = f"{describe_value(value)} is not a listing cursor (give a page's `next` value)"
    raise InvalidInput(msg)


def _parse_shape(shape: str) -> Shape:
    for known in SHAPES:
        if shape == known:
            return known
    msg = f"unknown shape {describe_value(shape)}; use one of: {', '.join(SHAPES)}"
    raise InvalidInput(msg)
