"""The OpenAI converters (Chat Completions, Responses API) on the real corpus, the real SDK
types and the synthetic cases the corpus lacks; recorded in real stores and replayed through
the SDK request validators of tests/sdk.py."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.responses import Response
from pydantic import JsonValue

import convstore
from convstore.convert.history import History
from convstore.convert.openai_chat import assistant_blocks, history_from_chat
from convstore.convert.responses import history_from_responses
from convstore.domain.blocks import ImageBlock, ReasoningBlock, TextBlock, ToolUseBlock
from convstore.projections.prose import text_prose
from convstore.recording.anthropic import MessageStreamRecorder
from convstore.recording.openai import (
    record_chat_message,
    record_chat_messages,
    record_responses_items,
    record_tool_messages,
)
from tests.sdk import rejections, request_body
from tests.strategies import TINY_IMAGES

PNG = TINY_IMAGES["image/png"][0]
TOOL_USE = re.compile(r"(?:^|\n\n)Tool use: ([^(\n]+)\(")
RESULT = re.compile(r"(?:^|\n\n)(?:Result|Error) \(([^)\n]+)\): ")


def record(store: convstore.Store, history: History) -> UUID:
    """Record a converted history as one new conversation."""
    conv = store.new_conversation()
    for message in history.messages:
        store.append_message(conv, message.role, message.blocks)
    return conv


def accepted_replay(store: convstore.Store, conv: UUID) -> list[dict[str, Any]]:
    """Replay in both shapes, asserting the SDKs accept each; the OpenAI messages."""
    for shape in ("openai", "anthropic"):
        fragment = store.replay(conv, shape=shape)
        problems = rejections(shape, request_body(shape, fragment))
        assert problems == [], "\n".join(problems[:5])
    messages: list[dict[str, Any]] = store.replay(conv)["messages"]
    return messages


def prose_counts(messages: list[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """Tool calls and tool results by tool name, read from replay's prose."""
    texts = [m["content"] for m in messages if isinstance(m["content"], str)]
    calls = Counter(name for text in texts for name in TOOL_USE.findall(text))
    results = Counter(name for text in texts for name in RESULT.findall(text))
    return calls, results


def corpus_files(corpus_dir: Path, kind: str) -> list[Path]:
    files = sorted((corpus_dir / kind).glob("*.json"))
    assert files, f"no {kind} files in {corpus_dir}"
    return files


@pytest.fixture
def store(tmp_path: Path) -> convstore.Store:
    """A fresh SQLite store."""
    return convstore.open_store(tmp_path / "store.db")


# -- the real corpus ---------------------------------------------------------------------------


def test_every_chat_corpus_file_converts_records_and_replays_with_every_call(
    corpus_dir: Path, store: convstore.Store
) -> None:
    """Every Chat Completions body in the corpus is recorded; its replay is accepted by both
    SDKs and keeps every tool call and tool result as prose, by tool name."""
    for path in corpus_files(corpus_dir, "openai-chat"):
        body = json.loads(path.read_text())
        source = body["messages"]
        names = {c["id"]: c["function"]["name"] for m in source for c in m.get("tool_calls") or []}
        want_calls = Counter(names.values())
        want_results = Counter(names[m["tool_call_id"]] for m in source if m["role"] == "tool")
        conv = record(store, history_from_chat(body))
        calls, results = prose_counts(accepted_replay(store, conv))
        assert (calls, results) == (want_calls, want_results), path.name


