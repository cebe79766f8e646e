"""A ``nats://`` store over several streams (``?partitions=3``), on a real 3-server cluster:
the store contract, conversations spread over every partition, a count that cannot change,
and a store moved onto partitions and back with the same log."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from convstore import InvalidInput, Store, open_store
from convstore.domain.events import Event
from convstore.infrastructure.nats.location import partition_of
from tests.contract import StoreContract, interleaved_with
from tests.nats_cluster import Cluster, delete_stream
from tests.test_transfer import filled_and_piped, log_order, log_rows, problems, replays

pytestmark = pytest.mark.slow

PARTITIONS = 3


@pytest.fixture
def store_name(nats_cluster: Cluster) -> Iterator[str]:
    """A fresh store name; every stream it may have made is deleted after the test."""
    name = f"t{uuid4().hex[:12]}"
    yield name
    for stream in (name, *(f"{name}-p{k}" for k in range(PARTITIONS + 1))):
        asyncio.run(delete_stream(nats_cluster, stream))


async def _messages_per_stream(cluster: Cluster, streams: list[str]) -> dict[str, int]:
    import nats  # noqa: PLC0415 - a dev dependency

    client = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        js = client.jetstream()
        return {s: (await js.stream_info(s)).state.messages for s in streams}
    finally:
        await client.close()


class TestPartitionedNatsStore(StoreContract):
    """Every contract test on a store of three streams; each store opened is a host of its
    own (its own replica file), so reads across stores are reads across hosts."""

    @pytest.fixture(autouse=True)
    def _stream(self, nats_cluster: Cluster, store_name: str, tmp_path: Path) -> None:
        self.url = f"nats://{nats_cluster.url}/{store_name}?partitions={PARTITIONS}"
        self.replicas = tmp_path / "replicas"
        self.replicas.mkdir()

    def open_store(self) -> Store:
        return open_store(f"{self.url}&replica={self.replicas / uuid4().hex}.db")

    def test_notifications_page_through_every_conversation_in_commit_order(
        self, store: Store, conv: UUID
    ) -> None:
        """What the contract's test checks, but for another host: partitions have no common
        order, so each host's replica numbers the events in the order it applied them. Another
        host reads the same events, each conversation's in version order, at positions
        1, 2, 3, … of its own (the contract's claim of equal positions across hosts is
        exactly what a partitioned store does not make; docs/design/nats.md says so)."""
        other_conv = interleaved_with(store, conv)
        everything = store.notifications(0, 1000)
        positions = [position for position, _ in everything]
        assert positions == list(range(1, len(everything) + 1))
        assert positions[-1] == store.log_position()
        paged: list[tuple[int, Event]] = []
        while page := store.notifications(paged[-1][0] if paged else 0, 3):
            paged += page
        assert paged == everything
        other = self.open_store()
        try:
            theirs = other.notifications(0, 1000)
            assert [p for p, _ in theirs] == positions
            assert sorted(map(repr, (e for _, e in theirs))) == sorted(
                map(repr, (e for _, e in everything))
            )
            for conversation in (conv, other_conv):
                mine = [e for _, e in theirs if e.originator_id == conversation]
                assert mine == store.events(conversation)
        finally:
            other.close()


def test_conversations_spread_over_every_partition_and_read_back_in_one_order(
    nats_cluster: Cluster, store_name: str, tmp_path: Path
) -> None:
    """Twelve conversations land on the stream their id picks, every stream gets some, and
    a host with a fresh replica reads all of them, each event once, in one order of its own
    (notification ids 1, 2, 3, …) that every projection follows."""
    url = f"nats://{nats_cluster.url}/{store_name}?partitions={PARTITIONS}"
    # Random ids, four for each partition: twelve drawn freely leave a partition empty in
    # about one run of forty (3 x (2/3)^12), which says nothing about the store.
    ids: list[UUID] = []
    while len(ids) < 4 * PARTITIONS:
        candidate = uuid4()
        if sum(partition_of(i, PARTITIONS) == partition_of(candidate, PARTITIONS) for i in ids) < 4:
            ids.append(candidate)
    with open_store(f"{url}&replica={tmp_path / 'a.db'}") as store:
        made = [
            store.new_conversation(title=f"c{n}", conversation_id=conversation)
            for n, conversation in enumerate(ids)
        ]
        for conv in made:
            store.append_message(conv, "user", [{"type": "text", "text": f"hi {conv}"}])
        events = {conv: len(store.events(conv)) for conv in made}
    streams = [f"{store_name}-p{k}" for k in range(PARTITIONS)]
    counts = asyncio.run(_messages_per_stream(nats_cluster, streams))
    expected = dict.fromkeys(streams, 0)
    for conv in made:
        expected[streams[partition_of(conv, PARTITIONS)]] += events[conv]
    assert counts == expected
    assert all(counts.values()), counts
    with open_store(f"{url}&replica={tmp_path / 'b.db'}") as other:
        records = list(other.scan())
        assert [r.position for r in records] == list(range(1, len(records) + 1))
        assert len(records) == sum(events.values())
        assert {c.id for c in other.conversations()} == set(made)
        assert all(len(other.events(conv)) == events[conv] for conv in made)


CONNECTIONS_SCRIPT = """
import sys
from pathlib import Path
from convstore import open_store

