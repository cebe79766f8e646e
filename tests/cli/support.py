"""Helpers the command-line tests share: running the CLI in-process and as the installed
script, reading a store back, and three stores to start from (the fixtures, registered for this
directory by tests/cli/conftest.py).

The contract the tests check: exit 0 on success; exit 2 with one ``error: …`` line for bad input
and nothing written; exit 1 with one line when the store itself fails.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

from convstore.app.demo import tiny_png
from convstore.cli import cli
from tests.conftest import one_error_line

CONVSTORE = Path(sys.executable).parent / "convstore"
"""The installed console script, next to the interpreter running the tests."""

PNG = base64.b64encode(tiny_png()).decode()
UNKNOWN_ID = "0b8e7c0e-3d6f-4c1a-9a51-5e2f1c9d7a10"
TEXT_BLOCK = {"type": "text", "text": "hello"}


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store path that does not exist yet."""
    return tmp_path / "store.db"


def invoke(
    db: Path | None,
    *args: str,
    stdin: str | bytes | None = None,
    env: dict[str, str | None] | None = None,
) -> Result:
    """Run the CLI in-process, with ``--db`` when a path is given."""
    argv = ["--db", str(db), *args] if db is not None else list(args)
    return CliRunner().invoke(cli, argv, input=stdin, env=env)


def ok(db: Path | None, *args: str, stdin: str | bytes | None = None) -> str:
    """Run the CLI, insist it succeeded quietly, and return its stdout."""
    result = invoke(db, *args, stdin=stdin)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr == ""
    assert result.exception is None
    return result.stdout


def blocks_json(*blocks: dict[str, Any]) -> str:
    """Blocks as the JSON array ``append`` reads."""
    return json.dumps(list(blocks))


def assert_refused(result: Result, *fragments: str, code: int = 2) -> str:
    """Exit ``code``, nothing on stdout, one ``error:`` line on stderr naming the fragments."""
    assert isinstance(result.exception, SystemExit), result.exception
    return one_error_line(result.exit_code, result.stdout, result.stderr, *fragments, code=code)


def dump(db: Path) -> list[Any]:
    """Every stored event row, in insertion order: the store's whole content."""
    assert db.exists()
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()


def new_conversation(db: Path, title: str | None = None) -> str:
    """A new conversation's id, made through the CLI."""
    args = ["new", "--title", title] if title else ["new"]
    return str(UUID(ok(db, *args).strip()))


def append(
    db: Path, conv: str, role: str, *blocks: dict[str, Any], leave_open: bool = False
) -> str:
    """Record a message through the CLI (stdin); returns its id."""
    flags = ["--open"] if leave_open else []
    out = ok(db, "append", conv, "--role", role, *flags, stdin=blocks_json(*blocks))
    return str(UUID(out.strip()))


def replay(db: Path, conv: str, *flags: str) -> dict[str, Any]:
    """The parsed replay JSON."""
    body: dict[str, Any] = json.loads(ok(db, "replay", conv, *flags))
    return body


def log_events(db: Path, conv: str) -> list[dict[str, Any]]:
    """The parsed ``log`` output, one event per line."""
    return [json.loads(line) for line in ok(db, "log", conv).splitlines()]


def anthropic_text(message: dict[str, Any]) -> str:
    """The text parts of an Anthropic wire message, joined."""
    return "\n\n".join(part["text"] for part in message["content"] if part["type"] == "text")


