"""The ``convstore`` command line, end to end, against real SQLite files.

Most tests drive ``convstore.cli.cli`` through click's ``CliRunner`` (stdout and stderr kept
apart); the ones marked ``slow`` run the installed console script as a subprocess to prove the
entry point, the exit codes and that a failure is one line on stderr with no traceback.

The contract checked here: exit 0 on success; exit 2 with one ``error: …`` line for bad input
and nothing written; exit 1 with one line when the store itself fails.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

from convstore.cli import cli, command_names
from convstore.demo import tiny_png
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


# -- happy paths ---------------------------------------------------------------------------------


def test_new_prints_an_id_and_creates_a_private_store(db: Path) -> None:
    """`new` prints one UUID line and creates the store file with mode 0o600."""
    out = ok(db, "new", "--title", "triage")
    assert out.endswith("\n")
    assert len(out.splitlines()) == 1
    UUID(out.strip())
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


def test_append_reads_a_file_argument(seeded: Seeded, tmp_path: Path) -> None:
    """`append CONV --role R FILE` records the blocks in FILE as one ended message."""
    source = tmp_path / "blocks.json"
    source.write_text(blocks_json({"type": "text", "text": "from a file"}))
    message = ok(seeded.db, "append", seeded.conv, "--role", "user", str(source)).strip()
    events = log_events(seeded.db, seeded.conv)[-3:]
    assert [e["type"] for e in events] == ["message_started", "block_appended", "message_ended"]
    assert {e["message_id"] for e in events} == {message}
    assert events[1]["block"] == {"type": "text", "text": "from a file"}


@pytest.mark.parametrize("dash", [True, False], ids=["dash", "no-argument"])
def test_append_reads_stdin(seeded: Seeded, dash: bool) -> None:
    """`append` reads stdin both for `-` and for no FILE argument."""
    args = ["append", seeded.conv, "--role", "user", *(["-"] if dash else [])]
    stdin = blocks_json({"type": "text", "text": "piped"}, {"type": "text", "text": "twice"})
    message = ok(seeded.db, *args, stdin=stdin).strip()
    events = log_events(seeded.db, seeded.conv)[-4:]
    assert [e["type"] for e in events] == [
        "message_started",
        "block_appended",
        "block_appended",
        "message_ended",
    ]
    assert [e["block"]["text"] for e in events[1:3]] == ["piped", "twice"]
    assert events[0]["message_id"] == message


def test_open_add_block_end_streams_one_message(seeded: Seeded) -> None:
    """`append --open` then `add-block` twice then `end` records the blocks in order, then ends."""
    db, conv = seeded.db, seeded.conv
    message = append(db, conv, "assistant", {"type": "text", "text": "first"}, leave_open=True)
    ok(db, "add-block", conv, message, stdin=json.dumps({"type": "text", "text": "second"}))
    ok(db, "add-block", conv, message, "-", stdin=json.dumps({"type": "reasoning", "text": "3rd"}))
    ok(db, "end", conv, message)
    events = [e for e in log_events(db, conv) if e.get("message_id") == message]
    assert [e["type"] for e in events] == [
        "message_started",
        "block_appended",
        "block_appended",
        "block_appended",
        "message_ended",
    ]
    assert [e["index"] for e in events[1:4]] == [0, 1, 2]
    assert replay(db, conv)["messages"][-1]["content"].endswith(
        "first\n\nsecond\n\n[Reasoning]: 3rd"
    )


def test_interrupt_with_and_without_reason(seeded: Seeded) -> None:
    """`interrupt` records the reason when given and replay closes the message with the marker."""
    db, conv = seeded.db, seeded.conv
    with_reason = append(db, conv, "assistant", TEXT_BLOCK, leave_open=True)
    assert ok(db, "interrupt", conv, with_reason, "--reason", "timed out") == ""
    events = log_events(db, conv)
    assert events[-1]["type"] == "message_interrupted"
    assert events[-1]["reason"] == "timed out"
    # the seeded fixture already interrupted one message without --reason
    bare = [e for e in events if e.get("message_id") == seeded.interrupted_msg][-1]
    assert bare["type"] == "message_interrupted"
    assert bare["reason"] is None
    contents = [m["content"] for m in replay(db, conv)["messages"]]
    assert "hello\n\n[Interrupted: timed out]" in contents
    assert "hello\n\n[Interrupted]" in contents


def test_replay_openai_text_only(recorded: Recorded) -> None:
    """OpenAI text-only replay: one string message per stored message, every block as prose."""
    body = replay(recorded.db, recorded.conv, "--shape", "openai", "--no-vision")
    assert list(body) == ["messages"]
    messages = body["messages"]
    assert [m["role"] for m in messages] == recorded.roles
    assert all(isinstance(m["content"], str) for m in messages)
    content = [m["content"] for m in messages]
    assert content[0] == SYSTEM_TEXT
    assert content[1].startswith("What is in the repo?\n\n[Image not shown: an image/png image")
    assert content[1].endswith("but this model cannot see images.]")
    assert content[2] == (
        "[Reasoning]: Look first.\n\nListing.\n\n"
        'Tool use: ls({"path":"."})\n\nTool use: cat({"file":"missing"})'
    )
    assert content[3] == "Result (ls): README.md\n\nError (cat): no such file"
    assert content[4] == 'Running the tests.\n\nTool use: run_tests({"k":"x"})'
    assert content[5].startswith("Result (run_tests): 3 passed\n[Image not shown:")
    assert content[6] == "Working\n\n[Interrupted: user pressed stop]"
    assert "[Image not shown:" in content[7]
    assert content[7].endswith("Here is a chart.")
    assert content[8] == "partial\n\n[Interrupted]"
    assert content[9] == 'Tool use: grep({"pattern":"x"})'
    assert "image_url" not in json.dumps(body)


def test_replay_openai_vision(recorded: Recorded) -> None:
    """OpenAI vision replay: user images become image_url parts; assistant images stay markers."""
    messages = replay(recorded.db, recorded.conv, "--vision")["messages"]
    assert len(messages) == len(recorded.message_ids)
    url = f"data:image/png;base64,{PNG}"
    assert messages[1]["content"] == [
        {"type": "text", "text": "What is in the repo?"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    assert messages[5]["content"] == [
        {"type": "text", "text": "Result (run_tests): 3 passed"},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    assistant_image = messages[7]["content"]
    assert isinstance(assistant_image, str)
    assert "assistant messages cannot carry images" in assistant_image
    image_roles = {
        m["role"]
        for m in messages
        if isinstance(m["content"], list)
        and any(part["type"] == "image_url" for part in m["content"])
    }
    assert image_roles == {"user"}


def test_replay_anthropic_text_only(recorded: Recorded) -> None:
    """Anthropic text-only replay: system hoisted out, one text-block message per other message."""
    body = replay(recorded.db, recorded.conv, "--shape", "anthropic", "--compact")
    assert body["system"] == SYSTEM_TEXT
    messages = body["messages"]
    assert [m["role"] for m in messages] == [r for r in recorded.roles if r != "system"]
    for message in messages:
        assert [part["type"] for part in message["content"]] == ["text"]
    assert anthropic_text(messages[2]) == "Result (ls): README.md\n\nError (cat): no such file"
    assert anthropic_text(messages[5]) == "Working\n\n[Interrupted: user pressed stop]"
    assert "[Image not shown:" in anthropic_text(messages[0])


def test_replay_anthropic_vision(recorded: Recorded) -> None:
    """Anthropic vision replay: user images become base64 image blocks, nowhere else."""
    messages = replay(recorded.db, recorded.conv, "--shape", "anthropic", "--vision")["messages"]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    assert messages[0]["content"] == [{"type": "text", "text": "What is in the repo?"}, image]
    assert messages[4]["content"] == [
        {"type": "text", "text": "Result (run_tests): 3 passed"},
        image,
    ]
    for message in messages:
        if message["role"] != "user":
            assert all(part["type"] == "text" for part in message["content"])


def test_replay_compact_is_one_line(recorded: Recorded) -> None:
    """`replay --compact` prints the same JSON on one line."""
    compact = ok(recorded.db, "replay", recorded.conv, "--compact")
    assert len(compact.splitlines()) == 1
    assert json.loads(compact) == replay(recorded.db, recorded.conv)


def test_replay_never_emits_tool_roles_or_call_ids(recorded: Recorded) -> None:
    """No replay shape or vision setting emits tool roles, tool blocks or tool-call ids."""
    for flags in (["--shape", "openai"], ["--shape", "anthropic"]):
        for vision in ("--vision", "--no-vision"):
            body = replay(recorded.db, recorded.conv, *flags, vision)
            values = list(walk(body))
            for forbidden in ("tool", "tool_calls", "tool_call_id", "tool_use", "tool_result"):
                assert forbidden not in values
            for call_id in ("call_1", "call_2", "call_3", "call_4"):
                assert call_id not in json.dumps(body)


def test_show_prints_a_readable_transcript(recorded: Recorded) -> None:
    """`show` lists each message with number, role and status, and its blocks as prose."""
    out = ok(recorded.db, "show", recorded.conv)
    headers = [line for line in out.splitlines() if line.startswith("[") and "] " in line[:5]]
    assert len(headers) == len(recorded.roles)
    statuses = [
        "ended",
        "ended",
        "ended",
        "ended",
        "ended",
        "ended",
        "interrupted",
        "ended",
        "interrupted",
        "open (never ended)",
    ]
    for number, (header, role, status) in enumerate(
        zip(headers, recorded.roles, statuses, strict=True), 1
    ):
        assert header.startswith(f"[{number}] {role} "), header
        assert status in header, header
    assert "    [Interrupted: user pressed stop]" in out
    assert "    Error (cat): no such file" in out
    assert '    Tool use: grep({"pattern":"x"})' in out


def test_log_prints_every_event_as_a_json_line(recorded: Recorded) -> None:
    """`log` prints one JSON event per line, versions 1..n gapless, types as recorded."""
    events = log_events(recorded.db, recorded.conv)
    assert [e["originator_version"] for e in events] == list(range(1, len(events) + 1))
    assert {e["originator_id"] for e in events} == {recorded.conv}
    types = [e["type"] for e in events]
    assert types[0] == "conversation_started"
    assert events[0]["title"] == "full"
    assert types.count("conversation_started") == 1
    assert types.count("message_started") == 10
    assert types.count("block_appended") == 17
    assert types.count("message_ended") == 7
    assert types.count("message_interrupted") == 2
    started = [e["message_id"] for e in events if e["type"] == "message_started"]
    assert started == recorded.message_ids
    results = {
        e["block"]["tool_use_id"]: e["tool_name"]
        for e in events
        if e["type"] == "block_appended" and e["block"]["type"] == "tool_result"
    }
    assert results == {"call_1": "ls", "call_2": "cat", "call_3": "run_tests"}


def test_list_plain_and_json(db: Path) -> None:
    """`list` prints id, time and title oldest first; `list --json` the same as objects."""
    first = new_conversation(db, "first")
    second = new_conversation(db)
    lines = ok(db, "list").splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(first)
    assert lines[0].endswith("  first")
    assert lines[1].startswith(second)
    rows = json.loads(ok(db, "list", "--json"))
    assert [(r["id"], r["title"]) for r in rows] == [(first, "first"), (second, None)]
    assert all(isinstance(r["created_at"], str) for r in rows)


def test_tool_result_without_a_recorded_call_is_unknown(seeded: Seeded) -> None:
    """A result whose call is not recorded replays as `Result (unknown)` and logs tool_name."""
    result = {"type": "tool_result", "tool_use_id": "nope", "content": "orphan"}
    append(seeded.db, seeded.conv, "user", result)
    assert replay(seeded.db, seeded.conv)["messages"][-1]["content"] == "Result (unknown): orphan"
    block_line = ok(seeded.db, "log", seeded.conv).splitlines()[-2]
    assert '"type":"block_appended"' in block_line
    assert '"tool_name":"unknown"' in block_line


def test_tool_result_name_on_the_block_wins(seeded: Seeded) -> None:
    """A result carrying its own `name` replays under that name even without a recorded call."""
    result = {"type": "tool_result", "tool_use_id": "zz", "content": "x", "name": "fetch"}
    append(seeded.db, seeded.conv, "user", result)
    assert replay(seeded.db, seeded.conv)["messages"][-1]["content"] == "Result (fetch): x"


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_demo_json(db: Path, shape: str) -> None:
    """`demo --json` records the demo and replays it text-only and with vision, no tool roles."""
    payload = json.loads(ok(db, "demo", "--shape", shape, "--json"))
    assert set(payload) == {"conversation", "store", "text_only", "vision"}
    assert payload["store"] == str(db)
    UUID(payload["conversation"])
    for key in ("text_only", "vision"):
        values = list(walk(payload[key]))
        assert "tool" not in values
        assert "tool_calls" not in values
        assert "tool_call_id" not in values
        assert "Tool use: run_tests" in json.dumps(payload[key])
    image_part = "image_url" if shape == "openai" else "image"
    assert image_part in list(walk(payload["vision"]))
    assert image_part not in list(walk(payload["text_only"]))
    assert "[Image not shown:" in json.dumps(payload["text_only"])
    assert "[Image not shown:" not in json.dumps(payload["vision"])


def test_demo_plain_then_show(db: Path) -> None:
    """`demo` prints both replays and a hint; `show` of it marks the killed turn as never ended."""
    out = ok(db, "demo", "--shape", "anthropic")
    assert "--- Replay for a text-only model (anthropic shape) ---" in out
    assert "--- Replay for a vision model (anthropic shape) ---" in out
    assert "Tool use: run_tests" in out
    assert '"tool_calls"' not in out
    assert '"tool_call_id"' not in out
    assert '"role": "tool"' not in out
    rows = json.loads(ok(db, "list", "--json"))
    assert [r["title"] for r in rows] == ["Why is the build red?"]
    conv = rows[0]["id"]
    assert f"show {conv}" in out
    transcript = ok(db, "show", conv)
    assert "open (never ended)" in transcript
    assert 'Tool use: run_tests({"k":"test_login"})' in transcript


def test_db_option_and_environment_variable(tmp_path: Path) -> None:
    """CONVSTORE_DB selects the store when --db is absent; --db wins when both are given."""
    from_env = tmp_path / "env.db"
    from_option = tmp_path / "option.db"
    env: dict[str, str | None] = {"CONVSTORE_DB": str(from_env)}
    created = invoke(None, "new", "--title", "via env", env=env)
    assert created.exit_code == 0, created.stderr
    assert from_env.exists()
    listed = invoke(None, "list", env=env)
    assert listed.stdout.startswith(created.stdout.strip())
    overridden = invoke(from_option, "new", "--title", "via option", env=env)
    assert overridden.exit_code == 0, overridden.stderr
    assert from_option.exists()
    assert json.loads(ok(from_option, "list", "--json"))[0]["title"] == "via option"
    assert [r["title"] for r in json.loads(ok(from_env, "list", "--json"))] == ["via env"]


def test_demo_never_records_into_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --db or CONVSTORE_DB `demo` makes a fresh store in a temporary directory, says
    where, and leaves the default store alone; with CONVSTORE_DB it records there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where mkdtemp makes dirs
    (tmp_path / "tmp").mkdir()
    payload = json.loads(ok(None, "demo", "--json"))
    written = Path(payload["store"])
    assert written.parent.parent == tmp_path / "tmp"
    assert written.parent.name.startswith("convstore-demo-")
    assert [r["title"] for r in json.loads(ok(written, "list", "--json"))] == [
        "Why is the build red?"
    ]
    assert not (tmp_path / "xdg" / "convstore" / "convstore.db").exists()
    first_line = ok(None, "demo").splitlines()[0]
    assert first_line.startswith("Recorded demo conversation ")
    assert str(tmp_path / "tmp") in first_line
    chosen = tmp_path / "chosen.db"
    monkeypatch.setenv("CONVSTORE_DB", str(chosen))
    assert json.loads(ok(None, "demo", "--json"))["store"] == str(chosen)


def test_default_location_is_under_xdg_data_home(tmp_path: Path) -> None:
    """Without --db or CONVSTORE_DB the store is made under $XDG_DATA_HOME/convstore/."""
    conv = ok(None, "new").strip()
    default = tmp_path / "xdg" / "convstore" / "convstore.db"
    assert default.exists()
    assert json.loads(ok(default, "list", "--json"))[0]["id"] == conv


def test_every_command_has_help_with_an_example() -> None:
    """`--help` of the group and of every command exits 0 and shows an Example."""
    names = command_names()
    assert {"replay", "audit", "pressure", "verify"} <= set(names)
    for args in ([], *([name] for name in names)):
        for flag in ("--help", "-h"):
            result = invoke(None, *args, flag)
            assert result.exit_code == 0, (args, result.stderr)
            assert "Example" in result.stdout, args
            assert result.stderr == ""


# -- bad input: exit 2, one line, nothing written -----------------------------------------------

NOT_AN_IMAGE = base64.b64encode(b"hello, this is plain text").decode()

BAD_APPEND_INPUTS: list[tuple[str, str, bytes, str]] = [
    ("truncated-json", "user", b'[{"type":"text","text":"hi"', "malformed JSON"),
    ("not-an-array", "user", json.dumps(TEXT_BLOCK).encode(), "expected a JSON array"),
    ("scalar", "user", b"42", "expected a JSON array"),
    ("empty-input", "user", b"", "malformed JSON"),
    (
        "unknown-block-type",
        "user",
        blocks_json({"type": "video", "text": "x"}).encode(),
        "unknown block type 'video'; use one of",
    ),
    ("missing-type", "user", blocks_json({"text": "x"}).encode(), "missing field 'type'"),
    ("missing-field", "user", blocks_json({"type": "text"}).encode(), "missing field 'text'"),
    (
        "extra-field",
        "user",
        blocks_json({"type": "text", "text": "x", "colour": "red"}).encode(),
        "unknown field 'colour'",
    ),
    (
        "wrong-field-type",
        "user",
        blocks_json({"type": "text", "text": 5}).encode(),
        "text block: text",
    ),
    (
        "bad-base64",
        "user",
        blocks_json(
            {"type": "image", "media_type": "image/png", "data": "!!not base64!!"}
        ).encode(),
        "not valid base64",
    ),
    (
        "bytes-not-an-image",
        "user",
        blocks_json({"type": "image", "media_type": "image/png", "data": NOT_AN_IMAGE}).encode(),
        "does not match media_type image/png",
    ),
    (
        "png-declared-as-jpeg",
        "user",
        blocks_json({"type": "image", "media_type": "image/jpeg", "data": PNG}).encode(),
        "found: image/png",
    ),
    (
        "unsupported-media-type",
        "user",
        blocks_json({"type": "image", "media_type": "image/bmp", "data": PNG}).encode(),
        "media_type",
    ),
    ("invalid-utf8", "user", b'[{"type":"text","text":"\xff\xfe"}]', "not valid UTF-8"),
    (
        "nan",
        "assistant",
        b'[{"type":"tool_use","id":"n","name":"f","input":{"x":NaN}}]',
        "NaN is not a JSON number",
    ),
    (
        "duplicate-key",
        "user",
        b'[{"type":"text","text":"a","text":"b"}]',
        "key 'text' appears twice",
    ),
    (
        "tool-use-in-user-message",
        "user",
        blocks_json({"type": "tool_use", "id": "c9", "name": "ls", "input": {}}).encode(),
        "tool_use blocks belong in assistant messages",
    ),
    (
        "tool-result-in-assistant-message",
        "assistant",
        blocks_json({"type": "tool_result", "tool_use_id": "call_1", "content": "x"}).encode(),
        "tool_result blocks belong in user messages",
    ),
    (
        "duplicate-tool-use-id",
        "assistant",
        blocks_json({"type": "tool_use", "id": "call_1", "name": "ls", "input": {}}).encode(),
        "tool_use id 'call_1' is already recorded",
    ),
    (
        "duplicate-tool-use-id-within-the-message",
        "assistant",
        blocks_json(
            {"type": "tool_use", "id": "c7", "name": "ls", "input": {}},
            {"type": "tool_use", "id": "c7", "name": "ls", "input": {}},
        ).encode(),
        "block 1: tool_use id 'c7' appears twice in this message",
    ),
    (
        "only-the-last-block-bad",
        "assistant",
        blocks_json(
            {"type": "reasoning", "text": "fine"},
            {"type": "text", "text": "fine too"},
            {"type": "tool_use", "id": "c8", "name": "ls", "input": {}},
            {"type": "text", "text": "still fine"},
            {"type": "text"},
        ).encode(),
        "block 4: text block: missing field 'text'",
    ),
]


@pytest.mark.parametrize(
    ("role", "payload", "fragment"),
    [case[1:] for case in BAD_APPEND_INPUTS],
    ids=[case[0] for case in BAD_APPEND_INPUTS],
)
def test_append_refuses_bad_input(seeded: Seeded, role: str, payload: bytes, fragment: str) -> None:
    """Each class of bad `append` input exits 2 with one error line and writes nothing."""
    before = dump(seeded.db)
    result = invoke(seeded.db, "append", seeded.conv, "--role", role, stdin=payload)
    assert_refused(result, fragment)
    assert dump(seeded.db) == before


@pytest.mark.parametrize(
    ("role", "payload", "fragment"),
    [case[1:] for case in BAD_APPEND_INPUTS if case[0] in {"truncated-json", "invalid-utf8"}],
    ids=["truncated-json", "invalid-utf8"],
)
def test_append_refuses_bad_input_from_a_file(
    seeded: Seeded, tmp_path: Path, role: str, payload: bytes, fragment: str
) -> None:
    """Bad JSON read from a FILE is refused the same way and the error names the file."""
    source = tmp_path / "bad.json"
    source.write_bytes(payload)
    before = dump(seeded.db)
    result = invoke(seeded.db, "append", seeded.conv, "--role", role, str(source))
    assert_refused(result, fragment, str(source))
    assert dump(seeded.db) == before


BAD_BLOCKS: list[tuple[str, bytes, str]] = [
    ("truncated-json", b'{"type":"text"', "malformed JSON"),
    ("not-an-object", blocks_json(TEXT_BLOCK).encode(), "expected one block as a JSON object"),
    ("unknown-block-type", b'{"type":"audio"}', "audio"),
    ("missing-field", b'{"type":"text"}', "missing field 'text'"),
    ("extra-field", b'{"type":"text","text":"x","y":1}', "unknown field 'y'"),
    ("wrong-field-type", b'{"type":"reasoning","text":["x"]}', "reasoning block: text"),
    ("nan", b'{"type":"tool_use","id":"q","name":"f","input":{"v":NaN}}', "NaN"),
    ("duplicate-key", b'{"type":"text","type":"text","text":"x"}', "appears twice"),
    ("invalid-utf8", b'{"type":"text","text":"\xc3"}', "not valid UTF-8"),
    (
        "tool-result-in-assistant-message",
        b'{"type":"tool_result","tool_use_id":"call_1","content":"x"}',
        "tool_result blocks belong in user messages",
    ),
    (
        "duplicate-tool-use-id",
        b'{"type":"tool_use","id":"call_1","name":"ls","input":{}}',
        "already recorded",
    ),
]


@pytest.mark.parametrize(
    ("payload", "fragment"), [case[1:] for case in BAD_BLOCKS], ids=[case[0] for case in BAD_BLOCKS]
)
def test_add_block_refuses_bad_input(seeded: Seeded, payload: bytes, fragment: str) -> None:
    """Each class of bad `add-block` input exits 2 with one error line and writes nothing."""
    before = dump(seeded.db)
    result = invoke(seeded.db, "add-block", seeded.conv, seeded.open_msg, stdin=payload)
    assert_refused(result, fragment)
    assert dump(seeded.db) == before


def test_append_refuses_a_missing_input_file(seeded: Seeded, tmp_path: Path) -> None:
    """A FILE that does not exist is refused with one line naming it; nothing is written."""
    missing = tmp_path / "nowhere.json"
    before = dump(seeded.db)
    result = invoke(seeded.db, "append", seeded.conv, "--role", "user", str(missing))
    assert_refused(result, "cannot read", str(missing))
    assert dump(seeded.db) == before


def _closed_message_cases() -> list[tuple[str, list[str], str]]:
    return [
        ("add-block-to-ended", ["add-block", "{conv}", "{ended}"], "already ended"),
        (
            "add-block-to-interrupted",
            ["add-block", "{conv}", "{interrupted}"],
            "already interrupted",
        ),
        ("end-twice", ["end", "{conv}", "{ended}"], "already ended; it cannot be ended"),
        ("end-interrupted", ["end", "{conv}", "{interrupted}"], "already interrupted"),
        ("interrupt-ended", ["interrupt", "{conv}", "{ended}"], "cannot be interrupted"),
        ("interrupt-twice", ["interrupt", "{conv}", "{interrupted}"], "already interrupted"),
        ("add-block-unknown-message", ["add-block", "{conv}", UNKNOWN_ID], "not found"),
        ("end-unknown-message", ["end", "{conv}", UNKNOWN_ID], "not found"),
        ("interrupt-unknown-message", ["interrupt", "{conv}", UNKNOWN_ID], "not found"),
        ("add-block-malformed-message-id", ["add-block", "{conv}", "msg-1"], "is not a message id"),
        ("end-malformed-message-id", ["end", "{conv}", "42"], "is not a message id"),
    ]


@pytest.mark.parametrize(
    ("template", "fragment"),
    [case[1:] for case in _closed_message_cases()],
    ids=[case[0] for case in _closed_message_cases()],
)
def test_message_commands_refuse_closed_or_unknown_messages(
    seeded: Seeded, template: list[str], fragment: str
) -> None:
    """Writing to a closed, unknown or malformed message id exits 2 and writes nothing."""
    args = [
        part.format(conv=seeded.conv, ended=seeded.ended_msg, interrupted=seeded.interrupted_msg)
        for part in template
    ]
    before = dump(seeded.db)
    result = invoke(seeded.db, *args, stdin=json.dumps(TEXT_BLOCK))
    assert_refused(result, fragment)
    assert dump(seeded.db) == before


CONVERSATION_COMMANDS: list[tuple[str, list[str], str | None]] = [
    ("append", ["append", "{conv}", "--role", "user"], blocks_json(TEXT_BLOCK)),
    ("add-block", ["add-block", "{conv}", "{msg}"], json.dumps(TEXT_BLOCK)),
    ("end", ["end", "{conv}", "{msg}"], None),
    ("interrupt", ["interrupt", "{conv}", "{msg}", "--reason", "r"], None),
    ("replay", ["replay", "{conv}"], None),
    ("show", ["show", "{conv}"], None),
    ("log", ["log", "{conv}"], None),
]


@pytest.mark.parametrize(
    ("conv", "fragment"),
    [(UNKNOWN_ID, f"conversation {UNKNOWN_ID} not found"), ("not-a-uuid", "is not a conversation")],
    ids=["unknown", "malformed"],
)
@pytest.mark.parametrize(
    ("template", "stdin"),
    [case[1:] for case in CONVERSATION_COMMANDS],
    ids=[case[0] for case in CONVERSATION_COMMANDS],
)
def test_commands_refuse_unknown_or_malformed_conversation_ids(
    seeded: Seeded, template: list[str], stdin: str | None, conv: str, fragment: str
) -> None:
    """Every command naming a conversation refuses an unknown or malformed id with exit 2."""
    args = [part.format(conv=conv, msg=seeded.open_msg) for part in template]
    before = dump(seeded.db)
    result = invoke(seeded.db, *args, stdin=stdin)
    assert_refused(result, fragment)
    assert dump(seeded.db) == before


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["append", "{conv}", "--role", "tool"], "'tool' is not one of"),
        (["append", "{conv}"], "Missing option '--role'"),
        (["replay", "{conv}", "--shape", "gemini"], "'gemini' is not one of"),
        (["frobnicate"], "No such command"),
        (["end", "{conv}"], "Missing argument 'MSG'"),
    ],
    ids=["unknown-role", "missing-role", "unknown-shape", "unknown-command", "missing-argument"],
)
def test_usage_errors_exit_2_and_write_nothing(
    seeded: Seeded, args: list[str], fragment: str
) -> None:
    """Click usage errors (an unknown role among them) exit 2, say what is wrong, write nothing."""
    before = dump(seeded.db)
    result = invoke(seeded.db, *[a.format(conv=seeded.conv) for a in args], stdin="[]")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert fragment in result.stderr
    assert "Traceback" not in result.output
    assert dump(seeded.db) == before


@pytest.mark.parametrize(
    "args",
    [
        ["append", "{conv}", "--role", "tool"],
        ["append", "{conv}"],
        ["replay", "{conv}", "--shape", "gemini"],
        ["list", "--bogus"],
        ["nosuchcommand"],
    ],
)
def test_usage_errors_are_one_error_line(seeded: Seeded, args: list[str]) -> None:
    """Click's usage errors (bad choice, missing option, unknown option or command) are one line."""
    before = dump(seeded.db)
    result = invoke(seeded.db, *[a.format(conv=seeded.conv) for a in args], stdin="[]")
    assert dump(seeded.db) == before
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: ")
    assert "--help" in line


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (["append", UNKNOWN_ID, "--role", "user"], blocks_json(TEXT_BLOCK)),
        (["append", UNKNOWN_ID, "--role", "user"], "[{"),
        (["append", UNKNOWN_ID, "--role", "user", "--open"], "[]"),
        (["add-block", UNKNOWN_ID, UNKNOWN_ID], json.dumps(TEXT_BLOCK)),
        (["end", UNKNOWN_ID, UNKNOWN_ID], None),
        (["interrupt", UNKNOWN_ID, UNKNOWN_ID], None),
        (["replay", UNKNOWN_ID], None),
        (["show", UNKNOWN_ID], None),
        (["log", UNKNOWN_ID], None),
    ],
    ids=[
        "append",
        "append-malformed",
        "append-open",
        "add-block",
        "end",
        "interrupt",
        "replay",
        "show",
        "log",
    ],
)
def test_commands_on_a_missing_store_create_nothing(
    db: Path, args: list[str], stdin: str | None
) -> None:
    """Against a store path that does not exist, commands other than new/demo/list exit 2."""
    result = invoke(db, *args, stdin=stdin)
    assert_refused(result)
    assert not db.exists()
    assert list(db.parent.iterdir()) == []


