"""Recording Anthropic responses and streams into a store, sync and async, on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from anthropic.types.beta import BetaRawMessageStreamEvent
from pydantic import TypeAdapter

import convstore
from convstore.convert.anthropic import history_from_messages
from convstore.domain.blocks import HostedToolResultBlock, ReasoningBlock, TextBlock, ToolUseBlock
from convstore.recording.anthropic import (
    AsyncMessageStreamRecorder,
    MessageStreamRecorder,
    arecord_messages,
    record_message,
    record_messages,
)
from tests import anthropic_blocks as fx

EVENTS: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store location on each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
    return make()


def _stream() -> list[RawMessageStreamEvent]:
    """A real-shaped stream: signed thinking, text, a tool call in pieces, and a tool call
    whose arguments are not JSON, as the SDK's typed events."""
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }
    raw: list[dict[str, Any]] = [
        {"type": "message_start", "message": message},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "List "},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "first."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "SIG"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": "Looking"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": '},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '"."}'},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "content_block_start",
            "index": 3,
            "content_block": {"type": "tool_use", "id": "t2", "name": "rm", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": '{"path": "a'},
        },
        {"type": "content_block_stop", "index": 3},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    return [EVENTS.validate_python(event) for event in raw]


EXPECTED = [
    ReasoningBlock(text="List first.", signature="SIG"),
    TextBlock(text="Looking"),
    ToolUseBlock(id="t1", name="ls", input={"path": "."}),
    ToolUseBlock(id="t2", name="rm", input='{"path": "a'),
]


def test_a_stream_appends_each_block_at_its_stop_event(location: str) -> None:
    """Each block lands at content_block_stop; malformed streamed arguments stay raw text."""
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "Clean up."}])
        recorder = MessageStreamRecorder(store, conv)
        events = _stream()
        for event in events[:6]:
            recorder.record(event)
        [_, landed] = store.messages(conv)
        assert [b.block for b in landed.blocks] == EXPECTED[:1]
        assert landed.status == "open"
        for event in events[6:]:
            recorder.record(event)
        [_, turn] = store.messages(conv)
        assert [b.block for b in turn.blocks] == EXPECTED
        assert turn.status == "ended"
        assert recorder.message_id is not None
        assert 'Tool use: rm({"path": "a)' in store.replay(conv)["messages"][-1]["content"]


def test_the_live_request_sends_streamed_thinking_back_signed(tmp_path: Path) -> None:
    """A streamed tool round's live request carries the thinking block with its signature."""
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "Clean up."}])
        events = [e for e in _stream() if getattr(e, "index", None) != 3]
        turn = MessageStreamRecorder(store, conv).record_all(events)
        assert turn is not None
        result = {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}
        store.append_message(conv, "user", [result])
        live = store.live_request(conv, turn, shape="anthropic")
        thinking = live["messages"][-2]["content"][0]
        assert thinking == {"type": "thinking", "thinking": "List first.", "signature": "SIG"}


def test_an_unknown_stream_block_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    """A block type the recorder does not know (a beta compaction block) in a stream is refused
    by name and index; nothing lands."""
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        recorder = MessageStreamRecorder(store, conv)
        recorder.record(_stream()[0])
        before = len(store.events(conv))
        bad = {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "compaction", "content": None},
        }
        with pytest.raises(
            convstore.InvalidInput,
            match="stream event 1, content block 0: unsupported Anthropic content block "
            "type 'compaction'",
        ):
            recorder.record(bad)
        with pytest.raises(
            convstore.InvalidInput, match="unsupported Anthropic stream event type 'bogus'"
        ):
            recorder.record({"type": "bogus"})
        assert len(store.events(conv)) == before


def test_a_stream_cut_at_max_tokens_is_recorded_interrupted(tmp_path: Path) -> None:
    """stop_reason max_tokens marks the streamed message interrupted, with the reason."""
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        events = _stream()
        events[-2] = EVENTS.validate_python(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens"},
                "usage": {"output_tokens": 9},
            }
        )
        MessageStreamRecorder(store, conv).record_all(events)
        [turn] = store.messages(conv)
        assert turn.status == "interrupted"
        assert turn.interrupt_reason == "stopped at max_tokens"


