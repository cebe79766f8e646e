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
from pydantic import JsonValue

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


# -- OpenRouter's reasoning and annotations -------------------------------------------------


def router_chunk(
    delta: dict[str, Any],
    finish_reason: str | None = None,
    model: str = "anthropic/claude-sonnet-4",
) -> ChatCompletionChunk:
    """A chunk as OpenRouter streams it: the SDK type with OpenRouter's extra keys (the
    chunk's ``provider``, the choice's ``native_finish_reason``, the delta's ``reasoning``,
    ``reasoning_details`` and ``annotations``), which the SDK keeps."""
    return ChatCompletionChunk.model_validate(
        {
            "id": "gen-1750000000-abc",
            "provider": "Anthropic",
            "object": "chat.completion.chunk",
            "created": 1750000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", **delta},
                    "finish_reason": finish_reason,
                    "native_finish_reason": finish_reason,
                    "logprobs": None,
                }
            ],
        }
    )


def thinking(text: str, **more: str) -> dict[str, Any]:
    detail = {"type": "reasoning.text", "text": text, "format": "anthropic-claude-v1", "index": 0}
    return {"content": "", "reasoning": text or None, "reasoning_details": [detail | more]}


CITATION: dict[str, JsonValue] = {
    "type": "url_citation",
    "url_citation": {
        "url": "https://nodejs.org/en/about/previous-releases",
        "title": "Node.js Releases",
        "content": "Node 24 is the Active LTS.",
        "start_index": 0,
        "end_index": 26,
    },
}
ROUTER_STREAM = [
    router_chunk(thinking("The user wants ")),
    router_chunk(thinking("the current LTS.")),
    router_chunk(thinking("", signature="ErUBCkYIBxgCKkD")),
    router_chunk({"content": "Node 24 is "}),
    router_chunk({"content": "the Active LTS."}),
    router_chunk({"content": "", "annotations": [CITATION]}),
    router_chunk({"content": ""}, finish_reason="stop"),
]
ROUTER_MESSAGE = {
    "role": "assistant",
    "content": "Node 24 is the Active LTS.",
    "reasoning": "The user wants the current LTS.",
    "reasoning_details": [
        {
            "type": "reasoning.text",
            "text": "The user wants the current LTS.",
            "signature": "ErUBCkYIBxgCKkD",
            "format": "anthropic-claude-v1",
            "index": 0,
        }
    ],
    "annotations": [CITATION],
}


def test_openrouter_reasoning_and_annotations_are_recorded_as_the_whole_message_reads(
    tmp_path: Path,
) -> None:
    """Reasoning pieces (and the signature that comes last) are one reasoning block, the
    citation rides on the text it came after: the blocks the non-streaming converter makes
    of the same message, landed in a SQLite store and read back; replay names the source."""
    store = convstore.open_store(tmp_path / "s.db")
    conv = store.new_conversation()
    with ChatStreamRecorder(store, conv) as recorder:
        for part in ROUTER_STREAM:
            recorder.feed(part)
    assert blocks_of(store, conv) == [
        ReasoningBlock(text="The user wants the current LTS.", signature="ErUBCkYIBxgCKkD"),
        TextBlock(text="Node 24 is the Active LTS.", annotations=[CITATION]),
    ]
    assert blocks_of(store, conv) == list(assistant_blocks(ROUTER_MESSAGE))
    content = store.replay(conv)["messages"][1]["content"]
    assert content.endswith(
        "Node 24 is the Active LTS.\n[Sources: Node.js Releases "
        "(https://nodejs.org/en/about/previous-releases)]"
    )


