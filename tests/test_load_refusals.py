"""`load` holds every event of a dump to the write API's rules, and a refused dump leaves
nothing behind: no store file where there was none, no event in a PostgreSQL schema.

The dumps are real ones (`convstore dump` of a real store) with one event edited the way a
hand-made or damaged dump would be; the loads run the installed console script, into a new
SQLite file and into a fresh PostgreSQL schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import convstore
from convstore.store.transfer import BATCH_SIZE
from tests.conftest import one_error_line

CONVSTORE = Path(sys.executable).parent / "convstore"

Edit = Callable[[dict[str, Any]], None]
"""Changes one event line of a dump (the whole line: conversation, version, topic, event)."""


def run(
    *args: str, stdin: bytes, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if k != "CONVSTORE_DB"}
    full_env.update(env or {})
    return subprocess.run(
        [str(CONVSTORE), *args],
        input=stdin,
        capture_output=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def source_dump(tmp_path: Path) -> list[dict[str, Any]]:
    """A real dump's lines, parsed: a conversation with a title, a label, a message and an
    interruption, then a rename."""
    db = tmp_path / "source.db"
    with convstore.open_store(db) as store:
        conv = store.new_conversation(title="first")
        store.set_labels(conv, {"team": "red"})
        store.append_message(conv, "user", [{"type": "text", "text": "hello"}])
        store.rename(conv, "second")
    dumped = run("--db", str(db), "dump", stdin=b"")
    assert dumped.returncode == 0, dumped.stderr
    return [json.loads(line) for line in dumped.stdout.splitlines()]


def encode(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def edited(lines: list[dict[str, Any]], event_type: str, edit: Edit) -> bytes:
    """The dump with ``edit`` applied to the last event line of ``event_type``."""
    copy = json.loads(json.dumps(lines))
    [*_, line] = [line for line in copy if line.get("event", {}).get("type") == event_type]
    edit(line)
    return encode(copy)


def naive_time(line: dict[str, Any]) -> None:
    line["event"]["timestamp"] = "2026-01-02T03:04:05.123456"


def nul_title(line: dict[str, Any]) -> None:
    line["event"]["title"] = "a\x00b"


def nul_label(line: dict[str, Any]) -> None:
    line["event"]["labels"] = {"team": "re\x00d"}


def nil_conversation(lines: list[dict[str, Any]]) -> bytes:
    nil = str(UUID(int=0))
    copy = json.loads(json.dumps(lines))
    for line in copy[1:-1]:
        line["conversation"] = line["event"]["originator_id"] = nil
    return encode(copy)


BAD_DUMPS: dict[str, tuple[Callable[[list[dict[str, Any]]], bytes], str]] = {
    "naive timestamp": (
        lambda lines: edited(lines, "conversation_started", naive_time),
        "timezone info",
    ),
    "naive timestamp, later event": (
        lambda lines: edited(lines, "block_recorded", naive_time),
        "timezone info",
    ),
    "NUL in the title": (lambda lines: edited(lines, "conversation_started", nul_title), "NUL"),
    "NUL in a rename": (lambda lines: edited(lines, "conversation_renamed", nul_title), "NUL"),
    "NUL in a label": (lambda lines: edited(lines, "labels_set", nul_label), "NUL"),
    "the nil UUID": (nil_conversation, "nil UUID"),
}


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the dump is loaded: a SQLite file that does not exist yet, or a fresh schema."""
    if request.param == "sqlite":
        (tmp_path / "target").mkdir()
        return str(tmp_path / "target" / "t.db")
    return str(request.getfixturevalue("postgres_url"))


def assert_nothing_left(target: str) -> None:
    if "://" not in target:
        assert list(Path(target).parent.iterdir()) == []
        return
    with convstore.open_store(target) as store:
        assert store.log_position() == 0
        assert store.conversations() == []


@pytest.mark.parametrize("case", sorted(BAD_DUMPS))
def test_a_dump_breaking_a_write_rule_is_refused_in_one_line_leaving_nothing(
    case: str, target: str, tmp_path: Path
) -> None:
    """A time with no zone, NUL in a title, rename or label, the nil UUID as a conversation
    id: what the write API refuses, load refuses too (exit 2, one line naming the line), and
    nothing is left: no store file (nor a temporary one), no event."""
    make, fragment = BAD_DUMPS[case]
    proc = run("--db", target, "load", "-", stdin=make(source_dump(tmp_path)))
    one_error_line(proc.returncode, proc.stdout, proc.stderr, "line ", fragment)
    assert_nothing_left(target)


def test_a_block_past_the_target_stores_limit_is_refused(target: str, tmp_path: Path) -> None:
    """Blocks are held to the target store's limits, as its append would hold them."""
    lines = source_dump(tmp_path)
    proc = run(
        "--db", target, "load", "-", stdin=encode(lines), env={"CONVSTORE_MAX_BLOCK_BYTES": "20"}
    )
    one_error_line(proc.returncode, proc.stdout, proc.stderr, "the limit is 20")
    assert_nothing_left(target)


def test_a_refusal_past_the_first_batch_leaves_no_new_store_file(tmp_path: Path) -> None:
    """A dump whose last event breaks a rule, after more than one batch of good ones: a new
    SQLite file is made whole or not at all, so nothing is left (not even the batches that
    passed), and the refusal names no prefix to continue from."""
    lines = source_dump(tmp_path)
    header, started, labelled = lines[0], lines[1], lines[2]
    assert labelled["event"]["type"] == "labels_set"
    events = [started]
    for version in range(2, BATCH_SIZE + 10):
        line = json.loads(json.dumps(labelled))
        line["version"] = line["event"]["originator_version"] = version
        events.append(line)
    nul_label(events[-1])
    dump = encode([header, *events, {"end": {"events": len(events), "conversations": 1}}])
    (tmp_path / "target").mkdir()
    target = tmp_path / "target" / "t.db"
    proc = run("--db", str(target), "load", "-", stdin=dump)
    line = one_error_line(proc.returncode, proc.stdout, proc.stderr, "NUL")
    assert "holds the first" not in line
    assert list(target.parent.iterdir()) == []
    nul_label_fixed = dump.replace(b"re\\u0000d", b"red")
    loaded = run("--db", str(target), "load", "-", stdin=nul_label_fixed)
    assert loaded.returncode == 0, loaded.stderr
    with convstore.open_store(target) as store:
        assert store.log_position() == len(events)
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.db"]