def test_list_on_a_missing_store_prints_nothing(db: Path) -> None:
    """`list` against a missing store prints nothing (or `[]` with --json) and creates nothing."""
    assert ok(db, "list") == ""
    assert json.loads(ok(db, "list", "--json")) == []
    assert not db.exists()


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
def test_a_file_that_is_not_sqlite_is_a_store_failure(
    db: Path, args: list[str], stdin: str | None
) -> None:
    """A store file holding garbage bytes fails with exit 1 and one line, and is left as it was."""
    garbage = b"this is not a SQLite database, just some bytes\n" * 40
    db.write_bytes(garbage)
    result = invoke(db, *args, stdin=stdin)
    assert_refused(result, "not a database", code=1)
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
    assert json.loads(replayed.stdout) == {
        "system": "",
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
    """The console script exits 1 with one line for a missing directory and a non-SQLite file."""
    line = assert_script_failed(run_script("--db", str(tmp_path / "no" / "s.db"), "new"), 1)
    assert "does not exist" in line
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 8)
    line = assert_script_failed(run_script("--db", str(garbage), "new"), 1)
    assert "not a database" in line


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
    """`convstore --help` exits 0 naming every command; `list` of a missing store makes no file."""
    proc = run_script("--help")
    assert proc.returncode == 0, proc.stderr
    for name in command_names():
        assert name.encode() in proc.stdout
    listed = run_script("--db", str(tmp_path / "h.db"), "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == b""
    assert not (tmp_path / "h.db").exists()