def test_encrypted_and_summary_reasoning_then_a_tool_call() -> None:
    """Gemini's encrypted reasoning and OpenAI's summaries, as OpenRouter streams them
    (entries told apart by ``index``), close when the tool call starts; the encrypted data
    is kept, and the whole message reads the same."""
    summary = {"type": "reasoning.summary", "format": "openai-responses-v1", "index": 0}
    secret = {"type": "reasoning.encrypted", "format": "google-gemini-v1", "index": 1}
    stream = [
        router_chunk(
            {"reasoning": "Look up ", "reasoning_details": [summary | {"summary": "Look up "}]}
        ),
        router_chunk(
            {
                "reasoning": "the weather.",
                "reasoning_details": [summary | {"summary": "the weather."}],
            }
        ),
        router_chunk({"reasoning_details": [secret | {"data": "CiQB0e2Kb"}]}),
        router_chunk({"reasoning_details": [secret | {"data": "7nQ=="}]}),
        router_chunk(call_delta(0, "tool_0", "weather", '{"city": "Oslo"}')),
        router_chunk({}, finish_reason="tool_calls"),
    ]
    assembler = ChunkAssembler()
    done = [block for part in stream for block in assembler.feed(part)]
    assert done == [
        ReasoningBlock(text="Look up the weather."),
        ReasoningBlock(text="", encrypted_content="CiQB0e2Kb7nQ=="),
    ]
    done += assembler.finish()
    whole = {
        "role": "assistant",
        "content": None,
        "reasoning": "Look up the weather.",
        "reasoning_details": [
            summary | {"summary": "Look up the weather."},
            secret | {"data": "CiQB0e2Kb7nQ=="},
        ],
        "tool_calls": [
            {
                "id": "tool_0",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    }
    assert done == list(assistant_blocks(whole))
    assert assembler.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("delta", "named"),
    [
        ({"audio": {"id": "a", "data": "AAAA"}}, "chunk 0 delta: key 'audio'"),
        (
            {"reasoning_details": [{"type": "reasoning.audio", "index": 0}]},
            "chunk 0 reasoning_details: reasoning detail type 'reasoning.audio'",
        ),
        (
            {"function_call": {"name": "f", "arguments": "{}"}},
            "chunk 0 delta: field 'function_call'",
        ),
    ],
)
def test_a_delta_the_assembler_cannot_read_is_refused_naming_it(
    delta: dict[str, Any], named: str
) -> None:
    """Never dropped: an unknown delta key, reasoning detail type or the legacy
    ``function_call`` is refused in one line."""
    with pytest.raises(convstore.InvalidInput) as refused:
        ChunkAssembler().feed(router_chunk(delta))
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


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


DETAIL_TEXT = {
    "reasoning.text": "text",
    "reasoning.summary": "summary",
    "reasoning.encrypted": "data",
}
"""Each ``reasoning_details`` type and its field that streams in pieces."""


@st.composite
def openrouter_reasoning(
    draw: st.DrawFn,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """OpenRouter reasoning: the message's ``reasoning`` and ``reasoning_details``, and the
    deltas that stream them (each entry cut into pieces sharing its ``index``, a text's
    ``signature`` on its last piece, the plain ``reasoning`` beside the text pieces)."""
    entries: list[dict[str, Any]] = []
    deltas: list[dict[str, Any]] = []
    for index, kind in enumerate(draw(st.lists(st.sampled_from(list(DETAIL_TEXT)), max_size=3))):
        key, whole = DETAIL_TEXT[kind], draw(texts)
        entry: dict[str, Any] = {"type": kind, key: whole, "index": index}
        parts = [{"type": kind, key: p, "index": index} for p in pieces(draw, whole)]
        if kind == "reasoning.text" and draw(st.booleans()):
            entry["signature"] = "sig-" + whole
            parts.append(
                {"type": kind, "text": "", "signature": entry["signature"], "index": index}
            )
        entries.append(entry)
        for part in parts:
            plain = {"reasoning": part["text"]} if part.get("text") else {}
            deltas.append({**plain, "reasoning_details": [part]})
    text = "".join(e["text"] for e in entries if e["type"] == "reasoning.text")
    if not entries:  # the plain text alone, as providers without details send it
        text = draw(st.none() | texts) or ""
        deltas = [{"reasoning": p} for p in pieces(draw, text)]
    message = {"reasoning": text or None, "reasoning_details": entries}
    return message, deltas


CITATIONS = st.lists(
    st.builds(
        lambda url, title: {
            "type": "url_citation",
            "url_citation": {"url": url, "title": title, "start_index": 0, "end_index": 1},
        },
        st.sampled_from(["https://a.example/1", "https://b.example/2"]),
        texts,
    ),
    max_size=3,
)


@st.composite
def completions(draw: st.DrawFn) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An assistant message, and chunks of it cut at random: DeepSeek's or OpenRouter's
    reasoning, text with the annotations OpenRouter streams after it, tool calls."""
    content = draw(st.none() | texts)
    calls: list[dict[str, Any]] = [
        {"id": f"c{i}", "type": "function", "function": {"name": draw(texts), "arguments": a}}
        for i, a in enumerate(draw(st.lists(arguments, max_size=3)))
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": calls}
    deltas: list[dict[str, Any]] = [{"role": "assistant"}]
    if draw(st.booleans()):
        reasoning = draw(st.none() | texts)
        if reasoning:
            message["reasoning_content"] = reasoning
        deltas += [{"reasoning_content": p} for p in pieces(draw, reasoning or "")]
    else:
        whole, streamed = draw(openrouter_reasoning())
        message |= whole
        deltas += streamed
    deltas += [{"content": p} for p in pieces(draw, content or "")]
    annotations = draw(CITATIONS)
    if annotations:
        message["annotations"] = annotations
        cut = draw(st.integers(0, len(annotations)))
        # With the last piece of text, or in a chunk of their own (content "" beside them).
        deltas += [
            {"content": "", "annotations": a} for a in (annotations[:cut], annotations[cut:]) if a
        ]
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
