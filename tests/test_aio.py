"""The async store: the same API as the sync one, off the event loop, safe to cancel.

Coroutines run under ``asyncio.run`` inside plain tests, on a real SQLite file and on the real
PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

import convstore
from convstore import (
    AsyncStore,
    ConversationNotFound,
    InvalidBlock,
    MessageClosed,
    NoStore,
    Store,
    StoreError,
    open_async_store,
    open_store,
)
from tests.formats import events_of

TEXT = {"type": "text", "text": "hello"}

ASYNC_ONLY = {"drain"}
"""Methods only the async store has."""

RETURNS_OTHERWISE = {
    "raw_events": ("Iterator[bytes]", "list[bytes]"),
    "scan": ("Iterator[Recorded]", "AsyncIterator[Recorded]"),
    "dump": ("Iterator[bytes]", "AsyncIterator[bytes]"),
}
"""Methods whose async twin returns a different container, as documented: (sync, async)."""


def _public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_every_store_method_has_an_async_twin_with_the_same_signature() -> None:
    """Each public Store method exists on AsyncStore as a coroutine (or async iterator) with
    the same parameters, defaults and annotations, and the same result but where documented."""
    sync, asynchronous = _public_methods(Store), _public_methods(AsyncStore)
    assert set(sync) - set(asynchronous) == set(), "Store methods without an async twin"
    assert set(asynchronous) - set(sync) == ASYNC_ONLY
    for name, method in sync.items():
        twin = asynchronous[name]
        if name in {"scan", "dump"}:
            assert inspect.isasyncgenfunction(twin), name
        else:
            assert inspect.iscoroutinefunction(twin), name
        ours, theirs = inspect.signature(method), inspect.signature(twin)
        assert list(ours.parameters.values()) == list(theirs.parameters.values()), name
        expected = RETURNS_OTHERWISE.get(name, (ours.return_annotation,) * 2)
        assert (ours.return_annotation, theirs.return_annotation) == expected, name


def test_the_store_attributes_are_there_too(tmp_path: Path) -> None:
    """location, limits and identity read through to the wrapped store (AsyncStore.store)."""

    async def main() -> None:
        async with await open_async_store(tmp_path / "a.db") as store:
            assert isinstance(store.store, Store)
            assert store.location == store.store.location == str((tmp_path / "a.db").resolve())
            assert store.limits is store.store.limits
            assert store.identity == store.store.identity != ""

    asyncio.run(main())


def test_async_calls_give_what_sync_calls_give(location: str) -> None:
    """A conversation recorded through the async store reads back, through every read
    method, exactly as the sync store reads it."""

    async def main() -> None:
        async with await open_async_store(location) as store:
            conv = await store.new_conversation(title="twins")
            await store.append_message(conv, "system", [{"type": "text", "text": "Be brief."}])
            await store.append_message(conv, "user", [TEXT])
            turn = await store.start_message(conv, "assistant")
            call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "."}}
            assert await store.append_block(conv, turn, call) == 0
            await store.end_message(conv, turn)
            result = {"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}
            done = await store.append_message(conv, "user", [result])
            live = await store.live_request(conv, turn)
            assert live == store.store.live_request(conv, turn)
            cut = await store.start_message(conv, "assistant")
            await store.append_block(conv, cut, {"type": "text", "text": "Let me"})
            await store.interrupt_message(conv, cut, reason="stop")
            await store.compact(conv, "They listed a folder.", through=done)

            sync = store.store
            assert await store.events(conv) == sync.events(conv)
            assert await store.raw_events(conv) == list(sync.raw_events(conv))
            assert await store.messages(conv) == sync.messages(conv)
            for full in (False, True):
                assert await store.replay(conv, full=full) == sync.replay(conv, full=full)
            assert await store.replay(conv, shape="anthropic") == sync.replay(
                conv, shape="anthropic"
            )
            assert await store.pressure(conv, full=True) == sync.pressure(conv, full=True)
            assert await store.fit_tool_results(conv, 10_000) == sync.fit_tool_results(conv, 10_000)
            assert await store.conversations() == sync.conversations()
            assert await store.notifications(0, 100) == sync.notifications(0, 100)
            position = await store.log_position()
            assert position == sync.log_position() > 0
            scanned = [record async for record in store.scan(page_size=3)]
            assert scanned == list(sync.scan(page_size=3))
            assert (
                len(scanned)
                == len(await store.events(conv))
                == (17 if store.store_format < 3 else 11)
            )

    asyncio.run(main())


def test_async_calls_raise_what_sync_calls_raise(location: str) -> None:
    """Bad calls fail with the sync store's errors, through the await, and write nothing."""

    async def main() -> None:
        async with await open_async_store(location) as store:
            with pytest.raises(ConversationNotFound):
                await store.replay(uuid4())
            conv = await store.new_conversation()
            with pytest.raises(InvalidBlock, match="block 0"):
                await store.append_message(conv, "user", [{"type": "text"}])
            message = await store.append_message(conv, "user", [TEXT])
            with pytest.raises(MessageClosed):
                await store.append_block(conv, message, TEXT)
            assert len(await store.events(conv)) == 1 + events_of(store)

    asyncio.run(main())


