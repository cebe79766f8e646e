"""Replay output checked against the real provider SDKs' request types (tests/sdk.py).

The negative tests below show the validator rejects each kind of mistake at the place it is
made; the rest show every replay (generated histories, a realistic one, compacted and
microcompacted) is accepted.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import open_store
from convstore.domain.blocks import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import Event
from convstore.engine.plan import NOTHING_RECORDED, SHAPES, SUMMARY_HEAD, Shape, replay
from tests.sdk import (
    REQUEST_TYPES,
    Provider,
    pydantic_problems,
    rejections,
    request_body,
    request_problems,
)
from tests.strategies import TINY_IMAGES, HistoryBuilder, histories

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_replay(
    events: list[Event],
    shape: Shape,
    vision: bool,
    *,
    full: bool = False,
    keep_tool_results: int | None = None,
) -> dict[str, Any]:
    """Replay ``events`` and assert the SDK's request type accepts the result; return it."""
    fragment = replay(
        events, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
    )
    problems = rejections(shape, request_body(shape, fragment))
    assert problems == [], "\n".join(problems[:10])
    return fragment


# -- the validator itself ----------------------------------------------------------------------

PNG = TINY_IMAGES["image/png"][0]

GOOD: dict[Provider, dict[str, Any]] = {
    "openai": {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                ],
            },
            {"role": "assistant", "content": "A pixel."},
        ],
    },
    "anthropic": {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": "Be brief.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "A pixel."}]},
        ],
    },
}


def _with(provider: Provider, path: Sequence[str | int], change: Any) -> dict[str, Any]:
    """A deep copy of the good request for ``provider`` with ``change`` applied at ``path``.

    ``change`` is a dict merged into the object found at ``path``, or a callable returning the
    object's replacement.
    """

    def copy(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: copy(v) for k, v in value.items()}
        if isinstance(value, list):
            return [copy(v) for v in value]
        return value

    body: dict[str, Any] = copy(GOOD[provider])
    parent: Any = None
    target: Any = body
    for step in path:
        parent, target = target, target[step]
    replacement = change(target) if callable(change) else {**target, **change}
    if parent is None:
        return typing.cast(dict[str, Any], replacement)
    parent[path[-1]] = replacement
    return body


MESSAGE_0_PART_0: list[str | int] = ["messages", 0, "content", 0]
MESSAGE_0_SOURCE: list[str | int] = ["messages", 0, "content", 1, "source"]

BAD: list[tuple[str, Provider, dict[str, Any], str]] = [
    ("top-level key", "openai", _with("openai", [], {"bogus": 1}), "body: unknown key 'bogus'"),
    (
        "message key",
        "openai",
        _with("openai", ["messages", 0], {"bogus": 1}),
        "body.messages[0]: unknown key 'bogus'",
    ),
    (
        "text part key",
        "openai",
        _with("openai", ["messages", 1, "content", 0], {"bogus": 1}),
        "body.messages[1].content[0]: unknown key 'bogus'",
    ),
    (
        "key inside image_url",
        "openai",
        _with("openai", ["messages", 1, "content", 1, "image_url"], {"bogus": 1}),
        "body.messages[1].content[1].image_url: unknown key 'bogus'",
    ),
    (
        "tool role without tool_call_id",
        "openai",
        _with("openai", ["messages", 2], lambda _: {"role": "tool", "content": "42"}),
        "body.messages[2]: missing required key 'tool_call_id'",
    ),
    (
        "content not text",
        "openai",
        _with("openai", ["messages", 0], {"content": 42}),
        "body.messages[0].content: int is not",
    ),
    (
        "top-level key",
        "anthropic",
        _with("anthropic", [], {"bogus": 1}),
        "body: unknown key 'bogus'",
    ),
    (
        "message key",
        "anthropic",
        _with("anthropic", ["messages", 1], {"bogus": 1}),
        "body.messages[1]: unknown key 'bogus'",
    ),
    (
        "text block key",
        "anthropic",
        _with("anthropic", MESSAGE_0_PART_0, {"bogus": 1}),
        "body.messages[0].content[0]: unknown key 'bogus'",
    ),
    (
        "key inside image source",
        "anthropic",
        _with("anthropic", MESSAGE_0_SOURCE, {"bogus": 1}),
        "body.messages[0].content[1].source: unknown key 'bogus'",
    ),
    (
        "tool role",
        "anthropic",
        _with("anthropic", ["messages", 1], {"role": "tool"}),
        "body.messages[1].role: 'tool' is not one of",
    ),
    (
        "tool_result without tool_use_id",
        "anthropic",
        _with("anthropic", MESSAGE_0_PART_0, lambda _: {"type": "tool_result", "content": "4"}),
        "body.messages[0].content[0]: missing required key 'tool_use_id'",
    ),
    (
        "unknown media type",
        "anthropic",
        _with("anthropic", MESSAGE_0_SOURCE, {"media_type": "image/bmp"}),
        "body.messages[0].content[1].source.media_type: 'image/bmp' is not one of",
    ),
]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_validator_accepts_a_good_request(provider: Provider) -> None:
    """Both layers accept a plain valid request with text and an image (they are not blanket no)."""
    assert request_problems(GOOD[provider], REQUEST_TYPES[provider]) == []
    assert pydantic_problems(provider, GOOD[provider]) == []


