"""The replay read model's tables, and the reader that keeps it caught up on read.

Two tables beside the events (in the same SQLite file, or the same PostgreSQL schema, so every
host of a store shares them): ``convstore_replay_heads`` holds, per conversation, the version
the model has folded and its head (compactions, rewinds in force, the log's change count when
it was folded, and a digest binding all of it to every message row);
``convstore_replay_messages`` one row per stored message: its id and its plan's text (see
:mod:`convstore.engine.model`; SQLite stores a long plan LZ4-packed,
:func:`convstore.engine.state.packed_plan`). A stored model is used only when its digest holds
and its change count is the log's count now (``log_changes.CHANGES_TABLE``, read with the events in
one snapshot); otherwise the log is folded alone, as a replay without a model does, and the
model stored again. Nothing else writes them: readers do, after they
fold events the model had not seen, in one transaction that moves the head's version forward
only (a compare on the version stored), so each event is folded into the stored copy once. A
writer that finds the conversation erased writes nothing, and an erasure deletes the rows in
its own transaction (each backend's ``forget_*`` in its ``replay_tables`` module), so the
model never brings erased text back. The tables can be emptied at any time
(:meth:`ReplayTables.clear`): the next replays fold the log again and write the same text.

Each backend keeps the tables its own way behind :class:`~convstore.ports.replay.ReplayTables`
(``backends/sqlite/replay_tables.py``, ``backends/postgres/replay_tables.py``); this module
holds only what they share and the reader.

:class:`ReplayReader` answers a replay from the newest of: its in-process cache (a bounded
number of bytes), the stored model, or nothing; then it reads only the events after that
version from the log and folds them. The log is always read, so an append made by any process
on any host is in the next replay.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from convstore.backends.common.gc_pause import paused_gc
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.engine.render import render
from convstore.engine.state import ImageLoader, ReplayState
from convstore.ports.replay import Execute, ReplayTables, Stored

if TYPE_CHECKING:  # the command line's quick replay imports this module without the models
    from convstore.domain.events import Event
    from convstore.engine.plan import JSONDict, ReplayOptions, Shape

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "HEADS",
    "MESSAGES",
    "WRITE_LAG",
    "EventsAfter",
    "Execute",
    "LogTail",
    "ReplayReader",
    "ReplayTables",
    "Stored",
]

WRITE_LAG = 32
"""A reader stores what it folded once the stored model is this many events behind: a replay
after each append then writes one small transaction every few turns, and a new process never
folds more than this many events on top of the stored model."""

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
"""The in-process cache's default budget (``replay_cache_bytes``)."""

# -- the reader ------------------------------------------------------------------------------


class LogTail(Protocol):
    """A conversation's events after a version, as read, decoded only as consumed."""

    def first_version(self) -> int | None:
        """The first event's version (``None``: there is none), read without decoding it
        where the stored form allows: a replay from a stored model only checks that the
        event at the model's version is still there, and a fresh process that finds nothing
        after it then never builds the event models."""

    def events(self, *, skip_first: bool = False) -> Iterator[Event]:
        """The events in order, decoded one by one (without the first, ``skip_first``)."""


EventsAfter = Callable[[UUID, int], "tuple[int, LogTail]"]
"""A conversation's change count (:data:`convstore.backends.common.log_changes.CHANGES_TABLE`) and
its events after a version, read as of one moment (the store's reader)."""


class _Entry:
    __slots__ = ("lock", "size", "state", "stored")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: ReplayState | None = None
        self.stored = 0
        """The version the stored model is known to hold."""
        self.size = 0


