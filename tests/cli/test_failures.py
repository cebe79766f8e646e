"""Store failures (exit 1, one line) and the installed console script run as a subprocess: the
entry point, the exit codes, and a failure as one line with no traceback."""

from __future__ import annotations

import json
import os
import pty
from pathlib import Path
from uuid import UUID

import pytest

from convstore.cli import command_names
from tests.cli.support import (
    TEXT_BLOCK,
    UNKNOWN_ID,
    assert_refused,
    assert_script_failed,
    blocks_json,
    dump,
    invoke,
    run_script,
)

# -- store failures: exit 1, one line -----------------------------------------------------------


def test_new_in_a_missing_directory_is_a_store_failure(tmp_path: Path) -> None:
    """`new` with --db in a directory that does not exist exits 1 with one line; no dir made."""
    target = tmp_path / "absent" / "store.db"
    result = invoke(target, "new")
    assert_refused(result, "does not exist", code=1)
    assert not target.parent.exists()


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["new"], None),
        (["list"], None),
        (["list", "--json"], None),
        (["append", UNKNOWN_ID, "--role", "user"], blocks_json(TEXT_BLOCK)),
        (["replay", UNKNOWN_ID], None),
        (["demo"], None),
    ],
    ids=["new", "list", "list-json", "append", "replay", "demo"],
)
def test_a_file_that_is_not_sqlite_is_refused_as_not_a_store(
    db: Path, args: list[str], stdin: str | None
) -> None:
    """A store file holding garbage bytes is refused as bad input (exit 2, as the CLI guide
    promises for a file that is not a store; issue 39 item 17 found exit 1) with one line,
    and is left as it was."""
    garbage = b"this is not a SQLite database, just some bytes\n" * 40
    db.write_bytes(garbage)
    result = invoke(db, *args, stdin=stdin)
    assert_refused(result, "is not a convstore store: it is not a SQLite file", code=2)
    assert "unexpected" not in result.stderr
    assert str(db) in result.stderr
    assert db.read_bytes() == garbage


# -- the installed console script ---------------------------------------------------------------


@pytest.mark.slow
def test_script_happy_path(tmp_path: Path) -> None:
    """The console script records and replays a conversation, exiting 0 with JSON on stdout."""
    db = str(tmp_path / "script.db")
    created = run_script("--db", db, "new", "--title", "via script")
    assert created.returncode == 0, created.stderr
    conv = created.stdout.decode().strip()
    UUID(conv)
    appended = run_script(
        "append", conv, "--role", "user", stdin=blocks_json(TEXT_BLOCK).encode(),
        extra_env={"CONVSTORE_DB": db},
    )  # fmt: skip
    assert appended.returncode == 0, appended.stderr
    replayed = run_script("--db", db, "replay", conv, "--shape", "anthropic")
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stderr == b""
    # No system message, so no "system" key (issue 39 item 19: it used to be "").
    assert json.loads(replayed.stdout) == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    }


@pytest.mark.slow
def test_script_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    """The console script refuses truncated JSON with exit 2, one line, no traceback."""
    db = tmp_path / "script.db"
    conv = run_script("--db", str(db), "new").stdout.decode().strip()
    before = dump(db)
    proc = run_script("--db", str(db), "append", conv, "--role", "user", stdin=b'[{"type":')
    line = assert_script_failed(proc, 2)
    assert "malformed JSON" in line
    assert dump(db) == before


@pytest.mark.slow
def test_script_usage_error_exits_2_without_traceback(tmp_path: Path) -> None:
    """A click usage error from the console script exits 2 with no traceback."""
    proc = run_script("--db", str(tmp_path / "x.db"), "append", UNKNOWN_ID, "--role", "robot")
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr
    assert b"'robot' is not one of" in proc.stderr
    assert not (tmp_path / "x.db").exists()


@pytest.mark.slow
def test_script_store_failures_exit_1_with_one_line(tmp_path: Path) -> None:
    """The console script exits 1 with one line for a missing directory, and 2 (not a store:
    bad input, issue 39 item 17) for a non-SQLite file."""
    line = assert_script_failed(run_script("--db", str(tmp_path / "no" / "s.db"), "new"), 1)
    assert "does not exist" in line
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 8)
    line = assert_script_failed(run_script("--db", str(garbage), "new"), 2)
    assert "not a SQLite file" in line


@pytest.mark.slow
def test_script_refuses_a_terminal_as_stdin(tmp_path: Path) -> None:
    """With no FILE and a terminal on stdin, `append` exits 2 asking for input, not hanging."""
    db = tmp_path / "script.db"
    conv = run_script("--db", str(db), "new").stdout.decode().strip()
    before = dump(db)
    controller, terminal = pty.openpty()
    try:
        proc = run_script("--db", str(db), "append", conv, "--role", "user", stdin=terminal)
    finally:
        os.close(controller)
        os.close(terminal)
    line = assert_script_failed(proc, 2)
    assert "no input" in line
    assert dump(db) == before


@pytest.mark.slow
def test_script_help_and_list_of_a_missing_store(tmp_path: Path) -> None:
    """`convstore --help` exits 0 naming every command; `list` of a missing store says there
    is none (exit 2, issue 39 item 17: it used to list nothing and exit 0) and makes no file."""
    proc = run_script("--help")
    assert proc.returncode == 0, proc.stderr
    for name in command_names():
        assert name.encode() in proc.stdout
    listed = run_script("--db", str(tmp_path / "h.db"), "list")
    line = assert_script_failed(listed, 2)
    assert "no store at" in line
    assert not (tmp_path / "h.db").exists()