@pytest.mark.parametrize(
    ("provider", "body", "expected"),
    [pytest.param(p, body, expected, id=f"{p}: {name}") for name, p, body, expected in BAD],
)
def test_validator_rejects_a_bad_request(
    provider: Provider, body: dict[str, Any], expected: str
) -> None:
    """The TypedDict walker alone rejects each broken request, at the place that is broken."""
    problems = request_problems(body, REQUEST_TYPES[provider])
    assert any(problem.startswith(expected) for problem in problems), problems
    assert rejections(provider, body) != []


def test_tool_message_without_call_id_is_rejected() -> None:
    """A hand-built OpenAI request with a tool message lacking tool_call_id is rejected."""
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "run it"},
            {"role": "tool", "content": "done"},
        ],
    }
    problems = rejections("openai", body)
    assert any("tool_call_id" in problem for problem in problems), problems
    assert pydantic_problems("openai", body) != []


# -- replay over generated histories -------------------------------------------------------------


@SETTINGS
@given(histories(), st.integers(0, 3))
def test_sdk_accepts_every_replay(events: list[Event], keep: int) -> None:
    """The SDK request types accept any history's replay, in every shape and replay mode."""
    for shape in SHAPES:
        for vision in (False, True):
            for full in (False, True):
                for keep_tool_results in (None, keep):
                    check_replay(
                        events, shape, vision, full=full, keep_tool_results=keep_tool_results
                    )


# -- a realistic history -------------------------------------------------------------------------


def realistic_history() -> tuple[HistoryBuilder, UUID]:
    """A coding-agent session with tools, parallel calls, an error, a crash and a stop.

    Returns the recorded history and the id of the message holding the parallel calls.
    """
    history = HistoryBuilder(UUID("0b8e7c0e-3d6f-4c1a-9a51-5e2f1c9d7a10"), "fix the build")
    history.message("system", [TextBlock(text="You are a careful coding agent.")])
    history.message(
        "user",
        [
            TextBlock(text="What's in a.txt? Here is a screenshot of the failure."),
            ImageBlock(media_type="image/png", data=PNG),
        ],
    )
    parallel_calls = history.message(
        "assistant",
        [
            ReasoningBlock(text="Read the file and look for TODOs at the same time."),
            TextBlock(text="Let me look."),
            ToolUseBlock(id="call_1", name="read_file", input={"path": "a.txt"}),
            ToolUseBlock(id="call_2", name="grep", input={"pattern": "TODO", "path": "."}),
        ],
    )
    history.message(
        "user",
        [
            ToolResultBlock(tool_use_id="call_1", content="hello world"),
            ToolResultBlock(tool_use_id="call_2", content="grep: .: Is a directory", is_error=True),
        ],
    )
    # The agent process died right after asking for the tests to run: no result ever landed.
    crashed = history.start("assistant")
    history.append(crashed, TextBlock(text="Now running the tests."))
    history.append(crashed, ToolUseBlock(id="call_3", name="run_tests", input={"k": ["a", 1]}))
    # A screenshot result for a call from before this window: its call is not in the log.
    history.message(
        "user",
        [
            ToolResultBlock(
                tool_use_id="call_0",
                content=[
                    TextBlock(text="the screen:"),
                    ImageBlock(media_type="image/png", data=PNG),
                ],
            ),
            TextBlock(text="Hello? Still there?"),
        ],
    )
    stopped = history.start("assistant")
    history.append(stopped, TextBlock(text="Summary so far: a.txt says hello"))
    history.interrupt(stopped, "user pressed stop")
    history.message("user", [])
    return history, parallel_calls


FIRST_ASK = "What's in a.txt? Here is a screenshot of the failure."
SHOWN = "<native image/png>"
NOT_SHOWN = (
    f"[Image not shown: an image/png image ({len(base64.b64decode(PNG))} bytes) was here, "
    "but this model cannot see images.]"
)


