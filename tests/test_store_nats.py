"""The store contract against a real 3-server NATS JetStream cluster, plus what only the
``nats://`` URL and the stream can get wrong."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from convstore import ConversationErased, InvalidInput, NoStore, Store, StoreError, open_store
from convstore.infrastructure.nats import link as link_module
from convstore.infrastructure.nats.backend import NatsBackend
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier
from tests.contract import StoreContract
from tests.nats_cluster import Cluster, assert_erased_from_stream_files, delete_stream, holding
from tests.test_nats_faults import _texts
from tests.test_nats_follower import _say
from tests.test_transfer import assert_same_log, fill, filled_and_piped, run

pytestmark = pytest.mark.slow


@pytest.fixture
def stream_url(nats_cluster: Cluster) -> Iterator[str]:
    """A fresh stream's ``nats://`` URL (without a replica), deleted after the test."""
    name = f"t{uuid4().hex[:12]}"
    yield f"nats://{nats_cluster.url}/{name}"
    asyncio.run(delete_stream(nats_cluster, name))


class TestNatsStore(StoreContract):
    """Every contract test, on one fresh stream per test; each store opened is a host of its
    own (its own replica file), so reads across stores are reads across hosts."""

    @pytest.fixture(autouse=True)
    def _stream(self, stream_url: str, tmp_path: Path) -> None:
        self.url = stream_url
        self.replicas = tmp_path / "replicas"
        self.replicas.mkdir()

    def open_store(self) -> Store:
        return open_store(f"{self.url}?replica={self.replicas / uuid4().hex}.db")


def test_the_url_is_shown_with_the_password_masked(stream_url: str, tmp_path: Path) -> None:
    """A store opened with credentials in its URL never shows the password: the location,
    and the one line a server that refuses them gives."""
    servers, _, name = stream_url.removeprefix("nats://").partition("/")
    with_password = f"nats://someone:hunter2@{servers}/{name}?replica={tmp_path / 'r.db'}"
    with pytest.raises(StoreError) as caught:
        open_store(with_password.replace(servers, "127.0.0.1:1") + "&timeout=1")
    assert "hunter2" not in str(caught.value)
    assert "someone:***@127.0.0.1:1" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert NatsBackend().show(with_password) == with_password.replace("hunter2", "***")


def test_bad_urls_are_refused_in_one_line() -> None:
    """A bad stream name, port or option is refused before anything is reached."""
    for url, fragment in (
        ("nats://h:4222/bad.name", "stream name"),
        ("nats://h:99999/s", "out of range"),
        ("nats://h:x/s", "HOST:PORT"),
        ("nats://h/s?replicas=9", "replicas"),
        ("nats://u:secret@h/s?poolsize=3", "bad URL option poolsize"),
    ):
        with pytest.raises(InvalidInput, match=fragment) as caught:
            open_store(url)
        assert "secret" not in str(caught.value)


def test_a_missing_stream_is_no_store_unless_created(stream_url: str, tmp_path: Path) -> None:
    """Opening with create=False finds no stream and makes none."""
    with pytest.raises(NoStore):
        open_store(f"{stream_url}?replica={tmp_path / 'r.db'}", create=False)
    with open_store(f"{stream_url}?replica={tmp_path / 'r.db'}") as store:
        conv = store.new_conversation(title="made")
    with open_store(f"{stream_url}?replica={tmp_path / 'r2.db'}", create=False) as store:
        assert [c.id for c in store.conversations()] == [conv]


def test_a_new_replica_is_rebuilt_from_the_stream(stream_url: str, tmp_path: Path) -> None:
    """A host with no replica yet reads every conversation, listing and replay included, and
    the same heads and notification ids (stream sequences) as the host that wrote them."""
    with open_store(f"{stream_url}?replica={tmp_path / 'a.db'}") as writer:
        conv = writer.new_conversation(title="first")
        writer.append_message(conv, "user", [{"type": "text", "text": "hi"}])
        writer.set_labels(conv, {"k": "v"})
        listed, replayed = writer.conversations(), writer.replay(conv)
        scanned = [(r.position, r.state) for r in writer.scan()]
    with open_store(f"{stream_url}?replica={tmp_path / 'b.db'}") as reader:
        assert reader.conversations() == listed
        assert reader.replay(conv) == replayed
        assert [(r.position, r.state) for r in reader.scan()] == scanned
        heads = reader.heads()
        assert heads is not None
        verifier = Verifier(heads=heads, key=chain_key())
        verifier.check_all(reader.scan())
        assert verifier.problems == []


