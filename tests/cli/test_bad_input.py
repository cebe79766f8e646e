"""Bad input to the command line: exit 2, exactly one ``error: …`` line on stderr, and nothing
written."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from convstore.cli import cli
from tests.cli.support import (
    CONVSTORE,
    PNG,
    TEXT_BLOCK,
    UNKNOWN_ID,
    Seeded,
    assert_refused,
    blocks_json,
    dump,
    invoke,
    new_conversation,
)
from tests.conftest import one_error_line

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
        (["append", "not-a-uuid", "--role", "user"], "'not-a-uuid' is not a conversation id"),
        (["add-block", "{conv}", "nope"], "'nope' is not a message id"),
        (["add-block", "not-a-uuid", "{msg}"], "'not-a-uuid' is not a conversation id"),
    ],
    ids=["append-conversation", "add-block-message", "add-block-conversation"],
)
def test_a_malformed_id_is_named_before_the_input_is_read(
    seeded: Seeded, args: list[str], fragment: str
) -> None:
    """A malformed id is the error reported, not the input that came with it (which the
    command never reads): the id is checked as the arguments are."""
    filled = [part.format(conv=seeded.conv, msg=seeded.open_msg) for part in args]
    before = dump(seeded.db)
    result = invoke(seeded.db, *filled, stdin=b"not json")
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


READ_COMMANDS = [
    ["list"],
    ["list", "--json"],
    ["list", "--label", "team=a", "--limit", "1"],
    ["show", UNKNOWN_ID],
    ["replay", UNKNOWN_ID],
    ["log", UNKNOWN_ID],
    ["pressure", UNKNOWN_ID],
    ["export", UNKNOWN_ID, "--format", "markdown"],
    ["verify"],
    ["dump"],
    ["project"],
    ["rebuild"],
    ["rebuild", "--projection", "listing"],
    ["audit", "tools"],
    ["audit", "search", "hello"],
    ["audit", "sql", "SELECT 1"],
    ["serve", "--port", "0"],
]


@pytest.mark.parametrize("args", READ_COMMANDS, ids=[" ".join(a[:2]) for a in READ_COMMANDS])
@pytest.mark.parametrize("where", ["missing", "empty-file", "directory", "text-file"])
def test_every_read_of_a_location_without_a_store_says_so(
    tmp_path: Path, where: str, args: list[str]
) -> None:
    """Issue 39 item 17: every command that reads, pointed at a path that holds no store (a
    typo, an empty file, a directory, a text file such as /etc/passwd), exits 2 with one line
    saying so, and leaves the path as it was (nothing made). Before, `list` printed "no
    conversations match" and exited 0 for a missing or empty path, and a text file or a
    directory was a store failure (exit 1)."""
    location = tmp_path / "typo.db"
    fragment = "no store at"
    if where == "empty-file":
        location.touch()
    elif where == "directory":
        location.mkdir()
    elif where == "text-file":
        location.write_text("root:x:0:0:root:/root:/bin/bash\n")
        fragment = "not a convstore store: it is not a SQLite file"
    before = sorted(p.name for p in tmp_path.iterdir())
    content = location.read_bytes() if location.is_file() else None
    assert_refused(invoke(location, *args), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (location.read_bytes() if location.is_file() else None) == content


def test_the_script_says_no_store_for_a_typo_as_every_command_does(tmp_path: Path) -> None:
    """Issue 39 item 17, through the installed script (whose `replay` takes a quick path
    before the command line loads): `list` and `replay` of a missing path both exit 2."""
    location = tmp_path / "typo.db"
    for args in (["list"], ["replay", UNKNOWN_ID]):
        done = subprocess.run(
            [str(CONVSTORE), "--db", str(location), *args], capture_output=True, check=False
        )
        one_error_line(done.returncode, done.stdout, done.stderr, f"no store at {location}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["list"], ["show", UNKNOWN_ID], ["verify"], ["dump"]])
def test_reading_a_postgres_schema_without_a_store_says_so_and_makes_nothing(
    postgres_url: str, args: list[str]
) -> None:
    """Issue 39 item 17 on PostgreSQL: a read of a schema that holds no store exits 2 saying
    so, and the schema is not created (before, the read made the schema a store)."""
    import psycopg  # noqa: PLC0415

    schema = postgres_url.rsplit("schema=", 1)[1]
    result = CliRunner().invoke(cli, ["--db", postgres_url, *args])
    assert_refused(result, "no store at", f"schema {schema} holds none")
    with psycopg.connect(postgres_url.split("?", 1)[0]) as conn:
        found = conn.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
        ).fetchone()
    assert found == (0,)


@pytest.mark.parametrize(
    ("stdin", "fragment"),
    [
        ("The user wants the login test fixed.", "for plain text pass --text"),
        ('"a summary"', "expected a JSON array of text blocks, got a string; for plain text"),
        ("[]", "a summary needs at least one text block"),
        (blocks_json({"type": "reasoning", "text": "x"}), "block 0 is a reasoning block"),
        ('[{"type": "text"}]', "block 0: text block: missing field 'text'"),
    ],
    ids=["plain-text", "string", "empty", "not-text", "bad-block"],
)
def test_compact_refuses_what_is_not_text_blocks(seeded: Seeded, stdin: str, fragment: str) -> None:
    """`compact` without --text takes only a JSON array of text blocks: anything else is exit 2
    with one line (plain text pointed at --text) and nothing written."""
    before = dump(seeded.db)
    result = invoke(seeded.db, "compact", seeded.conv, "--through", seeded.ended_msg, stdin=stdin)
    assert_refused(result, fragment)
    assert dump(seeded.db) == before


def test_serve_without_the_web_extra_names_the_install_that_works(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With Starlette absent, `serve` is exit 2 with one line naming the install that works
    from a checkout (convstore is on no package index), as the other extras' hints do."""
    new_conversation(db)
    monkeypatch.setitem(sys.modules, "starlette", None)
    line = assert_refused(invoke(db, "serve"))
    assert line == (
        "error: convstore serve needs convstore's 'web' extra: pip install -e '.[web]' in the "
        "convstore checkout, or pip install 'starlette>=0.40' 'uvicorn>=0.30'"
    )


def test_append_of_an_empty_array_is_refused(seeded: Seeded) -> None:
    """Issue 39 item 18: `append` of `[]` as a whole message is refused in one line (exit 2)
    pointing at --open and `start`, and nothing is written; before, it recorded an ended
    message with no blocks. `append --open` of `[]` still opens a message for add-block."""
    before = dump(seeded.db)
    result = invoke(seeded.db, "append", seeded.conv, "--role", "user", stdin="[]")
    assert_refused(result, "the array holds no blocks", "--open", "convstore start")
    assert dump(seeded.db) == before
