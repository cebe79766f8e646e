"""The audit read model: batching-independent, exactly once under crashes, swapped atomically.

Everything runs against real SQLite files in ``tmp_path`` (and the real PostgreSQL server for
the one test that needs it). Read models are compared table by table, row for row, including
the full-text index's terms, so "equal" here means every fact the read model holds.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import Store, open_store
from convstore.app.demo import record_demo, tiny_png
from convstore.app.projector import audit_path, catch_up, default_audit_path, follow, rebuild
from convstore.audit.db import TABLES, AuditDatabase
from convstore.domain.errors import ProjectionConflict
from convstore.domain.events import Event
from tests.formats import events_of
from tests.strategies import histories

Row = tuple[Any, ...]
Snapshot = dict[str, list[Row]]

SOURCE = "test-source"
"""The source name the property tests give their read models."""

FTS_TABLE = "blocks_fts"


# -- comparing read models ---------------------------------------------------------------------


def _table_names(conn: sqlite3.Connection) -> list[str]:
    """Every ordinary table, without SQLite's own and the full-text index's shadow tables."""
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND name NOT LIKE ? ORDER BY name",
        [f"{FTS_TABLE}%"],
    ).fetchall()
    return [str(row[0]) for row in rows]


def _all_rows(conn: sqlite3.Connection, table: str) -> list[Row]:
    """``SELECT rowid, * FROM table ORDER BY`` every column."""
    columns = ["rowid", *(f'"{row[1]}"' for row in conn.execute(f'PRAGMA table_info("{table}")'))]
    listed = ", ".join(columns)
    query = f'SELECT {listed} FROM "{table}" ORDER BY {listed}'  # noqa: S608 - names from the schema
    return [tuple(row) for row in conn.execute(query)]


def snapshot(path: Path) -> Snapshot:
    """Every row of every table of the read model at ``path``, and its full-text index terms."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        tables = _table_names(conn)
        snap = {table: _all_rows(conn, table) for table in tables}
        snap[FTS_TABLE] = [
            tuple(row)
            for row in conn.execute("SELECT rowid, text FROM blocks_fts ORDER BY rowid, text")
        ]
        snap[f"{FTS_TABLE}_docsize"] = [
            tuple(row) for row in conn.execute("SELECT id, sz FROM blocks_fts_docsize ORDER BY 1")
        ]
        # The inverted index itself, term by term: independent of how it was split into
        # segments (which does depend on how many transactions wrote it).
        conn.execute(
            "CREATE VIRTUAL TABLE temp.terms USING fts5vocab('main', 'blocks_fts', 'instance')"
        )
        snap["fts terms"] = [
            tuple(row) for row in conn.execute("SELECT * FROM temp.terms ORDER BY 1, 2, 3, 4")
        ]
    finally:
        conn.close()
    return snap


def assert_same_read_model(actual: Path, expected: Path) -> None:
    """The two read models hold exactly the same rows, table by table."""
    left, right = snapshot(actual), snapshot(expected)
    assert sorted(left) == sorted(right)
    for table, rows in right.items():
        assert left[table] == rows, f"table {table} differs"


def fts_integrity_check(path: Path) -> None:
    """FTS5's own check that the index matches the ``blocks`` rows (raises if not)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("INSERT INTO blocks_fts(blocks_fts) VALUES ('integrity-check')")
    finally:
        conn.close()


def files_under(root: Path) -> set[Path]:
    """Every file below ``root``."""
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A SQLite store in tmp_path."""
    with open_store(tmp_path / "store.db") as opened:
        yield opened


def orphan_result(store: Store, conversation: UUID) -> None:
    """A tool result whose call was never recorded, with no name given."""
    store.append_message(
        conversation,
        "user",
        [{"type": "tool_result", "tool_use_id": "call_ghost", "content": "from nowhere"}],
    )


# -- 1. any split into batches gives the same read model ---------------------------------------


