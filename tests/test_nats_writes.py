"""What a ``nats://`` store's writes promise on a real 3-server cluster, where the stream's
own limits and other writers can get in the way: a message the servers would never take is
refused at once, an import is whole or absent, and an erasure takes its turn."""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import os
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from convstore import ConversationNotFound, open_store
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier
from tests.conftest import one_error_line
from tests.formats import events_of
from tests.nats_cluster import Cluster, assert_erased_from_stream_files, delete_stream, holding
from tests.test_transfer import run

pytestmark = pytest.mark.slow


@pytest.fixture
def stream(nats_cluster: Cluster) -> Iterator[str]:
    """A fresh stream's name, deleted after the test."""
    name = f"w{uuid4().hex[:12]}"
    yield name
    asyncio.run(delete_stream(nats_cluster, name))


def _url(cluster: Cluster, stream: str, replica: Path, *options: str) -> str:
    return f"nats://{cluster.url}/{stream}?" + "&".join((f"replica={replica}", *options))


def _incompressible(size: int) -> str:
    """Text of about ``size`` characters that compression cannot bring under ``size * 3/4``."""
    return base64.b64encode(os.urandom(size * 3 // 4)).decode()


def _verified(url: str) -> list[str]:
    """What ``verify`` finds, on a replica of its own built from the stream."""
    with open_store(url) as store:
        heads = store.heads()
        assert heads is not None
        verifier = Verifier(heads=heads, key=chain_key())
        verifier.check_all(store.scan())
        return [problem.problem for problem in verifier.problems]


def test_a_block_over_the_servers_max_payload_is_refused_at_once(
    nats_cluster: Cluster, stream: str, tmp_path: Path
) -> None:
    """A block inside convstore's limits but larger than one NATS message may be (the
    servers' max_payload, 1 MiB by default) is refused in one line naming both limits, exit
    2, nothing written; it used to be retried until the URL's timeout and then reported as
    "no acknowledgement from the stream"."""
    url = _url(nats_cluster, stream, tmp_path / "r.db", "timeout=4")
    with open_store(url) as store:
        conversation = store.new_conversation()
        before = [r.state for r in store.scan()]
    block = [{"type": "text", "text": _incompressible(1_600_000)}]
    refused = run(
        "--db", url, "append", str(conversation), "-r", "user", stdin=json.dumps(block).encode()
    )
    one_error_line(
        refused.returncode,
        refused.stdout,
        refused.stderr,
        "max_payload of 1,048,576 bytes",
        "CONVSTORE_MAX_BLOCK_BYTES",
        "nothing was written",
    )
    with open_store(_url(nats_cluster, stream, tmp_path / "fresh.db")) as fresh:
        assert [r.state for r in fresh.scan()] == before
        fresh.append_message(conversation, "user", [{"type": "text", "text": "small"}])


def _chat(messages: int, last: str) -> bytes:
    """An OpenAI Chat Completions message list of ``messages`` messages, the last ``last``."""
    body = [
        {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}
        for n in range(messages - 1)
    ]
    body.append({"role": "user", "content": last})
    return json.dumps(body).encode()


def test_an_import_with_a_message_over_max_payload_writes_nothing(
    nats_cluster: Cluster, stream: str, tmp_path: Path
) -> None:
    """A 1,201-message history (more events than one atomic batch holds, in either format)
    whose last message is over the servers' max_payload: the import is refused before
    anything is published (it used to leave the first batch stored, verify clean, and refuse
    the retry as "already imported"); with the last message made small, the same input
    imports whole."""
    url = _url(nats_cluster, stream, tmp_path / "r.db")
    history = tmp_path / "chat.json"
    history.write_bytes(_chat(1201, _incompressible(1_600_000)))
    refused = run("--db", url, "import", "--format", "openai-chat", str(history))
    one_error_line(
        refused.returncode, refused.stdout, refused.stderr, "max_payload", "nothing was written"
    )
    with open_store(_url(nats_cluster, stream, tmp_path / "fresh.db")) as fresh:
        assert list(fresh.scan()) == []
        assert fresh.conversations() == []
    history.write_bytes(_chat(1201, "small at last"))
    imported = run("--db", url, "import", "--format", "openai-chat", str(history))
    assert imported.returncode == 0, imported.stderr
    with open_store(_url(nats_cluster, stream, tmp_path / "again.db")) as again:
        [conversation] = again.conversations()
        assert len(again.messages(conversation.id)) == 1201
    assert _verified(_url(nats_cluster, stream, tmp_path / "check.db")) == []


async def _limit_messages(cluster: Cluster, stream: str, room: int) -> None:
    """Let the stream take ``room`` more messages, refusing any past that (discard new)."""
    import nats  # noqa: PLC0415 - a dev dependency
    from nats.js.api import DiscardPolicy  # noqa: PLC0415

    nc = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        js = nc.jetstream()
        info = await js.stream_info(stream)
        config = info.config
        config.max_msgs = info.state.messages + room
        config.discard = DiscardPolicy.NEW
        await js.update_stream(config)
    finally:
        await nc.close()


def test_an_import_stopped_between_two_batches_leaves_nothing_replayable(
    nats_cluster: Cluster, stream: str, tmp_path: Path
) -> None:
    """The stream takes the first atomic batch of a long import and refuses the second (a
    limit on its messages, here): the part stored is erased before the import reports the
    failure, so no host replays a half import and verify is clean; once the stream has room,
    the retry imports the whole history (under the source's next id)."""
    url = _url(nats_cluster, stream, tmp_path / "r.db")
    with open_store(url) as store:
        store.new_conversation(title="already here")
    asyncio.run(_limit_messages(nats_cluster, stream, 1001))
    history = tmp_path / "chat.json"
    history.write_bytes(_chat(1201, "the last"))
    stopped = run("--db", url, "import", "--format", "openai-chat", str(history))
    one_error_line(
        stopped.returncode,
        stopped.stdout,
        stopped.stderr,
        "stopped part-way",
        "erased",
        code=1,
    )
    with open_store(_url(nats_cluster, stream, tmp_path / "fresh.db")) as fresh:
        assert [c.title for c in fresh.conversations()] == ["already here"]
        [erasure] = fresh.erasures()
        assert "stopped part-way" in erasure.reason
    assert _verified(_url(nats_cluster, stream, tmp_path / "check.db")) == []
    asyncio.run(_limit_messages(nats_cluster, stream, 100_000))
    retried = run("--db", url, "import", "--format", "openai-chat", str(history))
    assert retried.returncode == 0, retried.stderr
    with open_store(_url(nats_cluster, stream, tmp_path / "after.db")) as after:
        imported = [c for c in after.conversations() if c.title != "already here"]
        assert [len(after.messages(c.id)) for c in imported] == [1201]


MARKER = "racing-secret"


def _append_until_refused(url: str, conversation: str) -> int:
    """Append messages to ``conversation`` until it is erased; how many landed."""
    landed = 0
    with open_store(url) as store:
        try:
            while True:
                text = f"{MARKER}-{landed}"
                store.append_message(conversation, "user", [{"type": "text", "text": text}])
                landed += 1
        except ConversationNotFound:  # erased (or read as gone after the erasure)
            return landed


ROUNDS = 6
"""Races per run: an erasure that gave up after five lost races failed in each of three runs of
six, and passed most runs of three."""


def test_an_erasure_racing_appending_processes_takes_its_turn(
    nats_cluster: Cluster, stream: str, tmp_path: Path
) -> None:
    """Two processes, each a host of its own, append to a conversation while another erases
    it, :data:`ROUNDS` times over: each erasure retries on the stream's expected-sequence refusal as
    an append does (it used to fail with the raw "wrong last sequence … (err_code 10071)"
    after five tries), every appender ends refused, and nothing of the conversation is
    replayable on any host."""
    url = _url(nats_cluster, stream, tmp_path / "eraser.db")
    with open_store(url) as store:
        kept = store.new_conversation()
        store.append_message(kept, "user", [{"type": "text", "text": "kept"}])
    erased = []
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        for _ in range(ROUNDS):
            with open_store(url) as store:
                conversation = store.new_conversation()
                pending = [
                    pool.apply_async(
                        _append_until_refused,
                        (_url(nats_cluster, stream, tmp_path / f"w{n}.db"), str(conversation)),
                    )
                    for n in range(2)
                ]
                while len(store.events(conversation)) < 60:
                    assert not all(p.ready() for p in pending)
                tombstone = store.erase(conversation, reason="race")
            landed = [p.get(timeout=120) for p in pending]
            assert tombstone.events == 1 + events_of(store) * sum(landed)
            erased.append(conversation)
    for replica in ("eraser.db", "w0.db", "fresh.db"):
        with open_store(_url(nats_cluster, stream, tmp_path / replica)) as store:
            for conversation in erased:
                assert store.last_event(conversation) is None
            assert [e.id for e in store.erasures()] == erased
            assert len(store.events(kept)) == 1 + events_of(store)
    assert _verified(_url(nats_cluster, stream, tmp_path / "check.db")) == []


async def _forge_last(cluster: Cluster, stream: str, count: int, old: bytes, new: bytes) -> None:
    """As anyone allowed to publish to the stream could: delete its last ``count`` messages
    and publish them again with ``old`` replaced by ``new``, every convstore header kept."""
    import nats  # noqa: PLC0415 - a dev dependency

    nc = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        js = nc.jetstream()
        last = (await js.stream_info(stream)).state.last_seq
        messages = [await js.get_msg(stream, seq) for seq in range(last - count + 1, last + 1)]
        for message in messages:
            assert message.seq is not None
            await js.delete_msg(stream, message.seq)
        for message in messages:
            assert message.subject is not None
            assert message.data is not None
            headers = {
                key: value
                for key, value in (message.headers or {}).items()
                if not key.startswith("Nats-")
            }
            await js.publish(message.subject, message.data.replace(old, new), headers=headers)
    finally:
        await nc.close()


def test_a_message_forged_on_the_stream_fails_verify_with_a_chain_key(
    nats_cluster: Cluster, stream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CONVSTORE_CHAIN_KEY set, the writer's keyed chain travels with each message and
    becomes the replica's head: a conversation's last three messages deleted from the stream
    and published again with one word changed (headers copied) are reported by verify on a
    host that builds its replica afterwards (it used to replay the forged text and verify
    clean, as it chained whatever the stream held)."""
    monkeypatch.setenv("CONVSTORE_CHAIN_KEY", "only the writers know")
    with open_store(_url(nats_cluster, stream, tmp_path / "writer.db")) as writer:
        conversation = writer.new_conversation()
        writer.append_message(conversation, "user", [{"type": "text", "text": "pay alice"}])
        writer.append_message(conversation, "assistant", [{"type": "text", "text": "paid"}])
    clean = _url(nats_cluster, stream, tmp_path / "before.db")
    assert _verified(clean) == []
    asyncio.run(_forge_last(nats_cluster, stream, 3, b"paid", b"sent"))
    forged = _url(nats_cluster, stream, tmp_path / "after.db")
    with open_store(forged) as reader:
        assert "sent" in json.dumps(reader.replay(conversation))
    [problem] = _verified(forged)
    assert "do not match the hash chain" in problem


def test_a_long_running_host_drops_erased_text_from_its_replica_files(
    nats_cluster: Cluster, stream: str, tmp_path: Path
) -> None:
    """A host that read a conversation and stays open applies another host's erasure: once it
    has, neither its replica nor the replica's write-ahead log holds the text (the log used
    to keep it until the process ended)."""
    marker = f"wal-secret-{uuid4().hex}"
    with open_store(_url(nats_cluster, stream, tmp_path / "long.db")) as long_running:
        conversation = long_running.new_conversation()
        long_running.append_message(conversation, "user", [{"type": "text", "text": marker}])
        assert marker in json.dumps(long_running.replay(conversation))
        with open_store(_url(nats_cluster, stream, tmp_path / "eraser.db")) as eraser:
            eraser.erase(conversation, reason="asked")
        assert [e.id for e in long_running.erasures()] == [conversation]
        files = sorted(tmp_path.glob("long.db*"))
        assert tmp_path / "long.db-wal" in files
        assert [f.name for f in files if marker.encode() in f.read_bytes()] == []


RAFT_LOG_BOUND_SECONDS = 180.0
"""What docs/design/nats.md promises for the servers' Raft logs: each server snapshots a
stream whose state changed on a timer of 2 minutes plus up to one more, and compacts its log
then."""


def test_erased_text_leaves_every_servers_raft_log_within_the_stated_bound(
    nats_cluster: Cluster, stream: str, tmp_path: Path
) -> None:
    """The stream's message files lose an erased conversation's bytes (the leader's when
    erase returns, the followers' as they apply the deletions);
    each server's Raft log for the stream (``$SYS/_js_/…``) keeps them until that server's
    next snapshot of the stream: within :data:`RAFT_LOG_BOUND_SECONDS` of the erasure on all
    three, while the store keeps taking appends (checked every few seconds, a minute's slack
    for a busy machine)."""
    marker = f"raft-secret-{uuid4().hex}".encode()
    with open_store(_url(nats_cluster, stream, tmp_path / "r.db")) as store:
        conversation = store.new_conversation()
        store.append_message(conversation, "user", [{"type": "text", "text": marker.decode()}])
        other = store.new_conversation()
        deadline = time.monotonic() + 10
        while len([f for f in holding(nats_cluster, marker) if "/_js_/" in f]) < 3:
            assert time.monotonic() < deadline, holding(nats_cluster, marker)
            time.sleep(0.05)
        store.erase(conversation, reason="asked")
        erased = time.monotonic()
        assert_erased_from_stream_files(nats_cluster, stream, marker)
        while held := holding(nats_cluster, marker):
            waited = time.monotonic() - erased
            assert waited < RAFT_LOG_BOUND_SECONDS + 60, (waited, held)
            store.append_message(other, "user", [{"type": "text", "text": f"at {waited:.0f}"}])
            time.sleep(5)