def test_every_responses_corpus_file_converts_records_and_replays_with_every_call(
    corpus_dir: Path, store: convstore.Store
) -> None:
    """Every Responses API body in the corpus is recorded; its replay is accepted by both
    SDKs and keeps every function call and output as prose; encrypted reasoning rides along."""
    for path in corpus_files(corpus_dir, "openai-responses"):
        body = json.loads(path.read_text())
        items = body["input"]
        names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
        outputs = [i for i in items if i.get("type") == "function_call_output"]
        conv = record(store, history_from_responses(body))
        calls, results = prose_counts(accepted_replay(store, conv))
        assert calls == Counter(names.values()), path.name
        assert results == Counter(names[i["call_id"]] for i in outputs), path.name
        encrypted = [i["encrypted_content"] for i in items if i.get("encrypted_content")]
        kept = [
            b.encrypted_content
            for m in store.messages(conv)
            for b in (r.block for r in m.blocks)
            if isinstance(b, ReasoningBlock) and b.encrypted_content
        ]
        assert kept == encrypted, path.name


def test_deepseek_reasoning_content_becomes_a_reasoning_block(corpus_dir: Path) -> None:
    """DeepSeek's ``reasoning_content`` is recorded as reasoning, first in its message; an
    empty one adds nothing."""
    path = (
        corpus_dir / "openai-chat/pydanticai-deepseek-deferred-capability-with-thinking-req2.json"
    )
    body = json.loads(path.read_text())
    history = history_from_chat(body)
    wanted = [m["reasoning_content"] for m in body["messages"] if m.get("reasoning_content")]
    found = [
        b.text
        for m in history.messages
        for b in m.blocks
        if isinstance(b, ReasoningBlock) and m.blocks[0] is b
    ]
    assert found == wanted


# -- Chat Completions: SDK types and synthetic cases -------------------------------------------


def completion(message: dict[str, Any], finish_reason: str = "tool_calls") -> ChatCompletion:
    """A real SDK ``ChatCompletion`` around one assistant message."""
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
    )


def test_sdk_completion_with_invalid_json_arguments_is_recorded_faithfully(
    store: convstore.Store,
) -> None:
    """A ``ChatCompletion`` whose tool call arguments are not a JSON object is recorded with the
    raw text, and replay shows that text exactly; valid arguments become the input object."""
    reply = completion(
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": "{'p': 1"},
                },
                {"id": "c2", "type": "function", "function": {"name": "ls", "arguments": "[1, 2]"}},
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"p":"."}'},
                },
            ],
        }
    )
    conv = store.new_conversation()
    record_chat_message(store, conv, reply)
    [message] = store.messages(conv)
    blocks = [r.block for r in message.blocks]
    assert [b.input for b in blocks if isinstance(b, ToolUseBlock)] == [
        "{'p': 1",
        "[1, 2]",
        {"p": "."},
    ]
    content = store.replay(conv)["messages"][1]["content"]  # after the opening marker
    assert "Tool use: ls({'p': 1)" in content
    assert "Tool use: ls([1, 2])" in content


NOT_JSON_NUMBERS = ['{"x": NaN}', '{"x": Infinity}', '{"x": -Infinity}', '{"x": 1e999}']