@st.composite
def logs(draw: st.DrawFn) -> list[tuple[int, Event]]:
    """Several generated conversations interleaved, at strictly increasing log positions."""
    conversations = draw(
        st.lists(
            histories(max_messages=6, max_blocks=4),
            min_size=1,
            max_size=3,
            unique_by=lambda events: events[0].originator_id,
        )
    )
    order = draw(st.permutations([i for i, events in enumerate(conversations) for _ in events]))
    streams = [iter(events) for events in conversations]
    interleaved = [next(streams[i]) for i in order]
    gaps = draw(st.lists(st.integers(1, 3), min_size=len(interleaved), max_size=len(interleaved)))
    return list(zip(itertools.accumulate(gaps), interleaved, strict=True))


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(log=logs(), data=st.data())
def test_any_split_into_batches_gives_the_same_rows(
    log: list[tuple[int, Event]], data: st.DataObject
) -> None:
    """Applying a log in any batches (empty ones too) equals applying it in one batch."""
    cuts = sorted(data.draw(st.lists(st.integers(0, len(log)), max_size=8), label="cuts"))
    bounds = [0, *cuts, len(log)]
    batches = [log[start:end] for start, end in itertools.pairwise(bounds)]
    with tempfile.TemporaryDirectory() as tmp:
        whole_path, split_path = Path(tmp) / "whole.db", Path(tmp) / "split.db"
        whole = AuditDatabase(whole_path, SOURCE, store_id="")
        assert whole.apply(log, after=0) == log[-1][0]
        whole.close()

        split = AuditDatabase(split_path, SOURCE, store_id="")
        position = 0
        for batch in batches:
            new_position = split.apply(batch, after=position)
            assert new_position == (batch[-1][0] if batch else position)
            assert split.position() == new_position
            position = new_position
        split.close()

        assert position == log[-1][0]
        fts_integrity_check(split_path)
        assert_same_read_model(split_path, whole_path)


# -- 2. through a real store ------------------------------------------------------------------


def test_catch_up_equals_rebuild_and_records_the_demo_facts(store: Store, tmp_path: Path) -> None:
    """Catch-up equals a rebuild; tool outcomes, orphan results and image facts are recorded."""
    conversation = record_demo(store)
    orphan_result(store, conversation)
    path = audit_path(store, tmp_path / "audit.db")
    audit = AuditDatabase(path, store.location, store_id=store.identity)
    try:
        assert catch_up(store, audit, batch_size=7) == store.log_position()
        assert catch_up(store, audit) == 0
        assert audit.position() == store.log_position()

        calls = {row["call_id"]: row for row in audit.query("SELECT * FROM tool_calls")}
        images = audit.query("SELECT * FROM images ORDER BY version")
    finally:
        audit.close()

    assert {call: row["outcome"] for call, row in calls.items()} == {
        "call_1": "ok",
        "call_2": "error",
        "call_3": "missing",
        "call_4": "ok",
        "call_ghost": "ok",
    }
    killed = calls["call_3"]
    assert (killed["name"], killed["call_found"], killed["results"]) == ("run_tests", 1, 0)
    assert killed["result_at"] is None
    assert killed["seconds_to_result"] is None
    assert calls["call_2"]["name"] == "git_diff"
    assert calls["call_2"]["results"] == 1
    assert calls["call_1"]["seconds_to_result"] is not None
    assert calls["call_1"]["seconds_to_result"] >= 0
    ghost = calls["call_ghost"]
    assert (ghost["call_found"], ghost["name"], ghost["results"]) == (0, "unknown", 1)
    assert ghost["called_at"] is None
    assert ghost["result_size"] == len(b"from nowhere")

    png = tiny_png()
    assert len(images) == 2
    for image in images:
        assert image["sha256"] == hashlib.sha256(png).hexdigest()
        assert image["byte_size"] == len(png)
        assert (image["media_type"], image["width"], image["height"]) == ("image/png", 4, 3)
    assert [image["part"] for image in images] == [None, 1]

    rebuilt = tmp_path / "rebuilt.db"
    report = rebuild(store, rebuilt)
    assert report.events == store.log_position()
    assert {"_meta", "_tracking", *TABLES} <= set(snapshot(rebuilt))
    assert_same_read_model(path, rebuilt)


