"""Replay's in-process cache: each recently replayed conversation's folded state, extended by
the events appended since on every replay.

There is no stored copy of the fold (format 3 removed the replay model that earlier versions
kept beside the log; docs/design/replay-model.md says why): a conversation that is not cached
is read from the log once, its rows in version order, and folded
(:func:`convstore.engine.model.fold`). A cached one reads only the log from its own version
on, so the next replay after an append folds one more event, whatever the conversation's
length. The log is read on every call, so an append made by any process on any host is in the
next replay.

A cached state is dropped and the conversation folded again from the log when the event at
its version is gone (the conversation was erased, or the log replaced) or when the log's
change count differs from the one read with the state (a row it folded was changed or deleted
in place since; :data:`convstore.infrastructure.common.log_changes.CHANGES_TABLE`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from convstore.engine.model import Folded, fold
from convstore.engine.render import render
from convstore.engine.state import ImageLoader, ReplayState
from convstore.infrastructure.common.gc_pause import paused_gc

if TYPE_CHECKING:
    from convstore.engine.plan import JSONDict, ReplayOptions, Shape

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
"""The in-process cache's default budget (``replay_cache_bytes``)."""


class LogTail(Protocol):
    """A conversation's events after a version, as read, decoded only as consumed."""

    def first_version(self) -> int | None:
        """The first event's version (``None``: there is none), read without decoding it
        where the stored form allows: a warm replay only checks that the event at its cached
        version is still there."""

    def folded(self, *, skip_first: bool = False) -> Iterator[Folded]:
        """The events in order, as the fold takes them, decoded one by one (without the
        first, ``skip_first``): a block event as its row holds it where the row allows, so a
        first load builds no model for most blocks."""


EventsAfter = Callable[[UUID, int], "tuple[int, LogTail]"]
"""A conversation's change count and its events after a version, read as of one moment (the
store's reader)."""


class _Entry:
    __slots__ = ("changes", "lock", "size", "state")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: ReplayState | None = None
        self.changes = 0
        """The log's change count when :attr:`state` was folded."""
        self.size = 0


class ReplayCache:
    """Replays conversations by folding their events, keeping the folds of the most recently
    replayed ones within a budget of bytes."""

    def __init__(
        self, events_after: EventsAfter, *, cache_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        self._events_after = events_after
        self.cache_bytes = cache_bytes
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
        """The entry's state extended by the events after it, or the conversation folded
        afresh from one read of its log when there is none or it no longer matches."""
        state = entry.state
        if state is not None:
            # Read from the state's own version: the event there must still be the one folded.
            changes, tail = self._events_after(conversation, state.version - 1)
            if tail.first_version() == state.version and changes == entry.changes:
                events = tail.folded(skip_first=True)
            else:
                state = None
        if state is None:
            entry.state = None
            state = ReplayState()
            changes, tail = self._events_after(conversation, 0)
            events = tail.folded()
        try:
            fold(state, events)
        except BaseException:
            entry.state = None  # half folded: never reuse it
            raise
        if state.version == 0:
            return None
        entry.state, entry.changes = state, changes
        return state

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
        """Drop every cached state."""
        with self._guard:
            self._entries.clear()
            self._cached = 0

    @property
    def cached_bytes(self) -> int:
        """About how many bytes the cache holds."""
        return self._cached
