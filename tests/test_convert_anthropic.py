"""Anthropic Messages shapes (dicts and the SDK's typed objects) into convstore histories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from anthropic.types import Message

import convstore
from convstore.convert.anthropic import history_from_messages
from convstore.domain.blocks import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.histories import prose_tool_blocks, record_history
from tests.sdk import rejections, request_body

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
    "hQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_every_corpus_body_records_and_replays_each_tool_round(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Each recorded Messages body (and the response) converts, records, and replays with its
    tool calls and results as prose, accepted by both SDKs."""
    files = sorted((corpus_dir / "anthropic-messages").glob("*.json"))
    assert len(files) >= 4
    with convstore.open_store(tmp_path / "s.db") as store:
        for path in files:
            data = json.loads(path.read_text(encoding="utf-8"))
            history = history_from_messages(data)
            conv = record_history(store, history)
            source = json.dumps(data)
            counts = prose_tool_blocks(store.replay(conv))
            assert counts["tool_use"] == source.count('"type": "tool_use"'), path.name
            assert counts["tool_result"] == source.count('"type": "tool_result"'), path.name
            for shape in ("openai", "anthropic"):
                replayed = store.replay(conv, shape=shape)
                assert rejections(shape, request_body(shape, replayed)) == [], path.name


def test_a_typed_response_message_keeps_signatures_and_redacted_thinking() -> None:
    """An SDK ``Message`` gives one assistant turn: thinking signed, redacted kept, tool input."""
    message = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 2},
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Looking.", "citations": None},
                {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}},
            ],
        }
    )
    [turn] = history_from_messages(message).messages
    assert turn.role == "assistant"
    assert turn.blocks == (
        ReasoningBlock(text="hmm", signature="sig"),
        ReasoningBlock(text="", encrypted_content="opaque", redacted=True),
        TextBlock(text="Looking."),
        ToolUseBlock(id="t1", name="ls", input={"path": "."}),
    )


def test_a_request_body_with_system_blocks_images_and_errors() -> None:
    """System blocks come first; images by data and URL; tool results keep is_error and parts."""
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                    {
                        "type": "image",
                        "source": {"type": "url", "url": "https://example.com/a.png"},
                    },
                    {"type": "text", "text": "What is it?"},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "look", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "boom"}],
                    }
                ],
            },
        ],
    }
    history = history_from_messages(body)
    assert [m.role for m in history.messages] == ["system", "user", "assistant", "user"]
    assert history.messages[0].blocks == (TextBlock(text="Be terse."),)
    first, second, _ = history.messages[1].blocks
    assert isinstance(first, ImageBlock)
    assert first.media_type == "image/png"
    assert isinstance(second, ImageBlock)
    assert second.url == "https://example.com/a.png"
    [result] = history.messages[3].blocks
    assert isinstance(result, ToolResultBlock)
    assert result.is_error
    assert result.content == [TextBlock(text="boom")]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "mcp_tool_listing", "mcp_server_name": "s", "tools": []}],
                }
            ],
            "message 0, block 0: unsupported Anthropic content block type 'mcp_tool_listing'",
        ),
        (
            [
                {
                    "role": "assistant",
                    "content": [{"type": "memory_tool_result", "tool_use_id": "s", "content": {}}],
                }
            ],
            "message 0, block 0: unsupported Anthropic content block type 'memory_tool_result'",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "user",
                        "content": [
                            {"type": "document", "source": {"type": "content", "content": []}}
                        ],
                    },
                ]
            },
            "message 1, block 0: unsupported document source type 'content'",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [{"type": "browser_state", "tabs": []}],
                        }
                    ],
                }
            ],
            "message 0, block 0, part 0: unsupported tool_result content type 'browser_state'",
        ),
        ([{"role": "system", "content": "x"}], "message 0: role must be 'user' or 'assistant'"),
        ({"model": "m"}, "expected a Messages request body"),
    ],
)
def test_unknown_types_are_refused_with_their_position(data: object, named: str) -> None:
    """Anything not accepted raises one InvalidInput naming the type and where it is."""
    with pytest.raises(convstore.InvalidInput, match=named.replace("(", r"\(")):
        history_from_messages(data)
