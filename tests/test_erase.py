"""Erasure on SQLite files and through the CLI: the bytes leave the files, racing writers
never leave half a conversation, and retention picks conversations by inactivity."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import pytest
from click.testing import CliRunner

from convstore import ConversationErased, ConversationNotFound, open_store
from convstore.audit.file import default_audit_file
from convstore.cli import cli
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier
from tests.conftest import one_error_line
from tests.formats import events_of

SECRET = "hunter2-credit-card-4111111111111111"  # noqa: S105 - the bytes grep looks for


def _files(db: Path) -> list[Path]:
    return [p for p in (db, db.with_name(db.name + "-wal")) if p.exists()]


def test_erased_bytes_leave_the_database_file_and_its_wal(tmp_path: Path) -> None:
    """A grep of the store file and its write-ahead log finds the secret before the erasure
    and nothing after, while a conversation kept beside it is still readable."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv = store.new_conversation(title=SECRET)
        kept = store.new_conversation(title="kept")
        for n in range(50):
            store.append_message(conv, "user", [{"type": "text", "text": f"{SECRET} #{n}"}])
            store.append_message(kept, "user", [{"type": "text", "text": f"plain {n}"}])
        assert any(SECRET.encode() in p.read_bytes() for p in _files(db))
        store.erase(conv, reason="user asked")
        for path in _files(db):
            assert SECRET.encode() not in path.read_bytes(), path
        assert len(store.messages(kept)) == 50
    for path in _files(db):
        assert SECRET.encode() not in path.read_bytes(), path


def _append_until_refused(db: str, conv: str) -> int:
    """Append messages to ``conv`` until it is erased; returns how many landed."""
    landed = 0
    with open_store(db) as store:
        try:
            while True:
                store.append_message(conv, "user", [{"type": "text", "text": f"{SECRET}-{landed}"}])
                landed += 1
        except ConversationErased:
            return landed
        except ConversationNotFound:  # the state was read after the erasure
            return landed


