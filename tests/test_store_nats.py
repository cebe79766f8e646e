"""The store contract against a real 3-server NATS JetStream cluster, plus what only the
``nats://`` URL and the stream can get wrong."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from convstore import InvalidInput, NoStore, Store, StoreError, open_store
from convstore.backends.nats.backend import NatsBackend
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier
from tests.contract import StoreContract
from tests.nats_cluster import Cluster, delete_stream

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
