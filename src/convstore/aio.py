"""The store for asyncio: every :class:`~convstore.Store` call as a coroutine.

An :class:`AsyncStore` wraps a :class:`~convstore.Store` and runs each call on worker threads
of its own, so no file or network I/O, fsync or lock wait ever runs on the event loop. Two
bounded pools keep reads and writes apart:

- **writes** (``new_conversation``, ``start_message``, ``append_block``, ``end_message``,
  ``interrupt_message``, ``append_message``, ``compact``, ``rewind``, ``rename``,
  ``set_labels``, ``remove_labels``, ``rebuild_listing``, ``record_entries``,
  ``delete_entries``, ``import_history``, ``import_histories``, ``load``) go to a writer pool:
  one thread on SQLite, which admits one writer at a time anyway (more threads would only queue
  on its lock), four on PostgreSQL, whose connections can overlap their round trips while the
  table lock still serialises the inserts. Writes submitted by one task run in the order it
  awaits them.
- **reads** go to a reader pool (four threads by default), so a replay never waits behind a
  queue of appends.

**Cancellation.** Each write is one transaction of the sync store. A cancelled write either
never started (it is taken off the queue and never lands) or had started, in which case its
thread finishes it: the write lands whole or fails whole, never half. To learn which, await
:meth:`AsyncStore.drain` (it returns once every write submitted before it has finished) and
then read :meth:`AsyncStore.messages`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar
from uuid import UUID

from pydantic import JsonValue

from convstore.bootstrap import open_store
from convstore.domain.blocks import Block
from convstore.domain.events import Event, MessageMeta, Role
from convstore.domain.limits import Limits
from convstore.errors import StoreError
from convstore.infrastructure.chain import Head
from convstore.infrastructure.erasure import Erasure
from convstore.infrastructure.postgres import is_postgres_url
from convstore.infrastructure.records import Recorded
from convstore.infrastructure.replay_tables import DEFAULT_CACHE_BYTES
from convstore.projections.messages import RecordedMessage
from convstore.projections.pressure import Pressure
from convstore.projections.replay import JSONDict, ReplayOptions, Shape
from convstore.store import ConversationInfo, EntryBatch, Page, Store

if TYPE_CHECKING:
    from convstore.convert.history import History
    from convstore.importing import ImportReport
    from convstore.transfer import LoadReport

_P = ParamSpec("_P")
_T = TypeVar("_T")

READER_THREADS = 4
"""Reader threads per store unless told otherwise."""

POSTGRES_WRITER_THREADS = 4
"""Writer threads per PostgreSQL store unless told otherwise (SQLite gets one)."""

DUMP_PAGE = 1000
"""Dump lines handed from the worker thread to the loop at a time."""

THREAD_START_TIMEOUT = 30.0
"""Seconds to wait for a new store's worker threads to start."""


async def open_async_store(
    location: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
    limits: Limits | None = None,
    readers: int = READER_THREADS,
    writers: int | None = None,
    replay_cache_bytes: int = DEFAULT_CACHE_BYTES,
    replay_model: bool = True,
) -> AsyncStore:
    """Open the store at ``location`` (as :func:`convstore.open_store` does) for asyncio.

    Opening reads the file or reaches the server, so it runs on a worker thread. If the
    awaiting task is cancelled meanwhile, the store is closed as soon as it has opened.
    """
    opening = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="convstore-open")
    future = opening.submit(
        _open,
        location,
        create,
        limits,
        readers,
        writers,
        replay_cache_bytes=replay_cache_bytes,
        replay_model=replay_model,
    )
    opening.shutdown(wait=False)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_opened)
        raise


def _open(
    location: str | os.PathLike[str] | None,
    create: bool,
    limits: Limits | None,
    readers: int,
    writers: int | None,
    *,
    replay_cache_bytes: int,
    replay_model: bool,
) -> AsyncStore:
    """Open the store and start its threads, on the opening thread."""
    store = open_store(
        location,
        create=create,
        limits=limits,
        replay_cache_bytes=replay_cache_bytes,
        replay_model=replay_model,
    )
    try:
        return AsyncStore(store, readers=readers, writers=writers)
    except BaseException:
        store.close()
        raise