def test_appends_after_a_catch_up_are_picked_up_next_time(store: Store, tmp_path: Path) -> None:
    """A catch-up applies exactly the events recorded since the last one, then equals a rebuild."""
    first = record_demo(store)
    path = tmp_path / "audit.db"
    audit = AuditDatabase(path, store.location, store_id=store.identity)
    try:
        assert catch_up(store, audit) == store.log_position()
        before = store.log_position()
        second = record_demo(store)
        orphan_result(store, first)
        store.end_message(second, store.start_message(second, "assistant"))
        assert catch_up(store, audit, batch_size=3) == store.log_position() - before
        assert catch_up(store, audit) == 0
        counts = audit.query("SELECT id, events FROM conversations")
    finally:
        audit.close()
    assert {row["id"]: row["events"] for row in counts} == {
        str(first): len(store.events(first)),
        str(second): len(store.events(second)),
    }
    rebuild(store, tmp_path / "rebuilt.db")
    assert_same_read_model(path, tmp_path / "rebuilt.db")


def test_the_default_audit_path_sits_beside_a_sqlite_store(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --audit the read model is NAME.audit.db beside the store, unless the env says."""
    assert default_audit_path(store) == (tmp_path / "store.audit.db").resolve()
    assert audit_path(store) == default_audit_path(store)
    monkeypatch.setenv("CONVSTORE_AUDIT_DB", str(tmp_path / "env.db"))
    assert audit_path(store) == tmp_path / "env.db"
    assert audit_path(store, tmp_path / "given.db") == tmp_path / "given.db"


def test_a_read_model_of_another_store_is_refused(tmp_path: Path) -> None:
    """Opening a read model built from another store fails rather than mixing two logs."""
    with open_store(tmp_path / "one.db") as one, open_store(tmp_path / "two.db") as two:
        record_demo(one)
        AuditDatabase(tmp_path / "audit.db", one.location, store_id=one.identity).close()
        with pytest.raises(Exception, match="was built from"):
            AuditDatabase(tmp_path / "audit.db", two.location, store_id=two.identity)


# -- 3. exactly once under crashes, and racing projectors -------------------------------------

CRASH_SEEDS = (1, 2, 3, 4, 5)

CHILD = """
import sys
from pathlib import Path

from convstore import open_store
from convstore.app.projector import catch_up, open_audit

store = open_store(sys.argv[1], create=False)
audit = open_audit(store, Path(sys.argv[2]))
told = []

def progress(count):
    if not told:
        told.append(count)
        print("applying", flush=True)

catch_up(store, audit, batch_size=1, progress=progress)
print("done", flush=True)
"""


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, int]:
    """A SQLite store of about 3,000 events, and a from-scratch rebuild of its read model."""
    root = tmp_path_factory.mktemp("big")
    location = root / "big.db"
    with open_store(location) as store:
        for n in range(60):
            conv = store.new_conversation(title=f"conversation {n}")
            blocks: list[dict[str, Any]] = [
                {"type": "text", "text": f"step {i} of conversation {n}"} for i in range(40)
            ]
            blocks += [
                {"type": "reasoning", "text": f"thinking about {n}"},
                {"type": "tool_use", "id": f"c{n}", "name": "grep", "input": {"n": n}},
            ]
            store.append_message(conv, "assistant", blocks)
            store.append_message(
                conv,
                "user",
                [
                    {"type": "tool_result", "tool_use_id": f"c{n}", "content": f"out {n}"},
                    {"type": "image", "media_type": "image/png", "data": _png_b64()},
                ],
            )
        total = store.log_position()
        expected = root / "expected.audit.db"
        assert rebuild(store, expected).events == total
    return location, expected, total


def _png_b64() -> str:
    return base64.b64encode(tiny_png()).decode()


@pytest.mark.slow
def test_a_killed_projector_loses_nothing_and_counts_nothing_twice(
    big_store: tuple[Path, Path, int], tmp_path: Path
) -> None:
    """SIGKILL at a seeded random moment: the file opens, resumes, and equals a rebuild."""
    location, expected, total = big_store
    landed_mid_way = []
    for seed in CRASH_SEEDS:
        path = tmp_path / f"killed-{seed}.audit.db"
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(location), str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "applying\n", child.stderr
            delay = random.Random(seed).uniform(0.02, 0.6)  # noqa: S311 - a seeded test delay
            try:
                child.wait(timeout=delay)
            except subprocess.TimeoutExpired:
                os.kill(child.pid, signal.SIGKILL)
            assert child.wait(timeout=30) in (-signal.SIGKILL, 0)
        finally:
            if child.poll() is None:
                child.kill()
            child.communicate()

        with open_store(location, create=False) as store:
            audit = AuditDatabase(path, store.location, store_id=store.identity)
            try:
                position = audit.position()
                assert 0 < position <= store.log_position() == total
                landed_mid_way.append(position < total)
                assert catch_up(store, audit) == total - position
                assert audit.position() == total
            finally:
                audit.close()
        fts_integrity_check(path)
        assert_same_read_model(path, expected)
    assert any(landed_mid_way), "every kill came after the projector had finished"


def test_a_stale_apply_raises_projection_conflict(store: Store, tmp_path: Path) -> None:
    """Two handles on one file: the second to apply the same batch gets ProjectionConflict."""
    record_demo(store)
    path = tmp_path / "audit.db"
    first, second = (
        AuditDatabase(path, store.location, store_id=store.identity),
        AuditDatabase(path, store.location, store_id=store.identity),
    )
    try:
        batch = store.notifications(0, 5)
        assert first.apply(batch, after=0) == batch[-1][0]
        before = snapshot(path)
        with pytest.raises(ProjectionConflict):
            second.apply(batch, after=0)
        assert snapshot(path) == before
    finally:
        first.close()
        second.close()


def test_a_stale_apply_changes_nothing(store: Store, tmp_path: Path) -> None:
    """A batch applied after a position the read model has left is refused and rolled back."""
    conversation = record_demo(store)
    path = tmp_path / "audit.db"
    first, second = (
        AuditDatabase(path, store.location, store_id=store.identity),
        AuditDatabase(path, store.location, store_id=store.identity),
    )
    try:
        turn = store.start_message(conversation, "assistant")
        assert catch_up(store, first) == store.log_position()
        # Events that only update rows: the stale apply reaches the position check.
        after = store.log_position()
        store.end_message(conversation, turn)
        updates = store.notifications(after, 10)
        assert first.apply(updates, after=after) == store.log_position()
        before = snapshot(path)
        with pytest.raises(ProjectionConflict):
            second.apply(updates, after=after)
        assert snapshot(path) == before
        # Events that insert rows: refused too (whatever the error), and nothing changes.
        with pytest.raises((ProjectionConflict, sqlite3.IntegrityError)):
            second.apply(store.notifications(0, 5), after=0)
        assert snapshot(path) == before
        assert second.position() == first.position() == store.log_position()
    finally:
        first.close()
        second.close()


def test_catch_up_carries_on_when_another_projector_moves_first(
    store: Store, tmp_path: Path
) -> None:
    """Two projectors on one file: the one that lost the race resumes from the winner's work."""
    record_demo(store)
    record_demo(store)
    path = tmp_path / "audit.db"
    slow, fast = (
        AuditDatabase(path, store.location, store_id=store.identity),
        AuditDatabase(path, store.location, store_id=store.identity),
    )
    try:

        def let_the_other_run(_: int) -> None:
            catch_up(store, fast)

        catch_up(store, slow, batch_size=10, progress=let_the_other_run)
        assert slow.position() == store.log_position()
    finally:
        slow.close()
        fast.close()
    rebuild(store, tmp_path / "rebuilt.db")
    assert_same_read_model(path, tmp_path / "rebuilt.db")


# -- 4. rebuild swaps atomically; follow reopens ----------------------------------------------


def test_rebuild_swaps_in_a_new_file_under_open_readers(store: Store, tmp_path: Path) -> None:
    """A reader opened before a rebuild keeps the old file; a new open sees the new one."""
    record_demo(store)
    path = tmp_path / "audit.db"
    audit = AuditDatabase(path, store.location, store_id=store.identity)
    catch_up(store, audit)
    audit.close()
    old_position = store.log_position()
    old_inode = path.stat().st_ino

    count = "SELECT position FROM _tracking"
    reader = sqlite3.connect(path)
    try:
        assert reader.execute(count).fetchone() == (old_position,)
        record_demo(store)
        report = rebuild(store, path)
        assert report.events == store.log_position() > old_position
        assert reader.execute(count).fetchone() == (old_position,)
        assert reader.execute("SELECT count(*) FROM conversations").fetchone() == (1,)
    finally:
        reader.close()

    assert path.stat().st_ino != old_inode
    fresh = sqlite3.connect(path)
    try:
        assert fresh.execute(count).fetchone() == (store.log_position(),)
        assert fresh.execute("SELECT count(*) FROM conversations").fetchone() == (2,)
    finally:
        fresh.close()
    assert not [p for p in tmp_path.iterdir() if ".rebuild-" in p.name]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("audit")) == ["audit.db"]


