"""``convstore upgrade`` rewrites a SQLite store of format 2 as format 3, whole or not at all
(docs/design/format-3.md, "The store format, and the upgrade path").

On real files: the store 0.3.0 wrote (``tests/fixtures/format2/``) upgrades to a store of block
events that replays as 0.3.0 recorded, verifies clean and keeps no stored replay model, with
the old file kept beside it; a store of format 3 is left alone; a damaged store, a store held
by a writer or open in another process, and a taken backup name are refused with nothing
changed; a process killed at each step of the upgrade leaves the old store whole and working,
and the next upgrade finishes the job.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from click.testing import CliRunner

import convstore
from convstore.app.upgrade import upgrade_store
from convstore.app.verifying import log_problems
from convstore.cli.app import cli
from convstore.domain.errors import InvalidInput
from convstore.domain.events import BlockAppended, MessageEnded, MessageStarted
from tests.test_format2_fixture import _recorded

FIXTURE = Path(__file__).parent / "fixtures" / "format2"
FOLDED_AWAY = (MessageStarted, BlockAppended, MessageEnded)
COUNTERS = (range(24, 28), range(92, 96))
"""Page 1's change counter and the version it is valid for: the only bytes of the old file
the switch moves (leaving WAL mode and coming back)."""


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    copy = tmp_path / "agent.db"
    shutil.copyfile(FIXTURE / "store.db", copy)
    return copy


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tables(db: Path) -> set[str]:
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}


def _marks(db: Path) -> dict[str, str]:
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        return dict(conn.execute("SELECT key, value FROM convstore_store").fetchall())


def _replays_as_recorded(db: Path) -> None:
    with convstore.open_store(str(db), create=False) as store:
        for conversation, replays in _recorded().items():
            for replay in replays:
                mode = replay["mode"]
                got = store.replay(
                    conversation, shape=mode["shape"], vision=mode["vision"], full=mode["full"]
                )
                assert got == replay["request"], (conversation, mode)


def test_the_0_3_0_store_upgrades_to_block_events_that_replay_as_recorded(
    old_store: Path,
) -> None:
    before = old_store.read_bytes()
    with convstore.open_store(str(old_store), create=False) as old:
        heads = {str(c): h for c, h in old.heads().items() if h.version}
        old_identity = old.identity
    result = CliRunner().invoke(cli, ["--db", str(old_store), "upgrade"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"upgraded {old_store} from format 2 to 3: 3 conversations")
    assert "events 78 → 48" in result.stdout
    backup = old_store.with_name("agent.db.format2")
    assert _files(old_store.parent) == ["agent.db", "agent.db.format2"]
    # The backup is the old file: every byte but page 1's change counters.
    kept = backup.read_bytes()
    assert len(kept) == len(before)
    moved = [i for i in range(len(before)) if kept[i] != before[i]]
    assert all(any(i in r for r in COUNTERS) for i in moved), moved
    _replays_as_recorded(old_store)
    with convstore.open_store(str(old_store), create=False) as store:
        assert store.store_format == 3
        assert store.identity != old_identity
        events = [e for c in store.conversations() for e in store.events(c.id)]
        assert len(events) == 48
        assert not any(isinstance(e, FOLDED_AWAY) for e in events)
        assert log_problems(store)[1] == []
    # The stored replay model is not carried over; the old chain heads are kept.
    assert not {t for t in _tables(old_store) if t.startswith("convstore_replay_")}
    marks = _marks(old_store)
    assert json.loads(marks["upgraded_from"])["identity"] == old_identity
    assert {k.split(":", 1)[1]: v for k, v in marks.items() if k.startswith("upgraded_from:")} == {
        c: f"{h.version} {h.chain.hex()}" for c, h in heads.items()
    }
    # The backup is still a working store of format 2 that replays as before.
    _replays_as_recorded(backup)
    with convstore.open_store(str(backup), create=False) as store:
        assert store.store_format == 2


def test_a_store_of_format_3_is_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with convstore.open_store(str(db)) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [convstore.TextBlock(text="hi")])
    digest = _digest(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "upgrade"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{db} is of format 3 already: nothing to do\n"
    assert _digest(db) == digest
    assert not db.with_name("new.db.format3").exists()


def test_without_a_backup_only_the_new_store_remains(old_store: Path) -> None:
    report = upgrade_store(old_store, backup=False)
    assert (report.upgraded, report.backup) == (True, None)
    assert _files(old_store.parent) == ["agent.db"]
    _replays_as_recorded(old_store)


def test_a_damaged_store_is_refused_naming_the_conversation(old_store: Path) -> None:
    with closing(sqlite3.connect(old_store)) as conn:
        rowid, conversation, state = conn.execute(
            "SELECT rowid, originator_id, state FROM stored_events ORDER BY rowid LIMIT 1 OFFSET 9"
        ).fetchone()
        flipped = bytes(state[:-3]) + bytes([state[-3] ^ 0x01]) + bytes(state[-2:])
        conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", [flipped, rowid])
        conn.commit()
    digest = _digest(old_store)
    result = CliRunner().invoke(cli, ["--db", str(old_store), "upgrade"])
    assert result.exit_code == 1, result.output
    assert len(result.stderr.splitlines()) == 1
    assert str(conversation).replace("-", "") in result.stderr.replace("-", "")
    assert "nothing was written" in result.stderr
    assert _files(old_store.parent) == ["agent.db"]
    assert _digest(old_store) == digest


def test_a_taken_backup_name_is_refused(old_store: Path) -> None:
    taken = old_store.with_name("agent.db.format2")
    taken.write_text("mine")
    digest = _digest(old_store)
    result = CliRunner().invoke(cli, ["--db", str(old_store), "upgrade"])
    assert result.exit_code == 2, result.output
    assert "agent.db.format2 exists" in result.stderr
    assert taken.read_text() == "mine"
    assert _digest(old_store) == digest


def test_postgresql_and_nats_are_refused_in_one_line() -> None:
    for url in ("postgresql://127.0.0.1/test", "nats://127.0.0.1:4222/agents"):
        with pytest.raises(InvalidInput, match="not supported yet: dump it and load"):
            upgrade_store(url)


# -- other processes --------------------------------------------------------------------------

_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "lock":
    conn.execute("BEGIN IMMEDIATE")
else:
    import convstore
    store = convstore.open_store(sys.argv[1], create=False)
    conv = store.new_conversation(title="written while upgrading")
    print(conv, flush=True)
print("ready", flush=True)
sys.stdin.readline()
"""


