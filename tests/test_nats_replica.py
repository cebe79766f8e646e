"""What a ``nats://`` store's replica accepts, on a real 3-server cluster: a replica file
belongs to one store (another store's, or another application's SQLite file, is refused and
left as it is), a message on a conversation's subject that convstore cannot read is reported
and skipped, and a message deleted from the stream (its newest included) stops no read."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from convstore import InvalidInput, open_store
from tests.nats_cluster import Cluster, delete_stream
from tests.test_nats_faults import _texts
from tests.test_nats_follower import _say
from tests.test_transfer import one_error_line, run

pytestmark = pytest.mark.slow


@pytest.fixture
def names(nats_cluster: Cluster) -> Iterator[list[str]]:
    """Fresh store names (append to it); every stream they may have made is deleted after."""
    made: list[str] = []
    yield made
    for name in made:
        for stream in (name, *(f"{name}-p{k}" for k in range(3))):
            asyncio.run(delete_stream(nats_cluster, stream))


def _url(cluster: Cluster, names: list[str], options: str) -> str:
    name = f"t{uuid4().hex[:12]}"
    names.append(name)
    return f"nats://{cluster.url}/{name}?{options}"


def _bytes(path: Path) -> dict[str, bytes]:
    """The file and its write-ahead log, as they are now (an empty log is no log: a
    read-only open of a WAL file makes one)."""
    return {
        p.name: p.read_bytes()
        for p in (path, path.with_name(f"{path.name}-wal"))
        if p.exists() and p.stat().st_size
    }


@pytest.mark.parametrize("partitions", [1, 2])
def test_a_replica_file_belongs_to_one_store(
    nats_cluster: Cluster, names: list[str], tmp_path: Path, partitions: int
) -> None:
    """Two stores (other stream names, partitioned or not) given one replica file: the
    second is refused in one line before it reads or writes a row, so it never shows the
    first's conversations; the first still opens and reads its own."""
    replica = tmp_path / "r.db"
    options = f"replica={replica}" + (f"&partitions={partitions}" if partitions > 1 else "")
    url_a = _url(nats_cluster, names, options)
    url_b = _url(nats_cluster, names, options)
    with open_store(url_a) as a:
        secret = a.new_conversation(title="tenant a")
        _say(a, secret, "tenant a's private text")
    before = _bytes(replica)
    with pytest.raises(InvalidInput, match="belongs to another store") as caught:
        open_store(url_b)
    assert "\n" not in str(caught.value)
    replayed = run("--db", url_b, "replay", str(secret))
    assert "belongs to another store" in one_error_line(replayed)
    assert b"private" not in replayed.stdout
    assert _bytes(replica) == before
    with open_store(url_a) as a:
        assert _texts(a, secret) == ["tenant a's private text"]


def test_a_replica_of_the_same_name_on_another_stream_is_refused(
    nats_cluster: Cluster, names: list[str], tmp_path: Path
) -> None:
    """The stream deleted and made again (another identity): its old replica is refused."""
    replica = tmp_path / "r.db"
    url = _url(nats_cluster, names, f"replica={replica}")
    with open_store(url) as store:
        store.new_conversation(title="old")
    asyncio.run(delete_stream(nats_cluster, names[-1]))
    with pytest.raises(InvalidInput, match="was fed from another stream"):
        open_store(url)


def test_another_applications_sqlite_file_is_refused_and_left_byte_for_byte(
    nats_cluster: Cluster, names: list[str], tmp_path: Path
) -> None:
    """``?replica=`` naming another application's SQLite file (or a SQLite store): refused in
    one line, and the file is left as it was (no tables added, not switched to WAL)."""
    foreign = tmp_path / "app.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.close()
    sqlite_store = tmp_path / "store.db"
    open_store(sqlite_store).close()
    not_sqlite = tmp_path / "text.db"
    not_sqlite.write_bytes(b"plain text, not a database\n" * 10)
    for path, fragment in (
        (foreign, "not the replica of a convstore NATS store"),
        (sqlite_store, "not the replica of a convstore NATS store"),
        (not_sqlite, "cannot be read as a SQLite file"),
    ):
        before = _bytes(path)
        url = _url(nats_cluster, names, f"replica={path}")
        with pytest.raises(InvalidInput, match=fragment) as caught:
            open_store(url)
        assert "\n" not in str(caught.value)
        assert fragment in one_error_line(run("--db", url, "list"))
        assert _bytes(path) == before, path


