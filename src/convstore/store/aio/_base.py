"""The hand-written part of :class:`~convstore.AsyncStore`: its pools, its lifecycle, and the
few methods that differ from :class:`~convstore.Store`'s.

Every other coroutine is generated into :mod:`convstore.store.aio._generated` by
``tools/gen_async.py``; this module holds what the generated ones call (:meth:`_write`,
:meth:`_read`, :func:`materialised`) and the methods its table marks as written here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar, cast
from uuid import UUID

from convstore.domain.errors import StoreError
from convstore.domain.limits import Limits
from convstore.infrastructure.postgres.backend import WRITER_THREADS
from convstore.ports.records import Recorded
from convstore.store import Store

_P = ParamSpec("_P")
_T = TypeVar("_T")
_V = TypeVar("_V")

READER_THREADS = 4
"""Reader threads per store unless told otherwise."""

POSTGRES_WRITER_THREADS = WRITER_THREADS
"""Writer threads per PostgreSQL store unless told otherwise (SQLite gets one): each store's
own is its backend's ``writer_threads``."""

DUMP_PAGE = 1000
"""Dump lines handed from the worker thread to the loop at a time."""

THREAD_START_TIMEOUT = 30.0
"""Seconds to wait for a new store's worker threads to start."""


def materialised(value: _V) -> _V:
    """An argument as it may cross to a worker thread: a one-shot iterator (a generator, a
    ``map``, an open file) is read into a list here, on the caller's side, so nothing is
    consumed on another thread after the caller has moved on. Anything else (a list, a tuple,
    a string, a model) crosses as it is, and the sync method's own checks answer it."""
    if isinstance(value, Iterator):
        return cast("_V", list(value))
    return value


class AsyncStoreBase:
    """Runs a :class:`~convstore.Store`'s calls on two bounded pools of worker threads."""

    def __init__(
        self, store: Store, *, readers: int = READER_THREADS, writers: int | None = None
    ) -> None:
        if writers is None:
            writers = store.backend.writer_threads
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

    @property
    def identity(self) -> str:
        """The store's random identity (see :attr:`convstore.Store.identity`)."""
        return self.store.identity

    @property
    def store_format(self) -> int:
        """The store's format (see :attr:`convstore.Store.store_format`)."""
        return self.store.store_format

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

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- the methods that differ from Store's ------------------------------------------------

    async def raw_events(self, conversation: UUID | str) -> list[bytes]:
        """Every recorded event of a conversation as its full JSON (a list; see
        :meth:`convstore.Store.raw_events`)."""
        return await self._read(lambda: list(self.store.raw_events(conversation)))

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

    # -- what the generated coroutines call ------------------------------------------------

    async def _write(self, call: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``call`` on the writer pool."""
        future = self._submit(self._writes, call, *args, **kwargs)
        with self._guard:
            self._in_flight.add(future)
        future.add_done_callback(self._landed)
        # Cancelling the await cancels the write only if it has not started; once running,
        # its thread carries it to the end (one transaction) and drain() waits for it.
        return await asyncio.wrap_future(future)

    async def _read(self, call: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run ``call`` on the reader pool."""
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
