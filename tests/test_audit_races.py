"""The audit file under real processes: killed projectors, rebuilds racing followers, long readers.

Every process here is the installed ``convstore`` command on real SQLite files: a ``project``
SIGKILLed mid-batch then a ``rebuild``; a ``project --follow`` while rebuilds swap the file
and while a long ``audit sql`` holds it past the busy timeout; one-shot ``project`` racing
``rebuild``. Each ends with the read model equal to a clean rebuild.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from convstore import open_store
from convstore.app.projector import rebuild
from tests.test_audit import assert_same_read_model, fts_integrity_check

SCRIPT = Path(sys.executable).parent / "convstore"

pytestmark = pytest.mark.slow


def add_events(db: Path, conversations: int, blocks: int = 60) -> None:
    """Record ``conversations`` conversations of one long assistant message each."""
    with open_store(db) as store:
        for n in range(conversations):
            conv = store.new_conversation(title=f"c{n}")
            message: list[dict[str, Any]] = [
                {"type": "text", "text": f"step {i} of {n} " + "word " * 40} for i in range(blocks)
            ]
            message.append({"type": "tool_use", "id": f"t{n}", "name": "grep", "input": {}})
            store.append_message(conv, "assistant", message)


def convstore(db: Path, audit: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), "--db", str(db), "--audit", str(audit), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def start(db: Path, audit: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(SCRIPT), "--db", str(db), "--audit", str(audit), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def position(audit: Path) -> int:
    with closing(sqlite3.connect(f"{audit.as_uri()}?mode=ro", uri=True, timeout=30)) as conn:
        return int(conn.execute("SELECT position FROM _tracking").fetchone()[0])


def log_position(db: Path) -> int:
    with open_store(db, create=False) as store:
        return store.log_position()


def integrity(audit: Path) -> str:
    with closing(sqlite3.connect(audit)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def clean_rebuild(db: Path, where: Path) -> Path:
    with open_store(db, create=False) as store:
        rebuild(store, where)
    return where


@pytest.fixture
def store_db(tmp_path: Path) -> Path:
    """A store of about 6,000 events: a `project` of it takes a good part of a second."""
    db = tmp_path / "s.db"
    add_events(db, 100)
    return db


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
"""The first bytes of a synced rollback journal: one SQLite would play back (a hot journal)."""


def journal_is_hot(journal: Path) -> bool:
    try:
        with journal.open("rb") as handle:
            return handle.read(8) == JOURNAL_MAGIC
    except FileNotFoundError:
        return False


def kill_mid_batch(db: Path, audit: Path) -> bool:
    """Start `project`, SIGKILL it while a batch commits (journal synced, pages being written).

    True if the kill left a hot journal beside the file.
    """
    journal = audit.with_name(audit.name + "-journal")
    child = start(db, audit, "project")
    try:
        deadline = time.monotonic() + 60
        while child.poll() is None and time.monotonic() < deadline:
            if journal_is_hot(journal):
                os.kill(child.pid, signal.SIGKILL)
                break
    finally:
        if child.poll() is None:
            child.kill()
        child.communicate()
    return child.returncode == -signal.SIGKILL and journal_is_hot(journal)


def test_rebuild_after_a_killed_project_gives_a_sound_file(store_db: Path, tmp_path: Path) -> None:
    """project SIGKILLed mid-commit leaves a hot journal; rebuild still gives a sound file."""
    expected = clean_rebuild(store_db, tmp_path / "expected.db")
    hot = 0
    for attempt in range(3):
        audit = tmp_path / f"a{attempt}.db"
        for _ in range(30):  # kill until a batch is caught mid-commit: a hot journal
            if kill_mid_batch(store_db, audit):
                break
        else:
            continue
        hot += 1
        result = convstore(store_db, audit, "rebuild")
        assert result.returncode == 0, result.stderr
        assert integrity(audit) == "ok"
        fts_integrity_check(audit)
        assert_same_read_model(audit, expected)
        assert sorted(p.name for p in tmp_path.glob(f"a{attempt}.db*")) == [audit.name]
        result = convstore(store_db, audit, "audit", "stats")  # and it stays sound when used
        assert result.returncode == 0, result.stderr
        assert integrity(audit) == "ok"
    assert hot >= 2, "too few kills landed mid-batch to test anything"


def wait_until_caught_up(db: Path, audit: Path, follower: subprocess.Popen[str]) -> None:
    end = log_position(db)
    deadline = time.monotonic() + 120
    while position(audit) != end:
        assert follower.poll() is None, follower.communicate()
        assert time.monotonic() < deadline, "the follower never caught up"
        time.sleep(0.1)


def stop(follower: subprocess.Popen[str]) -> str:
    """Ctrl-C the follower; it must still have been running and stop cleanly."""
    assert follower.poll() is None, follower.communicate()
    follower.send_signal(signal.SIGINT)
    _, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert "error" not in err, err
    return err


def test_the_follower_survives_rebuilds_swapping_the_file_mid_catch_up(
    store_db: Path, tmp_path: Path
) -> None:
    """Rebuilds swap the file while `project --follow` is catching up: it reopens, never dies."""
    audit = tmp_path / "a.db"
    follower = start(store_db, audit, "project", "--follow", "--interval", "0.05")
    try:
        for _ in range(3):
            add_events(store_db, 40)  # a burst the follower takes a while to apply
            time.sleep(0.1)
            result = convstore(store_db, audit, "rebuild")
            assert result.returncode == 0, result.stderr
            assert follower.poll() is None, follower.communicate()
        add_events(store_db, 5)
        wait_until_caught_up(store_db, audit, follower)
        stop(follower)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert integrity(audit) == "ok"
    assert_same_read_model(audit, clean_rebuild(store_db, tmp_path / "expected.db"))


def test_one_shot_projects_racing_rebuilds_all_succeed(store_db: Path, tmp_path: Path) -> None:
    """`project` and `rebuild` started together, again and again: every one exits 0."""
    audit = tmp_path / "a.db"
    for _ in range(3):
        add_events(store_db, 20)
        children = [start(store_db, audit, "project"), start(store_db, audit, "rebuild")]
        children.append(start(store_db, audit, "project"))
        outcomes = [(child.wait(timeout=300), child.communicate()[1]) for child in children]
        assert [code for code, _ in outcomes] == [0, 0, 0], outcomes
    assert convstore(store_db, audit, "project").returncode == 0
    assert integrity(audit) == "ok"
    assert_same_read_model(audit, clean_rebuild(store_db, tmp_path / "expected.db"))


def wait_until_held(audit: Path, reader: subprocess.Popen[str]) -> None:
    """Return once another process has held a read lock on ``audit`` for a quarter second."""
    refused_since: float | None = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert reader.poll() is None, reader.communicate()
        probe = sqlite3.connect(audit, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN EXCLUSIVE")
            probe.execute("ROLLBACK")
            refused_since = None
        except sqlite3.OperationalError:
            refused_since = refused_since or time.monotonic()
            if time.monotonic() - refused_since > 0.25:
                return
        finally:
            probe.close()
        time.sleep(0.02)
    pytest.fail("the long query never took hold of the audit file")


LONG_QUERY = (
    "SELECT count(*) FROM blocks, (WITH RECURSIVE n(i) AS "
    "(SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 100000000000) SELECT i FROM n)"
)


def test_the_follower_survives_a_query_holding_the_file_past_the_busy_timeout(
    store_db: Path, tmp_path: Path
) -> None:
    """A 15 s `audit sql` blocks the follower's commit past 10 s: it waits and catches up."""
    audit = tmp_path / "a.db"
    assert convstore(store_db, audit, "project").returncode == 0
    follower = start(store_db, audit, "project", "--follow", "--interval", "0.05")
    try:
        time.sleep(0.5)
        reader = start(store_db, audit, "audit", "--stale", "sql", "--time-limit", "15", LONG_QUERY)
        wait_until_held(audit, reader)
        add_events(store_db, 20)  # the follower now needs to commit while the reader holds on
        _, err = reader.communicate(timeout=60)
        assert "time limit" in err, err
        add_events(store_db, 2)
        wait_until_caught_up(store_db, audit, follower)
        told = stop(follower)
    finally:
        for child in (follower,):
            if child.poll() is None:
                child.kill()
                child.communicate()
    assert "retrying" in told, told  # it really was held up, and said so
    assert integrity(audit) == "ok"
    assert_same_read_model(audit, clean_rebuild(store_db, tmp_path / "expected.db"))
