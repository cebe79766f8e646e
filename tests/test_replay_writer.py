"""The replay model its writers keep (SQLite): inside each append's transaction, equal after
every append to a fold of the log from scratch (a message still streaming written when it
closes, or once DEFER_LIMIT of its events wait), with two writers taking turns and readers
replaying in between; never ahead of the log, nor behind it by more than a streaming
message's events, when a writer is killed mid-append;
extended only where the stored head is what a writer can trust; a model stored under the
digest before the sum of row MACs still read, and stored anew once; ``replay_model="on_read"``
leaving it to readers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import InvalidInput, Store, open_store
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.backends.sqlite.replay_keeper import DEFER_LIMIT
from convstore.domain.events import BlockAppended, BlockRecorded, Event, MessageStarted
from convstore.engine.model import fold
from convstore.engine.plan import replay
from convstore.engine.state import ReplayState, model_digest, packed_plan, row_digest
from tests.strategies import histories

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def stored_model(location: Path | str, conversation: UUID) -> tuple[Any, ...]:
    """The stored model as its tables hold it: (version, head, [(message id, plan)…])."""
    with closing(sqlite3.connect(location)) as conn:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (HEADS,)).fetchone()
        if found is None:
            return (None,)
        head = conn.execute(
            f"SELECT version, head FROM {HEADS} WHERE originator_id = ?",  # noqa: S608
            (conversation.hex,),
        ).fetchone()
        if head is None:
            return (None,)
        rows = conn.execute(
            f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ? "  # noqa: S608
            "ORDER BY position",
            (conversation.hex,),
        ).fetchall()
    return (head[0], head[1], rows)


def folded_model(conversation: UUID, events: list[Event]) -> tuple[Any, ...]:
    """What a fold of ``events`` from scratch stores."""
    state = ReplayState()
    fold(state, events)
    rows = [(m.message_id, packed_plan(m.encode())) for m in state.messages]
    return (state.version, state.encode_head(conversation.hex), rows)


def assert_kept(location: Path | str, conversation: UUID, events: list[Event]) -> int:
    """The stored model is the fold of the log up to its version: the log's own, or behind
    it only by a message still streaming (its start and blocks, fewer than DEFER_LIMIT
    events), which the writer holds until the message closes. Returns the stored version."""
    stored = stored_model(location, conversation)
    version = stored[0]
    assert version is not None
    assert stored == folded_model(conversation, events[:version])
    waiting = events[version:]
    assert len(waiting) < DEFER_LIMIT
    assert all(
        isinstance(e, MessageStarted | BlockAppended)
        or (isinstance(e, BlockRecorded) and not e.closes)
        for e in waiting
    ), waiting
    return int(version)


def write(store: Store, events: list[Event]) -> None:
    """Record events decided elsewhere through the store's writer, as its commands do (so the
    writer's hook runs in the append's transaction)."""
    conversation = events[0].originator_id
    store._write(conversation, lambda _state: list(events))


@SETTINGS
@given(histories(max_messages=8), st.data())
def test_the_writers_keep_the_stored_model_equal_to_a_fresh_fold_after_every_append(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], data: st.DataObject
) -> None:
    """Two writers take turns (each other's appends are another process's to it); a reader
    replays in between, storing what it folds at once (its writes must agree): after every
    append the stored model is the fold of the whole log, at the log's version, but for a
    message still streaming (:func:`assert_kept`)."""
    location = tmp_path_factory.mktemp("kept") / "s.db"
    conversation = events[0].originator_id
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=5)))
    turns = data.draw(st.lists(st.integers(0, 1), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    with ExitStack() as stack:
        writers = [stack.enter_context(open_store(location)) for _ in range(2)]
        reader = stack.enter_context(open_store(location, replay_cache_bytes=0))
        reader._replays.write_lag = 0
        writers[0]._save(events[:1])  # the conversation made (no model: nothing to replay)
        done = 1
        for turn, cut in zip(turns, [*cuts, len(events)], strict=True):
            if cut <= done:
                continue
            write(writers[turn], events[done:cut])
            done = cut
            assert_kept(location, conversation, events[:done])
            if data.draw(st.booleans()):
                assert reader.replay(conversation) == replay(events[:done])
                assert stored_model(location, conversation)[0] == done


CHILD = """
import sys
from convstore import open_store
location, conv = sys.argv[1], sys.argv[2]
print("ready", flush=True)
with open_store(location) as store:
    i = 0
    while True:
        i += 1
        call = {"type": "tool_use", "id": f"k{i}", "name": "ls", "input": {"i": i}}
        store.append_message(conv, "assistant", [{"type": "text", "text": f"m{i}"}, call])
        result = {"type": "tool_result", "tool_use_id": f"k{i}", "content": "out " * 300}
        store.append_message(conv, "user", [result])
        m = store.start_message(conv, "assistant")
        store.append_block(conv, m, {"type": "text", "text": "streamed"})
        store.end_message(conv, m)
