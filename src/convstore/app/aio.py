"""The composition root's asyncio side: :func:`open_async_store`, an :class:`AsyncStore` opened
off the event loop.

Kept apart from :mod:`convstore.app.bootstrap` so that a synchronous program's
``from convstore import open_store`` imports neither :mod:`asyncio` nor the async store's
thread pools (about a sixth of that import's time).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os

from convstore.app.bootstrap import ReplayModel, open_store, warn_replay_model
from convstore.domain.limits import Limits
from convstore.store.aio import READER_THREADS, AsyncStore
from convstore.store.replay_cache import DEFAULT_CACHE_BYTES


async def open_async_store(
    location: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
    limits: Limits | None = None,
    readers: int = READER_THREADS,
    writers: int | None = None,
    replay_cache_bytes: int = DEFAULT_CACHE_BYTES,
    replay_model: ReplayModel = None,
) -> AsyncStore:
    """Open the store at ``location`` (as :func:`convstore.open_store` does) for asyncio.

    Opening reads the file or reaches the server, so it runs on a worker thread. If the
    awaiting task is cancelled meanwhile, the store is closed as soon as it has opened.
    ``replay_model`` is ignored, with a :class:`DeprecationWarning`, as there.
    """
    warn_replay_model(replay_model, stacklevel=2)
    opening = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="convstore-open")
    future = opening.submit(
        _open_async,
        location,
        create,
        limits,
        readers,
        writers,
        replay_cache_bytes=replay_cache_bytes,
    )
    opening.shutdown(wait=False)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_opened)
        raise


def _open_async(
    location: str | os.PathLike[str] | None,
    create: bool,
    limits: Limits | None,
    readers: int,
    writers: int | None,
    *,
    replay_cache_bytes: int,
) -> AsyncStore:
    """Open the store and start its threads, on the opening thread."""
    store = open_store(
        location,
        create=create,
        limits=limits,
        replay_cache_bytes=replay_cache_bytes,
    )
    try:
        return AsyncStore(store, readers=readers, writers=writers)
    except BaseException:
        store.close()
        raise


def _close_opened(future: concurrent.futures.Future[AsyncStore]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result()._shut_down()