@pytest.mark.parametrize("arguments", NOT_JSON_NUMBERS)
def test_arguments_with_non_finite_numbers_are_kept_as_raw_text(
    store: convstore.Store, arguments: str
) -> None:
    """Arguments Python's json would read as NaN or infinity (not JSON; models emit them) are
    recorded as the raw text by every converter, not refused for a non-finite number."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    chat = {
        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}]
    }
    items = [
        {"role": "user", "content": "q"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": arguments},
    ]
    convs = [
        store.import_history(history_from_chat(chat), again=True),
        store.import_history(history_from_responses(items), again=True),
    ]
    streamed = store.new_conversation()
    store.append_message(streamed, "user", [{"type": "text", "text": "q"}])
    recorder = MessageStreamRecorder(store, streamed)
    block = {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    delta = {"type": "input_json_delta", "partial_json": arguments}
    message = {"id": "m", "type": "message", "role": "assistant", "content": [], "model": "x"}
    for event in [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": block},
        {"type": "content_block_delta", "index": 0, "delta": delta},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]:
        recorder.record(event)
    for conv in [*convs, streamed]:
        [_, turn] = store.messages(conv)
        assert [r.block.input for r in turn.blocks if isinstance(r.block, ToolUseBlock)] == [
            arguments
        ]
        assert store.replay(conv)["messages"][1]["content"] == f"Tool use: f({arguments})"


def test_consecutive_tool_messages_form_one_user_message_named_from_the_calls(
    store: convstore.Store,
) -> None:
    """Two ``tool`` messages become one user message of two results, named from the calls; a
    result whose call is unknown is recorded as the tool ``unknown``."""
    conv = store.new_conversation()
    record_chat_message(
        store,
        conv,
        completion(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "a",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    },
                    {
                        "id": "b",
                        "type": "function",
                        "function": {"name": "grep", "arguments": "{}"},
                    },
                ],
            }
        )
        .choices[0]
        .message,
    )
    record_tool_messages(
        store,
        conv,
        [
            {"role": "tool", "tool_call_id": "a", "content": "text of a"},
            {
                "role": "tool",
                "tool_call_id": "b",
                "content": [{"type": "text", "text": "no match"}],
            },
            {"role": "tool", "tool_call_id": "zz", "content": "orphan"},
        ],
    )
    messages = accepted_replay(store, conv)
    assert len(messages) == 3  # the opening marker, the calls, one user message of results
    assert messages[2] == {
        "role": "user",
        "content": (
            "Result (read): text of a\n\nResult (grep): no match\n\nResult (unknown): orphan"
        ),
    }


def test_unanswered_call_replays_as_prose_the_sdk_accepts(store: convstore.Store) -> None:
    """A call whose result never came (the process died) replays as prose, and the next
    user turn makes a request both SDKs accept."""
    body = {
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "Delete tmp."},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "x", "type": "function", "function": {"name": "rm", "arguments": ""}}
                ],
            },
            {"role": "user", "content": "Did it work?"},
        ]
    }
    conv = record(store, history_from_chat(body))
    messages = accepted_replay(store, conv)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == "Tool use: rm()\n\n[No result was recorded for this call.]"


def test_images_by_data_url_and_by_address(store: convstore.Store) -> None:
    """A ``data:`` URL image becomes base64 data with its media type; an https one an image
    by URL, never fetched; both are shown to a vision model and marked for a text model."""
    body = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Compare."},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {
                    "type": "image_url",
                    "image_url": {"url": "https://example.com/a.jpg", "detail": "low"},
                },
            ],
        }
    ]
    history = history_from_chat(body)
    blocks = history.messages[0].blocks
    assert blocks[1] == ImageBlock(media_type="image/png", data=PNG)
    assert blocks[2] == ImageBlock(url="https://example.com/a.jpg")
    conv = record(store, history)
    seen = store.replay(conv, vision=True)["messages"][0]["content"]
    assert [p["type"] for p in seen] == ["text", "image_url", "image_url"]
    assert rejections("openai", request_body("openai", store.replay(conv, vision=True))) == []
    text_only = store.replay(conv)["messages"][0]["content"]
    assert "[Image not shown: an image (at https://example.com/a.jpg)" in text_only


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        (
            [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
            "message 1 (user) content part 0: part type 'input_audio'",
        ),
        ([{"role": "function", "name": "f", "content": "x"}], "message 1: role 'function'"),
        (
            [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}],
            "message 1 (user) content part 0 image_url.url: image url 'ftp://x'",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}
                    ],
                }
            ],
            "message 1 (user) content part 0 image_url.url: media_type",
        ),
    ],
)
def test_an_unknown_chat_type_is_refused_and_nothing_is_written(
    store: convstore.Store, messages: list[dict[str, Any]], named: str
) -> None:
    """A part type, role or image the converter does not take is refused with one line that
    names it and its position, and none of the list's messages are written."""
    conv = store.new_conversation()
    before = store.events(conv)
    with pytest.raises(convstore.InvalidInput) as refused:
        record_chat_messages(store, conv, [{"role": "user", "content": "first"}, *messages])
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)
    assert store.events(conv) == before


