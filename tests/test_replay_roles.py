"""Replay against the role-order rules of the validators in use (tests/role_rules.py): a
history that opens with the assistant (recorded from mid-way) still replays user first, and
the neighbouring rules are each checked for what replay does today, fixed or a known limit.
"""

from __future__ import annotations

import json
from pathlib import Path
from uuid import uuid4

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convstore
from convstore.convert.anthropic import history_from_messages
from convstore.domain.blocks import ReasoningBlock, TextBlock, ToolResultBlock, ToolUseBlock
from convstore.domain.events import ROLES, Event, Role
from convstore.engine.live import live_request
from convstore.engine.model import folded
from convstore.engine.options import ReplayOptions
from convstore.engine.plan import HISTORY_STARTS, SHAPES, Shape, replay
from convstore.engine.pressure import MESSAGE_FRAMING_TOKENS, measure
from convstore.engine.render import plan
from convstore.engine.tokenizer import count_tokens
from tests.histories import record_history
from tests.role_rules import (
    alternation_problems,
    blank_text_problems,
    first_turn_problems,
    last_turn_problems,
)
from tests.sdk import rejections, request_body
from tests.strategies import HistoryBuilder, histories

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MODES = [
    (shape, vision, full, keep)
    for shape in SHAPES
    for vision in (False, True)
    for full in (False, True)
    for keep in (None, 1)
]
"""Both shapes, vision off and on, compaction honoured and ignored, microcompact off and on."""


def opened_by_the_assistant(*, reasoning: bool = True) -> HistoryBuilder:
    """A history recorded from mid-way: the assistant's message (with reasoning) first."""
    builder = HistoryBuilder(uuid4())
    blocks: list[TextBlock | ReasoningBlock] = [TextBlock(text="Here is the plan.")]
    if reasoning:
        blocks.insert(0, ReasoningBlock(text="The user asked for a plan.", signature="sig"))
    builder.message("assistant", list(blocks))
    builder.message("user", [TextBlock(text="Go on.")])
    return builder


# -- the first message is the user's (fixed) ---------------------------------------------------


@SETTINGS
@given(st.sampled_from(ROLES).flatmap(lambda role: histories(opening=role)))
def test_every_history_replays_valid_under_every_validator(events: list[Event]) -> None:
    """Whatever role opens the history, with compaction and rewinds, every mode's replay is
    accepted by the SDK types and meets the first-turn rule (Bedrock, Mistral, chat
    templates) and Bedrock's no-blank-text rule."""
    for shape, vision, full, keep in MODES:
        out = replay(events, shape=shape, vision=vision, full=full, keep_tool_results=keep)
        assert rejections(shape, request_body(shape, out)) == [], (shape, vision, full, keep)
        assert first_turn_problems(out) == [], (shape, vision, full, keep)
        assert blank_text_problems(out) == [], (shape, vision, full, keep)