def test_erase_overwrites_the_events_in_every_servers_stream_files(
    nats_cluster: Cluster, stream_url: str, tmp_path: Path
) -> None:
    """When erase returns, the conversation's bytes are gone from the stream leader's message
    files and from the replica (within seconds from the other two servers' message files),
    and its tombstone is left (a new host's replica knows it was erased). What keeps them is
    each server's Raft log for the stream (``$SYS/_js_/…``), until the server compacts it
    after a snapshot: the docs say so (docs/design/nats.md), and this test pins it so a
    change in the server is noticed."""
    marker = f"zanzibar-{uuid4().hex}".encode()
    name = stream_url.rsplit("/", 1)[1]
    with open_store(f"{stream_url}?replica={tmp_path / 'a.db'}") as store:
        conv = store.new_conversation(title="secret")
        store.append_message(conv, "user", [{"type": "text", "text": marker.decode()}])
        kept = store.new_conversation(title="kept")
        store.append_message(kept, "user", [{"type": "text", "text": "stays"}])
        # Acknowledged on a quorum (two servers): the third may write it a moment later.
        deadline = time.monotonic() + 10
        while True:
            before = holding(nats_cluster, marker)
            in_streams = [f for f in before if f"/streams/{name}/" in f]
            if len(in_streams) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(in_streams) == 3, before
        store.erase(conv, reason="asked")
        assert marker not in b"".join(p.read_bytes() for p in tmp_path.glob("a.db*"))
        assert_erased_from_stream_files(nats_cluster, name, marker)
        assert marker not in b"".join(p.read_bytes() for p in tmp_path.glob("a.db*"))
    with open_store(f"{stream_url}?replica={tmp_path / 'b.db'}") as fresh:
        assert [e.id for e in fresh.erasures()] == [conv]
        assert [c.id for c in fresh.conversations()] == [kept]
        with pytest.raises(ConversationErased):
            fresh.new_conversation(conversation_id=conv)


def test_an_append_after_another_hosts_erasure_is_refused(stream_url: str, tmp_path: Path) -> None:
    """A host that last wrote a conversation publishes its next append without reading its
    replica (it knows the newest event from its own acknowledgement): after another host
    erased the conversation, the stream refuses that publish, and the append ends in
    ConversationErased with nothing written."""
    with (
        open_store(f"{stream_url}?replica={tmp_path / 'a.db'}") as writer,
        open_store(f"{stream_url}?replica={tmp_path / 'b.db'}") as eraser,
    ):
        conv = writer.new_conversation()
        writer.append_message(conv, "user", [{"type": "text", "text": "first"}])
        eraser.erase(conv, reason="asked")
        with pytest.raises(ConversationErased):
            writer.append_message(conv, "user", [{"type": "text", "text": "after"}])
        assert [e.id for e in writer.erasures()] == [conv]
        assert writer.last_event(conv) is None
    with open_store(f"{stream_url}?replica={tmp_path / 'c.db'}") as fresh:
        assert [e.id for e in fresh.erasures()] == [conv]
        assert fresh.last_event(conv) is None


def test_sqlite_to_nats_and_back_through_the_command_line(stream_url: str, tmp_path: Path) -> None:
    """`convstore --db agent.db dump | convstore --db nats://… load -` moves a store onto the
    stream; `verify` is clean there, every replay is byte-identical, and a dump of the stream
    loads back into a new SQLite file holding the same log."""
    db, back = tmp_path / "agent.db", tmp_path / "back.db"
    url = f"{stream_url}?replica={tmp_path / 'replica.db'}"
    filled_and_piped(db, url, [], ["--shape", "anthropic", "--vision"])
    with open_store(url) as nats_store, open_store(back) as copy:
        copy.load(nats_store.dump())
        with open_store(db) as original:
            assert_same_log(original, copy)
            assert_same_log(original, nats_store)


def test_a_refused_load_into_a_new_stream_leaves_no_store(stream_url: str, tmp_path: Path) -> None:
    """`load` into a stream that does not exist makes it, and deletes it again when the dump
    is refused part-way (an event leaving a gap): nothing is left to open."""
    with open_store(tmp_path / "a.db") as source:
        fill(source, conversations=1)
        lines = list(source.dump())
    line = json.loads(lines[5])
    gap = dict(line, version=line["version"] + 5)
    gap["event"] = dict(line["event"], originator_version=line["version"] + 5)
    doctored = b"".join([*lines[:5], json.dumps(gap).encode() + b"\n", *lines[6:]])
    url = f"{stream_url}?replica={tmp_path / 'replica.db'}"
    refused = run("--db", url, "load", "-", stdin=doctored)
    assert refused.returncode != 0
    assert b"gap" in refused.stderr
    with pytest.raises(NoStore):
        open_store(url, create=False)
    assert list(tmp_path.glob("replica.db*")) == []