# -- Responses API: SDK types and synthetic cases ----------------------------------------------


def test_sdk_response_output_is_one_assistant_message(store: convstore.Store) -> None:
    """A real SDK ``Response``'s output (reasoning with encrypted content, text, a function
    call) is recorded as ONE assistant message; its output after is one user message."""
    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-5",
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "output": [
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [
                        {"type": "summary_text", "text": "Plan."},
                        {"type": "summary_text", "text": "Look."},
                    ],
                    "encrypted_content": "gAAAA-opaque",
                },
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
                },
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "ls",
                    "arguments": '{"path": "."}',
                },
            ],
        }
    )
    conv = store.new_conversation()
    record_responses_items(store, conv, [{"role": "user", "content": "List."}, *response.output])
    record_responses_items(
        store, conv, [{"type": "function_call_output", "call_id": "call_1", "output": "a b"}]
    )
    messages = store.messages(conv)
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert tuple(r.block for r in messages[1].blocks) == (
        ReasoningBlock(text="Plan.\n\nLook.", encrypted_content="gAAAA-opaque"),
        TextBlock(text="Looking."),
        ToolUseBlock(id="call_1", name="ls", input={"path": "."}),
    )
    assert accepted_replay(store, conv)[2]["content"] == "Result (ls): a b"


def test_encrypted_only_reasoning_is_kept_but_not_marked_redacted() -> None:
    """A reasoning item with no text but encrypted content is kept with it, and not marked
    redacted (that flag means an Anthropic ``redacted_thinking`` block)."""
    history = history_from_responses(
        [{"type": "reasoning", "id": "rs", "summary": [], "encrypted_content": "zzz"}]
    )
    assert history.messages[0].blocks == (ReasoningBlock(text="", encrypted_content="zzz"),)


def test_empty_reasoning_items_add_nothing() -> None:
    """A reasoning item with no text and no encrypted content adds no block, and a turn of
    nothing else adds no message."""
    empty = {"type": "reasoning", "id": "rs", "summary": []}
    history = history_from_responses(
        [{"role": "user", "content": "Hi"}, empty, {"role": "assistant", "content": "Hello"}]
    )
    assert [m.blocks for m in history.messages] == [
        (TextBlock(text="Hi"),),
        (TextBlock(text="Hello"),),
    ]
    assert history_from_responses([empty]).messages == []


def test_responses_body_string_input_and_instructions() -> None:
    """A body whose ``input`` is a string is one user message, after ``instructions`` as the
    system message."""
    history = history_from_responses({"instructions": "Be kind.", "input": "Hi"})
    assert [(m.role, m.blocks) for m in history.messages] == [
        ("system", (TextBlock(text="Be kind."),)),
        ("user", (TextBlock(text="Hi"),)),
    ]


def test_function_call_output_with_parts_and_images(store: convstore.Store) -> None:
    """A ``function_call_output`` whose output is a list of text and image parts is one tool
    result with those parts; bad JSON arguments stay raw."""
    items = [
        {"type": "function_call", "call_id": "s", "name": "shot", "arguments": "not json"},
        {
            "type": "function_call_output",
            "call_id": "s",
            "output": [
                {"type": "input_text", "text": "Here:"},
                {
                    "type": "input_image",
                    "image_url": f"data:image/png;base64,{PNG}",
                    "detail": "auto",
                },
            ],
        },
    ]
    conv = store.new_conversation()
    record_responses_items(store, conv, [{"role": "user", "content": "Go"}, *items])
    messages = accepted_replay(store, conv)
    assert messages[1]["content"] == "Tool use: shot(not json)"
    assert messages[2]["content"].startswith("Result (shot): Here:\n[Image not shown:")