def expected_realistic(vision: bool) -> list[tuple[str, list[str]]]:
    """Each wire message of the realistic history: role and parts (text, or SHOWN)."""
    if vision:
        ask, screen = [FIRST_ASK, SHOWN], ["Result (unknown): the screen:", SHOWN]
    else:
        ask, screen = (
            [f"{FIRST_ASK}\n\n{NOT_SHOWN}"],
            [f"Result (unknown): the screen:\n{NOT_SHOWN}"],
        )
    screen_and_hello = (
        [*screen, "Hello? Still there?"] if vision else [f"{screen[0]}\n\nHello? Still there?"]
    )
    return [
        ("system", ["You are a careful coding agent."]),
        ("user", ask),
        (
            "assistant",
            [
                "[Reasoning]: Read the file and look for TODOs at the same time.\n\n"
                "Let me look.\n\n"
                'Tool use: read_file({"path":"a.txt"})\n\n'
                'Tool use: grep({"pattern":"TODO","path":"."})'
            ],
        ),
        ("user", ["Result (read_file): hello world\n\nError (grep): grep: .: Is a directory"]),
        (
            "assistant",
            [
                'Now running the tests.\n\nTool use: run_tests({"k":["a",1]})\n\n'
                "[No result was recorded for this call.]"
            ],
        ),
        ("user", screen_and_hello),
        ("assistant", ["Summary so far: a.txt says hello\n\n[Interrupted: user pressed stop]"]),
        ("user", [NOTHING_RECORDED]),
    ]


def realistic_parts(message: dict[str, Any]) -> list[str]:
    """A wire message's content as text parts, a native image (of PNG only) as SHOWN."""
    content = message["content"]
    if isinstance(content, str):
        return [content]
    parts: list[str] = []
    for part in content:
        if part["type"] == "text":
            parts.append(part["text"])
        elif part["type"] == "image_url":
            assert part["image_url"] == {"url": f"data:image/png;base64,{PNG}"}
            parts.append(SHOWN)
        else:
            assert part == {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": PNG},
            }
            parts.append(SHOWN)
    return parts


@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_sdk_accepts_a_realistic_history(shape: Shape, vision: bool) -> None:
    """A realistic session replays to a request the SDK accepts, with the exact expected prose."""
    fragment = check_replay(realistic_history()[0].events, shape, vision)
    expected = expected_realistic(vision)
    if shape == "anthropic":
        assert fragment["system"] == "You are a careful coding agent."
        expected = expected[1:]
    got = [(m["role"], realistic_parts(m)) for m in fragment["messages"]]
    assert got == expected


@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_sdk_accepts_a_compacted_and_microcompacted_history(shape: Shape, vision: bool) -> None:
    """Compacted mid tool round, every tool output cleared: accepted, with the expected prose."""
    history, parallel_calls = realistic_history()
    history.compact("The user asked about a.txt; the agent read it.", parallel_calls)
    fragment = check_replay(history.events, shape, vision, keep_tool_results=0)
    expected = expected_realistic(vision)
    screenshot_size = len("the screen:") + len(base64.b64decode(PNG))
    expected[1:3] = [("user", [f"{SUMMARY_HEAD}The user asked about a.txt; the agent read it."])]
    expected[2] = (
        "user",
        [
            "Result (read_file): [Output cleared to save context: 11 bytes]\n\n"
            "Error (grep): [Output cleared to save context: 23 bytes]"
        ],
    )
    expected[4] = (
        "user",
        [
            f"Result (unknown): [Output cleared to save context: {screenshot_size} bytes]\n\n"
            "Hello? Still there?"
        ],
    )
    if shape == "anthropic":
        assert fragment["system"] == "You are a careful coding agent."
        expected = expected[1:]
    got = [(m["role"], realistic_parts(m)) for m in fragment["messages"]]
    assert got == expected


def test_an_anthropic_replay_without_a_system_message_has_no_system_key(tmp_path: Path) -> None:
    """Issue 39 item 19: every path that builds an Anthropic request (the API, the CLI's
    quick replay path, the full command line, `export --format anthropic`) leaves `system`
    out when nothing is a system message, instead of sending `"system": ""`; with one, it is
    there. Each body is accepted by the anthropic SDK's request type."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        bare = store.new_conversation()
        store.append_message(bare, "user", [{"type": "text", "text": "hello"}])
        told = store.new_conversation()
        store.append_message(told, "system", [{"type": "text", "text": "Be terse."}])
        store.append_message(told, "user", [{"type": "text", "text": "hello"}])
        bodies = {"api": store.replay(bare, shape="anthropic")}
        assert store.replay(told, shape="anthropic")["system"] == "Be terse."
    script = Path(sys.executable).parent / "convstore"
    runs = {
        "quick": ["--db", str(db), "replay", str(bare), "--shape", "anthropic"],
        "full": ["--db", str(db), "replay", str(bare), "--shape", "anthropic", "--full"],
        "export": ["--db", str(db), "export", str(bare), "--format", "anthropic"],
    }
    for name, args in runs.items():
        done = subprocess.run([str(script), *args], capture_output=True, check=True)
        bodies[name] = json.loads(done.stdout)
    for name, body in bodies.items():
        assert "system" not in body, (name, body)
        assert body["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "hello"}]}
        ], name
        problems = rejections("anthropic", request_body("anthropic", body))
        assert problems == [], (name, problems)
