"""Processes sharing one ``nats://`` replica file follow the stream once: one of them (the
holder of the replica's follow lock) applies every message, the others wait for its position.
On a real 3-server cluster: one consumer for a host's processes, a follower SIGKILLed or
stopped, and an apply that fails leaving no gap."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

import pytest

from convstore import Store, StoreError, open_store
from convstore.infrastructure.nats.location import NatsLocation
from convstore.infrastructure.nats.recorder import (
    FOLLOW_LOCK_SUFFIX,
    MARK,
    WAIT_EVERY,
)
from convstore.infrastructure.nats.replica import POSITION_TABLE
from tests.nats_cluster import Cluster, delete_stream
from tests.test_nats_faults import _texts, _verified

if TYPE_CHECKING:
    from nats.js.api import StreamState

pytestmark = pytest.mark.slow

HOLDER = """
import json, sys
from uuid import UUID
import convstore
with convstore.open_store(sys.argv[1]) as store:
    print("ready", flush=True)
    for line in sys.stdin:
        conv = UUID(line.strip())
        texts = [str(m["content"]) for m in store.replay(conv)["messages"]]
        print(json.dumps(texts), flush=True)
"""
"""A process holding the store open on a replica: for each conversation id sent to it, it
replays the conversation and prints its messages' texts (one JSON line)."""


@pytest.fixture
def url(nats_cluster: Cluster) -> Iterator[str]:
    name = f"t{uuid4().hex[:12]}"
    yield f"nats://{nats_cluster.url}/{name}"
    asyncio.run(delete_stream(nats_cluster, name))


def _holder(location: str) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, location],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "ready"
    return holder


def _ask(holder: subprocess.Popen[str], conversation: UUID) -> list[str]:
    assert holder.stdin is not None
    assert holder.stdout is not None
    holder.stdin.write(f"{conversation}\n")
    holder.stdin.flush()
    texts: list[str] = json.loads(holder.stdout.readline())
    return texts


def _say(store: Store, conversation: UUID, text: str) -> None:
    store.append_message(conversation, "user", [{"type": "text", "text": text}])


async def _stream_state(cluster: Cluster, stream: str) -> StreamState:
    import nats  # noqa: PLC0415 - a dev dependency

    client = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        return (await client.jetstream().stream_info(stream)).state
    finally:
        await client.close()


async def _last_seq(cluster: Cluster, stream: str) -> int:
    return int((await _stream_state(cluster, stream)).last_seq)


async def _consumers(cluster: Cluster, stream: str) -> int:
    return int((await _stream_state(cluster, stream)).consumer_count)


def _consumers_settle(cluster: Cluster, stream: str, count: int, seconds: float = 15.0) -> bool:
    """Whether the stream's consumer count comes to ``count`` within ``seconds`` (a closed
    store's ordered consumer lingers on the server until its inactivity threshold, 5 s)."""
    deadline = time.monotonic() + seconds
    while asyncio.run(_consumers(cluster, stream)) != count:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.25)
    return True


def _stop(*holders: subprocess.Popen[str]) -> None:
    for holder in holders:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=30)


def test_processes_sharing_a_replica_follow_the_stream_once(
    nats_cluster: Cluster, url: str, tmp_path: Path
) -> None:
    """Three processes on one replica file make one consumer on the stream, not three (beside
    the one of another host, on a replica of its own); each reads what that host wrote, and
    the writes of a process that does not follow."""
    stream = url.rsplit("/", 1)[1]
    shared = f"{url}?replica={tmp_path / 'shared.db'}"
    with open_store(f"{url}?replica={tmp_path / 'elsewhere.db'}") as elsewhere:
        conv = elsewhere.new_conversation()
        first = _holder(shared)
        second = _holder(shared)
        try:
            with open_store(shared) as store:
                assert asyncio.run(_consumers(nats_cluster, stream)) == 2
                _say(elsewhere, conv, "from another host")
                _say(store, conv, "from this host")
                expected = ["from another host", "from this host"]
                assert _texts(store, conv) == expected
                assert _ask(first, conv) == expected
                assert _ask(second, conv) == expected
                assert _texts(elsewhere, conv) == expected
                assert asyncio.run(_consumers(nats_cluster, stream)) == 2
        finally:
            _stop(first, second)