def test_a_replica_another_process_is_still_making_is_waited_for(
    nats_cluster: Cluster, names: list[str], tmp_path: Path
) -> None:
    """Two processes opening one new replica at once: the one that finds the file made but
    still locked by the other (making its tables, switching it to WAL) waits for the lock,
    as it waits for a writer's, instead of failing with "database is locked" (a CI run's
    writer did, on a replica its neighbour was making)."""
    replica = tmp_path / "r.db"
    url = _url(nats_cluster, names, f"replica={replica}")
    open_store(url.replace(str(replica), str(tmp_path / "first.db"))).close()
    replica.touch(mode=0o600)  # made by the other process, which holds it for a moment
    holder = sqlite3.connect(replica, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(1.0, holder.execute, ("COMMIT",))
    release.start()
    try:
        with open_store(url) as store:
            conversation = store.new_conversation(title="waited")
            _say(store, conversation, "opened once the lock was free")
            assert _texts(store, conversation) == ["opened once the lock was free"]
    finally:
        release.join()
        holder.close()


async def _publish(
    cluster: Cluster, subject: str, data: bytes, headers: dict[str, str] | None = None
) -> int:
    """Publish one message as any client of the stream may; its stream sequence."""
    import nats  # noqa: PLC0415 - a dev dependency

    client = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        return int((await client.jetstream().publish(subject, data, headers=headers)).seq)
    finally:
        await client.close()


def _verify(url: str) -> tuple[int, str]:
    """`convstore verify` in a process of its own: its exit code and its output."""
    proc = run("--db", url, "verify", "--json")
    return proc.returncode, (proc.stdout + proc.stderr).decode()


def test_a_message_convstore_cannot_read_is_reported_and_skipped(
    nats_cluster: Cluster, names: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Messages another client published on a conversation's subject (no headers, a version
    the conversation holds, a tombstone that is none, a subject naming no conversation) are
    never applied and stop nothing: every conversation reads, on the host that follows and
    on a new one, the conversation takes appends again, `verify` names each (before any
    append too) and exits 1, and the follower logs each once."""
    url = _url(nats_cluster, names, f"replica={tmp_path / 'a.db'}")
    stream = names[-1]
    with open_store(url) as a:
        hit, other = a.new_conversation(title="hit"), a.new_conversation(title="other")
        _say(a, hit, "before")
        _say(a, other, "untouched")
        junk = [asyncio.run(_publish(nats_cluster, f"{stream}.c.{hit.hex}", b"junk"))]
        code, said = _verify(url)  # the junk is the stream's newest message: no append since
        assert code == 1, said
        assert f"message {junk[0]} on {stream}.c.{hit.hex} was not applied" in said
        for subject, headers in (
            (f"{stream}.c.{hit.hex}", {"Convstore-Version": "1", "Convstore-Topic": "x"}),
            (f"{stream}.c.{hit.hex}", {"Convstore-Erased": "1"}),
            (f"{stream}.c.not-a-conversation", {}),
        ):
            junk.append(asyncio.run(_publish(nats_cluster, subject, b"{junk", headers)))
        assert _texts(a, hit) == ["before"]
        assert _texts(a, other) == ["untouched"]
        _say(a, hit, "after")  # its subject's newest is a skipped message: the stream expects it
        assert _texts(a, hit) == ["before", "after"]
        code, said = _verify(url)
        assert code == 1, said
        for seq in junk:
            assert f"message {seq} on " in said
        assert said.count("was not applied") == len(junk)
    logged = [r.getMessage() for r in caplog.records if "was not applied" in r.getMessage()]
    for seq in junk:  # once each, by the follower that applied it
        assert sum(f"message {seq} on " in m for m in logged) == 1, logged
    with open_store(f"{url.split('?')[0]}?replica={tmp_path / 'b.db'}") as b:
        assert _texts(b, hit) == ["before", "after"]
        assert _texts(b, other) == ["untouched"]
        assert sum(f"message {junk[0]} on " in p for p in b.storage_problems()) == 1


async def _delete_message(cluster: Cluster, stream: str, seq: int) -> None:
    """Delete one message as `nats stream rmm` does (the stream's message-delete API)."""
    import nats  # noqa: PLC0415 - a dev dependency

    client = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        assert await client.jetstream().delete_msg(stream, seq)
    finally:
        await client.close()


def test_deleted_messages_stop_no_read_and_verify_reports_them(
    nats_cluster: Cluster, names: list[str], tmp_path: Path
) -> None:
    """The stream's newest message deleted (the stream's newest sequence stays at it): a host
    that had not read it reads at once after a short wait, in the process that follows and
    in one that does not, and `verify` there names the deleted sequence; a deleted message
    inside a conversation is reported as the gap in its versions. The host that had applied
    them keeps them (its replica is not the stream)."""
    base = _url(nats_cluster, names, "timeout=6")  # a read that never returns fails in 6 s
    stream = names[-1]
    with open_store(f"{base}&replica={tmp_path / 'a.db'}") as a:
        gapped, cut = a.new_conversation(title="gapped"), a.new_conversation(title="cut")
        for text in ("one", "two", "three"):
            _say(a, gapped, text)
        _say(a, cut, "kept")
        _say(a, cut, "lost")
        assert _texts(a, cut) == ["kept", "lost"]
        # The second of its three messages (one event each: a new store is of format 3).
        middle = [r.position for r in a.scan() if r.originator_id == gapped][2]
        newest = max(r.position for r in a.scan())
    asyncio.run(_delete_message(nats_cluster, stream, middle))
    asyncio.run(_delete_message(nats_cluster, stream, newest))
    url_b = f"{base}&replica={tmp_path / 'b.db'}"
    with open_store(url_b) as b:
        # Another process on b's replica does not follow (b does): it waits for b's follower.
        replayed = run("--db", url_b, "replay", str(cut))
        assert replayed.returncode == 0, replayed.stderr
        assert b"kept" in replayed.stdout
        assert _texts(b, cut) == ["kept"]  # "lost" was its one event, deleted
        code, said = _verify(url_b)
        assert code == 1, said
        assert f"message {newest} was deleted from the stream before this replica read it" in said
        assert "(a gap)" in said
        _say(b, cut, "again")  # the conversation takes appends on
        assert _texts(b, cut)[-1] == "again"
    with open_store(f"{base}&replica={tmp_path / 'c.db'}") as c:  # a new replica follows
        assert _texts(c, cut)[-1] == "again"