def test_an_erasure_racing_appending_processes_leaves_no_half_state(tmp_path: Path) -> None:
    """Processes appending to a conversation while another erases it end refused; the log
    holds nothing of it afterwards, verify is clean, and the tombstone counts every event
    that was recorded before it."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv = store.new_conversation()
        kept = store.new_conversation()
        store.append_message(kept, "user", [{"type": "text", "text": "kept"}])
    context = multiprocessing.get_context("spawn")
    with context.Pool(3) as pool:
        pending = [pool.apply_async(_append_until_refused, (str(db), str(conv))) for _ in range(3)]
        with open_store(db) as store:
            deadline = time.monotonic() + 60
            while len(store.events(conv)) < 30 and time.monotonic() < deadline:
                time.sleep(0.05)
            erased = store.erase(conv, reason="race")
        landed = [p.get(timeout=120) for p in pending]
    assert sum(landed) >= 10
    # Each message is one atomic write; every landed write was erased whole.
    with open_store(db) as store:
        per_message = events_of(store)
    assert erased.events == 1 + per_message * sum(landed)
    with open_store(db) as store:
        assert store.last_event(conv) is None
        verifier = Verifier(heads=store.heads(), key=chain_key())
        verifier.check_all(store.scan())
        assert verifier.problems == []
        assert len(store.events(kept)) == 1 + events_of(store)
    for path in _files(db):
        assert SECRET.encode() not in path.read_bytes()


def test_cli_erase_and_retention(tmp_path: Path) -> None:
    """`erase CONV --reason` erases one conversation; `--inactive-for --dry-run` lists the
    idle ones and erases nothing; without --dry-run it erases exactly those."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        old = store.new_conversation(title="old")
        fresh = store.new_conversation(title="fresh")
        one = store.new_conversation(title="one")
    # Age "old" by rewriting nothing: its only event's timestamp is read back, so wait.
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", db, "erase", str(one), "--reason", "asked"])
    assert result.exit_code == 0, result.output
    assert result.output == f"erased {one}: 1 event(s)\n"
    result = runner.invoke(cli, ["--db", db, "erase", str(one), "--reason", "asked"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"already erased {one}: 1 event(s) at ")
    result = runner.invoke(cli, ["--db", db, "erase", str(old)])
    assert result.exit_code == 2
    assert "--reason is required" in result.stderr
    time.sleep(1.2)
    with open_store(db) as store:
        store.append_message(fresh, "user", [{"type": "text", "text": "still here"}])
    result = runner.invoke(cli, ["--db", db, "erase", "--inactive-for", "1s", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        line for line in result.output.splitlines() if line.startswith(f"would erase {old}")
    ]
    assert len(result.output.splitlines()) == 1
    result = runner.invoke(
        cli, ["--db", db, "erase", "--inactive-for", "1s", "--reason", "retention"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"erased {old}: 1 event(s)")
    with open_store(db) as store:
        assert [c.id for c in store.conversations()] == [fresh]
        assert [e.reason for e in store.erasures()] == ["asked", "retention"]
    result = runner.invoke(cli, ["--db", db, "erase", "--inactive-for", "30x"])
    assert result.exit_code == 2
    assert "--inactive-for takes a number and a unit" in result.stderr


def test_retention_by_label_erases_only_the_labelled_idle_ones(tmp_path: Path) -> None:
    """`erase --inactive-for SPAN --label K=V` picks from the listing index the idle
    conversations holding every label given, and erases only those."""
    db = str(tmp_path / "s.db")
    with open_store(db) as store:
        acme = store.new_conversation(title="acme")
        store.set_labels(acme, {"tenant": "acme"})
        other = store.new_conversation(title="other")
        store.set_labels(other, {"tenant": "globex"})
        bare = store.new_conversation(title="bare")
    time.sleep(1.2)
    runner = CliRunner()
    args = ["--db", db, "erase", "--inactive-for", "1s", "--label", "tenant=acme"]
    result = runner.invoke(cli, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert [line.split()[2] for line in result.output.splitlines()] == [str(acme)]
    result = runner.invoke(cli, [*args, "--reason", "retention"])
    assert result.exit_code == 0, result.output
    with open_store(db) as store:
        assert {c.id for c in store.conversations()} == {other, bare}
    result = runner.invoke(cli, ["--db", db, "erase", str(other), "--label", "tenant=globex"])
    assert result.exit_code == 2
    assert "--label go with --inactive-for" in result.stderr


def test_parse_duration_units() -> None:
    """Spans read as seconds, minutes, hours, days and weeks."""
    from convstore.cli.lifecycle import parse_duration  # noqa: PLC0415

    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("2w") == timedelta(weeks=2)
    assert parse_duration("90m") == timedelta(minutes=90)


def test_sqlite_tombstones_table_is_made_on_open_of_an_older_store(tmp_path: Path) -> None:
    """A store made before erasure existed gets the tombstones table when opened, so its
    writers can check erased ids."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv = store.new_conversation()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE convstore_erased")
    with open_store(db) as store:
        store.append_message(conv, "user", [{"type": "text", "text": "x"}])
        store.erase(conv, reason="r")
        assert [e.id for e in store.erasures()] == [conv]
    assert isinstance(conv, UUID)


@pytest.mark.parametrize("span", ["", "d", "1y", "-3d"])
def test_bad_spans_are_refused(span: str) -> None:
    """A span without a number or with an unknown unit is invalid input."""
    from convstore.cli.lifecycle import parse_duration  # noqa: PLC0415
    from convstore.domain.errors import InvalidInput  # noqa: PLC0415

    with pytest.raises(InvalidInput):
        parse_duration(span)


def test_an_erasure_racing_appending_processes_on_postgres(postgres_url: str) -> None:
    """On PostgreSQL too, processes appending while another erases end refused, and nothing
    of the conversation is left: the tombstone counts every event recorded before it."""
    with open_store(postgres_url) as store:
        conv = store.new_conversation()
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        pending = [
            pool.apply_async(_append_until_refused, (postgres_url, str(conv))) for _ in range(2)
        ]
        with open_store(postgres_url) as store:
            deadline = time.monotonic() + 60
            while len(store.events(conv)) < 30 and time.monotonic() < deadline:
                time.sleep(0.05)
            erased = store.erase(conv, reason="race")
        landed = [p.get(timeout=120) for p in pending]
    with open_store(postgres_url) as store:
        assert erased.events == 1 + events_of(store) * sum(landed)
        assert store.last_event(conv) is None
        verifier = Verifier(heads=store.heads(), key=chain_key())
        verifier.check_all(store.scan())
        assert verifier.problems == []


def test_verify_accepts_a_read_model_past_an_erased_tail(tmp_path: Path) -> None:
    """When the erased events were the newest, a read model that had projected them is not
    "past the log's end" for `verify`, and the tombstone keeps the high mark."""
    db = str(tmp_path / "s.db")
    runner = CliRunner()
    with open_store(db) as store:
        store.new_conversation()
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "tail"}])
        high = store.log_position()
    assert runner.invoke(cli, ["--db", db, "project"]).exit_code == 0
    # Erased through the CLI, which also clears this host's audit read model (issue 39 item
    # 16): after an API erasure `verify` rightly reports the text the read model still holds.
    result = runner.invoke(cli, ["--db", db, "erase", str(conv), "--reason", "tail"])
    assert result.exit_code == 0, result.output + result.stderr
    with open_store(db) as store:
        (erased,) = store.erasures()
        assert erased.high == high
        assert store.log_position() < high
    result = runner.invoke(cli, ["--db", db, "verify"])
    assert result.exit_code == 0, result.output + result.stderr
    assert runner.invoke(cli, ["--db", db, "project"]).exit_code == 0
    assert runner.invoke(cli, ["--db", db, "verify"]).exit_code == 0


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_inactive_for_a_span_past_the_calendar_is_one_error_line(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """`erase --inactive-for 999999w` reaches back before the year 1: exit 2, one line,
    nothing erased. The longest span that still names a date lists on either backend."""
    if backend == "sqlite":
        location = str(tmp_path / "s.db")
    else:
        location = request.getfixturevalue("postgres_url")
    with open_store(location) as store:
        kept = store.new_conversation(title="kept")
    script = Path(sys.executable).parent / "convstore"
    for args in (["--dry-run"], ["--reason", "retention"]):
        proc = subprocess.run(
            [str(script), "--db", location, "erase", "--inactive-for", "999999w", *args],
            capture_output=True,
            check=False,
        )
        one_error_line(proc.returncode, proc.stdout, proc.stderr, "before the year 1")
    proc = subprocess.run(
        [str(script), "--db", location, "erase", "--inactive-for", "100000w", "--dry-run"],
        capture_output=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, b""), proc.stderr
    assert b"error" not in proc.stderr
    with open_store(location) as store:
        assert [c.id for c in store.conversations()] == [kept]


def _audit_files(audit: Path) -> list[Path]:
    return [
        p
        for p in (audit, *(audit.with_name(audit.name + s) for s in ("-wal", "-journal")))
        if p.exists()
    ]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_cli_erase_removes_the_text_from_this_hosts_audit_read_model(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Issue 39 item 16: after `erase` (of one conversation, and by retention), a grep of the
    default audit file (beside a SQLite store, in the data directory for PostgreSQL) and its
    companions finds none of the erased text, search finds nothing, and `verify` is clean;
    the conversation kept beside it is still searchable. Before, the text stayed until
    `project`, and `verify` said ok meanwhile."""
    if backend == "sqlite":
        location = str(tmp_path / "s.db")
    else:
        location = request.getfixturevalue("postgres_url")
    runner = CliRunner()
    with open_store(location) as store:
        one = store.new_conversation(title=f"title {SECRET}")
        idle = store.new_conversation(title="idle")
        store.set_labels(one, {"tenant": SECRET})
        for n in range(20):
            store.append_message(one, "user", [{"type": "text", "text": f"{SECRET} one {n}"}])
            store.append_message(idle, "user", [{"type": "text", "text": f"{SECRET} idle {n}"}])
        audit = default_audit_file(store.location)
    assert runner.invoke(cli, ["--db", location, "project"]).exit_code == 0
    assert any(SECRET.encode() in p.read_bytes() for p in _audit_files(audit))
    result = runner.invoke(cli, ["--db", location, "erase", str(one), "--reason", "asked"])
    assert result.exit_code == 0, result.output + result.stderr
    time.sleep(1.1)
    with open_store(location) as store:
        kept = store.new_conversation(title="kept")
        store.append_message(kept, "user", [{"type": "text", "text": "plain words"}])
    assert runner.invoke(cli, ["--db", location, "project"]).exit_code == 0
    result = runner.invoke(
        cli, ["--db", location, "erase", "--inactive-for", "1s", "--reason", "retention"]
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert result.output.startswith(f"erased {idle}:"), result.output
    for path in _audit_files(audit):
        assert SECRET.encode() not in path.read_bytes(), path
    result = runner.invoke(cli, ["--db", location, "verify"])
    assert result.exit_code == 0, result.output + result.stderr
    result = runner.invoke(cli, ["--db", location, "audit", "--stale", "search", "plain"])
    assert result.exit_code == 0, result.output + result.stderr
    assert str(kept) in result.output


def _secret_in_the_audit_model(db: str, runner: CliRunner) -> UUID:
    """A store at ``db`` with one conversation holding SECRET, projected into its audit read
    model; the conversation's id."""
    with open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": SECRET}])
    assert runner.invoke(cli, ["--db", db, "project"]).exit_code == 0
    return conv


def test_verify_reports_erased_text_left_in_the_audit_read_model(tmp_path: Path) -> None:
    """Issue 39 item 16: an erasure through the Python API (which cannot reach the read model)
    leaves the audit file holding the text until `project`: `verify` says so, naming the
    conversation and the command, and exits 1; after `project` it is clean."""
    db = str(tmp_path / "s.db")
    runner = CliRunner()
    conv = _secret_in_the_audit_model(db, runner)
    with open_store(db) as store:
        store.erase(conv, reason="asked")
    result = runner.invoke(cli, ["--db", db, "verify", "--json"])
    assert result.exit_code == 1, result.output + result.stderr
    (problem,) = json.loads(result.stdout)
    assert problem["conversation"] == str(conv)
    assert problem["problem"] == (
        "audit read model still holds its erased text: run `convstore project`"
    )
    assert runner.invoke(cli, ["--db", db, "project"]).exit_code == 0
    assert runner.invoke(cli, ["--db", db, "verify"]).exit_code == 0


def test_erase_that_cannot_reach_the_audit_read_model_says_what_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39 item 16: with the audit file locked by another writer, `erase` still erases
    the events, then fails (exit 1) in one line naming the file and the `project` command
    that removes the text; running that command does, and `verify` is then clean."""
    monkeypatch.setattr("convstore.audit.db.BUSY_TIMEOUT_SECONDS", 0.2)
    db = str(tmp_path / "s.db")
    runner = CliRunner()
    conv = _secret_in_the_audit_model(db, runner)
    audit = tmp_path / "s.audit.db"
    holder = sqlite3.connect(audit, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        result = runner.invoke(cli, ["--db", db, "erase", str(conv), "--reason", "asked"])
    finally:
        holder.close()
    assert result.exit_code == 1
    assert result.output == f"erased {conv}: 2 event(s)\n" or result.output.startswith(
        f"erased {conv}:"
    )
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.startswith("error: erased, but the audit read model"), line
    assert str(audit) in line
    assert "project" in line
    with open_store(db) as store:
        assert store.last_event(conv) is None
    assert runner.invoke(cli, ["--db", db, "project"]).exit_code == 0
    assert SECRET.encode() not in audit.read_bytes()
    assert runner.invoke(cli, ["--db", db, "verify"]).exit_code == 0