def _title(store: convstore.Store, conversation: str) -> str | None:
    return next(c.title for c in store.conversations() if str(c.id) == conversation)


def _holder(db: Path, how: str) -> tuple[subprocess.Popen[str], list[str]]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db), how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    said = [child.stdout.readline().strip()]
    while said[-1] != "ready":
        said.append(child.stdout.readline().strip())
    return child, said[:-1]


def test_a_writer_holding_the_write_lock_is_waited_for_then_refused(
    old_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVSTORE_LOCK_TIMEOUT", "1")
    child, _ = _holder(old_store, "lock")
    try:
        digest = _digest(old_store)
        result = CliRunner().invoke(cli, ["--db", str(old_store), "upgrade"])
        assert result.exit_code == 1, result.output
        assert "write lock" in result.stderr
        assert "nothing was written" in result.stderr
        assert [n for n in _files(old_store.parent) if "upgrading" in n or "format2" in n] == []
        assert _digest(old_store) == digest
    finally:
        child.communicate("\n")


def test_a_store_open_in_another_process_is_not_switched(old_store: Path) -> None:
    """A process with the store open (it has written to it) would keep writing to the old
    file after a rename: the upgrade builds and checks, then refuses to switch, and the
    writer's event is in the store, which is still of format 2 and still works."""
    child, said = _holder(old_store, "open")
    try:
        result = CliRunner().invoke(cli, ["--db", str(old_store), "upgrade"])
        assert result.exit_code == 1, result.output
        assert "open in another process" in result.stderr
        assert "nothing was switched" in result.stderr
        assert _files(old_store.parent) == ["agent.db", "agent.db-shm", "agent.db-wal"]
    finally:
        child.communicate("\n")
    with convstore.open_store(str(old_store), create=False) as store:
        assert store.store_format == 2
        assert _title(store, said[0]) == "written while upgrading"
        assert log_problems(store)[1] == []
    # Once the writer is gone the upgrade goes through, its conversation included.
    report = upgrade_store(old_store)
    assert (report.upgraded, report.conversations) == (True, 4)
    with convstore.open_store(str(old_store), create=False) as store:
        assert _title(store, said[0]) == "written while upgrading"


# -- killed -----------------------------------------------------------------------------------

_KILLED_AT = """
import sys, time
from convstore.app.upgrade import upgrade_store

def stage(name, total):
    if name == sys.argv[2]:
        print("at", name, flush=True)
        time.sleep(600)

upgrade_store(sys.argv[1], stage=stage)
print("done", flush=True)
"""


@pytest.mark.parametrize("step", ["building", "checking", "switching", "backed up"])
def test_an_upgrade_killed_at_each_step_leaves_the_old_store_working(
    old_store: Path, step: str
) -> None:
    before = old_store.read_bytes()
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_AT, str(old_store), step], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == f"at {step}"
    child.send_signal(signal.SIGKILL)
    child.wait()
    # The old store is where it was, as it was, and works. Once the switch has begun it is out
    # of WAL mode (which the next open puts back): page 1's mode bytes and counters moved.
    after = old_store.read_bytes()
    moved = [i for i in range(len(before)) if after[i] != before[i]]
    if step in {"building", "checking", "switching"}:
        assert moved == []
    else:
        assert all(i in {18, 19} or any(i in r for r in COUNTERS) for i in moved), moved
    _replays_as_recorded(old_store)
    with convstore.open_store(str(old_store), create=False) as store:
        assert store.store_format == 2
        assert log_problems(store)[1] == []
    # The next upgrade removes what the killed one left and finishes the job.
    report = upgrade_store(old_store)
    assert report.upgraded
    assert _files(old_store.parent) == ["agent.db", "agent.db.format2"]
    _replays_as_recorded(old_store)