def test_a_follower_killed_is_replaced_by_a_process_that_reads(url: str, tmp_path: Path) -> None:
    """SIGKILL the process that follows for a replica: the next read of another process on
    that replica takes over following (the lock went with the dead process) and sees every
    write, and so does a third process, now through the new follower."""
    shared = f"{url}?replica={tmp_path / 'shared.db'}"
    follower = _holder(shared)
    with open_store(shared) as store:
        waiting = _holder(shared)
        try:
            with open_store(f"{url}?replica={tmp_path / 'elsewhere.db'}") as elsewhere:
                conv = elsewhere.new_conversation()
                _say(elsewhere, conv, "before")
                assert _texts(store, conv) == ["before"]
                follower.send_signal(signal.SIGKILL)
                follower.wait(timeout=30)
                _say(elsewhere, conv, "after the kill")
            assert _texts(store, conv) == ["before", "after the kill"]
            assert _ask(waiting, conv) == ["before", "after the kill"]
        finally:
            _stop(follower, waiting)


def test_a_stopped_follower_does_not_stop_the_others(
    nats_cluster: Cluster, url: str, tmp_path: Path
) -> None:
    """A follower that holds the lock but applies nothing (SIGSTOP) does not hang a read of
    another process: once the position has not moved for a while, that process follows the
    stream too and reads every write. Once the follower applies again, the other process
    stops following: the host is back to one consumer on the stream."""
    stream = url.rsplit("/", 1)[1]
    shared = f"{url}?replica={tmp_path / 'shared.db'}"
    follower = _holder(shared)
    try:
        with open_store(shared) as store:
            elsewhere = f"{url}?replica={tmp_path / 'elsewhere.db'}"
            with open_store(elsewhere) as other:
                conv = other.new_conversation()
                _say(other, conv, "first")
                assert _texts(store, conv) == ["first"]
                follower.send_signal(signal.SIGSTOP)
                _say(other, conv, "while it is stopped")
            assert _texts(store, conv) == ["first", "while it is stopped"]
            assert _consumers_settle(nats_cluster, stream, 2)  # the stopped one's, and ours
            follower.send_signal(signal.SIGCONT)
            assert _ask(follower, conv) == ["first", "while it is stopped"]
            expected = ["first", "while it is stopped"]
            with open_store(elsewhere) as other:  # a consumer of its own, on its replica
                for n in range(30):  # the one dropped lingers on the servers up to 5 s
                    _say(other, conv, f"back {n}")
                    expected.append(f"back {n}")
                    time.sleep(0.5)  # the follower applies it (or else this read does)
                    assert _texts(store, conv) == expected
                    if asyncio.run(_consumers(nats_cluster, stream)) == 2:  # other's, follower's
                        break
                else:
                    pytest.fail("the process that followed alongside kept its consumer")
            assert _consumers_settle(nats_cluster, stream, 1)
            assert _ask(follower, conv) == expected
            _say(store, conv, "from the process that waits again")
            assert _ask(follower, conv) == [*expected, "from the process that waits again"]
    finally:
        follower.send_signal(signal.SIGCONT)
        _stop(follower)