def test_an_assistant_opening_with_reasoning_replays_after_one_user_message() -> None:
    """The one wire message that is no stored message: the user's, saying where the record
    starts, then the assistant's message (its reasoning kept) and the rest, one each."""
    events = opened_by_the_assistant().events
    for shape in SHAPES:
        messages = replay(events, shape=shape)["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        first = messages[0]["content"]
        assert (first if shape == "openai" else first[0]["text"]) == HISTORY_STARTS
        assert "The user asked for a plan." in json.dumps(messages[1])


def test_the_marker_goes_after_the_system_messages() -> None:
    """A system prompt stays first (OpenAI shape) or apart (Anthropic): the marker is the
    first message after it."""
    builder = HistoryBuilder(uuid4())
    builder.message("system", [TextBlock(text="Be brief.")])
    builder.message("assistant", [TextBlock(text="Hello again.")])
    openai = replay(builder.events, shape="openai")["messages"]
    assert [m["role"] for m in openai] == ["system", "user", "assistant"]
    assert openai[1]["content"] == HISTORY_STARTS
    anthropic = replay(builder.events, shape="anthropic")
    assert anthropic["system"] == "Be brief."
    assert [m["role"] for m in anthropic["messages"]] == ["user", "assistant"]


def test_an_assistant_speaking_after_a_rewind_to_the_start_gets_the_marker() -> None:
    """A rewind to the start withdraws the user's opening; the assistant's next message is
    then the first, and replay puts the marker before it."""
    builder = HistoryBuilder(uuid4())
    builder.message("user", [TextBlock(text="Hi.")])
    builder.rewind(None)
    builder.message("assistant", [TextBlock(text="Starting over.")])
    for shape in SHAPES:
        assert first_turn_problems(replay(builder.events, shape=shape)) == []
        roles = [m["role"] for m in replay(builder.events, shape=shape)["messages"]]
        assert roles == ["user", "assistant"]


def test_a_history_opening_with_the_user_or_a_summary_gets_no_marker() -> None:
    """No marker where none is needed: the user's opening, or a compaction's summary (a user
    message) standing first."""
    builder = opened_by_the_assistant()
    through = builder.visible_messages()[0]
    builder.compact("The assistant proposed a plan.", through)
    for shape in SHAPES:
        compacted = json.dumps(replay(builder.events, shape=shape))
        assert HISTORY_STARTS not in compacted
        assert HISTORY_STARTS in json.dumps(replay(builder.events, shape=shape, full=True))
    user_first = HistoryBuilder(uuid4())
    user_first.message("user", [TextBlock(text="Hi.")])
    user_first.message("assistant", [TextBlock(text="Hello.")])
    assert HISTORY_STARTS not in json.dumps(replay(user_first.events))


def test_pressure_counts_the_marker_as_a_sent_message() -> None:
    """Pressure counts what is sent: the marker is a message of its own, of kind marker."""
    events = opened_by_the_assistant().events
    state, load = folded(events)
    for shape in SHAPES:
        options = ReplayOptions(shape=shape)
        pressure = measure(plan(state, options, load), shape, count_tokens)
        sent = replay(events, shape=shape)["messages"]
        assert len(pressure.by_message) == len(sent)
        first = pressure.by_message[0]
        assert first.role == "user"
        assert first.tokens == count_tokens(HISTORY_STARTS) + MESSAGE_FRAMING_TOKENS
        assert pressure.by_kind["marker"] == count_tokens(HISTORY_STARTS)
        assert sum(pressure.by_kind.values()) == pressure.total


def test_a_live_round_opening_the_history_follows_the_marker() -> None:
    """A live tool round whose assistant message opens the history: the request still starts
    with the user's message."""
    builder = HistoryBuilder(uuid4())
    live = builder.message("assistant", [ToolUseBlock(id="call_1", name="lookup", input={})])
    builder.message("user", [ToolResultBlock(tool_use_id="call_1", content="42")])
    for shape in SHAPES:
        request = live_request(builder.events, live, shape=shape)
        assert first_turn_problems(request) == []


def test_the_corpus_response_opening_with_the_assistant_replays_valid(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """The shared corpus's Messages API response (thinking, text, tool_use): one assistant
    message, which replay sends after the marker, valid under every validator."""
    path = corpus_dir / "anthropic-messages/pydanticai-anthropic-tool-with-thinking-resp0.json"
    history = history_from_messages(json.loads(path.read_text(encoding="utf-8")))
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = record_history(store, history)
        for shape in SHAPES:
            out = store.replay(conv, shape=shape)
            assert [m["role"] for m in out["messages"] if m["role"] != "system"][:2] == [
                "user",
                "assistant",
            ]
            assert rejections(shape, request_body(shape, out)) == []
            assert first_turn_problems(out) == []
            assert blank_text_problems(out) == []


def test_every_corpus_messages_body_replays_user_first(corpus_dir: Path, tmp_path: Path) -> None:
    """Every recorded Messages body and response in the corpus, whichever role it opens with,
    replays with the user's message first and no blank text, in both shapes."""
    files = sorted((corpus_dir / "anthropic-messages").glob("*.json"))
    with convstore.open_store(tmp_path / "s.db") as store:
        for path in files:
            history = history_from_messages(json.loads(path.read_text(encoding="utf-8")))
            conv = record_history(store, history)
            for shape in SHAPES:
                out = store.replay(conv, shape=shape)
                assert first_turn_problems(out) == [], path.name
                assert blank_text_problems(out) == [], path.name


# -- the neighbouring rules --------------------------------------------------------------------


def roles_of(events: list[Event], shape: Shape) -> list[Role]:
    return [m["role"] for m in replay(events, shape=shape)["messages"]]


def test_known_limit_two_assistant_messages_in_a_row_stay_two() -> None:
    """Known limit (docs/blocks.md): an interrupted turn and the assistant's next message are
    two stored messages, so two wire messages in a row of the same role. Bedrock Converse and
    strict chat templates refuse that; the Messages API merges them itself."""
    builder = HistoryBuilder(uuid4())
    builder.message("user", [TextBlock(text="Write a poem.")])
    cut = builder.start("assistant")
    builder.append(cut, TextBlock(text="Roses are"))
    builder.interrupt(cut, "user pressed stop")
    builder.message("assistant", [TextBlock(text="Here is a poem.")])
    for shape in SHAPES:
        out = replay(builder.events, shape=shape)
        assert roles_of(builder.events, shape) == ["user", "assistant", "assistant"]
        assert alternation_problems(out) == ["messages 1 and 2 are both the assistant's"]
        assert rejections(shape, request_body(shape, out)) == []  # the SDK types accept it


def test_known_limit_a_history_ending_with_the_assistant_ends_so() -> None:
    """Known limit: replay is the history so far; one ending with the assistant's message
    ends the fragment with it. Mistral (serving) wants the last message the user's: the
    caller appends the next user turn, after which the rule holds."""
    events = opened_by_the_assistant().events[:-3]  # drop the user's message
    out = replay(events, shape="openai")
    assert [m["role"] for m in out["messages"]] == ["user", "assistant"]
    assert last_turn_problems(out) == ["the last message is the assistant's"]
    out["messages"].append({"role": "user", "content": "Next."})
    assert last_turn_problems(out) == []


def test_a_final_assistant_turn_never_ends_in_whitespace_in_the_anthropic_shape() -> None:
    """The Messages API refuses a final assistant turn ending in whitespace: trimmed."""
    builder = HistoryBuilder(uuid4())
    builder.message("user", [TextBlock(text="Hi.")])
    builder.message("assistant", [TextBlock(text="Hello.  \n")])
    last = replay(builder.events, shape="anthropic")["messages"][-1]["content"][-1]["text"]
    assert last == "Hello."


def test_the_rules_find_what_they_describe() -> None:
    """Each validator refuses its own mistake (so an empty answer means something)."""
    assistant_first = {
        "messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]
    }
    assert first_turn_problems(assistant_first) == [
        "the first message is the assistant's, not the user's"
    ]
    assert first_turn_problems({"messages": [{"role": "user", "content": "u"}]}) == []
    assert blank_text_problems(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]}
    )
    assert blank_text_problems({"messages": [{"role": "user", "content": []}]})
    repeated = {"messages": [{"role": "user", "content": "u"}, {"role": "user", "content": "v"}]}
    assert alternation_problems(repeated) == ["messages 0 and 1 are both the user's"]
    prefixed = {
        "messages": [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a", "prefix": True},
        ]
    }
    assert last_turn_problems(prefixed) == []