def test_the_replica_lives_in_the_data_directory_unless_told(
    stream_url: str, tmp_path: Path
) -> None:
    """Without ``?replica=``, the replica is a file in the data directory named after the
    servers and stream (the same for every opening of that store on this host), and the
    audit read model's default file is another one."""
    backend = NatsBackend()
    with open_store(stream_url) as store:
        conv = store.new_conversation(title="here")
        replicas = sorted((tmp_path / "xdg" / "convstore").glob("nats-*.db"))
        replica = backend.store_file(store.location)
        assert replica is not None
        assert replicas == [replica]
        assert backend.default_audit_file(store.location) != replicas[0]
    with open_store(stream_url) as again:
        assert [c.id for c in again.conversations()] == [conv]
    assert sorted((tmp_path / "xdg" / "convstore").glob("nats-*.db")) == replicas


def test_a_link_waits_for_its_loop_thread_to_run(
    nats_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link whose event-loop thread is slow to start (a busy machine: eight processes opening
    a store at once) connects once it runs, instead of calling itself closed."""
    from convstore.infrastructure.nats.link import JetStreamLink  # noqa: PLC0415 - the nats extra

    started = asyncio.BaseEventLoop.run_forever

    def late(loop: asyncio.BaseEventLoop) -> None:
        time.sleep(0.3)
        started(loop)

    monkeypatch.setattr(asyncio.BaseEventLoop, "run_forever", late)
    link = JetStreamLink([f"nats://{s}" for s in nats_cluster.url.split(",")], "nothing")
    try:
        assert link.stream_metadata() is None
    finally:
        link.close()


def test_appends_from_many_threads_at_once_all_land(stream_url: str, tmp_path: Path) -> None:
    """Eight threads append to one store at once. A publish is made by the thread that asks
    for it, on a connection that thread drives itself, one thread at a time; the others
    publish through the link's loop thread meanwhile. Every append lands once, in order."""
    with open_store(f"{stream_url}?replica={tmp_path / 'r.db'}") as store:
        conversations = [store.new_conversation() for _ in range(8)]
        failures: list[BaseException] = []

        def write(conversation: UUID) -> None:
            try:
                for n in range(15):
                    _say(store, conversation, f"{n}")
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=write, args=(c,)) for c in conversations]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert failures == []
        for conversation in conversations:
            assert _texts(store, conversation) == [f"{n}" for n in range(15)]


def test_an_append_from_inside_an_event_loop_lands(stream_url: str, tmp_path: Path) -> None:
    """A host calling the synchronous store from a coroutine runs an event loop in that
    thread, which cannot run a second: its publishes go through the link's loop thread."""
    with open_store(f"{stream_url}?replica={tmp_path / 'r.db'}") as store:
        conversation = store.new_conversation()

        async def inside() -> None:
            _say(store, conversation, "from a coroutine")

        asyncio.run(inside())
        _say(store, conversation, "from plain code")
        assert _texts(store, conversation) == ["from a coroutine", "from plain code"]


def test_a_publishing_connection_left_idle_is_made_again(
    stream_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection a thread publishes on runs only while it publishes, so it answers no
    server PING in between: unused for ``DIRECT_IDLE_SECONDS`` it is closed, and the next
    publish connects again (and lands)."""
    import nats  # noqa: PLC0415 - a dev dependency

    connects = []
    real = nats.connect

    async def counted(*args: object, **kwargs: object) -> object:
        connects.append(time.monotonic())
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nats, "connect", counted)
    monkeypatch.setattr(link_module, "DIRECT_IDLE_SECONDS", 0.2)
    with open_store(f"{stream_url}?replica={tmp_path / 'r.db'}") as store:
        conversation = store.new_conversation()
        _say(store, conversation, "one")
        made = len(connects)
        _say(store, conversation, "two")
        assert len(connects) == made  # the same connection, within the idle time
        time.sleep(0.5)
        _say(store, conversation, "after a pause")
        assert len(connects) == made + 1
        assert _texts(store, conversation) == ["one", "two", "after a pause"]
