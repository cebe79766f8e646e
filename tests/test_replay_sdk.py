"""Replay output checked against the real provider SDKs' request types, unknown keys forbidden.

How the validator works, and why it has two layers:

1. **Keys and values, by walking the SDK's TypedDicts** (:func:`request_problems`). The request
   body is walked together with the SDK type (``CompletionCreateParamsNonStreaming`` or
   ``MessageCreateParamsNonStreaming``): at every TypedDict the dict must have no key outside
   the TypedDict's annotations and every required key; each value is checked against its
   annotation recursively (unions: some arm must fit; ``Literal``: one of its values; lists and
   ``Iterable``: every item). Required keys are read from the ``Required[...]`` /
   ``NotRequired[...]`` wrappers in the resolved annotations: ``__required_keys__`` is empty on
   these classes here (the SDK modules use ``from __future__ import annotations``, so the
   wrappers are strings when ``typing_extensions.TypedDict`` sorts the keys on Python 3.11).
2. **pydantic** (:func:`pydantic_problems`): ``TypeAdapter(list[Request],
   config=ConfigDict(extra="forbid", strict=True))`` over ``[body]``. The request type must be
   wrapped: ``TypeAdapter`` refuses ``config`` for a TypedDict itself. The config then reaches
   nested TypedDicts, but not reliably: the anthropic SDK gives some of its TypedDicts a pydantic
   config of their own (``Base64ImageSourceParam``, for one), under which unknown keys are
   ignored again, and with the SDK versions installed here pydantic alone accepts an unknown key
   on an anthropic image source and on an anthropic text block. ``Iterable`` fields are also
   validated lazily, so the result is walked to force every nested iterator. So pydantic is a
   second opinion on values; layer 1 is what makes "no unknown key" hold everywhere.

A body is accepted only when both layers find nothing. The negative tests below show that each
kind of mistake (unknown key at the top, on a message, on a content part, inside a nested part;
a missing required key; a wrong literal; a wrong value type) is rejected.
"""

from __future__ import annotations

import base64
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeAlias
from uuid import UUID

import pytest
import typing_extensions
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import ConfigDict, TypeAdapter, ValidationError

from convstore.domain.blocks import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import Event
from convstore.projections.replay import NOTHING_RECORDED, SHAPES, SUMMARY_HEAD, Shape, replay
from tests.strategies import TINY_IMAGES, HistoryBuilder, histories

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Provider: TypeAlias = Literal["openai", "anthropic"]

REQUEST_TYPES: dict[Provider, type[Any]] = {
    "openai": CompletionCreateParamsNonStreaming,
    "anthropic": MessageCreateParamsNonStreaming,
}

FORBID_EXTRA = ConfigDict(extra="forbid", strict=True)

ADAPTERS: dict[Provider, TypeAdapter[Any]] = {
    "openai": TypeAdapter(list[CompletionCreateParamsNonStreaming], config=FORBID_EXTRA),
    "anthropic": TypeAdapter(list[MessageCreateParamsNonStreaming], config=FORBID_EXTRA),
}


def request_body(provider: Provider, fragment: Mapping[str, Any]) -> dict[str, Any]:
    """A whole request: replay's fragment plus the provider's other required fields."""
    if provider == "openai":
        return {"model": "gpt-4o", **fragment}
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, **fragment}


# -- layer 1: walk the TypedDicts ----------------------------------------------------------------

_WRAPPERS = tuple(
    wrapper
    for wrapper in (
        typing_extensions.Required,
        typing_extensions.NotRequired,
        getattr(typing_extensions, "ReadOnly", None),
        getattr(typing, "Required", None),
        getattr(typing, "NotRequired", None),
    )
    if wrapper is not None
)
_SEQUENCE_ORIGINS: tuple[Any, ...] = (list, tuple, Iterable, Sequence)


def _unwrap(annotation: Any) -> tuple[Any, bool | None]:
    """The annotation without ``Annotated``/``Required``/``NotRequired``, and what they said."""
    required: bool | None = None
    while True:
        origin = typing_extensions.get_origin(annotation)
        if origin is typing_extensions.Annotated:
            annotation = annotation.__origin__
        elif origin in _WRAPPERS:
            if origin in (typing_extensions.Required, getattr(typing, "Required", None)):
                required = True
            elif origin is not getattr(typing_extensions, "ReadOnly", None):
                required = False
            annotation = typing_extensions.get_args(annotation)[0]
        else:
            return annotation, required


_FIELDS: dict[type[Any], dict[str, tuple[Any, bool]]] = {}


def _fields(typed_dict: type[Any]) -> dict[str, tuple[Any, bool]]:
    """Each key of a TypedDict: its bare annotation and whether it is required (cached)."""
    if typed_dict in _FIELDS:
        return _FIELDS[typed_dict]
    hints = typing_extensions.get_type_hints(typed_dict, include_extras=True)
    fields: dict[str, tuple[Any, bool]] = {}
    for key, hint in hints.items():
        annotation, required = _unwrap(hint)
        if required is None:
            required = key in typed_dict.__required_keys__
        fields[key] = (annotation, required)
    _FIELDS[typed_dict] = fields
    return fields