@pytest.mark.parametrize(
    ("item", "named"),
    [
        (
            {"type": "compaction", "id": "cmp", "encrypted_content": "gAAA"},
            "item 2: item type 'compaction'",
        ),
        ({"type": "item_reference", "id": "msg_1"}, "item 2: item type 'item_reference'"),
        (
            {"type": "shell_call", "id": "s", "call_id": "c", "action": {}, "env": {}},
            "item 2 (shell_call): key 'env' is not part of this format",
        ),
        (
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
            "item 2 (message) part 0: part type 'input_audio'",
        ),
        ({"role": "tool", "content": "x"}, "item 2 (message): role 'tool'"),
        ({"content": "no type, no role"}, "item 2: item type None"),
    ],
)
def test_an_unknown_responses_item_is_refused_and_nothing_is_written(
    store: convstore.Store, item: dict[str, Any], named: str
) -> None:
    """An item or part type the converter does not take is refused with one line naming it
    and its position, and nothing of the batch is written."""
    conv = store.new_conversation()
    before = store.events(conv)
    items = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, item]
    with pytest.raises(convstore.InvalidInput) as refused:
        record_responses_items(store, conv, items)
    assert named in str(refused.value)
    assert store.events(conv) == before


def test_assistant_blocks_drop_empty_text_beside_calls() -> None:
    """``content: ""`` next to tool calls adds no block; alone it is kept as the message."""
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert assistant_blocks({"role": "assistant", "content": "", "tool_calls": [call]}) == (
        ToolUseBlock(id="c", name="f", input={}),
    )
    assert assistant_blocks({"role": "assistant", "content": ""}) == (TextBlock(text=""),)


def test_chat_annotations_ride_on_the_text_verbatim_and_name_their_sources() -> None:
    """A Chat Completions message's ``annotations`` (an SDK ``ChatCompletionMessage``'s
    url citations) are kept on its text exactly, and the prose names the cited page."""
    citation: dict[str, JsonValue] = {
        "type": "url_citation",
        "url_citation": {
            "start_index": 0,
            "end_index": 5,
            "title": "Weather",
            "url": "https://w.example/today",
        },
    }
    message = ChatCompletionMessage.model_validate(
        {"role": "assistant", "content": "Sunny.", "annotations": [citation]}
    )
    (text,) = assistant_blocks(message)
    assert text == TextBlock(text="Sunny.", annotations=[citation])
    assert text_prose(text) == "Sunny.\n[Sources: Weather (https://w.example/today)]"


def test_openrouter_reasoning_details_become_reasoning_blocks() -> None:
    """OpenRouter's ``reasoning_details`` (text with its signature, summary, encrypted data)
    are one reasoning block each; the plain ``reasoning`` counts only without them; an
    unknown detail type is refused by name."""
    details = [
        {"type": "reasoning.text", "text": "Think.", "signature": "sig", "index": 0},
        {"type": "reasoning.summary", "summary": "Thought.", "format": "openai-responses-v1"},
        {"type": "reasoning.encrypted", "data": "gAAA", "id": "rs_1"},
    ]
    body = {
        "role": "assistant",
        "content": "Done.",
        "reasoning": "Think.",
        "reasoning_details": details,
    }
    assert assistant_blocks(ChatCompletionMessage.model_validate(body)) == (
        ReasoningBlock(text="Think.", signature="sig"),
        ReasoningBlock(text="Thought."),
        ReasoningBlock(text="", encrypted_content="gAAA"),
        TextBlock(text="Done."),
    )
    plain = {"role": "assistant", "content": "Done.", "reasoning": "Think."}
    assert assistant_blocks(plain)[0] == ReasoningBlock(text="Think.")
    odd = {**body, "reasoning_details": [{"type": "reasoning.audio"}]}
    with pytest.raises(convstore.InvalidInput, match=r"reasoning detail type 'reasoning\.audio'"):
        assistant_blocks(odd)
