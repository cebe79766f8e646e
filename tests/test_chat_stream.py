"""Recording a streamed Chat Completion: real SDK ``ChatCompletionChunk`` s, blocks appended as
soon as they are complete, streams cut short, and any chunking giving the same blocks."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

import convstore
from convstore.convert.chat_stream import ChunkAssembler
from convstore.convert.openai_chat import assistant_blocks
from convstore.domain.blocks import Block, ReasoningBlock, TextBlock, ToolUseBlock
from convstore.recording.openai import (
    AsyncChatStreamRecorder,
    ChatStreamRecorder,
    arecord_chat_messages,
    arecord_responses_items,
)


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> ChatCompletionChunk:
    """A real SDK chunk of choice 0."""
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "deepseek-reasoner",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def call_delta(index: int, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    delta: dict[str, Any] = {"index": index, "function": function}
    if call_id is not None:
        delta |= {"id": call_id, "type": "function"}
    return {"tool_calls": [delta]}


STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Two files "}),
    chunk({"reasoning_content": "to read."}),
    chunk({"content": "Reading "}),
    chunk({"content": "both."}),
    chunk(call_delta(0, "c1", "read", '{"pa')),
    chunk(call_delta(0, None, None, 'th": "a"}')),
    chunk(call_delta(1, "c2", "read", '{"path": "b"')),  # cut JSON: kept raw
    chunk({}, finish_reason="tool_calls"),
]
WANTED: list[Block] = [
    ReasoningBlock(text="Two files to read."),
    TextBlock(text="Reading both."),
    ToolUseBlock(id="c1", name="read", input={"path": "a"}),
    ToolUseBlock(id="c2", name="read", input='{"path": "b"'),
]


def blocks_of(store: convstore.Store, conv: Any) -> list[Block]:
    [message] = store.messages(conv)
    return [r.block for r in message.blocks]


def test_each_block_lands_as_soon_as_it_is_complete(tmp_path: Path) -> None:
    """Reasoning lands when the text starts, the text when the first call starts, each call
    when the next starts, the last at the end; then the message is ended."""
    store = convstore.open_store(tmp_path / "s.db")
    conv = store.new_conversation()
    recorder = ChatStreamRecorder(store, conv)
    landed = []
    for part in STREAM:
        recorder.feed(part)
        landed.append(len(blocks_of(store, conv)))
    assert landed == [0, 0, 0, 1, 1, 2, 2, 3, 3]
    recorder.finish()
    assert blocks_of(store, conv) == WANTED
    assert store.messages(conv)[0].status == "ended"
    content = store.replay(conv)["messages"][1]["content"]  # after the opening marker
    assert content.endswith('Tool use: read({"path": "b")')


def test_a_stream_that_breaks_off_keeps_what_landed(tmp_path: Path) -> None:
    """An exception mid-stream interrupts the message with it as the reason: the finished
    blocks and the text in progress stay, a call still streaming is dropped."""
    store = convstore.open_store(tmp_path / "s.db")
    conv = store.new_conversation()

    def broken_stream() -> None:
        with ChatStreamRecorder(store, conv) as recorder:
            for part in STREAM[:4]:
                recorder.feed(part)
            msg = "peer closed"
            raise ConnectionError(msg)

    with pytest.raises(ConnectionError):
        broken_stream()
    [message] = store.messages(conv)
    assert [r.block for r in message.blocks] == [
        ReasoningBlock(text="Two files to read."),
        TextBlock(text="Reading "),
    ]
    assert message.status == "interrupted"
    assert message.interrupt_reason == "the stream failed: ConnectionError: peer closed"

    conv = store.new_conversation()
    recorder = ChatStreamRecorder(store, conv)
    for part in STREAM[:6]:
        recorder.feed(part)
    recorder.interrupt()
    assert blocks_of(store, conv) == WANTED[:2]


def test_a_length_cut_completion_is_recorded_interrupted(tmp_path: Path) -> None:
    """``finish_reason: length`` means the output was cut short: the message is interrupted
    with that reason, so replay tells the model."""
    store = convstore.open_store(tmp_path / "s.db")
    conv = store.new_conversation()
    with ChatStreamRecorder(store, conv) as recorder:
        recorder.feed(chunk({"content": "The answer is"}))
        recorder.feed(chunk({}, finish_reason="length"))
    content = store.replay(conv)["messages"][1]["content"]  # after the opening marker
    assert content.startswith("The answer is\n\n[Interrupted: the model reached its output")


def test_calls_told_apart_by_id_when_the_index_stays_zero() -> None:
    """Providers that send every call at index 0 (or none) still give one block per call id."""
    assembler = ChunkAssembler()
    done = assembler.feed({"choices": [{"index": 0, "delta": call_delta(0, "a", "f", "{}")}]})
    done += assembler.feed({"choices": [{"index": 0, "delta": call_delta(0, "b", "g", "{")}]})
    done += assembler.feed({"choices": [{"index": 0, "delta": call_delta(0, None, None, "}")}]})
    assert done + assembler.finish() == [
        ToolUseBlock(id="a", name="f", input={}),
        ToolUseBlock(id="b", name="g", input={}),
    ]


def test_a_second_choice_is_refused() -> None:
    """A stream of several choices (n>1) is refused by name."""
    two = ChatCompletionChunk.model_validate(
        {
            "id": "x",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 1, "delta": {"content": "hi"}, "finish_reason": None}],
        }
    )
    with pytest.raises(convstore.InvalidInput, match="chunk 0: choice 1; only streams of one"):
        ChunkAssembler().feed(two)


# -- any chunking of the same completion gives the same blocks ------------------------------

texts = st.text(min_size=1, max_size=30)
arguments = st.one_of(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3).map(
        json.dumps
    ),
    st.text(max_size=20),
)


def pieces(draw: st.DrawFn, text: str) -> list[str]:
    """``text`` cut at random places (never into empty pieces)."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
    bounds = [0, *(c for c in cuts if c < len(text)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if text[a:b]]


@st.composite
def completions(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An assistant message, and chunks of it cut at random."""
    reasoning = draw(st.none() | texts)
    content = draw(st.none() | texts)
    calls: list[dict[str, Any]] = [
        {"id": f"c{i}", "type": "function", "function": {"name": draw(texts), "arguments": a}}
        for i, a in enumerate(draw(st.lists(arguments, max_size=3)))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": calls}
    if reasoning:
        message["reasoning_content"] = reasoning
    deltas: list[dict[str, Any]] = [{"role": "assistant"}]
    deltas += [{"reasoning_content": p} for p in pieces(draw, reasoning or "")]
    deltas += [{"content": p} for p in pieces(draw, content or "")]
    for index, call in enumerate(calls):
        parts = pieces(draw, call["function"]["arguments"]) or [""]
        deltas.append(call_delta(index, call["id"], call["function"]["name"], parts[0]))
        deltas += [call_delta(index, None, None, p) for p in parts[1:]]
    chunks: list[dict[str, Any]] = [
        {"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    if draw(st.booleans()):
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return message, chunks


@settings(max_examples=150, deadline=None)
@given(completions())
def test_any_chunking_gives_the_blocks_of_the_whole_message(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """However a completion is cut into chunks (dicts or SDK objects), the assembled blocks are
    exactly those of the whole message converted at once."""
    message, chunks = case
    assembler = ChunkAssembler()
    done: list[Block] = []
    for index, part in enumerate(chunks):
        done += assembler.feed(
            part
            if index % 2
            else ChatCompletionChunk.model_validate(
                {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", **part}
            )
        )
    done += assembler.finish()
    assert done == list(assistant_blocks(message)) or (
        not done and assistant_blocks(message) == (TextBlock(text=""),)
    )


# -- the async recorder and helpers on both backends ---------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store location: a SQLite file, or a schema of the PostgreSQL test server."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.mark.parametrize("given", ["AsyncStore", "Store"])
def test_async_recorder_and_helpers_record_what_the_sync_ones_do(location: str, given: str) -> None:
    """On an AsyncStore (or a Store, taken through as_async) the stream recorder and the list
    helpers record the same blocks as the sync ones; a refused list leaves nothing behind."""

    async def go() -> None:
        async with await convstore.open_async_store(location) as store:
            conv = await store.new_conversation()
            into = store if given == "AsyncStore" else store.store
            await arecord_chat_messages(into, conv, [{"role": "user", "content": "Read a, b."}])
            async with AsyncChatStreamRecorder(into, conv) as recorder:
                for part in STREAM:
                    await recorder.feed(part)
            await arecord_chat_messages(
                into,
                conv,
                [
                    {"role": "tool", "tool_call_id": "c1", "content": "A"},
                    {"role": "tool", "tool_call_id": "c2", "content": "B"},
                ],
            )
            with pytest.raises(convstore.InvalidInput, match="item 1: item type 'compaction'"):
                await arecord_responses_items(
                    into, conv, [{"role": "user", "content": "x"}, {"type": "compaction"}]
                )
            messages = await store.messages(conv)
            assert [m.role for m in messages] == ["user", "assistant", "user"]
            assert [r.block for r in messages[1].blocks] == WANTED
            replayed = (await store.replay(conv))["messages"]
            assert replayed[2]["content"] == "Result (read): A\n\nResult (read): B"

    asyncio.run(go())