def _is_sequence_type(origin: Any) -> bool:
    return origin in _SEQUENCE_ORIGINS or getattr(origin, "__name__", "") == "SequenceNotStr"


Checker: TypeAlias = Callable[[object, Any, str], list[str]]


def request_problems(value: object, annotation: Any, where: str = "body") -> list[str]:
    """Every way ``value`` breaks ``annotation``, unknown keys included; empty when it fits."""
    annotation, _ = _unwrap(annotation)
    origin = typing_extensions.get_origin(annotation)
    checker: Checker
    if annotation is Any or annotation is object:
        checker = _anything
    elif origin is typing.Union or origin is types.UnionType:
        checker = _union_problems
    elif origin is typing_extensions.Literal or origin is typing.Literal:
        checker = _literal_problems
    elif typing_extensions.is_typeddict(annotation):
        checker = _typed_dict_problems
    elif _is_sequence_type(origin):
        checker = _sequence_problems
    elif origin in (dict, Mapping):
        checker = _mapping_problems
    else:
        checker = _scalar_problems
    return checker(value, annotation, where)


def _anything(value: object, annotation: Any, where: str) -> list[str]:
    return []


def _union_problems(value: object, annotation: Any, where: str) -> list[str]:
    arms = [request_problems(value, arm, where) for arm in typing_extensions.get_args(annotation)]
    if any(not problems for problems in arms):
        return []
    return min(arms, key=lambda problems: _closeness(problems, where))


def _literal_problems(value: object, annotation: Any, where: str) -> list[str]:
    allowed = typing_extensions.get_args(annotation)
    if any(type(value) is type(option) and value == option for option in allowed):
        return []
    return [f"{where}: {value!r} is not one of {allowed}"]


def _sequence_problems(value: object, annotation: Any, where: str) -> list[str]:
    if not isinstance(value, list | tuple):
        return [f"{where}: expected a list, got {type(value).__name__}"]
    args = typing_extensions.get_args(annotation)
    item = args[0] if args else Any
    return [p for i, v in enumerate(value) for p in request_problems(v, item, f"{where}[{i}]")]


def _mapping_problems(value: object, annotation: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {type(value).__name__}"]
    key_type, value_type = typing_extensions.get_args(annotation) or (Any, Any)
    return [
        problem
        for k, v in value.items()
        for problem in request_problems(k, key_type, f"{where}.<key>")
        + request_problems(v, value_type, f"{where}.{k}")
    ]


def _depth(location: str) -> int:
    return location.count(".") + location.count("[")


def _closeness(problems: list[str], where: str) -> tuple[bool, int, int]:
    """Ranks a union arm's problems, so the error names the arm that was meant.

    Worst is an arm whose own literal (a ``role`` or ``type``) does not match; then the arm
    that fit least deep; then the one with more problems.
    """
    locations = [problem.split(": ", 1)[0] for problem in problems]
    own_literal_missed = any(
        _depth(location) == _depth(where) + 1 and " is not one of " in problem
        for location, problem in zip(locations, problems, strict=True)
    )
    return own_literal_missed, -min(map(_depth, locations)), len(problems)


def _scalar_problems(value: object, annotation: Any, where: str) -> list[str]:
    annotation = typing_extensions.get_origin(annotation) or annotation
    if annotation is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    elif annotation is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif annotation is type(None) or annotation is None:
        fits = value is None
    elif isinstance(annotation, type):
        try:
            fits = isinstance(value, annotation)
        except TypeError:
            fits = False
    else:
        return [f"{where}: cannot check against {annotation!r}"]
    return [] if fits else [f"{where}: {type(value).__name__} is not {annotation!r}"]


def _typed_dict_problems(value: object, typed_dict: type[Any], where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected a {typed_dict.__name__} object, got {type(value).__name__}"]
    fields = _fields(typed_dict)
    problems = [f"{where}: unknown key {key!r}" for key in value if key not in fields]
    for key, (annotation, required) in fields.items():
        if key in value:
            problems += request_problems(value[key], annotation, f"{where}.{key}")
        elif required:
            problems.append(f"{where}: missing required key {key!r}")
    return problems


# -- layer 2: pydantic, with lazy iterables forced -------------------------------------------------


def _force(value: object) -> object:
    """``value`` with every lazily validating iterator run to the end (raising what it finds)."""
    if isinstance(value, Mapping):
        return {key: _force(item) for key, item in value.items()}
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, list | tuple | Iterator) or type(value).__name__ == "ValidatorIterator":
        return [_force(item) for item in typing.cast(Iterable[object], value)]
    return value


def pydantic_problems(provider: Provider, body: object) -> list[str]:
    """What pydantic, over the SDK's request type, finds wrong with ``body``."""
    try:
        _force(ADAPTERS[provider].validate_python([body]))
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return []


def rejections(provider: Provider, body: object) -> list[str]:
    """Everything either layer finds wrong with ``body``; empty means the SDK accepts it."""
    return request_problems(body, REQUEST_TYPES[provider]) + pydantic_problems(provider, body)


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
        ("assistant", ['Now running the tests.\n\nTool use: run_tests({"k":["a",1]})']),
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