"""


def test_a_writer_killed_mid_append_leaves_the_model_at_the_logs_version(tmp_path: Path) -> None:
    """SIGKILL at random moments of a writer appending (whole messages and block by block):
    the stored model is always the fold of the log up to its version, written in the append's
    own transaction, and behind the log only by the message streaming when the writer died;
    the next writer folds those events from the log and goes on extending it."""
    location = tmp_path / "s.db"
    with open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "go"}])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for round_ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(location), str(conv)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(0.4 + 0.3 * round_)
        child.send_signal(signal.SIGKILL)
        child.wait()
        with open_store(location, replay_cache_bytes=0) as store:
            events = store.events(conv)
            assert_kept(location, conv, events)
            store.append_message(conv, "user", [{"type": "text", "text": f"after {round_}"}])
            events = store.events(conv)
            assert stored_model(location, conv) == folded_model(conv, events)
    with closing(sqlite3.connect(location)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def record_turns(store: Store, conversation: UUID, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        call = {"type": "tool_use", "id": f"c{i}", "name": "ls", "input": {"i": i}}
        store.append_message(conversation, "assistant", [{"type": "text", "text": f"m{i}"}, call])
        result = {"type": "tool_result", "tool_use_id": f"c{i}", "content": f"out {i} " * 20}
        store.append_message(conversation, "user", [result])


def test_a_model_lagging_the_log_is_left_to_readers_then_kept_again(tmp_path: Path) -> None:
    """Appends by a store that leaves the model to readers make it lag; a keeping writer does
    not extend a lagging model (it cannot know the events between), a reader catches it up and
    stores it, and from then on the writer keeps it current again."""
    location = tmp_path / "s.db"
    with open_store(location, replay_model="on_read") as store:
        conv = store.new_conversation()
        record_turns(store, conv, 3)
    assert stored_model(location, conv) == (None,)  # left to readers: nothing stored
    with open_store(location) as store:
        record_turns(store, conv, 1, start=3)
        assert stored_model(location, conv) == (None,)  # a history before it: not started
        store._replays.write_lag = 1
        assert store.replay(conv) == replay(store.events(conv))  # the reader stores it
        record_turns(store, conv, 2, start=4)
        events = store.events(conv)
        assert stored_model(location, conv) == folded_model(conv, events)


def test_a_row_edited_under_a_kept_model_is_never_extended_into_a_trusted_one(
    tmp_path: Path,
) -> None:
    """A row edited by hand fails the digest when a writer reads the model to extend it (a
    store with no tail of it): the writer drops the head rather than extend it, replay folds
    the log, and the next reader stores the model anew."""
    location = tmp_path / "s.db"
    with open_store(location) as store:
        conv = store.new_conversation()
        record_turns(store, conv, 2)
    with closing(sqlite3.connect(location)) as conn, conn:
        conn.execute(
            f"UPDATE {MESSAGES} SET plan = 'aenothing to see' "  # noqa: S608
            "WHERE originator_id = ? AND position = 0",
            (conv.hex,),
        )
    with open_store(location, replay_cache_bytes=0) as store:
        record_turns(store, conv, 1, start=2)
        assert stored_model(location, conv) == (None,)  # dropped, not extended
        store._replays.write_lag = 1
        events = store.events(conv)
        assert store.replay(conv) == replay(events)
        assert stored_model(location, conv) == folded_model(conv, events)
        assert "nothing to see" not in json.dumps(store.replay(conv))


def as_the_earlier_digest_wrote_it(location: Path, conversation: UUID) -> None:
    """Rewrite the stored head as convstore wrote it before the sum of row MACs: no ``m`` or
    ``s``, and :func:`model_digest` over every row's :func:`row_digest`."""
    version, head, rows = stored_model(location, conversation)
    loaded = json.loads(head)
    facts = {"c": loaded["c"], "r": loaded["r"], "v": loaded["v"]}
    encoded = json.dumps(facts, ensure_ascii=False, separators=(",", ":"))
    digests = [row_digest(message_id, plan) for message_id, plan in rows]
    digest = model_digest(conversation.hex, version, loaded["n"], encoded, digests, b"")
    old = json.dumps({**facts, "n": loaded["n"], "d": digest}, separators=(",", ":"))
    with closing(sqlite3.connect(location)) as conn, conn:
        conn.execute(
            f"UPDATE {HEADS} SET head = ? WHERE originator_id = ?",  # noqa: S608
            (old, conversation.hex),
        )


