"""Store format 3's block events read like format 2's messages, in every fold.

:func:`~convstore.projections.format3.format3_events` rewrites a format-2 log (a start, its
blocks, an end) as format 3 records it (one :class:`~convstore.BlockRecorded` per block, the
first opening and the last closing its message). Every fold must read the two alike: replay in
every mode, the messages, the writer's rules (which ``verify`` applies), the listing and the
audit read model. Held over generated histories (interleaved streams, empty, interrupted and
open messages, compactions, rewinds and their undoing) and over the store 0.3.0 wrote
(``tests/fixtures/format2/``), whose recorded replays the rewritten log must give byte for
byte. That is the differential test the format change stands on (docs/design/format-3.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convstore
from convstore.audit.db import AuditDatabase
from convstore.domain.blocks import TextBlock
from convstore.domain.conversation import Conversation
from convstore.domain.events import (
    EVENT_ADAPTER,
    BlockAppended,
    BlockRecorded,
    Event,
    MessageEnded,
    MessageStarted,
)
from convstore.engine.model import folded
from convstore.engine.plan import SHAPES, replay
from convstore.infrastructure.common.mapper import compact_state, decode_compact, topic_of
from convstore.projections.format3 import format3_events, format3_stream
from convstore.projections.listing import listing_changes
from convstore.projections.messages import collect_history
from tests.conftest import format2_store_file, one_error_line
from tests.strategies import HistoryBuilder, histories
from tests.test_format2_fixture import _recorded

FIXTURE = Path(__file__).parent / "fixtures" / "format2"
SCRIPT = Path(sys.executable).parent / "convstore"
KEEP = st.integers(0, 3)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _replays(events: list[Event], keep: int) -> list[Any]:
    return [
        replay(events, shape=shape, vision=vision, full=full, keep_tool_results=kept)
        for shape in SHAPES
        for vision in (False, True)
        for full in (False, True)
        for kept in (None, keep)
    ]


@SETTINGS
@given(histories(), KEEP)
def test_every_replay_of_the_rewritten_log_is_the_same(events: list[Event], keep: int) -> None:
    rewritten = format3_events(events)
    assert [e.originator_version for e in rewritten] == list(range(1, len(rewritten) + 1))
    assert not any(isinstance(e, BlockAppended) for e in rewritten)
    blocks = [e.block for e in events if isinstance(e, BlockAppended)]
    assert [e.block for e in rewritten if isinstance(e, BlockRecorded)] == blocks
    assert _replays(rewritten, keep) == _replays(events, keep)

    def engine(log: list[Event]) -> tuple[list[Any], Any, list[Any]]:
        state = folded(log)[0]
        messages = [(m.message_id, m.role, m.status, m.reason, m.parts) for m in state.messages]
        return messages, state.compactions, list(state.rewinds.values())

    # The engine's own state, not only what it renders: a message's status and parts (an
    # image's part names the version it is read back from, which the rewrite renumbers).
    old, new = engine(events), engine(rewritten)
    assert [m[:4] for m in new[0]] == [m[:4] for m in old[0]]
    assert [len(m[4]) for m in new[0]] == [len(m[4]) for m in old[0]]
    assert new[1:] == old[1:]


@SETTINGS
@given(histories())
def test_the_messages_and_the_writers_rules_are_the_same(events: list[Event]) -> None:
    rewritten = format3_events(events)
    before, after = collect_history(events), collect_history(rewritten)

    def shown(history: Any) -> list[Any]:
        return [
            (m.message_id, m.role, m.blocks, m.status, m.interrupt_reason, m.withdrawn, m.meta)
            for m in history.messages
        ]

    assert shown(after) == shown(before)
    assert [(c.summary, c.through) for c in after.compactions] == [
        (c.summary, c.through) for c in before.compactions
    ]
    # The writer's state, folded with the rules verify applies: every rewritten event is
    # one the writer could have decided, and the state it leaves is the same.
    writer = Conversation(id=rewritten[0].originator_id)
    for event in rewritten:
        writer.recheck(event)
        writer.apply(event)
    old = Conversation.from_events(events[0].originator_id, events)
    assert writer.messages == old.messages
    assert writer.tool_names == old.tool_names
    assert writer.first_user == old.first_user
    assert list(writer.rewinds.values()) == list(old.rewinds.values())


@SETTINGS
@given(histories())
def test_the_listing_and_the_stored_states_are_the_same(events: list[Event]) -> None:
    rewritten = format3_events(events)
    [before] = listing_changes(events)
    [after] = listing_changes(rewritten)
    assert (after.first_user, after.texts, after.title) == (
        before.first_user,
        before.texts,
        before.title,
    )
    for event in rewritten:
        assert decode_compact(compact_state(event)) == event


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_the_audit_read_model_is_the_same(events: list[Event]) -> None:
    import tempfile  # noqa: PLC0415 - a fresh folder per example, not per test

    def facts(log: list[Event]) -> tuple[list[Any], list[Any]]:
        with tempfile.TemporaryDirectory() as folder:
            audit = AuditDatabase(Path(folder) / "audit.db", "test", store_id="test")
            try:
                audit.apply(list(enumerate(log, start=1)), after=0)
                messages = audit.db.execute(
                    "SELECT id, position, role, status, interrupt_reason, blocks, withdrawn "
                    "FROM messages ORDER BY position"
                ).fetchall()
                blocks = audit.db.execute(
                    "SELECT message_id, idx, kind, tool_name, text, byte_size FROM blocks "
                    "ORDER BY version"
                ).fetchall()
            finally:
                audit.close()
        return messages, blocks

    assert facts(format3_events(events)) == facts(events)


@SETTINGS
@given(st.lists(histories(max_messages=4), min_size=1, max_size=3), st.randoms())
def test_a_log_of_interleaved_conversations_is_each_ones_rewrite(
    logs: list[list[Event]], rand: Any
) -> None:
    """A load reads the conversations interleaved: each one's events come out of the stream
    as its own rewrite gives them, whatever the interleaving."""
    logs = [
        log
        for n, log in enumerate(logs)
        if log[0].originator_id not in {other[0].originator_id for other in logs[:n]}
    ]
    queues = [list(log) for log in logs]
    interleaved: list[Event] = []
    while any(queues):
        queue = rand.choice([q for q in queues if q])
        interleaved.append(queue.pop(0))
    out = list(format3_stream(interleaved))
    assert len(out) == sum(len(format3_events(log)) for log in logs)
    for log in logs:
        mine = [e for e in out if e.originator_id == log[0].originator_id]
        assert mine == format3_events(log)


def test_a_whole_message_is_one_event_a_block() -> None:
    builder = HistoryBuilder(UUID(int=1))
    builder.message("user", [TextBlock(text="one"), TextBlock(text="two")])
    builder.message("assistant", [TextBlock(text="three")])
    rewritten = format3_events(builder.events)
    assert [type(e).__name__ for e in rewritten] == [
        "ConversationStarted",
        "BlockRecorded",
        "BlockRecorded",
        "BlockRecorded",
    ]
    first, second, third = rewritten[1:]
    assert isinstance(first, BlockRecorded)
    assert isinstance(second, BlockRecorded)
    assert isinstance(third, BlockRecorded)
    assert (first.role, first.index, first.closes) == ("user", 0, None)
    assert (second.role, second.index, second.closes) == ("user", 1, True)
    assert (third.role, third.index, third.closes) == ("assistant", 0, True)


def test_a_start_or_end_another_event_came_between_stays_its_own_event() -> None:
    builder = HistoryBuilder(UUID(int=2))
    streamed = builder.start("assistant")
    meanwhile = builder.message("user", [TextBlock(text="meanwhile")])
    builder.append(streamed, TextBlock(text="late"))
    empty = builder.start("user")
    builder.end(empty)
    builder.end(streamed)
    rewritten = format3_events(builder.events)
    kinds = [(type(e).__name__, getattr(e, "message_id", None)) for e in rewritten]
    assert kinds == [
        ("ConversationStarted", None),
        ("MessageStarted", streamed),
        ("BlockRecorded", meanwhile),
        ("BlockRecorded", streamed),
        ("MessageStarted", empty),
        ("MessageEnded", empty),
        ("MessageEnded", streamed),
    ]
    assert collect_history(rewritten).messages[0].message_id == streamed


def test_an_undone_rewind_names_the_rewinds_new_version() -> None:
    builder = HistoryBuilder(UUID(int=3))
    first = builder.message("user", [TextBlock(text="a")])
    builder.message("assistant", [TextBlock(text="b")])
    builder.rewind(first)
    rewind_version = builder.events[-1].originator_version
    builder.undo_rewind(rewind_version)
    rewritten = format3_events(builder.events)
    rewound, undone = rewritten[-2:]
    assert rewound.type == "rewound"
    assert undone.type == "rewind_undone"
    assert undone.rewind == rewound.originator_version < rewind_version


def test_the_0_3_0_fixture_rewritten_replays_as_recorded() -> None:
    """The store 0.3.0 wrote, read from its dump, rewritten per conversation: every replay
    recorded from it then is what the rewritten log gives now, byte for byte."""
    lines = (FIXTURE / "dump.jsonl").read_bytes().splitlines()[1:-1]
    logs: dict[str, list[Event]] = defaultdict(list)
    for line in lines:
        record = json.loads(line)
        logs[record["conversation"]].append(EVENT_ADAPTER.validate_python(record["event"]))
    recorded = _recorded()
    assert sorted(logs) == sorted(recorded)
    before = after = 0
    for conversation, events in logs.items():
        rewritten = format3_events(events)
        before, after = before + len(events), after + len(rewritten)
        assert not any(isinstance(e, BlockAppended) for e in rewritten)
        for entry in recorded[conversation]:
            mode = entry["mode"]
            got = replay(rewritten, shape=mode["shape"], vision=mode["vision"], full=mode["full"])
            assert json.loads(json.dumps(got)) == entry["request"], (conversation, mode)
    # Of its 78 events, every start and end folds into a block: each came right before its
    # message's first block or right after its last.
    starts = sum(isinstance(e, MessageStarted) for events in logs.values() for e in events)
    ends = sum(isinstance(e, MessageEnded) for events in logs.values() for e in events)
    assert (before, after) == (78, 78 - starts - ends)


@pytest.mark.slow
def test_a_store_of_an_earlier_format_refuses_block_events(tmp_path: Path) -> None:
    """A format-2 store is shared with 0.3.x, which cannot read a block event: a dump that
    holds them is refused in one line, and nothing is written."""
    lines = (FIXTURE / "dump.jsonl").read_bytes().splitlines()
    header, events = lines[0], [json.loads(line) for line in lines[1:-1]]
    logs: dict[str, list[Event]] = defaultdict(list)
    for record in events:
        logs[record["conversation"]].append(EVENT_ADAPTER.validate_python(record["event"]))
    rewritten = [e for log in logs.values() for e in format3_events(log)]
    body = [
        json.dumps(
            {
                "conversation": str(e.originator_id),
                "version": e.originator_version,
                "topic": topic_of(type(e)),
                "event": json.loads(e.model_dump_json()),
            }
        ).encode()
        for e in rewritten
    ]
    dump = tmp_path / "format3.jsonl"
    closing = json.dumps({"end": {"events": len(body)}}).encode()
    dump.write_bytes(b"\n".join([header, *body, closing]) + b"\n")
    target = format2_store_file(tmp_path / "old.db")
    done = subprocess.run(
        [str(SCRIPT), "--db", str(target), "load", str(dump)],
        capture_output=True,
        text=True,
        check=False,
    )
    one_error_line(done.returncode, done.stdout, done.stderr, "a store of format 3")
    with convstore.open_store(str(target)) as store:
        assert store.conversations() == []


@pytest.mark.slow
def test_a_store_made_by_load_or_import_is_of_this_versions_format(tmp_path: Path) -> None:
    """A new SQLite file filled whole (``load``, ``import``) is a new store like any other:
    format 3, not taken for an earlier version's unmarked store (it was marked format 1)."""
    source = tmp_path / "source.db"
    with convstore.open_store(str(source)) as store:
        conv = store.new_conversation(title="moved")
        store.append_message(conv, "user", [{"type": "text", "text": "hello"}])
    dump = tmp_path / "source.jsonl"
    for args in (["--db", str(source), "dump", "--output", str(dump)],):
        assert subprocess.run([str(SCRIPT), *args], check=False).returncode == 0
    target = tmp_path / "loaded.db"
    done = subprocess.run(
        [str(SCRIPT), "--db", str(target), "load", str(dump)], capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr
    with convstore.open_store(str(target)) as store:
        assert store.store_format == 3
        assert [type(e).__name__ for e in store.events(conv)] == [
            "ConversationStarted",
            "BlockRecorded",
        ]


@pytest.mark.parametrize("store_format", [3, 2])
def test_a_fork_copies_every_kind_of_message_in_the_stores_format(
    tmp_path: Path, store_format: int
) -> None:
    """Empty messages ended, interrupted or left open, an interrupted one with a block and a
    whole one: the fork holds each as the parent does, in the store's own format."""
    path = tmp_path / "fork.db"
    if store_format == 2:
        format2_store_file(path)
    with convstore.open_store(str(path)) as store:
        assert store.store_format == store_format
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "q"}])
        ended = store.start_message(conv, "assistant")
        store.end_message(conv, ended)
        stopped = store.start_message(conv, "assistant")
        store.interrupt_message(conv, stopped, reason="stop")
        cut = store.start_message(conv, "assistant")
        store.append_block(conv, cut, {"type": "text", "text": "x"})
        store.interrupt_message(conv, cut, reason="cut")
        still_open = store.start_message(conv, "user")
        fork = store.fork(conv, at=still_open)

        def shown(c: UUID) -> list[tuple[str, str, str | None, int]]:
            return [
                (m.role, m.status, m.interrupt_reason, len(m.blocks)) for m in store.messages(c)
            ]

        assert shown(fork) == shown(conv)
        assert store.replay(fork) == store.replay(conv)
        kinds = {e.type for e in store.events(fork)}
        assert ("block_recorded" in kinds) == (store_format == 3)
        assert ("block_appended" in kinds) == (store_format == 2)
