"""The command line's happy paths, end to end against real SQLite files: each command does
what the CLI reference (docs/cli-reference.md) says, exit 0."""

from __future__ import annotations

import json
import shlex
import stat
import tempfile
from pathlib import Path
from uuid import UUID

import pytest

from convstore import open_store
from convstore.cli import command_names
from tests.cli.support import (
    PNG,
    SYSTEM_TEXT,
    TEXT_BLOCK,
    Recorded,
    Seeded,
    anthropic_text,
    append,
    blocks_json,
    invoke,
    log_events,
    new_conversation,
    ok,
    replay,
    walk,
)
from tests.formats import BLOCK_TYPES

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
    [event] = log_events(seeded.db, seeded.conv)[-1:]  # one block: one event, opening and ending
    assert (event["type"], event["message_id"]) == ("block_recorded", message)
    assert event["role"] == "user"
    assert (event["index"], event["closes"]) == (0, True)
    assert event["block"] == {"type": "text", "text": "from a file"}


@pytest.mark.parametrize("dash", [True, False], ids=["dash", "no-argument"])
def test_append_reads_stdin(seeded: Seeded, dash: bool) -> None:
    """`append` reads stdin both for `-` and for no FILE argument."""
    args = ["append", seeded.conv, "--role", "user", *(["-"] if dash else [])]
    stdin = blocks_json({"type": "text", "text": "piped"}, {"type": "text", "text": "twice"})
    message = ok(seeded.db, *args, stdin=stdin).strip()
    events = log_events(seeded.db, seeded.conv)[-2:]
    assert [e["type"] for e in events] == ["block_recorded", "block_recorded"]
    assert [e["block"]["text"] for e in events] == ["piped", "twice"]
    assert [e.get("closes") for e in events] == [None, True]
    assert {e["message_id"] for e in events} == {message}


def test_open_add_block_end_streams_one_message(seeded: Seeded) -> None:
    """`append --open` then `add-block` twice then `end` records the blocks in order, then ends."""
    db, conv = seeded.db, seeded.conv
    message = append(db, conv, "assistant", {"type": "text", "text": "first"}, leave_open=True)
    ok(db, "add-block", conv, message, stdin=json.dumps({"type": "text", "text": "second"}))
    ok(db, "add-block", conv, message, "-", stdin=json.dumps({"type": "reasoning", "text": "3rd"}))
    ok(db, "end", conv, message)
    events = [e for e in log_events(db, conv) if e.get("message_id") == message]
    assert [e["type"] for e in events] == [
        "block_recorded",
        "block_recorded",
        "block_recorded",
        "message_ended",
    ]
    assert [e["index"] for e in events[:3]] == [0, 1, 2]
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
    # A message opens with its start or its first block, and ends with its end or a block
    # that closes it (format 3: docs/design/format-3.md).
    opened: list[str] = []
    for e in events:
        opens = e["type"] == "message_started" or (
            e["type"] == "block_recorded" and e["index"] == 0
        )
        if opens and e["message_id"] not in opened:
            opened.append(e["message_id"])
    assert opened == recorded.message_ids
    assert len(opened) == 10
    assert sum(t in BLOCK_TYPES for t in types) == 17
    ended = [e for e in events if e["type"] == "message_ended" or e.get("closes")]
    assert len(ended) == 7
    assert types.count("message_interrupted") == 2
    results = {
        e["block"]["tool_use_id"]: e["tool_name"]
        for e in events
        if e["type"] in BLOCK_TYPES and e["block"]["type"] == "tool_result"
    }
    assert results == {"call_1": "ls", "call_2": "cat", "call_3": "run_tests"}


def test_list_plain_and_json(db: Path) -> None:
    """`list` prints id, time and title newest activity first; `list --json` the same as
    objects under "conversations", with a null "next" cursor on the last page."""
    first = new_conversation(db, "first")
    second = new_conversation(db)
    lines = ok(db, "list").splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(second)
    assert lines[1].startswith(first)
    assert lines[1].endswith("  first")
    page = json.loads(ok(db, "list", "--json"))
    rows = page["conversations"]
    assert [(r["id"], r["title"]) for r in rows] == [(second, None), (first, "first")]
    assert all(isinstance(r["created_at"], str) for r in rows)
    assert page["next"] is None