@pytest.mark.parametrize("given", ["AsyncStore", "Store"])
def test_async_stream_and_bodies_record_the_same(location: str, given: str) -> None:
    """The async recorder and helpers, on an AsyncStore or on a Store (taken through
    as_async), give exactly what the sync ones give."""

    async def run() -> tuple[list[Any], dict[str, Any]]:
        async with await convstore.open_async_store(location) as store:
            conv = await store.new_conversation()
            into = store if given == "AsyncStore" else store.store
            await arecord_messages(
                into,
                conv,
                {"system": "Be terse.", "messages": [{"role": "user", "content": "hi"}]},
            )

            async def events() -> Any:
                for event in _stream():
                    yield event

            await AsyncMessageStreamRecorder(into, conv).record_all(events())
            return [
                [b.block for b in m.blocks] for m in await store.messages(conv)
            ], await store.replay(conv)

    blocks, replayed = asyncio.run(run())
    assert blocks[2] == EXPECTED
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        record_messages(
            store, conv, {"system": "Be terse.", "messages": [{"role": "user", "content": "hi"}]}
        )
        MessageStreamRecorder(store, conv).record_all(_stream())
        assert store.replay(conv) == replayed


def test_a_response_message_with_an_unknown_block_records_nothing(tmp_path: Path) -> None:
    """record_message checks the whole response first: one bad block, no write at all."""
    response = {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Searching."},
            {"type": "memory_tool_result", "tool_use_id": "s1", "content": []},
        ],
    }
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        with pytest.raises(
            convstore.InvalidInput, match=r"response, block 1: .*'memory_tool_result'"
        ):
            record_message(store, conv, response)
        assert len(store.events(conv)) == 1


BETA_EVENTS: TypeAdapter[BetaRawMessageStreamEvent] = TypeAdapter(BetaRawMessageStreamEvent)


def _hosted_stream() -> list[BetaRawMessageStreamEvent]:
    """A real-shaped beta stream: text whose citations arrive as citations_delta, a web search
    whose query streams in pieces and whose results arrive whole, then an MCP round."""
    start: dict[str, Any] = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 0},
    }
    search = {**fx.SEARCH, "input": {}}
    mcp = {**fx.MCP_USE, "input": {}}
    raw: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": search},
        *_json_pieces(0, '{"query": "convstore ', 'event sourcing"}'),
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": fx.SEARCH_RESULTS},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "text", "text": "", "citations": None},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "text_delta", "text": fx.CITED["text"]},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "citations_delta", "citation": fx.WEB},
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "citations_delta", "citation": fx.CHAR},
        },
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": mcp},
        *_json_pieces(3, '{"text": ', '"ping"}'),
        {"type": "content_block_stop", "index": 3},
        {"type": "content_block_start", "index": 4, "content_block": fx.MCP_RESULT},
        {"type": "content_block_stop", "index": 4},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    return [BETA_EVENTS.validate_python(event) for event in raw]


def _json_pieces(index: int, *pieces: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": piece},
        }
        for piece in pieces
    ]


def test_a_stream_records_hosted_calls_results_and_citations(tmp_path: Path) -> None:
    """Server tool calls, their results, MCP blocks and citation deltas in a live stream land
    as the blocks the same content gives in a whole response (provider_data included)."""
    whole = {**fx.CITED, "citations": [fx.WEB, fx.CHAR]}
    response = {
        "type": "message",
        "role": "assistant",
        "content": [fx.SEARCH, fx.SEARCH_RESULTS, whole, fx.MCP_USE, fx.MCP_RESULT],
    }
    expected = list(history_from_messages(response).messages[0].blocks)
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        MessageStreamRecorder(store, conv).record_all(_hosted_stream())
        [turn] = store.messages(conv)
        assert [b.block for b in turn.blocks] == expected
        assert turn.status == "ended"
    [_, results, text, *_] = expected
    assert isinstance(results, HostedToolResultBlock)
    assert results.provider_data == fx.SEARCH_RESULTS
    assert isinstance(text, TextBlock)
    citations: list[Any] = [fx.WEB, fx.CHAR]
    assert text.annotations == citations
