"""The store: record conversations block by block, read them back, replay them.

One :class:`Store` wraps one event log (a SQLite file or a PostgreSQL database). It is made of
parts, each a module of this package:

- :mod:`~convstore.store.reading`: one conversation's events read back (the base of the rest);
- :mod:`~convstore.store.writer`: the writer (cached states, the version race, retries);
- :mod:`~convstore.store.scanning`: the whole log in order (``notifications``, ``scan``);
- :mod:`~convstore.store.replaying`: replay, live rounds and pressure;
- :mod:`~convstore.store.listing`: listing conversations from the listing index.

This module holds the commands (each parsed here, decided by the domain, saved by the writer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeAlias
from uuid import UUID, uuid4

from eventsourcing.persistence import IntegrityError
from pydantic import JsonValue, TypeAdapter, ValidationError

from convstore.domain.blocks import DEFERRED, AnyToolResult, Block, TextBlock
from convstore.domain.conversation import Conversation, EntryMessage, as_of
from convstore.domain.errors import (
    ConversationErased,
    InvalidBlock,
    InvalidInput,
    MessageNotFound,
)
from convstore.domain.events import (
    UNKNOWN_TOOL,
    BlockAppended,
    BlockRecorded,
    EntriesRecorded,
    Event,
    MessageMeta,
    MessageStarted,
    Role,
    happened,
    utcnow,
)
from convstore.domain.json_values import json_problem
from convstore.domain.limits import Limits
from convstore.domain.metadata import parse_label_keys, parse_labels, parse_meta
from convstore.domain.parsing import (
    MAX_COUNT,
    describe_value,
    parse_block,
    parse_blocks,
    parse_count,
    parse_flag,
    parse_id,
    parse_name,
    parse_optional_name,
    parse_optional_text,
    parse_role,
    parse_text,
)
from convstore.infrastructure import backend_for
from convstore.infrastructure.common.application import EventLog
from convstore.infrastructure.sqlite.backend import WAL_RETRY_PAUSE_SECONDS, WAL_WAIT_SECONDS
from convstore.ports.backend import Backend
from convstore.ports.erasure import Erasure
from convstore.projections.messages import RecordedBlock, collect_history
from convstore.store.importing import Importing
from convstore.store.listing import ConversationInfo, Page, parse_moment
from convstore.store.replay_cache import DEFAULT_CACHE_BYTES, ReplayCache
from convstore.store.replaying import Replayer
from convstore.store.transfer import Transferring

__all__ = [
    "WAL_RETRY_PAUSE_SECONDS",
    "WAL_WAIT_SECONDS",
    "ConversationInfo",
    "EntryBatch",
    "Page",
    "Store",
]


class Store(Importing, Transferring, Replayer):
    """Conversations recorded as an event log. Build one with :func:`convstore.open_store`."""

    def __init__(
        self,
        log: EventLog,
        location: str,
        *,
        secret: str = "",
        identity: str = "",
        limits: Limits | None = None,
        replay_cache_bytes: int = DEFAULT_CACHE_BYTES,
        backend: Backend | None = None,
    ) -> None:
        super().__init__(log, location, secret=secret, limits=limits)
        self.backend = backend or backend_for(location)
        """The backend that keeps this store (:class:`convstore.ports.backend.Backend`),
        chosen from its location by :func:`convstore.infrastructure.backend_for` unless given."""
        self.identity = identity
        """The store's random identity (written once in its ``convstore_store`` table): what
        a read model built from it records, so no other store's is ever taken for its own."""
        self.store_format = log.store_format
        """The store's format, as its marker says: 3 for a store this version made (a
        message is its block events), 2 or 1 for one an earlier version made, which keeps
        its form so the versions that share it can read it (docs/design/format-3.md)."""
        self._replays = ReplayCache(self._counted_stream, cache_bytes=replay_cache_bytes)

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
        title = parse_optional_name(title, "title", self.limits.max_note_bytes)
        source = parse_optional_name(source, "source", self.limits.max_note_bytes)
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
        state = Conversation(id=conversation_id, block_events=self._log.block_events)
        state.apply(started)
        self._remember(state)
        return conversation_id

    def start_message(self, conversation: UUID | str, role: Role | str) -> UUID:
        """Open a message for ``role``; returns the message id. Append blocks, then end it.

        The start is recorded at once (a small event of its own), so a message opened and
        killed before its first block is a recorded fact, and any process may append to it.
        A whole message (:meth:`append_message`) has no such event in a store of format 3:
        its first block opens it."""
        checked = parse_role(role)
        events = self._write(conversation, lambda c: [c.start_message(checked)])
        assert events[0].type == "message_started"
        return events[0].message_id

    def append_block(
        self,
        conversation: UUID | str,
        message: UUID | str,
        block: Block | Mapping[str, Any],
        *,
        last: bool = False,
    ) -> int:
        """Append one block to an open message (streaming); returns its index in the message.

        With ``last`` the message ends with this block, in the same write (no
        :meth:`end_message` after it)."""
        message_id = parse_id(message, "message")
        parsed = parse_block(block, self.limits)
        closes = parse_flag(last, "last")
        events = self._write(conversation, lambda c: c.add_block(message_id, parsed, closes=closes))
        [added] = [e for e in events if isinstance(e, BlockAppended | BlockRecorded)]
        return added.index

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
        opened = events[0]
        assert isinstance(opened, MessageStarted | BlockRecorded)
        return opened.message_id

    def record_entries(
        self,
        conversation: UUID | str,
        entries: Sequence[Mapping[str, Any]],
        carried: Callable[[list[dict[str, JsonValue]]], EntryBatch] | None = None,
        *,
        expected_version: int | None = None,
    ) -> int:
        """Keep an agent runtime's transcript entries verbatim, in one write with the messages
        they carry; returns how many entries were new.

        An entry whose ``uuid`` was recorded before (since the last :meth:`delete_entries`) is
        left out. ``carried`` turns the new entries into messages and compactions (as
        ``(messages, [(summary, through_index), ...])``); the messages are recorded beside
        the entries, so replay, audit and pressure see them.

        With ``expected_version`` (the version of the newest event the caller read) the write
        is conditional, as :meth:`rewind`'s: recorded only if nothing was recorded since, else
        :class:`~convstore.VersionConflict` and nothing written.
        """
        if not isinstance(entries, list | tuple):
            msg = f"entries must be a list of JSON objects, not {describe_value(entries)}"
            raise InvalidInput(msg)
        if carried is not None and not callable(carried):
            msg = f"carried must be a function or None, not {describe_value(carried)}"
            raise InvalidInput(msg)
        checked = [_entry(entry, index) for index, entry in enumerate(entries)]
        expected = (
            None
            if expected_version is None
            else parse_count(expected_version, "expected_version", 1, MAX_COUNT)
        )

        def decide(state: Conversation) -> list[Event]:
            fresh = state.new_entries(checked)
            messages, compactions = carried(fresh) if carried and fresh else ([], [])
            limited = [
                (role, [self._within_limits(block) for block in blocks], status, reason)
                for role, blocks, status, reason in messages
            ]
            return state.record_entries(fresh, limited, compactions)

        events = self._write(conversation, decide, expected_version=expected)
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

    def compact(self, conversation: UUID | str, summary: str, *, through: UUID | str) -> None:
        """Record that replay now starts with ``summary`` instead of every message up to and
        including ``through``. The log keeps everything; ``replay(full=True)`` ignores it."""
        message_id = parse_id(through, "message")
        summary = parse_text(summary, "summary", self.limits.max_block_bytes)
        self._write(conversation, lambda c: [c.compact(summary, message_id)])

    def rename(self, conversation: UUID | str, title: str | None) -> None:
        """Give a conversation a new title (``None`` clears it)."""
        title = parse_optional_name(title, "title", self.limits.max_note_bytes)
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

    def rewind(
        self,
        conversation: UUID | str,
        *,
        to: UUID | str | None,
        expected_version: int | None = None,
    ) -> int:
        """Withdraw every message recorded after ``to`` (every message, when ``to`` is
        ``None``): replay, pressure and live rounds leave them out; the log keeps them.
        Returns the rewind's version, which :meth:`undo_rewind` takes.

        With ``expected_version`` (the version of the newest event the caller read) the
        rewind is conditional: recorded only if nothing was recorded since, else
        :class:`~convstore.VersionConflict` and nothing written; read again and retry."""
        message_id = None if to is None else parse_id(to, "message")
        expected = (
            None
            if expected_version is None
            else parse_count(expected_version, "expected_version", 1, MAX_COUNT)
        )
        events = self._write(
            conversation, lambda c: [c.rewind(message_id)], expected_version=expected
        )
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
        newest compaction through a copied message is copied with it, and a tool result keeps
        the tool name the parent resolved (written on the block when its call is not copied).
        Every copied message gets a new id and keeps when it happened (its events'
        ``happened_at``: the parent's time, or the source's for an imported one) and its
        metadata. The copy is one transaction, read from one snapshot of the parent.
        """
        parent = parse_id(conversation, "conversation")
        point = parse_id(at, "message")
        title = parse_optional_name(title, "title", self.limits.max_note_bytes)
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
        state = Conversation(id=fork_id, block_events=self._log.block_events)
        events: list[Event] = []

        def record(event: Event) -> None:
            state.apply(event)
            events.append(event)

        record(Conversation.start(fork_id, title, parent_id=parent, forked_at=point))
        new_ids: dict[UUID, UUID] = {}
        for message in copied:
            when = message.started_at
            copy_id = new_ids[message.message_id] = uuid4()
            if not message.blocks:  # no block to open it: a start of its own
                record(*as_of([state.start_message(message.role, copy_id)], when))
            last = len(message.blocks) - 1
            for index, recorded in enumerate(message.blocks):
                added = state.add_block(
                    copy_id,
                    _named(recorded, state),
                    role=message.role,
                    closes=index == last and message.status == "ended",
                )
                for event in as_of(added, when):
                    record(event)
            if message.status == "interrupted":
                reason = message.interrupt_reason
                record(*as_of([state.interrupt_message(copy_id, reason)], when))
            elif message.status == "ended" and not message.blocks:
                record(*as_of([state.end_message(copy_id)], when))
            if message.meta is not None:
                record(*as_of([state.record_meta(copy_id, message.meta)], when))
        kept = [c for c in history.compactions if c.through in new_ids]
        if kept:
            summary, through = kept[-1].summary, new_ids[kept[-1].through]
            record(*as_of([state.compact(summary, through)], happened(kept[-1])))
        self._record_new(events)
        self._remember(state)
        return fork_id

    def erase(
        self, conversation: UUID | str, *, reason: str, idle_since: datetime | None = None
    ) -> Erasure:
        """Delete every event of a conversation for good, leaving only its tombstone (id, when,
        ``reason``, how many events); returns the tombstone.

        The one exception to "nothing is deleted". On SQLite the deleted bytes are overwritten
        and the write-ahead log emptied before this returns (it tries for
        :data:`WAL_WAIT_SECONDS`, then raises :class:`~convstore.StoreError`, the erasure
        committed); on PostgreSQL the rows are deleted (their bytes stay in the tables' pages
        until :meth:`vacuum`). Nothing more is recorded under the id afterwards. Read models
        drop what they derived from it at their next catch-up. Conversations that name it as
        their parent are not touched.

        With ``idle_since`` (retention), the conversation is erased only if its newest event
        is older, as found inside the erasing transaction; else
        :class:`~convstore.ConversationActive` is raised and nothing is erased.

        A conversation erased before raises :class:`~convstore.ConversationErased`, once this
        erasure has emptied the write-ahead log again (a first erasure that stopped before
        doing so, its process killed or a reader in the way, leaves old bytes in the files).
        """
        conversation_id = parse_id(conversation, "conversation")
        reason = parse_name(reason, "reason", self.limits.max_note_bytes)
        cutoff = parse_moment(idle_since, "idle_since")
        recorder = self._log.store_recorder
        at = utcnow()
        try:
            with self._lock(conversation_id):
                try:
                    seq, _ = self._guarded(
                        lambda: recorder.erase(conversation_id, reason, at.isoformat(), cutoff)
                    )
                finally:
                    self._forget(conversation_id)
                    self._replays.forget(conversation_id)
        except ConversationErased:
            # Erased before, perhaps by an erasure that stopped before emptying the log (its
            # process killed, or a reader in the way): finish that job, then say so.
            self._after_erase(conversation_id)
            raise
        self._after_erase(conversation_id)
        return self.erasures(seq - 1)[0]

    def _after_erase(self, conversation_id: UUID | None) -> None:
        """What the backend does after an erasure of ``conversation_id`` (or a vacuum: None):
        on SQLite, empty the write-ahead log, trying for :data:`WAL_WAIT_SECONDS`."""
        recorder = self._log.store_recorder
        self.backend.after_erase(lambda: self._guarded(recorder.truncate_wal), conversation_id)

    def storage_problems(self) -> list[str]:
        """What the storage engine finds wrong with the store's files, one line each (SQLite:
        its quick check of every page, indexes and the listing included; empty when sound, and
        on a backend with no such check). ``convstore verify`` reports them."""
        return self.backend.storage_problems(self.location)

    def vacuum(self, progress: Callable[[str], None] | None = None) -> None:
        """Rewrite the store's files so no erased (or otherwise deleted) row's bytes stay in
        them; ``progress`` is called with the name of each file or table before it is
        rewritten.

        SQLite: ``VACUUM`` (the file rebuilt without free pages; writers wait), then the
        write-ahead log copied in and emptied. PostgreSQL: ``VACUUM (FULL, ANALYZE)`` of each
        of convstore's tables in the store's schema, one after another, each holding that
        table's ACCESS EXCLUSIVE lock while it is rewritten (its TOAST and indexes too): its
        readers and writers wait. The old files are unlinked, not overwritten; the server's
        write-ahead log, archives, replicas and backups keep what they hold.
        """
        if progress is not None and not callable(progress):
            msg = f"progress must be a function or None, not {describe_value(progress)}"
            raise InvalidInput(msg)
        recorder = self._log.store_recorder
        report = progress or (lambda _: None)
        if not self._guarded(lambda: recorder.vacuum(report)):
            self._after_erase(None)


def _named(recorded: RecordedBlock, fork: Conversation) -> Block:
    """A parent's block as the fork records it: a tool result, or a hosted one, whose name the
    fork would not resolve as the parent did (its call is in a message a rewind withdrew, so
    not copied) carries the parent's resolved name on the block, so the fork replays it the
    same."""
    block = recorded.block
    if not isinstance(block, AnyToolResult) or block.name is not None:
        return block
    name = recorded.tool_name or UNKNOWN_TOOL
    if fork.tool_names.get(block.tool_use_id, UNKNOWN_TOOL) == name:
        return block
    return block.model_copy(update={"name": name})


EntryBatch: TypeAlias = tuple[list[EntryMessage], list[tuple[str, int]]]
"""What a batch of runtime entries carries: its messages, and its compactions."""


def _entry(entry: Mapping[str, Any], index: int) -> dict[str, JsonValue]:
    """A runtime entry checked as a JSON object (what ``json.dumps`` can write exactly)."""
    if not isinstance(entry, Mapping):
        msg = f"entry {index}: expected a JSON object, got {type(entry).__name__}"
        raise InvalidInput(msg)
    if problem := json_problem(entry):
        msg = f"entry {index}: {problem}"
        raise InvalidInput(msg)
    try:
        checked = _ENTRY.validate_python(entry)
    except ValidationError as exc:
        detail = exc.errors()[0]
        where = ".".join(map(str, detail["loc"]))
        msg = f"entry {index}: not JSON data at {where or 'top'} ({detail['msg']})"
        raise InvalidInput(msg) from None
    return checked


_ENTRY: TypeAdapter[dict[str, JsonValue]] = TypeAdapter(dict[str, JsonValue], config=DEFERRED)
