"""`convstore --db PATH replay CONV` from the stored model, before the command line loads: it
prints exactly what the full command prints, and steps aside whenever it cannot be sure."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from convstore import open_store
from convstore.app.quick_replay import EVENTS_TABLE, quick_replay
from convstore.app.quick_replay import MARKER_TABLE as QUICK_MARKER
from convstore.app.quick_replay import STORE_FORMATS as QUICK_FORMATS
from convstore.backends.common.application import MARKER_TABLE, STORE_FORMATS
from convstore.backends.common.replay_tables import HEADS, MESSAGES
from convstore.backends.sqlite.replay_keeper import DEFER_LIMIT
from convstore.engine.plan import HISTORY_STARTS
from convstore.ports.replay import ReplayModel
from tests.formats import events_of
from tests.strategies import IMAGE_BLOCKS

SCRIPT = Path(sys.executable).with_name("convstore")


@pytest.fixture(autouse=True)
def _no_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process calls see no ``CONVSTORE_`` variable of the test run's (CI sets
    ``CONVSTORE_REQUIRE_POSTGRES``), as the subprocesses below do not."""
    for name in [n for n in os.environ if n.startswith("CONVSTORE_")]:
        monkeypatch.delenv(name)


def cli(*args: str, quick: bool = True) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVSTORE_")}
    if not quick:
        env["CONVSTORE_DEBUG"] = "0"  # a setting that can change a read sends it the full way
    return subprocess.run([str(SCRIPT), *args], capture_output=True, env=env, check=False)


def busy_conversation(path: Path, replay_model: ReplayModel = True) -> UUID:
    """Every kind of block, an unanswered call, an interruption, a compaction and a rewind."""
    with open_store(path, replay_model=replay_model) as store:
        conv = store.new_conversation(title="quick")
        store.append_message(conv, "system", [{"type": "text", "text": "Be terse."}])
        blank: dict[str, Any] = {"type": "text", "text": "  "}
        store.append_message(conv, "user", [blank, IMAGE_BLOCKS[0]])
        calls: list[dict[str, Any]] = [
            {"type": "reasoning", "text": "look"},
            {"type": "tool_use", "id": "a", "name": "ls", "input": {"p": "."}},
            {"type": "tool_use", "id": "b", "name": "cat", "input": {"p": "x"}},
        ]
        first = store.append_message(conv, "assistant", calls)
        store.append_message(
            conv, "user", [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]
        )
        stopped = store.start_message(conv, "assistant")
        store.append_block(conv, stopped, {"type": "text", "text": "Let me ch"})
        store.interrupt_message(conv, stopped, reason="user pressed stop")
        store.compact(conv, "Earlier: a listing.", through=first)
        extra = store.append_message(conv, "user", [{"type": "text", "text": "again"}])
        store.rewind(conv, to=extra)
        store.append_message(conv, "assistant", [{"type": "text", "text": "done\n"}])
        store.start_message(conv, "assistant")  # left open, empty
    return conv


@pytest.mark.parametrize("options", [[], ["--shape", "anthropic"], ["--compact"]])
def test_the_quick_path_prints_what_the_full_command_prints(
    tmp_path: Path, options: list[str]
) -> None:
    db = tmp_path / "s.db"
    conv = busy_conversation(db)
    full = cli("--db", str(db), "replay", str(conv), *options, quick=False)
    assert full.returncode == 0, full.stderr
    argv = ["--db", str(db), "replay", str(conv), *options]
    assert quick_replay(argv) is True  # the full command stored the model
    quick = cli(*argv)
    assert (quick.returncode, quick.stdout, quick.stderr) == (0, full.stdout, b"")


def test_a_conversation_whose_writer_kept_its_model_is_quick_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Never replayed, written by stores that keep the model in each append (one more append
    by another store included): the quick path answers at once, printing what the full
    command prints."""
    db = tmp_path / "s.db"
    conv = busy_conversation(db)
    with open_store(db) as store:
        store.append_message(conv, "user", [{"type": "text", "text": "one more"}])
    argv = ["--db", str(db), "replay", str(conv)]
    assert quick_replay(argv) is True
    quick = capsys.readouterr().out
    full = cli(*argv, quick=False)
    assert (full.returncode, full.stderr) == (0, b"")
    assert quick.encode() == full.stdout
    assert "one more" in quick


@pytest.mark.parametrize("options", [[], ["--shape", "anthropic"]])
def test_a_history_opening_with_the_assistant_quick_prints_the_marker_first_too(
    tmp_path: Path, options: list[str]
) -> None:
    """The quick path renders through the engine's render, so it puts the same user message
    before an assistant's opening as the full command does."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "assistant", [{"type": "text", "text": "Picking up."}])
    full = cli("--db", str(db), "replay", str(conv), *options, quick=False)
    argv = ["--db", str(db), "replay", str(conv), *options]
    assert quick_replay(argv) is True
    quick = cli(*argv)
    assert (quick.returncode, quick.stdout, quick.stderr) == (0, full.stdout, b"")
    messages = json.loads(quick.stdout)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert HISTORY_STARTS in json.dumps(messages[0])