def _close_opened(future: concurrent.futures.Future[AsyncStore]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result()._shut_down()


class AsyncStore:
    """A :class:`~convstore.Store` for asyncio: the same methods, each a coroutine.

    Arguments, results and errors are those of the sync method of the same name; the one
    iterator, :meth:`scan`, is an async iterator here, and :meth:`raw_events` returns a list.
    """

    def __init__(
        self, store: Store, *, readers: int = READER_THREADS, writers: int | None = None
    ) -> None:
        if writers is None:
            writers = POSTGRES_WRITER_THREADS if is_postgres_url(store.location) else 1
        self.store = store
        """The sync store every call runs on; use it from threads, never from the loop."""
        self._writes = concurrent.futures.ThreadPoolExecutor(
            writers, thread_name_prefix="convstore-write"
        )
        self._reads = concurrent.futures.ThreadPoolExecutor(
            readers, thread_name_prefix="convstore-read"
        )
        # Start every thread now: a pool starts one lazily inside submit(), which then waits
        # for it to run, on the event loop; on a busy machine that wait was the longest stall.
        _start_threads(self._writes, writers)
        _start_threads(self._reads, readers)
        self._in_flight: set[concurrent.futures.Future[Any]] = set()
        self._guard = threading.Lock()
        self._closed = False

    @property
    def location(self) -> str:
        """Where the store is, safe to show (see :attr:`convstore.Store.location`)."""
        return self.store.location

    @property
    def limits(self) -> Limits:
        """The block and image size limits this store enforces."""
        return self.store.limits

    # -- lifecycle -------------------------------------------------------------------------

    async def drain(self) -> None:
        """Wait until every write submitted so far has finished (landed or failed).

        After a write was cancelled, ``await drain()`` and then read :meth:`messages` to see
        whether it landed: it is there whole or not at all.
        """
        with self._guard:
            pending = list(self._in_flight)
        if pending:
            await asyncio.wait([asyncio.wrap_future(f) for f in pending])

    async def close(self) -> None:
        """Finish the calls in flight (writes and reads), then release the backend's
        connections and the threads. Calls made after it raise :class:`StoreError`."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
        await asyncio.to_thread(self._shut_down)

    def _shut_down(self) -> None:
        # Waiting here (on a worker thread, not the loop) lets every submitted call finish;
        # a cancelled write still queued is skipped, as it would be anyway.
        self._writes.shutdown(wait=True)
        self._reads.shutdown(wait=True)
        self.store.close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- writing ---------------------------------------------------------------------------

    async def new_conversation(
        self,
        title: str | None = None,
        *,
        conversation_id: UUID | str | None = None,
        parent_id: UUID | str | None = None,
        source: str | None = None,
    ) -> UUID:
        """Start a conversation; returns its id (see :meth:`convstore.Store.new_conversation`)."""
        return await self._write(
            self.store.new_conversation,
            title,
            conversation_id=conversation_id,
            parent_id=parent_id,
            source=source,
        )

    async def start_message(self, conversation: UUID | str, role: Role | str) -> UUID:
        """Open a message for streaming; returns its id."""
        return await self._write(self.store.start_message, conversation, role)

    async def append_block(
        self, conversation: UUID | str, message: UUID | str, block: Block | Mapping[str, Any]
    ) -> int:
        """Append one block to an open message; returns its index in the message."""
        return await self._write(self.store.append_block, conversation, message, block)

    async def end_message(
        self,
        conversation: UUID | str,
        message: UUID | str,
        *,
        meta: MessageMeta | Mapping[str, Any] | None = None,
    ) -> None:
        """Mark an open message complete (with its metadata, when given)."""
        await self._write(self.store.end_message, conversation, message, meta=meta)

    async def rename(self, conversation: UUID | str, title: str | None) -> None:
        """Give a conversation a new title (``None`` clears it)."""
        await self._write(self.store.rename, conversation, title)

    async def set_labels(self, conversation: UUID | str, labels: Mapping[str, str]) -> None:
        """Set labels (key → text) on a conversation."""
        await self._write(self.store.set_labels, conversation, dict(labels))

    async def remove_labels(self, conversation: UUID | str, keys: Iterable[str]) -> None:
        """Remove the labels under ``keys``."""
        listed = keys if isinstance(keys, str) else list(keys)
        await self._write(self.store.remove_labels, conversation, listed)

    async def list_conversations(
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
        """One page of conversations, newest activity first, from the listing index."""
        return await self._read(
            self.store.list_conversations,
            labels=labels,
            title=title,
            started_after=started_after,
            started_before=started_before,
            active_after=active_after,
            active_before=active_before,
            limit=limit,
            after=after,
        )

    async def rebuild_listing(self) -> int:
        """Refill the listing index from the log; returns how many conversations it lists."""
        return await self._write(self.store.rebuild_listing)

    async def interrupt_message(
        self, conversation: UUID | str, message: UUID | str, reason: str | None = None
    ) -> None:
        """Record that an open message was cut short (and why, if known)."""
        await self._write(self.store.interrupt_message, conversation, message, reason)

    async def rewind(self, conversation: UUID | str, *, to: UUID | str | None) -> int:
        """Withdraw every message recorded after ``to`` (all of them when ``None``); returns
        the rewind's version."""
        return await self._write(self.store.rewind, conversation, to=to)

    async def undo_rewind(self, conversation: UUID | str, rewind: int) -> None:
        """Undo the rewind recorded at version ``rewind`` (see
        :meth:`convstore.Store.undo_rewind`)."""
        await self._write(self.store.undo_rewind, conversation, rewind)

    async def fork(
        self, conversation: UUID | str, *, at: UUID | str, title: str | None = None
    ) -> UUID:
        """Start a conversation whose history is a copy of this one's up to message ``at``
        (see :meth:`convstore.Store.fork`)."""
        return await self._write(self.store.fork, conversation, at=at, title=title)

    async def erase(self, conversation: UUID | str, *, reason: str) -> Erasure:
        """Delete a conversation's events for good, leaving its tombstone (see
        :meth:`convstore.Store.erase`)."""
        return await self._write(self.store.erase, conversation, reason=reason)

    async def erasures(self, after: int = 0) -> list[Erasure]:
        """The tombstones of erased conversations after ``seq`` ``after``, in order."""
        return await self._read(self.store.erasures, after)

    async def append_message(
        self,
        conversation: UUID | str,
        role: Role | str,
        blocks: Iterable[Block | Mapping[str, Any]],
        *,
        leave_open: bool = False,
        meta: MessageMeta | Mapping[str, Any] | None = None,
    ) -> UUID:
        """Record a whole message in one atomic write; returns its id."""
        # Materialise here: a generator must not be consumed on another thread after the
        # caller has moved on.
        listed = list(blocks)
        return await self._write(
            self.store.append_message, conversation, role, listed, leave_open=leave_open, meta=meta
        )

    async def compact(self, conversation: UUID | str, summary: str, *, through: UUID | str) -> None:
        """Record a compaction (see :meth:`convstore.Store.compact`)."""
        await self._write(self.store.compact, conversation, summary, through=through)

    # -- reading ---------------------------------------------------------------------------

    async def record_entries(
        self,
        conversation: UUID | str,
        entries: Sequence[Mapping[str, Any]],
        carried: Callable[[list[dict[str, JsonValue]]], EntryBatch] | None = None,
    ) -> int:
        """Keep runtime entries verbatim with their messages (see
        :meth:`convstore.Store.record_entries`)."""
        listed = list(entries)
        return await self._write(self.store.record_entries, conversation, listed, carried)

    async def delete_entries(self, conversation: UUID | str) -> None:
        """Mark runtime entries deleted (see :meth:`convstore.Store.delete_entries`)."""
        await self._write(self.store.delete_entries, conversation)

    async def entries(self, conversation: UUID | str) -> list[dict[str, JsonValue]] | None:
        """The runtime entries since the last deletion (see :meth:`convstore.Store.entries`)."""
        return await self._read(self.store.entries, conversation)

    async def last_event(self, conversation: UUID | str) -> Event | None:
        """The newest event of a conversation (see :meth:`convstore.Store.last_event`)."""
        return await self._read(self.store.last_event, conversation)

    async def events(self, conversation: UUID | str) -> list[Event]:
        """Every recorded event of a conversation, in order."""
        return await self._read(self.store.events, conversation)

    async def conversation_info(self, conversation: UUID | str) -> ConversationInfo:
        """One conversation as listed (see :meth:`convstore.Store.conversation_info`)."""
        return await self._read(self.store.conversation_info, conversation)

    async def tail(
        self, conversation: UUID | str, *, messages: int, before: int | None = None
    ) -> list[Event]:
        """The end of a conversation's log (see :meth:`convstore.Store.tail`)."""
        return await self._read(
            lambda: self.store.tail(conversation, messages=messages, before=before)
        )

    async def raw_events(self, conversation: UUID | str) -> list[bytes]:
        """Every recorded event of a conversation as its full JSON (a list)."""
        return await self._read(lambda: list(self.store.raw_events(conversation)))

    async def messages(self, conversation: UUID | str) -> list[RecordedMessage]:
        """The stored messages of a conversation with their blocks and status."""
        return await self._read(self.store.messages, conversation)

    async def replay(
        self,
        conversation: UUID | str,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """The conversation as provider wire messages (see :meth:`convstore.Store.replay`)."""
        return await self._read(
            self.store.replay,
            conversation,
            options=options,
            shape=shape,
            vision=vision,
            full=full,
            keep_tool_results=keep_tool_results,
        )

    async def fit_tool_results(
        self,
        conversation: UUID | str,
        max_tokens: int,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
    ) -> tuple[int | None, Pressure]:
        """The most tool results replay can keep within ``max_tokens``, and that pressure."""
        return await self._read(
            self.store.fit_tool_results,
            conversation,
            max_tokens,
            options=options,
            shape=shape,
            vision=vision,
            full=full,
        )

    async def live_request(
        self,
        conversation: UUID | str,
        live_message: UUID | str,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """History as prose, then ``live_message``'s tool round with real call-id linkage."""
        return await self._read(
            self.store.live_request,
            conversation,
            live_message,
            options=options,
            shape=shape,
            vision=vision,
            full=full,
            keep_tool_results=keep_tool_results,
        )

    async def pressure(
        self,
        conversation: UUID | str,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
        keep_tool_results: int | None = None,
    ) -> Pressure:
        """Tokens of exactly what :meth:`replay` sends with these options."""
        return await self._read(
            self.store.pressure,
            conversation,
            options=options,
            shape=shape,
            vision=vision,
            full=full,
            keep_tool_results=keep_tool_results,
        )

    async def conversations(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        title: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        active_after: datetime | None = None,
        active_before: datetime | None = None,
    ) -> list[ConversationInfo]:
        """Every conversation (matching the filters) in the order they were started."""
        return await self._read(
            self.store.conversations,
            labels=labels,
            title=title,
            started_after=started_after,
            started_before=started_before,
            active_after=active_after,
            active_before=active_before,
        )

    async def notifications(self, after: int, limit: int) -> list[tuple[int, Event]]:
        """Up to ``limit`` events of every conversation recorded after log position ``after``."""
        return await self._read(self.store.notifications, after, limit)

    async def scan(self, page_size: int = 1000) -> AsyncIterator[Recorded]:
        """Every stored record in log order (an async iterator; see
        :meth:`convstore.Store.scan`). Records are read a page at a time on a worker thread."""
        records = self.store.scan(page_size)
        while True:
            page = await self._read(_take, records, max(page_size, 1))
            for record in page:
                yield record
            if len(page) < max(page_size, 1):
                return

    async def log_position(self) -> int:
        """The position of the newest event in the log (0 when it is empty)."""
        return await self._read(self.store.log_position)

    async def heads(self) -> dict[UUID, Head]:
        """Every conversation's chained head (see :meth:`convstore.Store.heads`)."""
        return await self._read(self.store.heads)

    async def import_history(
        self, history: History, *, source: str | None = None, again: bool = False
    ) -> UUID:
        """Record a converted history as one new conversation, all or nothing."""
        return await self._write(self.store.import_history, history, source=source, again=again)

    async def import_histories(
        self,
        histories: Sequence[History],
        *,
        sources: Sequence[str | None] | None = None,
        again: bool = False,
    ) -> ImportReport:
        """Record several histories of one input in one transaction."""
        return await self._write(
            self.store.import_histories, histories, sources=sources, again=again
        )

    async def dump(self) -> AsyncIterator[bytes]:
        """The whole log as dump lines (an async iterator; see :meth:`convstore.Store.dump`),
        read a page at a time on a worker thread."""
        lines = self.store.dump()
        while True:
            page = await self._read(_take, lines, DUMP_PAGE)
            for line in page:
                yield line
            if len(page) < DUMP_PAGE:
                return

    async def load(self, lines: Iterable[bytes]) -> LoadReport:
        """Record a dump into this store (empty, or holding a prefix of the dump)."""
        return await self._write(self.store.load, lines)

    # -- internals -------------------------------------------------------------------------

    async def _write(self, call: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        future = self._submit(self._writes, call, *args, **kwargs)
        with self._guard:
            self._in_flight.add(future)
        future.add_done_callback(self._landed)
        # Cancelling the await cancels the write only if it has not started; once running,
        # its thread carries it to the end (one transaction) and drain() waits for it.
        return await asyncio.wrap_future(future)

    async def _read(self, call: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await asyncio.wrap_future(self._submit(self._reads, call, *args, **kwargs))

    def _submit(
        self,
        pool: concurrent.futures.ThreadPoolExecutor,
        call: Callable[_P, _T],
        /,
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> concurrent.futures.Future[_T]:
        if self._closed:
            raise self._closed_error()
        try:
            return pool.submit(call, *args, **kwargs)
        except RuntimeError:  # the pool shut down between the check and the submit
            raise self._closed_error() from None

    def _closed_error(self) -> StoreError:
        return StoreError(f"the store at {self.store.location} is closed")

    def _landed(self, future: concurrent.futures.Future[Any]) -> None:
        with self._guard:
            self._in_flight.discard(future)


def _start_threads(pool: concurrent.futures.ThreadPoolExecutor, count: int) -> None:
    """Make ``pool`` start all ``count`` of its threads: each waits at a barrier until all
    are running, so no submit finds an idle one and every submit starts another."""
    everyone = threading.Barrier(count + 1)
    for _ in range(count):
        pool.submit(everyone.wait, THREAD_START_TIMEOUT)
    everyone.wait(THREAD_START_TIMEOUT)


def _take(records: Iterator[_T], count: int) -> list[_T]:
    """The next ``count`` items (fewer at the end)."""
    page: list[_T] = []
    for record in records:
        page.append(record)
        if len(page) == count:
            break
    return page