def walk(value: Any) -> Iterator[Any]:
    """Every value nested in a JSON document, dict keys included."""
    yield value
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def run_script(
    *args: str, stdin: bytes | int | None = b"", extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the installed console script; stdin is a pipe (bytes) or a file descriptor."""
    env = {k: v for k, v in os.environ.items() if k not in {"CONVSTORE_DB", "CONVSTORE_DEBUG"}}
    env.update(extra_env or {})
    if isinstance(stdin, int):
        return subprocess.run(
            [str(CONVSTORE), *args],
            stdin=stdin,
            capture_output=True,
            env=env,
            timeout=60,
            check=False,
        )
    return subprocess.run(
        [str(CONVSTORE), *args], input=stdin, capture_output=True, env=env, timeout=60, check=False
    )


def assert_script_failed(proc: subprocess.CompletedProcess[bytes], code: int) -> str:
    """The script exited ``code`` with one ``error:`` line on stderr and no traceback."""
    stderr = proc.stderr.decode()
    assert proc.returncode == code, (proc.returncode, proc.stdout, stderr)
    assert proc.stdout == b""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# -- a store with a little of everything -----------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """A store holding one conversation with an open, an ended and an interrupted message."""

    db: Path
    conv: str
    open_msg: str
    ended_msg: str
    interrupted_msg: str


@pytest.fixture
def seeded(db: Path) -> Seeded:
    """A small conversation whose messages are in every status; tool call ``call_1`` exists."""
    conv = new_conversation(db, "seeded")
    append(db, conv, "user", TEXT_BLOCK)
    ended = append(
        db, conv, "assistant", {"type": "tool_use", "id": "call_1", "name": "ls", "input": {}}
    )
    interrupted = append(db, conv, "assistant", TEXT_BLOCK, leave_open=True)
    ok(db, "interrupt", conv, interrupted)
    open_msg = append(db, conv, "assistant", leave_open=True)
    return Seeded(db, conv, open_msg, ended, interrupted)


@dataclass(frozen=True)
class Recorded:
    """A full agent conversation recorded through every write command."""

    db: Path
    conv: str
    message_ids: list[str]
    roles: list[str]


SYSTEM_TEXT = "You are terse."


@pytest.fixture
def recorded(db: Path, tmp_path: Path) -> Recorded:
    """Ten messages covering every block kind, every input source and every message status."""
    conv = new_conversation(db, "full")
    ids: list[str] = []
    roles: list[str] = []

    def note(message_id: str, role: str) -> None:
        ids.append(str(UUID(message_id.strip())))
        roles.append(role)

    # 1. system, blocks from a FILE argument
    system_file = tmp_path / "system.json"
    system_file.write_text(blocks_json({"type": "text", "text": SYSTEM_TEXT}))
    note(ok(db, "append", conv, "--role", "system", str(system_file)), "system")
    # 2. user text and screenshot, from stdin via "-"
    user_blocks = blocks_json(
        {"type": "text", "text": "What is in the repo?"},
        {"type": "image", "media_type": "image/png", "data": PNG},
    )
    note(ok(db, "append", conv, "--role", "user", "-", stdin=user_blocks), "user")
    # 3. assistant reasoning, text and two parallel calls, from stdin with no argument
    assistant_blocks = blocks_json(
        {"type": "reasoning", "text": "Look first."},
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "call_1", "name": "ls", "input": {"path": "."}},
        {"type": "tool_use", "id": "call_2", "name": "cat", "input": {"file": "missing"}},
    )
    note(ok(db, "append", conv, "--role", "assistant", stdin=assistant_blocks), "assistant")
    # 4. user: a result and an error result
    results = blocks_json(
        {"type": "tool_result", "tool_use_id": "call_1", "content": "README.md"},
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": "no such file",
            "is_error": True,
        },
    )
    note(ok(db, "append", conv, "--role", "user", stdin=results), "user")
    # 5. assistant streamed: --open, add-block from a file and from stdin, end
    streamed = append(db, conv, "assistant", leave_open=True)
    block_file = tmp_path / "block.json"
    block_file.write_text(json.dumps({"type": "text", "text": "Running the tests."}))
    assert ok(db, "add-block", conv, streamed, str(block_file)) == ""
    call_3 = {"type": "tool_use", "id": "call_3", "name": "run_tests", "input": {"k": "x"}}
    assert ok(db, "add-block", conv, streamed, "-", stdin=json.dumps(call_3)) == ""
    assert ok(db, "end", conv, streamed) == ""
    note(streamed, "assistant")
    # 6. user: a result with a text part and an image part
    note(
        append(
            db,
            conv,
            "user",
            {
                "type": "tool_result",
                "tool_use_id": "call_3",
                "content": [
                    {"type": "text", "text": "3 passed"},
                    {"type": "image", "media_type": "image/png", "data": PNG},
                ],
            },
        ),
        "user",
    )
    # 7. assistant interrupted with a reason
    stopped = append(db, conv, "assistant", leave_open=True)
    ok(db, "add-block", conv, stopped, stdin=json.dumps({"type": "text", "text": "Working"}))
    assert ok(db, "interrupt", conv, stopped, "--reason", "user pressed stop") == ""
    note(stopped, "assistant")
    # 8. assistant with an image (assistants cannot carry images on the wire)
    note(
        append(
            db,
            conv,
            "assistant",
            {"type": "image", "media_type": "image/png", "data": PNG},
            {"type": "text", "text": "Here is a chart."},
        ),
        "assistant",
    )
    # 9. assistant interrupted without a reason
    cut = append(db, conv, "assistant", {"type": "text", "text": "partial"}, leave_open=True)
    assert ok(db, "interrupt", conv, cut) == ""
    note(cut, "assistant")
    # 10. assistant whose tool call landed but that was never ended (the process died)
    died = append(
        db,
        conv,
        "assistant",
        {"type": "tool_use", "id": "call_4", "name": "grep", "input": {"pattern": "x"}},
        leave_open=True,
    )
    note(died, "assistant")
    return Recorded(db, conv, ids, roles)