def test_a_model_stored_under_the_earlier_digest_is_read_then_stored_anew(
    tmp_path: Path,
) -> None:
    """A head of the digest before the sum of row MACs is read and trusted as it was (verify
    finds it clean); a writer leaves it alone; the next replay stores it in the new form,
    which writers then extend."""
    location = tmp_path / "s.db"
    with open_store(location) as store:
        conv = store.new_conversation()
        record_turns(store, conv, 2)
    as_the_earlier_digest_wrote_it(location, conv)
    earlier = stored_model(location, conv)
    assert "s" not in json.loads(earlier[1])
    with open_store(location, replay_cache_bytes=0) as store:
        assert store.replay_model_differences(conv) == []
        state = ReplayState.decode(conv.hex, earlier[0], earlier[1], earlier[2])
        assert state.legacy
        edited = [(earlier[2][0][0], "aeedited"), *earlier[2][1:]]
        with pytest.raises(ValueError, match="does not match its digest"):
            ReplayState.decode(conv.hex, earlier[0], earlier[1], edited)
        record_turns(store, conv, 1, start=2)
        assert stored_model(location, conv) == earlier  # not extended
        events = store.events(conv)
        assert store.replay(conv) == replay(events)  # stores it anew, whole
        assert stored_model(location, conv) == folded_model(conv, events)
        record_turns(store, conv, 1, start=3)
        assert stored_model(location, conv) == folded_model(conv, store.events(conv))


def test_replay_model_on_read_and_a_wrong_value(tmp_path: Path) -> None:
    """``"on_read"`` appends without the model (readers store it); any other value than True,
    False or "on_read" is refused in one line."""
    location = tmp_path / "s.db"
    with open_store(location, replay_model="on_read") as store:
        conv = store.new_conversation()
        record_turns(store, conv, 2)
        assert stored_model(location, conv) == (None,)
        store._replays.write_lag = 1
        assert store.replay(conv) == replay(store.events(conv))
        assert stored_model(location, conv) == folded_model(conv, store.events(conv))
    with pytest.raises(InvalidInput, match=r"^replay_model must be True, False or 'on_read'"):
        open_store(location, replay_model="writer")  # type: ignore[arg-type]


def test_a_streaming_message_is_written_when_it_closes_and_read_meanwhile(
    tmp_path: Path,
) -> None:
    """Block by block, the writer holds the open message's row until the message closes (or
    DEFER_LIMIT of its events wait): the stored model stays the fold of the log up to the
    last write, a fresh reader meanwhile folds the few events after it and sees every block,
    and the closing append writes the row and the head at the log's version."""
    location = tmp_path / "s.db"
    with open_store(location) as store:
        conv = store.new_conversation()
        record_turns(store, conv, 1)
        written = assert_kept(location, conv, store.events(conv))
        message = store.start_message(conv, "assistant")
        for i in range(3):
            store.append_block(conv, message, {"type": "text", "text": f"part {i}"})
            assert assert_kept(location, conv, store.events(conv)) == written
            with open_store(location, replay_cache_bytes=0) as fresh:
                replayed = fresh.replay(conv)
                assert replayed == replay(store.events(conv))
                assert f"part {i}" in replayed["messages"][-1]["content"]
        store.end_message(conv, message)
        events = store.events(conv)
        assert stored_model(location, conv) == folded_model(conv, events)
        long = store.start_message(conv, "assistant")
        versions = set()
        for i in range(2 * DEFER_LIMIT):
            store.append_block(conv, long, {"type": "text", "text": f"chunk {i}"})
            versions.add(assert_kept(location, conv, store.events(conv)))
        assert len(versions) >= 2  # written along the way, not only when it closes


def test_a_writer_folds_what_another_held_of_a_streaming_message(tmp_path: Path) -> None:
    """A writer killed (or still streaming) holds a message's blocks unwritten; the next
    append by another store folds them from the log inside its own transaction, so the model
    is at the log's version again, and the first writer's next append reads it anew."""
    location = tmp_path / "s.db"
    with open_store(location) as first, open_store(location) as second:
        conv = first.new_conversation()
        record_turns(first, conv, 1)
        message = first.start_message(conv, "assistant")
        first.append_block(conv, message, {"type": "text", "text": "held"})
        held = assert_kept(location, conv, first.events(conv))
        assert held < len(first.events(conv))
        second.append_message(conv, "user", [{"type": "text", "text": "meanwhile"}])
        events = second.events(conv)
        assert stored_model(location, conv) == folded_model(conv, events)
        first.append_block(conv, message, {"type": "text", "text": "more"})
        assert assert_kept(location, conv, first.events(conv)) > held
        first.end_message(conv, message)
        assert stored_model(location, conv) == folded_model(conv, first.events(conv))