def test_many_tasks_append_concurrently_without_loss(location: str) -> None:
    """Twenty tasks streaming into twenty conversations at once all land, each in order."""

    async def stream(store: AsyncStore, n: int) -> None:
        conv = await store.new_conversation(title=str(n))
        turn = await store.start_message(conv, "assistant")
        for i in range(5):
            await store.append_block(conv, turn, {"type": "text", "text": f"{n}-{i}"})
        await store.end_message(conv, turn)

    async def main() -> None:
        async with await open_async_store(location) as store:
            await asyncio.gather(*(stream(store, n) for n in range(20)))
            listed = await store.conversations()
            assert sorted(int(c.title or "") for c in listed) == list(range(20))
            for info in listed:
                [message] = await store.messages(info.id)
                texts = [getattr(b.block, "text", None) for b in message.blocks]
                assert texts == [f"{info.title}-{i}" for i in range(5)]

    asyncio.run(main())


def test_the_threads_start_with_the_store_and_end_with_it(location: str) -> None:
    """Opening starts every worker thread (one writer on SQLite, four on PostgreSQL; four
    readers), so no call has to start one on the loop; close() ends them all."""

    def convstore_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("convstore-")}

    def kinds(threads: set[threading.Thread]) -> dict[str, int]:
        names = [t.name.rsplit("_", 1)[0] for t in threads]
        return {kind: names.count(f"convstore-{kind}") for kind in ("write", "read")}

    # Threads of other stores (earlier tests' twins still being collected) may come and go
    # meanwhile, so only the threads this store started are counted.
    before = convstore_threads()
    started: set[threading.Thread] = set()

    async def main() -> None:
        store = await open_async_store(location)
        started.update(convstore_threads() - before)
        writers = 4 if location.startswith("postgresql://") else 1
        assert kinds(started) == {"write": writers, "read": 4}
        await store.close()

    asyncio.run(main())
    assert [t for t in started if t.is_alive()] == []


def test_opening_fails_as_open_store_does(tmp_path: Path) -> None:
    """open_async_store(create=False) on a missing file raises NoStore and leaves no file."""
    with pytest.raises(NoStore):
        asyncio.run(open_async_store(tmp_path / "missing.db", create=False))
    assert not (tmp_path / "missing.db").exists()


def test_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    """After close (or leaving `async with`) every call fails with StoreError; close twice is
    harmless."""

    async def main() -> None:
        store = await open_async_store(tmp_path / "a.db")
        async with store:
            await store.new_conversation()
        with pytest.raises(StoreError, match="closed"):
            await store.conversations()
        await store.close()

    asyncio.run(main())


def test_close_lets_the_calls_in_flight_finish(tmp_path: Path) -> None:
    """A read and a write submitted before close() both complete; the write is in the log."""

    async def main() -> None:
        store = await open_async_store(tmp_path / "a.db")
        conv = await store.new_conversation()
        writing = asyncio.create_task(store.append_message(conv, "user", [TEXT]))
        reading = asyncio.create_task(store.conversations())
        await asyncio.sleep(0)  # both are submitted
        await store.close()
        await writing
        assert [c.id for c in await reading] == [conv]

    asyncio.run(main())
    with open_store(tmp_path / "a.db") as store:
        assert len(store.messages(store.conversations()[0].id)) == 1


# -- off the loop, and cancellation ---------------------------------------------------------

HOLD_SQLITE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""
"""Another process that takes SQLite's write lock and holds it until told to let go."""