def test_tool_result_without_a_recorded_call_is_unknown(seeded: Seeded) -> None:
    """A result whose call is not recorded replays as `Result (unknown)` and logs tool_name."""
    result = {"type": "tool_result", "tool_use_id": "nope", "content": "orphan"}
    append(seeded.db, seeded.conv, "user", result)
    assert replay(seeded.db, seeded.conv)["messages"][-1]["content"] == "Result (unknown): orphan"
    block_line = ok(seeded.db, "log", seeded.conv).splitlines()[-1]
    assert '"type":"block_recorded"' in block_line
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
    rows = json.loads(ok(db, "list", "--json"))["conversations"]
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
    assert json.loads(ok(from_option, "list", "--json"))["conversations"][0]["title"] == (
        "via option"
    )
    listed_env = json.loads(ok(from_env, "list", "--json"))["conversations"]
    assert [r["title"] for r in listed_env] == ["via env"]


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
    assert [r["title"] for r in json.loads(ok(written, "list", "--json"))["conversations"]] == [
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
    assert json.loads(ok(default, "list", "--json"))["conversations"][0]["id"] == conv


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


def test_show_heads_with_the_title_and_marks_compactions(db: Path) -> None:
    """`show` starts with the title even without labels, and prints each compaction after the
    message it runs through; an older one is marked as superseded by the newest."""
    conv = new_conversation(db, "triage the build")
    first = append(db, conv, "user", {"type": "text", "text": "CI is red."})
    second = append(db, conv, "assistant", {"type": "text", "text": "Reading the log."})
    append(db, conv, "user", {"type": "text", "text": "And?"})
    with open_store(db) as store:
        store.compact(conv, "The user reported red CI.", through=UUID(first))
        store.compact(conv, "The log was read.", through=UUID(second))
    out = ok(db, "show", conv)
    assert out.splitlines()[0] == "triage the build"
    lines = out.splitlines()
    older = lines.index("--- compacted through [1] (superseded by a newer compaction) ---")
    newest = lines.index("--- compacted through [2]: replay starts here with this summary ---")
    assert lines[older + 1] == "    The user reported red CI."
    assert lines[newest + 1] == "    The log was read."
    headers = [n for n, line in enumerate(lines) if line.startswith("[")]
    assert headers[0] < older < headers[1] < newest < headers[2]
    with open_store(db) as store:
        store.rewind(conv, to=UUID(first))
    rewound = ok(db, "show", conv, "--all")
    assert "--- compacted through [1]: replay starts here with this summary ---" in rewound
    assert "--- compacted through [2] (not in force: a rewind withdrew that message) ---" in rewound
    assert "compacted through [2]" not in ok(db, "show", conv)
    untitled = new_conversation(db)
    assert ok(db, "show", untitled).splitlines()[0] == "(untitled)"


def test_compact_reads_text_blocks_like_append_or_plain_text_with_the_flag(db: Path) -> None:
    """`compact` reads a JSON array of text blocks (joined by a blank line) as `append` reads
    blocks; `--text` takes plain text. Replay starts with the summary either way."""
    conv = new_conversation(db)
    first = append(db, conv, "user", {"type": "text", "text": "CI is red."})
    second = append(db, conv, "assistant", {"type": "text", "text": "Reading the log."})
    summary = blocks_json(
        {"type": "text", "text": "Red CI."}, {"type": "text", "text": "Log read."}
    )
    assert ok(db, "compact", conv, "--through", first, stdin=summary) == ""
    [head, _] = replay(db, conv)["messages"]
    assert head["content"].endswith("Red CI.\n\nLog read.")
    assert ok(db, "compact", conv, "--through", second, "--text", stdin='["verbatim"]\n') == ""
    [head] = replay(db, conv)["messages"]
    assert head["content"].endswith('["verbatim"]\n')
    helped = ok(db, "compact", "--help")
    described = helped.split("Options:")[0].rstrip().splitlines()
    assert described[-4:-1] == [
        "  Example:",
        "      convstore compact $CONV --through $MSG --text < summary.txt",
        """      echo '[{"type":"text","text":"The user wants the login test fixed."}]' \\""",
    ]


def test_empty_results_say_so_on_stderr(db: Path) -> None:
    """`list` and `erase --inactive-for --dry-run` that match nothing exit 0 with nothing on
    stdout and "no conversations match" on stderr; `list --json` stays a bare empty page."""
    conv = new_conversation(db, "fresh")
    ok(db, "label", conv, "env=dev")
    for args in (
        ["list", "--label", "env=prod"],
        ["erase", "--inactive-for", "1h", "--dry-run"],
        ["erase", "--inactive-for", "1h", "--reason", "retention"],
    ):
        result = invoke(db, *args)
        assert (result.exit_code, result.stdout, result.stderr) == (
            0,
            "",
            "no conversations match\n",
        ), args
    empty = json.loads(ok(db, "list", "--label", "env=prod", "--json"))
    assert empty == {"conversations": [], "next": None}
    assert ok(db, "list").startswith(conv)


def test_the_more_hint_repeats_every_filter_and_the_limit(db: Path) -> None:
    """Issue 39 item 15: `list --label team=a --title t --limit 1` ends with a `more:` command
    that, followed page after page, lists every team-a conversation one at a time and never
    the other team's; it names the store given with --db. Before, the hint was `convstore
    list --after CURSOR`, which dropped the label and the limit."""
    team_a = []
    for team in ("a", "b", "a", "b", "a"):
        conv = new_conversation(db, f"t {team}")
        ok(db, "label", conv, f"team={team}")
        if team == "a":
            team_a.append(conv)
    args = ["--db", str(db), "list", "--label", "team=a", "--title", "t", "--limit", "1"]
    seen: list[str] = []
    while True:
        result = invoke(None, *args)
        assert result.exit_code == 0, result.stderr
        rows = result.stdout.splitlines()
        assert len(rows) <= 1, rows
        seen += [row.split()[0] for row in rows]
        hints = [line for line in result.stderr.splitlines() if line.startswith("more: ")]
        if not hints:
            break
        command = shlex.split(hints[0].removeprefix("more: "))
        assert command[:3] == ["convstore", "--db", str(db)]
        assert command[3:10] == ["list", "--label", "team=a", "--title", "t", "--limit", "1"]
        args = command[1:]
    assert sorted(seen) == sorted(team_a)
