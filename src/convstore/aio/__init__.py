"""The store for asyncio: every :class:`~convstore.Store` call as a coroutine.

An :class:`AsyncStore` wraps a :class:`~convstore.Store` and runs each call on worker threads
of its own, so no file or network I/O, fsync or lock wait ever runs on the event loop. Two
bounded pools keep reads and writes apart:

- **writes** (every method the table in ``tools/gen_async.py`` marks as writing; the
  docstring of :class:`AsyncStore` lists them) go to a writer pool: one thread on SQLite,
  which admits one writer at a time anyway (more threads would only queue on its lock), four
  on PostgreSQL, whose connections can overlap their round trips while the table lock still
  serialises the inserts. Writes submitted by one task run in the order it awaits them.
- **reads** go to a reader pool (four threads by default), so a replay never waits behind a
  queue of appends.

An argument that is a one-shot iterator (a generator, say) is read into a list on the
caller's side before it crosses to a thread (:func:`~convstore.aio._base.materialised`).

**Cancellation.** Each write is one transaction of the sync store. A cancelled write either
never started (it is taken off the queue and never lands) or had started, in which case its
thread finishes it: the write lands whole or fails whole, never half. To learn which, await
:meth:`AsyncStore.drain` (it returns once every write submitted before it has finished) and
then read :meth:`AsyncStore.messages`.

:class:`AsyncStore` is generated from :class:`~convstore.Store` (``python tools/gen_async.py``
writes :mod:`convstore.aio._generated`); the pools, the lifecycle and the methods that differ
are written by hand in :mod:`convstore.aio._base`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import weakref

from convstore.aio._base import (
    DUMP_PAGE,
    POSTGRES_WRITER_THREADS,
    READER_THREADS,
    THREAD_START_TIMEOUT,
)
from convstore.aio._generated import AsyncStore
from convstore.bootstrap import open_store
from convstore.domain.limits import Limits
from convstore.errors import InvalidInput
from convstore.infrastructure.replay_tables import DEFAULT_CACHE_BYTES
from convstore.store import Store

__all__ = [
    "DUMP_PAGE",
    "POSTGRES_WRITER_THREADS",
    "READER_THREADS",
    "THREAD_START_TIMEOUT",
    "AsyncStore",
    "as_async",
    "open_async_store",
]


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


_TWIN = "_convstore_async_twin"
"""The attribute under which a :class:`Store` keeps (weakly) the :class:`AsyncStore` made
for it."""

_twinning = threading.Lock()


def as_async(store: Store | AsyncStore) -> AsyncStore:
    """The :class:`AsyncStore` for ``store``: itself when it is one; for a
    :class:`~convstore.Store`, an ``AsyncStore`` over it with the default pools, the same one
    for as long as anything holds it (so integrations handed one ``Store`` at once share one
    writer pool).

    Every integration that runs on asyncio takes either kind of store through this. Nothing
    here closes a ``Store`` you passed: you keep owning it. A twin made here starts its
    threads when made and ends them once nothing holds it; for many calls, hold the twin (or
    open the store with :func:`open_async_store`) rather than pass the ``Store`` each time.
    """
    if isinstance(store, AsyncStore):
        return store
    if not isinstance(store, Store):
        msg = f"expected a Store or an AsyncStore, not {type(store).__name__}"
        raise InvalidInput(msg)
    with _twinning:
        held = vars(store).get(_TWIN)
        twin = held() if isinstance(held, weakref.ref) else None
        if not isinstance(twin, AsyncStore):
            # Held weakly: a strong reference would tie the store and its twin in a cycle, and
            # the twin's idle threads would outlive both until the collector found it.
            twin = AsyncStore(store)
            setattr(store, _TWIN, weakref.ref(twin))
        return twin