class SQLiteLockHolder:
    """A subprocess holding a store file's write lock."""

    def __init__(self, path: Path) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-c", HOLD_SQLITE_LOCK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        assert self._process.stdout.readline() == "locked\n"

    def release(self) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write("\n")
        self._process.stdin.close()
        assert self._process.wait(timeout=30) == 0


@pytest.fixture
def lock_holder(tmp_path: Path) -> Iterator[Callable[[Path], SQLiteLockHolder]]:
    """Starts lock-holding subprocesses and makes sure none outlives the test."""
    holders: list[SQLiteLockHolder] = []

    def hold(path: Path) -> SQLiteLockHolder:
        holders.append(SQLiteLockHolder(path))
        return holders[-1]

    yield hold
    for holder in holders:
        if holder._process.poll() is None:
            holder._process.kill()
            holder._process.wait()


async def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


def _writing(store: AsyncStore) -> bool:
    """Whether a write of this store is running on its writer thread right now."""
    return any(f.running() for f in store._in_flight)


def test_the_loop_keeps_running_while_a_write_waits_for_the_lock(
    tmp_path: Path, lock_holder: Callable[[Path], SQLiteLockHolder]
) -> None:
    """While another process holds SQLite's write lock, an append waits on its thread and the
    event loop keeps ticking; once the lock is released the append lands."""
    path = tmp_path / "store.db"

    async def main() -> None:
        async with await open_async_store(path) as store:
            conv = await store.new_conversation()
            holder = lock_holder(path)
            append = asyncio.create_task(store.append_message(conv, "user", [TEXT]))
            await _until(lambda: _writing(store))
            ticks = 0
            for _ in range(50):  # 0.5 s or more of a write held up
                await asyncio.sleep(0.01)
                ticks += 1
            assert not append.done()
            assert ticks == 50
            holder.release()
            await append
            assert len(await store.messages(conv)) == 1

    asyncio.run(main())


def test_cancelled_writes_land_whole_or_not_at_all_sqlite(
    tmp_path: Path, lock_holder: Callable[[Path], SQLiteLockHolder]
) -> None:
    """Cancelling appends stuck behind another process's write lock: the one already running
    lands whole once the lock is free, the queued one never lands, and drain() says when."""
    path = tmp_path / "store.db"

    async def main() -> None:
        async with await open_async_store(path) as store:
            conv = await store.new_conversation()
            holder = lock_holder(path)
            await _check_cancellation(store, conv, holder.release)

    asyncio.run(main())


def test_cancelled_writes_land_whole_or_not_at_all_postgres(postgres_url: str) -> None:
    """The same on PostgreSQL, with another session holding the events table's lock."""
    import psycopg  # noqa: PLC0415

    schema = postgres_url.rsplit("schema=", 1)[1]

    async def main() -> None:
        async with AsyncStore(open_store(postgres_url), writers=1) as store:
            conv = await store.new_conversation()
            with psycopg.connect(postgres_url.split("?", 1)[0]) as other:
                other.execute(f"LOCK TABLE {schema}.convstore_events IN EXCLUSIVE MODE")
                await _check_cancellation(store, conv, other.commit)

    asyncio.run(main())


async def _check_cancellation(store: AsyncStore, conv: UUID, release: Callable[[], object]) -> None:
    blocks = [{"type": "text", "text": f"part {i}"} for i in range(3)]
    running = asyncio.create_task(store.append_message(conv, "user", blocks))
    await _until(lambda: _writing(store))
    queued = asyncio.create_task(store.append_message(conv, "assistant", [TEXT]))
    await asyncio.sleep(0.05)
    running.cancel()
    queued.cancel()
    for task in (running, queued):
        with pytest.raises(asyncio.CancelledError):
            await task
    release()
    await store.drain()
    [landed] = await store.messages(conv)
    assert landed.role == "user"
    assert [getattr(b.block, "text", None) for b in landed.blocks] == ["part 0", "part 1", "part 2"]
    versions = [e.originator_version for e in await store.events(conv)]
    assert versions == list(range(1, len(versions) + 1))
    # The store goes on as before.
    await store.append_message(conv, "assistant", [TEXT])
    assert len(await store.messages(conv)) == 2


def test_async_names_are_exported() -> None:
    """AsyncStore and open_async_store are public names of the package."""
    assert {"AsyncStore", "open_async_store"} <= set(convstore.__all__)
    assert convstore.AsyncStore is AsyncStore