def connections(ports):
    # This process's established TCP connections to ``ports``: its sockets' inodes among
    # its descriptors, matched against the kernel's table of TCP connections.
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and port in ports and fields[9] in inodes:
                count += 1
    return count

url, ports = sys.argv[1], {int(p) for p in sys.argv[2].split(",")}
store = open_store(url)
convs = [store.new_conversation(title=f"c{n}") for n in range(6)]
for conv in convs:
    store.append_message(conv, "user", [{"type": "text", "text": "hi"}])
assert all(store.events(conv) for conv in convs)
print(connections(ports))
store.close()
print(connections(ports))
"""


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads Linux's /proc")
def test_the_partitions_share_one_connection(
    nats_cluster: Cluster, store_name: str, tmp_path: Path
) -> None:
    """A store over three streams holds one connection to the cluster for every partition's
    deliveries and requests, not one per stream (three before, each with its own event-loop
    thread), and one more that a publishing thread drives itself, also shared by every
    partition. Closing the store closes both. Counted in a fresh process, so nothing another
    test left open is counted."""
    url = f"nats://{nats_cluster.url}/{store_name}?partitions={PARTITIONS}"
    ports = ",".join(str(server.port) for server in nats_cluster.servers)
    done = subprocess.run(
        [sys.executable, "-c", CONNECTIONS_SCRIPT, f"{url}&replica={tmp_path / 'a.db'}", ports],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["2", "0"], done.stderr


def test_two_processes_append_to_conversations_in_different_partitions(
    nats_cluster: Cluster, store_name: str, tmp_path: Path
) -> None:
    """Two writer processes sharing one replica file, each on a conversation of its own
    partition: every acknowledged append is read back once, in order, by the shared replica
    and by a fresh one (a different host)."""
    url = f"nats://{nats_cluster.url}/{store_name}?partitions={PARTITIONS}"
    shared = f"{url}&replica={tmp_path / 'shared.db'}"
    with open_store(shared) as store:
        made: dict[int, UUID] = {}
        while len(made) < 2:
            conv = store.new_conversation()
            made.setdefault(partition_of(conv, PARTITIONS), conv)
    convs = list(made.values())
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.nats_writer", shared, str(conv), f"w{n}", "5"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n, conv in enumerate(convs)
    ]
    outputs = [w.communicate(timeout=300)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    for location in (shared, f"{url}&replica={tmp_path / 'fresh.db'}"):
        with open_store(location) as reader:
            for n, conv in enumerate(convs):
                texts = [str(m["content"]) for m in reader.replay(conv)["messages"]]
                assert texts == [f"w{n}-{i}" for i in range(5)], texts
            records = list(reader.scan())
            assert [r.position for r in records] == list(range(1, len(records) + 1))


def test_a_store_keeps_the_number_of_partitions_it_was_made_with(
    nats_cluster: Cluster, store_name: str, tmp_path: Path
) -> None:
    """Opening a store with another number of partitions (or none) is refused in one line
    naming both numbers, and makes nothing; so is partitioning a store made without."""
    base = f"nats://{nats_cluster.url}/{store_name}"
    with open_store(f"{base}?partitions={PARTITIONS}&replica={tmp_path / 'a.db'}") as store:
        store.new_conversation(title="kept")
    for asked in ("", "?partitions=2", f"?partitions={PARTITIONS + 1}"):
        with pytest.raises(InvalidInput, match=f"made with {PARTITIONS} partitions") as caught:
            open_store(f"{base}{asked}{'&' if asked else '?'}replica={tmp_path / 'b.db'}")
        assert "\n" not in str(caught.value)
    assert not (tmp_path / "b.db").exists() or (tmp_path / "b.db").stat().st_size == 0
    single = f"nats://{nats_cluster.url}/{store_name}x"
    try:
        with open_store(f"{single}?replica={tmp_path / 'c.db'}"):
            pass
        with pytest.raises(InvalidInput, match="made with 1 partition;"):
            open_store(f"{single}?partitions=2&replica={tmp_path / 'd.db'}")
    finally:
        asyncio.run(delete_stream(nats_cluster, f"{store_name}x"))
    with pytest.raises(InvalidInput, match="partitions must be a whole number from 1 to 64"):
        open_store(f"{base}?partitions=65")


def test_sqlite_to_partitions_and_back_keeps_the_log(
    nats_cluster: Cluster, store_name: str, tmp_path: Path
) -> None:
    """`dump | load` onto a partitioned store (one load spans every partition): `verify` is
    clean, replay is byte-identical, and a dump of it loads back into SQLite as the same log:
    the same events, each conversation's in its order (the order across conversations is the
    replica's own: partitions have no common one)."""
    db, back = tmp_path / "agent.db", tmp_path / "back.db"
    url = f"nats://{nats_cluster.url}/{store_name}?partitions={PARTITIONS}"
    url += f"&replica={tmp_path / 'replica.db'}"
    ids = filled_and_piped(db, url)
    with open_store(url) as nats_store, open_store(back) as copy, open_store(db) as original:
        copy.load(nats_store.dump())
        for target in (nats_store, copy):
            assert log_rows(target) == log_rows(original)
            assert replays(target) == replays(original)
            assert problems(target) == []
            for conv in ids:
                assert _order_of(target, conv) == _order_of(original, conv)


def _order_of(store: Store, conversation: UUID) -> list[int]:
    """The versions of a conversation's events in the store's notification order."""
    return [v for c, v in log_order(store) if c == conversation]