def test_follow_picks_up_appends_and_reopens_after_a_rebuild(store: Store, tmp_path: Path) -> None:
    """follow catches up appends made meanwhile and writes into the file a rebuild swapped in."""
    first = record_demo(store)
    path = tmp_path / "audit.db"
    polls = 0
    seen: list[int] = []
    inodes: list[int] = []

    def position_in_file() -> int:
        return int(snapshot(path)["_tracking"][0][2])

    def should_stop() -> bool:
        nonlocal polls
        polls += 1
        if polls == 2:  # the first pass caught up the demo; now record more meanwhile
            assert position_in_file() == store.log_position()
            orphan_result(store, first)
        elif polls == 3:  # the follower caught that up; swap in a rebuild and append again
            assert position_in_file() == store.log_position()
            inodes.append(path.stat().st_ino)
            rebuild(store, path)
            inodes.append(path.stat().st_ino)
            record_demo(store)
        elif polls == 4:  # the follower must have reopened: the new file holds the new events
            assert position_in_file() == store.log_position()
            return True
        return False

    applied = follow(store, path, interval=0.01, on_catch_up=seen.append, should_stop=should_stop)
    assert polls == 4
    assert inodes[0] != inodes[1] == path.stat().st_ino
    orphan = events_of(store)  # the orphan result's message
    demo_events = len(store.events(first)) - orphan
    assert seen == [demo_events, orphan, demo_events]
    assert applied == sum(seen)
    rebuild(store, tmp_path / "rebuilt.db")
    assert_same_read_model(path, tmp_path / "rebuilt.db")


