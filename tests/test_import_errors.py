"""What ``convstore import`` says about input it cannot record: the one line must point at
what is wrong, where the user can find it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from convstore.domain.json_values import MAX_INPUT_DEPTH, NestedTooDeepError, strict_loads
from tests.cli.support import assert_refused, dump, invoke, ok


def test_a_truncated_json_body_without_format_is_called_malformed(tmp_path: Path) -> None:
    """A request body cut short, imported without --format: before, the line only said no
    importer reads it (and to try --format), hiding the JSON error that is the whole story."""
    db = tmp_path / "s.db"
    ok(db, "new")
    before = dump(db)
    body = tmp_path / "body.json"
    body.write_text('{"messages": [\n  {"role": "user", "content": "hi"},\n')
    line = assert_refused(
        invoke(db, "import", str(body)), "cannot tell the input's format: it is neither JSON ("
    )
    assert "line 3 column 1" in line
    assert dump(db) == before


def test_json_lines_that_no_importer_reads_are_not_called_malformed(tmp_path: Path) -> None:
    """JSON lines are not one JSON document, but they are not malformed either: no JSON error
    is named for them."""
    db = tmp_path / "s.db"
    lines = tmp_path / "log.jsonl"
    lines.write_text('{"event": "start"}\n{"event": "stop"}\n')
    line = assert_refused(invoke(db, "import", str(lines)), "none of the importers reads it")
    assert "JSON" not in line.split("(")[0]


CALL = {"name": "ls", "arguments": "{}"}
META = {"id": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "base_instructions": {"text": "Be brief."}}
ASK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]}
LS = {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}
HOSTED_RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_9", "content": []}


@pytest.mark.parametrize(
    ("fmt", "lines", "place"),
    [
        # A Messages body: its system is no message of the input, so the old count (1-based,
        # the system first) said "message 3" of the input's messages[1].
        (
            "anthropic",
            [
                {
                    "system": "s",
                    "messages": [
                        {"role": "user", "content": "hi"},
                        {"role": "user", "content": [HOSTED_RESULT]},
                    ],
                }
            ],
            "message 1 (user): block 0: hosted_tool_result blocks belong in assistant",
        ),
        # A Chat body whose assistant message repeats a call id.
        (
            "openai-chat",
            [
                {
                    "messages": [
                        {"role": "system", "content": "s"},
                        {"role": "user", "content": "hi"},
                        {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {"id": "c1", "type": "function", "function": CALL},
                                {"id": "c1", "type": "function", "function": CALL},
                            ],
                        },
                    ]
                }
            ],
            "message 2 (assistant): block 1: tool_use id 'c1' appears twice",
        ),
        # Responses items grouped into one assistant message: the items are named.
        (
            "responses",
            [
                [
                    {"type": "message", "role": "user", "content": "hi"},
                    {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                    {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                ]
            ],
            "items 1 to 2: block 1: tool_use id 'c1' appears twice",
        ),
        # A Codex rollout: its lines are named (the old count said "message 3").
        (
            "codex",
            [
                {"timestamp": "2026-01-02T10:00:00Z", "type": "session_meta", "payload": META},
                {"timestamp": "2026-01-02T10:00:01Z", "type": "response_item", "payload": ASK},
                {"timestamp": "2026-01-02T10:00:02Z", "type": "response_item", "payload": LS},
                {"timestamp": "2026-01-02T10:00:03Z", "type": "response_item", "payload": LS},
            ],
            "lines 3 to 4: block 1: tool_use id 'c1' appears twice",
        ),
        # A Claude Code transcript: its lines are named (a provider's result in a user line).
        (
            "claude-code",
            [
                {
                    "type": role,
                    "uuid": f"u{n}",
                    "sessionId": "s1",
                    "timestamp": f"2026-01-02T10:00:0{n}Z",
                    "message": {"role": role, "content": content},
                }
                for n, (role, content) in enumerate(
                    [("user", "hi"), ("assistant", "ok"), ("user", [HOSTED_RESULT])], start=1
                )
            ],
            "line 3: block 0: hosted_tool_result blocks belong in assistant",
        ),
        # A Vercel AI SDK UIMessage array: its messages are named by their place.
        (
            "vercel-ai",
            [
                [
                    {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
                    {
                        "id": "m2",
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool-ls",
                                "toolCallId": "c1",
                                "state": "output-available",
                                "input": {},
                                "output": "a",
                            }
                        ],
                    },
                    {
                        "id": "m3",
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool-ls",
                                "toolCallId": "c1",
                                "state": "output-available",
                                "input": {},
                                "output": "a",
                            }
                        ],
                    },
                ]
            ],
            "message 2 (assistant): block 0: tool_use id 'c1' is already recorded",
        ),
    ],
)
def test_a_rule_broken_on_recording_names_the_place_in_the_input(
    fmt: str, lines: list[Any], place: str, tmp_path: Path
) -> None:
    """The store's rules (roles, call ids) are checked as the history is recorded; the line
    names where the input holds the message, as the converters' own refusals do, not a count of
    the messages recorded so far."""
    db = tmp_path / "s.db"
    source = tmp_path / "input"
    if fmt in ("codex", "claude-code"):
        source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    else:
        source.write_text(json.dumps(lines[0]))
    line = assert_refused(invoke(db, "import", "--format", fmt, str(source)), place)
    assert line.startswith(f"error: {place.split(':', maxsplit=1)[0]}:"), line


DEEP = "[" * 3000 + "]" * 3000
"""A 6 KB value nested 3,000 deep: before, it reached the JSON parser's recursion."""


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (None, '{"type": "session_meta", "payload": ' + DEEP + "}\n"),
        ("codex", '{"type": "session_meta", "payload": ' + DEEP + "}\n"),
        ("gemini-cli", '{"id": "m1", "content": ' + DEEP + "}\n"),
        ("openai-chat", '[{"role": "user", "content": ' + DEEP + "}]"),
        ("vercel-ai", '[{"role": "user", "parts": ' + DEEP + "}]"),
    ],
    ids=["detected", "codex", "gemini-cli", "openai-chat", "vercel-ai"],
)
def test_input_nested_past_the_limit_is_one_line_and_nothing_written(
    fmt: str | None, text: str, tmp_path: Path
) -> None:
    """A 6 KB line nested 3,000 deep is bad input for every reader, auto-detection included:
    one line naming the limit, exit 2, the store untouched. Before, auto-detection and the
    Codex and Gemini CLI readers crashed with "unexpected RecursionError" (exit 1)."""
    db = tmp_path / "s.db"
    ok(db, "new")
    before = dump(db)
    source = tmp_path / "deep.jsonl"
    source.write_text(text)
    args = ["import", str(source)] if fmt is None else ["import", "--format", fmt, str(source)]
    assert_refused(invoke(db, *args), f"nested more than {MAX_INPUT_DEPTH} levels deep")
    assert dump(db) == before


@pytest.mark.parametrize("depth", [MAX_INPUT_DEPTH, MAX_INPUT_DEPTH + 1])
@pytest.mark.parametrize(
    "filler", ['"]]]"', '"[[[{"', '"\\\\"', '"\\"[\\\\"', '"x\\\\\\"["'], ids=repr
)
def test_the_nesting_limit_counts_brackets_outside_strings_only(depth: int, filler: str) -> None:
    """Exactly the limit parses and one more level is refused, whatever brackets, quotes and
    backslashes the strings inside hold (they are text, not nesting)."""
    arrays = "[" * (depth - 1) + filler + "]" * (depth - 1)  # the object is one more level
    text = '{"a": "[[[[", "b": ' + arrays + ', "c": "]]]]"}'
    if depth > MAX_INPUT_DEPTH:
        with pytest.raises(NestedTooDeepError, match=f"more than {MAX_INPUT_DEPTH} levels"):
            strict_loads(text)
    else:
        assert strict_loads(text) == json.loads(text)