class ReplayReader:
    """Replays from the model: cached in process, stored beside the log, caught up on read."""

    def __init__(
        self,
        tables: ReplayTables | None,
        events_after: EventsAfter,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        write_lag: int = WRITE_LAG,
    ) -> None:
        self.tables = tables
        self.key = b"" if tables is None else tables.key
        """The chain key the stored model's digests are made with."""
        self._events_after = events_after
        self.cache_bytes = cache_bytes
        self.write_lag = write_lag
        """Store the model once it is this many events behind what a reader folded."""
        self._entries: OrderedDict[UUID, _Entry] = OrderedDict()
        self._guard = threading.Lock()
        self._cached = 0

    def replay(
        self,
        conversation: UUID,
        options: ReplayOptions,
        shape: Shape,
        load: ImageLoader,
    ) -> JSONDict | None:
        """The replay, or ``None`` when the log holds no event of the conversation."""
        with self._guard:
            entry = self._entries.get(conversation)
            if entry is None:
                entry = self._entries[conversation] = _Entry()
            self._entries.move_to_end(conversation)
        with entry.lock, paused_gc():
            state = self._caught_up(conversation, entry)
            if state is None:
                self.forget(conversation)
                return None
            result = render(state, options, shape, load)
            self._account(conversation, entry, state)
            return result

    def _caught_up(self, conversation: UUID, entry: _Entry) -> ReplayState | None:
        state = entry.state
        mismatched = False  # the stored model did not match the log: replace it now
        if state is None:
            stored = self._read_stored(conversation)
            state, entry.stored = ReplayState(), 0
            if stored is not None:
                try:
                    state = ReplayState.decode(
                        conversation.hex, stored.version, stored.head, stored.rows, self.key
                    )
                    entry.stored = stored.version
                    # A head of the digest before the sum of row MACs: store it anew, whole,
                    # so its writers can extend it.
                    mismatched = state.legacy
                except (ValueError, KeyError, TypeError, IndexError):
                    mismatched = True  # damaged or edited: fold the log alone, store it again
        since = state.version
        changes, tail = self._events_after(conversation, max(since - 1, 0))
        events = tail.events(skip_first=bool(since))
        if since and (tail.first_version() != since or changes != state.changes):
            # Read from the model's own version: if that event is gone, the conversation was
            # erased (or the log replaced) since; if a row was changed or deleted in place
            # since the model was folded, it is no longer the fold of this log. Either way,
            # start again from the log alone, exactly as a replay without a model does.
            mismatched = mismatched or entry.stored > 0
            entry.state, entry.stored = None, 0
            state, since = ReplayState(), 0
            changes, tail = self._events_after(conversation, 0)
            events = tail.events()
        state.changes = changes
        try:
            # The fold builds the domain's models; the quick path, which only reads stored
            # plans, imports this module without them.
            from convstore.engine.model import fold  # noqa: PLC0415

            fold(state, events)
        except BaseException:
            entry.state = None  # half folded: never reuse it
            raise
        if state.version == 0:
            return None
        entry.state = state
        lag = state.version - entry.stored
        due = self.tables is not None and (lag >= self.write_lag or mismatched)
        base = None if mismatched or not entry.stored else entry.stored
        if due and self._write_stored(conversation, state, base):
            state.clean()
            entry.stored = state.version
        return state

    def _read_stored(self, conversation: UUID) -> Stored | None:
        """The stored model, or ``None`` when there is none or it cannot be read: it is derived
        data, so a failure to read it (tables dropped meanwhile, a damaged row, a busy
        connection) only means folding the log, whose own failures still surface."""
        if self.tables is None:
            return None
        try:
            return self.tables.read(conversation)
        except Exception:  # noqa: BLE001 - see above
            self.tables.forget_schema()
            return None

    def _write_stored(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        """Store the model; whether it was written (a failure leaves it behind, no more)."""
        assert self.tables is not None
        try:
            return self.tables.write(conversation, state, since)
        except Exception:  # noqa: BLE001 - derived data: the next reader catches it up
            self.tables.forget_schema()
            return False

    def _account(self, conversation: UUID, entry: _Entry, state: ReplayState) -> None:
        """Keep the cache within its budget, dropping the least recently replayed first."""
        with self._guard:
            if self._entries.get(conversation) is not entry:  # evicted meanwhile
                entry.state = None
                return
            self._cached += state.size - entry.size
            entry.size = state.size
            while self._cached > self.cache_bytes and self._entries:
                oldest, dropped = next(iter(self._entries.items()))
                del self._entries[oldest]
                self._cached -= dropped.size
                dropped.state = None
                dropped.size = 0

    def forget(self, conversation: UUID) -> None:
        """Drop a conversation from the cache (it was erased)."""
        with self._guard:
            entry = self._entries.pop(conversation, None)
            if entry is not None:
                self._cached -= entry.size
                entry.state = None
                entry.size = 0

    def clear(self) -> None:
        """Throw the whole model away, stored and cached."""
        with self._guard:
            self._entries.clear()
            self._cached = 0
        if self.tables is not None:
            self.tables.clear()

    @property
    def cached_bytes(self) -> int:
        """About how many bytes the cache holds."""
        return self._cached

    def close(self) -> None:
        if self.tables is not None:
            self.tables.close()