def test_it_steps_aside_when_the_model_lags_the_log_or_the_call_is_not_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    conv = busy_conversation(db, replay_model="on_read")
    argv = ["--db", str(db), "replay", str(conv)]
    assert quick_replay(argv) is False  # its writer left the model to readers: none stored yet
    assert cli(*argv).returncode == 0  # the full path runs and stores it
    assert quick_replay(argv) is True
    assert capsys.readouterr().out.startswith("{")
    with open_store(db, replay_model="on_read") as store:
        store.append_message(conv, "user", [{"type": "text", "text": "one more"}])
    assert quick_replay(argv) is False  # an event after the model's version
    with open_store(db) as store:  # a writer keeping models folds the few events it lacks
        store.append_message(conv, "user", [{"type": "text", "text": "and another"}])
    assert quick_replay(argv) is True
    assert json.loads(capsys.readouterr().out) == json.loads(cli(*argv, quick=False).stdout)
    with open_store(db, replay_model="on_read") as store:
        for i in range(DEFER_LIMIT // events_of(store) + 1):  # DEFER_LIMIT events or more
            store.append_message(conv, "user", [{"type": "text", "text": f"more {i}"}])
    with open_store(db) as store:  # ... but leaves a model further behind to readers
        store.append_message(conv, "user", [{"type": "text", "text": "and another"}])
    assert quick_replay(argv) is False
    for other in (
        ["--db", str(db), "replay", str(conv), "--vision"],
        ["--db", str(db), "replay", str(conv), "--full"],
        ["--db", str(db), "replay", str(conv)[:8]],
        ["--db", str(db), "show", str(conv)],
        ["--db", str(tmp_path / "missing.db"), "replay", str(conv)],
        ["replay", str(conv)],
    ):
        assert quick_replay(other) is False
    assert capsys.readouterr().out == ""
    assert not (tmp_path / "missing.db").exists()


def test_the_store_named_by_convstore_db_is_answered_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`convstore replay CONV` with the store in CONVSTORE_DB (what --db defaults to) takes the
    quick path as `--db PATH` does, printing the same; an explicit --db still wins."""
    db = tmp_path / "s.db"
    conv = busy_conversation(db)
    full = cli("--db", str(db), "replay", str(conv), quick=False)
    assert full.returncode == 0, full.stderr
    monkeypatch.setenv("CONVSTORE_DB", str(db))
    assert quick_replay(["replay", str(conv)]) is True
    assert capsys.readouterr().out.encode() == full.stdout
    monkeypatch.setenv("CONVSTORE_DB", str(tmp_path / "missing.db"))
    assert quick_replay(["replay", str(conv)]) is False
    assert quick_replay(["--db", str(db), "replay", str(conv)]) is True
    monkeypatch.setenv("CONVSTORE_DB", "")
    assert quick_replay(["replay", str(conv)]) is False


def test_an_erased_conversation_is_not_answered_from_what_is_left(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    conv = busy_conversation(db)
    argv = ["--db", str(db), "replay", str(conv)]
    assert cli(*argv).returncode == 0
    with open_store(db) as store:
        store.erase(conv, reason="test")
    assert quick_replay(argv) is False
    gone = cli(*argv)
    assert gone.returncode == 2
    assert b"not found" in gone.stderr


def test_the_names_it_reads_are_the_stores_own(tmp_path: Path) -> None:
    assert (MARKER_TABLE, tuple(map(str, STORE_FORMATS))) == (QUICK_MARKER, QUICK_FORMATS)
    with open_store(tmp_path / "s.db") as s:
        assert s._log.recorder.events_table_name == EVENTS_TABLE  # type: ignore[attr-defined]
    assert {HEADS, MESSAGES} == {"convstore_replay_heads", "convstore_replay_messages"}


def test_a_process_importing_only_the_quick_path_loads_no_model() -> None:
    code = (
        "import sys; import convstore.app.quick_replay; "
        "print(sorted(m for m in ('pydantic', 'eventsourcing', 'click') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("value", "answered"), [("1", True), ("2", True), ("3", True), ("4", False)]
)
def test_stores_of_either_format_are_answered_and_no_other(
    tmp_path: Path, value: str, answered: bool
) -> None:
    """The model tables are the same in stores of format 1, 2 and 3; a newer format is left
    to the full command, which refuses it."""
    db = tmp_path / "s.db"
    conv = busy_conversation(db)
    argv = ["--db", str(db), "replay", str(conv)]
    assert cli(*argv, quick=False).returncode == 0
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE convstore_store SET value = ? WHERE key = 'format'", (value,))
        conn.commit()
    assert quick_replay(argv) is answered


def test_only_settings_that_cannot_change_a_read_keep_the_quick_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "s.db"
    conv = busy_conversation(db)
    argv = ["--db", str(db), "replay", str(conv)]
    assert cli(*argv, quick=False).returncode == 0  # stores the model
    monkeypatch.setenv("CONVSTORE_AUDIT_DB", str(tmp_path / "a.db"))
    monkeypatch.setenv("CONVSTORE_MAX_BLOCK_BYTES", "10")
    assert quick_replay(argv) is True
    capsys.readouterr()
    for name in ("CONVSTORE_CIPHER_KEY", "CONVSTORE_COMPRESSOR_TOPIC", "CONVSTORE_DEBUG"):
        with monkeypatch.context() as m:
            m.setenv(name, "x")
            assert quick_replay(argv) is False, name
    assert capsys.readouterr().out == ""