def test_an_apply_that_fails_is_applied_again_not_skipped(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another connection holds the replica's write lock past the lock timeout, a read
    fails in one line; the messages it could not apply are applied by the next read, before
    the ones that came after (none skipped), and the replica verifies clean."""
    monkeypatch.setenv("CONVSTORE_LOCK_TIMEOUT", "1")
    replica = tmp_path / "r.db"
    with (
        open_store(f"{url}?replica={replica}") as store,
        open_store(f"{url}?replica={tmp_path / 'elsewhere.db'}") as elsewhere,
    ):
        conv = elsewhere.new_conversation()
        _say(elsewhere, conv, "one")
        assert _texts(store, conv) == ["one"]
        blocker = sqlite3.connect(replica, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            _say(elsewhere, conv, "two")
            with pytest.raises(StoreError) as caught:
                store.replay(conv)
            assert "\n" not in str(caught.value)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        _say(elsewhere, conv, "three")
        assert _texts(store, conv) == ["one", "two", "three"]
        assert _verified(store) == []


def _marks(replica: Path) -> list[int]:
    """The follower's marks in the replica's follow lock file, one per stream."""
    raw = Path(f"{replica}{FOLLOW_LOCK_SUFFIX}").read_bytes()
    return [MARK.unpack_from(raw, offset)[0] for offset in range(0, len(raw), MARK.size)]


def _positions(replica: Path) -> list[int]:
    with sqlite3.connect(replica) as conn:
        return [int(seq) for (seq,) in conn.execute(f"SELECT seq FROM {POSITION_TABLE}")]  # noqa: S608


def test_the_follower_marks_each_commit_for_the_processes_that_wait(
    url: str, tmp_path: Path
) -> None:
    """The holder of the follow lock writes, after each commit, the position it committed into
    the lock file: what the processes that wait read instead of asking the replica again and
    again. Once reads of a waiting process have returned its appends, the mark is the
    replica's position."""
    replica = tmp_path / "shared.db"
    shared = f"{url}?replica={replica}"
    follower = _holder(shared)
    try:
        with open_store(shared) as store:
            conv = store.new_conversation()
            said = [f"message {n}" for n in range(20)]
            for text in said:
                _say(store, conv, text)
            assert _ask(follower, conv) == said
            assert _texts(store, conv) == said
            (position,) = _positions(replica)
            assert position > 20
            assert _marks(replica) == [position]
    finally:
        _stop(follower)


def test_an_append_returns_acknowledged_and_every_so_often_waits_for_the_replica(
    nats_cluster: Cluster, url: str, tmp_path: Path
) -> None:
    """An append returns once the stream has acknowledged it, and leaves its applying to the
    follower: with the follower stopped, a process that does not follow appends
    ``WAIT_EVERY - 1`` times and the replica has not moved. The next append waits until the
    replica holds it (here by following alongside the stopped follower), so a host's replica
    never falls far behind its writers. A read then has every append."""
    replica = tmp_path / "shared.db"
    shared = f"{url}?replica={replica}"
    stream = NatsLocation.parse(url).stream
    follower = _holder(shared)
    try:
        with open_store(shared) as store:
            conv = store.new_conversation()
            assert _texts(store, conv) == []
            before = _positions(replica)
            follower.send_signal(signal.SIGSTOP)
            said = [f"message {n}" for n in range(WAIT_EVERY)]
            for text in said[:-1]:
                _say(store, conv, text)
            assert _positions(replica) == before
            assert asyncio.run(_last_seq(nats_cluster, stream)) > before[0]
            _say(store, conv, said[-1])
            assert _positions(replica) == [asyncio.run(_last_seq(nats_cluster, stream))]
            assert _texts(store, conv) == said
    finally:
        follower.send_signal(signal.SIGCONT)
        _stop(follower)


def test_a_mark_ahead_of_the_replica_ends_no_wait(
    nats_cluster: Cluster, url: str, tmp_path: Path
) -> None:
    """A mark is a hint, the replica the truth: with the follower stopped and a mark far past
    anything the stream holds (a lock file left by a replica since deleted, say), a read of
    another process still waits for the replica to hold what was written (it follows
    alongside), never returns without it."""
    replica = tmp_path / "shared.db"
    shared = f"{url}?replica={replica}"
    follower = _holder(shared)
    try:
        with open_store(shared) as store:
            with open_store(f"{url}?replica={tmp_path / 'elsewhere.db'}") as other:
                conv = other.new_conversation()
                _say(other, conv, "first")
                assert _texts(store, conv) == ["first"]
                follower.send_signal(signal.SIGSTOP)
                Path(f"{replica}{FOLLOW_LOCK_SUFFIX}").write_bytes(MARK.pack(2**40))
                _say(other, conv, "while the mark says it is there")
            assert _texts(store, conv) == ["first", "while the mark says it is there"]
    finally:
        follower.send_signal(signal.SIGCONT)
        _stop(follower)