# -- 7. a PostgreSQL store, a local read model -------------------------------------------------


def test_postgres_store_with_a_local_read_model(postgres_url: str, tmp_path: Path) -> None:
    """Catch-up from PostgreSQL, appends by another Store, catch-up again: equals a rebuild."""
    path = tmp_path / "pg.audit.db"
    with open_store(postgres_url) as store:
        conversation = record_demo(store)
        audit = AuditDatabase(audit_path(store, path), store.location, store_id=store.identity)
        try:
            assert catch_up(store, audit) == len(store.events(conversation))
            with open_store(postgres_url) as other:
                orphan_result(other, conversation)
                second = record_demo(other)
                added = events_of(other) + len(other.events(second))
                expected_position = other.log_position()
            assert catch_up(store, audit, batch_size=4) == added
            assert audit.position() == expected_position
            outcomes = audit.query("SELECT outcome, count(*) AS n FROM tool_calls GROUP BY 1")
        finally:
            audit.close()
        assert {row["outcome"]: row["n"] for row in outcomes} == {
            "ok": 5,
            "error": 2,
            "missing": 2,
        }
        rebuild(store, tmp_path / "pg.rebuilt.db")
        assert default_audit_path(store).parent == tmp_path / "xdg" / "convstore"
    assert_same_read_model(path, tmp_path / "pg.rebuilt.db")
