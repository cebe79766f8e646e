"""``convstore verify`` over real SQLite files: a sound log, and logs tampered with by hand.

Each tampering is done with plain ``sqlite3`` on the ``stored_events`` table. Verify must name
the problem, exit 1 with one ``error:`` line on stderr, and change nothing: the stored rows,
the files in the directory and their bytes are the same before and after.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner, Result

from convstore import open_store
from convstore.cli import cli
from convstore.demo import record_demo

# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads a real store or audit file, and tracebacks stay folded."""
    for name in ("CONVSTORE_DB", "CONVSTORE_AUDIT_DB", "CONVSTORE_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def verify(db: Path, *flags: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), "verify", *flags])


def dump(db: Path) -> list[Any]:
    """Every stored event row, in insertion order."""
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()


def files(directory: Path) -> dict[str, str]:
    """Each file in ``directory`` with the SHA-256 of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


@dataclass(frozen=True)
class Stored:
    """A store holding the demo conversation and a small second one."""

    db: Path
    demo: UUID
    other: UUID


@pytest.fixture
def stored(tmp_path: Path) -> Stored:
    """The demo conversation (images, tools, an interrupted and an unfinished message) and
    another with an open message, so tampering can hit the middle of the log."""
    db = tmp_path / "store" / "convstore.db"
    db.parent.mkdir()
    with open_store(db) as store:
        demo = record_demo(store)
        other = store.new_conversation(title="second")
        store.append_message(other, "user", [{"type": "text", "text": "one"}])
        message = store.start_message(other, "assistant")
        store.append_block(other, message, {"type": "text", "text": "two"})
    return Stored(db, demo, other)


def rows_of(db: Path, conversation: UUID) -> list[tuple[int, int, str, bytes]]:
    """(rowid, version, topic, state) of a conversation's stored events, in version order."""
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute(
            "SELECT rowid, originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version",
            [conversation.hex],
        ).fetchall()


def tamper(db: Path, sql: str, params: list[Any]) -> None:
    with closing(sqlite3.connect(db)) as connection:
        connection.execute(sql, params)
        connection.commit()


def problems_of(result: Result) -> list[dict[str, Any]]:
    """The problems ``verify --json`` printed; insists on exit 1 and one stderr line."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "problem(s)" in lines[0], lines[0]
    assert "Traceback" not in result.output
    parsed: list[dict[str, Any]] = json.loads(result.stdout)
    return parsed


# -- a sound log ------------------------------------------------------------------------------


def test_a_sound_log_is_ok_in_every_format(stored: Stored) -> None:
    """A clean store: exit 0, one "ok:" line counting events; --json is [] and --csv a header."""
    before = files(stored.db.parent)
    result = verify(stored.db)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    [line] = result.stdout.splitlines()
    events = len(dump(stored.db))
    assert line == f"ok: {events} events in 2 conversations, log position {events}"
    assert result.stderr == ""
    as_json = verify(stored.db, "--json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == []
    as_csv = verify(stored.db, "--csv")
    assert as_csv.exit_code == 0
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [
        ["position", "conversation", "version", "problem"]
    ]
    assert files(stored.db.parent) == before  # no audit file, no leftover -wal: nothing written


def test_an_empty_store_is_ok(tmp_path: Path) -> None:
    """A store with nothing in it verifies, and a missing one is bad input (exit 2), not made."""
    db = tmp_path / "empty.db"
    with open_store(db):
        pass
    result = verify(db)
    assert result.exit_code == 0
    assert result.stdout.startswith("ok: 0 events in 0 conversations")
    missing = verify(tmp_path / "missing.db")
    assert missing.exit_code == 2
    assert not (tmp_path / "missing.db").exists()


# -- tampered logs ------------------------------------------------------------------------------


def _delete_middle(s: Stored) -> str:
    rowid, version, _, _ = rows_of(s.db, s.demo)[5]
    tamper(s.db, "DELETE FROM stored_events WHERE rowid = ?", [rowid])
    return f"version {version + 1} follows {version - 1} (a gap)"


def _empty_state(s: Stored) -> str:
    rowid = rows_of(s.db, s.demo)[4][0]
    tamper(s.db, "UPDATE stored_events SET state = ? WHERE rowid = ?", [b"{}", rowid])
    return "does not decode"


def _not_json(s: Stored) -> str:
    rowid = rows_of(s.db, s.other)[-1][0]
    tamper(s.db, "UPDATE stored_events SET state = ? WHERE rowid = ?", [b"\xff\x00{", rowid])
    return "does not decode"


def _version_column(s: Stored) -> str:
    rowid = rows_of(s.db, s.demo)[3][0]
    tamper(s.db, "UPDATE stored_events SET originator_version = ? WHERE rowid = ?", [900, rowid])
    return "the stored id or version disagrees with the event inside"


def _block_for_unknown_message(s: Stored) -> str:
    rows = rows_of(s.db, s.other)
    _, _, topic, state = next(r for r in rows if r[2] == "convstore:block_appended")
    event = json.loads(state)
    stranger = str(uuid4())
    event.update(originator_version=len(rows) + 1, message_id=stranger, index=0)
    tamper(
        s.db,
        "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
        "VALUES (?, ?, ?, ?)",
        [s.other.hex, len(rows) + 1, topic, json.dumps(event).encode()],
    )
    return f"block for message {stranger}, which is not open"


def _first_event_not_a_start(s: Stored) -> str:
    rowid = rows_of(s.db, s.other)[0][0]
    tamper(s.db, "DELETE FROM stored_events WHERE rowid = ?", [rowid])
    return "version 2 follows 0 (a gap)"


TAMPERINGS: dict[str, Callable[[Stored], str]] = {
    "an event deleted in the middle": _delete_middle,
    "a state overwritten with {}": _empty_state,
    "a state that is not JSON": _not_json,
    "the stored version column changed": _version_column,
    "a block for a message never started": _block_for_unknown_message,
    "the first event deleted": _first_event_not_a_start,
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS), ids=list(TAMPERINGS))
def test_tampering_is_reported_and_verify_changes_nothing(stored: Stored, tampering: str) -> None:
    """Each tampering is named in the report, verify exits 1, and no file changes."""
    expected = TAMPERINGS[tampering](stored)
    rows, before = dump(stored.db), files(stored.db.parent)
    problems = problems_of(verify(stored.db, "--json"))
    assert any(expected in p["problem"] for p in problems), (expected, problems)
    assert all(set(p) == {"position", "conversation", "version", "problem"} for p in problems)
    table = verify(stored.db)
    assert table.exit_code == 1
    assert expected[:40] in table.stdout  # the table cuts long cells, not the start
    # Rough edge (reported): the table format adds a "(N rows)" line to stderr.
    assert table.stderr.splitlines()[-1].startswith(f"error: {len(problems)} problem(s) in ")
    assert dump(stored.db) == rows
    assert files(stored.db.parent) == before


def test_the_report_names_where_each_problem_is(stored: Stored) -> None:
    """A problem carries the log position, conversation and version of the bad record."""
    rowid, version, _, _ = rows_of(stored.db, stored.demo)[4]
    _empty_state(stored)
    [problem] = [p for p in problems_of(verify(stored.db, "--json")) if "decode" in p["problem"]]
    assert problem["position"] == rowid
    assert problem["conversation"] == str(stored.demo)
    assert problem["version"] == version


# -- the audit read model's position ----------------------------------------------------------


def test_an_audit_position_past_the_log_end_is_reported(stored: Stored) -> None:
    """A read model tracked beyond the newest event is a problem; verify leaves it alone."""
    runner = CliRunner()
    projected = runner.invoke(cli, ["--db", str(stored.db), "project"])
    assert projected.exit_code == 0, projected.stderr
    audit = stored.db.with_name("convstore.audit.db")
    assert audit.exists()
    assert verify(stored.db).exit_code == 0  # caught up exactly: fine
    end = len(dump(stored.db))
    with closing(sqlite3.connect(audit)) as connection:
        connection.execute("UPDATE _tracking SET position = ?", [end + 1000])
        connection.commit()
    before = files(stored.db.parent)
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["problem"] == (
        f"audit read model at position {end + 1000}, past the log's end {end}"
    )
    assert files(stored.db.parent) == before
    # The --audit option points verify at another read model file.
    elsewhere = stored.db.parent / "elsewhere.audit.db"
    audit.rename(elsewhere)
    assert verify(stored.db).exit_code == 0
    result = CliRunner().invoke(cli, ["--db", str(stored.db), "--audit", str(elsewhere), "verify"])
    assert result.exit_code == 1


def test_an_audit_file_that_is_not_a_read_model_is_reported(stored: Stored) -> None:
    """A file at the audit path that is not a read model is reported, not a crash."""
    audit = stored.db.with_name("convstore.audit.db")
    audit.write_bytes(b"not a database at all, just text " * 100)
    before = files(stored.db.parent)
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["problem"].startswith("audit read model: ")
    assert files(stored.db.parent) == before


# -- tampering that once crashed verify or slipped past it (regression cases) -------------------


def test_a_topic_column_that_disagrees_is_reported(stored: Stored) -> None:
    """A stored topic that names another event type than the state holds is reported."""
    rowid = rows_of(stored.db, stored.other)[-1][0]
    tamper(stored.db, "UPDATE stored_events SET topic = ? WHERE rowid = ?", ["convstore:x", rowid])
    assert problems_of(verify(stored.db, "--json")) != []


def test_an_originator_id_that_is_not_a_uuid_is_reported(stored: Stored) -> None:
    """A stored originator_id that is not a UUID is reported as a problem."""
    rowid = rows_of(stored.db, stored.other)[-1][0]
    tamper(stored.db, "UPDATE stored_events SET originator_id = 'x' WHERE rowid = ?", [rowid])
    assert problems_of(verify(stored.db, "--json")) != []


@pytest.mark.parametrize("version", [None, "three"], ids=["null", "text"])
def test_a_version_that_is_not_a_number_is_reported(stored: Stored, version: str | None) -> None:
    """A stored originator_version that is NULL or text is reported as a problem."""
    rowid = rows_of(stored.db, stored.other)[1][0]  # an event with more after it
    tamper(
        stored.db,
        "UPDATE stored_events SET originator_version = ? WHERE rowid = ?",
        [version, rowid],
    )
    assert problems_of(verify(stored.db, "--json")) != []


def test_verify_writes_nothing_to_a_sqlite_file_that_is_not_a_store(tmp_path: Path) -> None:
    """Verify pointed at some other SQLite database leaves its bytes as they were."""
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
        connection.commit()
    before = files(tmp_path)
    verify(other)
    assert files(tmp_path) == before
