"""The OpenAI converters read every key the SDK gives a content part or a tool call and refuse
any other, naming it: a Chat Completions part (``text``, ``refusal``, ``image_url``, ``file``)
or ``tool_calls`` entry, or a Responses message part (``input_text``, ``output_text``,
``refusal``, ``input_image``, ``input_file``), with an unknown key is content the converter
would otherwise drop without a word, as it already refuses one on a message or an item."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from openai.types import chat, responses
from openai.types.chat import (
    chat_completion_content_part_image_param,
    chat_completion_content_part_param,
    chat_completion_message_custom_tool_call_param,
    chat_completion_message_function_tool_call,
    chat_completion_message_function_tool_call_param,
)

from convstore.convert.openai_chat import history_from_chat
from convstore.convert.responses import history_from_responses
from convstore.domain.errors import InvalidInput

PNG_URL = (
    "data:image/png;base64,"
    + base64.b64encode(
        bytes.fromhex(
            "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
            "1f15c4890000000d4944415478da63f8cfc0f01f0005000201e5270de20000000049454e44ae426082"
        )
    ).decode()
)
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n%%EOF\n").decode()
OPENROUTER = {"cache_control"}
"""Keys OpenRouter's Chat dialect adds to a text part (its prompt caching), read and dropped."""


def _keys(*types: Any) -> set[str]:
    """Every key the SDK types (TypedDicts or pydantic models) give this shape."""
    found: set[str] = set()
    for kind in types:
        if hasattr(kind, "model_fields"):
            found.update(kind.model_fields)
        else:
            for base in kind.__mro__:
                found.update(getattr(base, "__annotations__", {}))
    return found


# (SDK types, extra dialect keys, role, the part with every key, the nested object's SDK types
# and key, when it has one)
CHAT_PARTS: dict[str, tuple[tuple[Any, ...], set[str], str, dict[str, Any], Any, str | None]] = {
    "text": (
        (chat.ChatCompletionContentPartTextParam,),
        OPENROUTER,
        "user",
        {
            "type": "text",
            "text": "Hello",
            "prompt_cache_breakpoint": None,
            "cache_control": {"type": "ephemeral"},
        },
        None,
        None,
    ),
    "refusal": (
        (chat.ChatCompletionContentPartRefusalParam,),
        set(),
        "assistant",
        {"type": "refusal", "refusal": "No."},
        None,
        None,
    ),
    "image_url": (
        (chat.ChatCompletionContentPartImageParam,),
        set(),
        "user",
        {
            "type": "image_url",
            "image_url": {"url": PNG_URL, "detail": "auto"},
            "prompt_cache_breakpoint": None,
        },
        (chat_completion_content_part_image_param.ImageURL,),
        "image_url",
    ),
    "file": (
        (chat_completion_content_part_param.File,),
        set(),
        "user",
        {
            "type": "file",
            "file": {"file_data": PDF, "file_id": None, "filename": "a.pdf"},
            "prompt_cache_breakpoint": None,
        },
        (chat_completion_content_part_param.FileFile,),
        "file",
    ),
}

TOOL_CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...], str]] = {
    "function": (
        (
            chat.ChatCompletionMessageFunctionToolCallParam,
            chat.ChatCompletionMessageFunctionToolCall,
        ),
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
        (
            chat_completion_message_function_tool_call_param.Function,
            chat_completion_message_function_tool_call.Function,
        ),
        "function",
    ),
    "custom": (
        (chat.ChatCompletionMessageCustomToolCallParam, chat.ChatCompletionMessageCustomToolCall),
        {"id": "c1", "type": "custom", "custom": {"name": "patch", "input": "*** Begin"}},
        (chat_completion_message_custom_tool_call_param.Custom,),
        "custom",
    ),
}

RESPONSES_PARTS: dict[str, tuple[tuple[Any, ...], str, dict[str, Any]]] = {
    "input_text": (
        (responses.ResponseInputTextParam, responses.ResponseInputText),
        "user",
        {"type": "input_text", "text": "Hello", "prompt_cache_breakpoint": None},
    ),
    "output_text": (
        (responses.ResponseOutputTextParam, responses.ResponseOutputText),
        "assistant",
        {"type": "output_text", "text": "Hi.", "annotations": [], "logprobs": []},
    ),
    "refusal": (
        (responses.ResponseOutputRefusalParam, responses.ResponseOutputRefusal),
        "assistant",
        {"type": "refusal", "refusal": "No."},
    ),
    "input_image": (
        (responses.ResponseInputImageParam, responses.ResponseInputImage),
        "user",
        {
            "type": "input_image",
            "image_url": PNG_URL,
            "file_id": None,
            "detail": "auto",
            "prompt_cache_breakpoint": None,
        },
    ),
    "input_file": (
        (responses.ResponseInputFileParam, responses.ResponseInputFile),
        "user",
        {
            "type": "input_file",
            "file_id": "file-1",
            "file_data": None,
            "file_url": None,
            "filename": "a.pdf",
            "detail": "auto",
            "prompt_cache_breakpoint": None,
        },
    ),
}


def _chat(role: str, part: dict[str, Any]) -> object:
    return history_from_chat(
        {"messages": [{"role": "user", "content": "q"}, {"role": role, "content": [part]}]}
    )


def _tool_call(call: dict[str, Any]) -> object:
    assistant = {"role": "assistant", "content": None, "tool_calls": [call]}
    return history_from_chat({"messages": [{"role": "user", "content": "q"}, assistant]})


def _responses(role: str, part: dict[str, Any]) -> object:
    items = [
        {"type": "message", "role": "user", "content": "q"},
        {"type": "message", "role": role, "content": [part]},
    ]
    return history_from_responses(items)


@pytest.mark.parametrize("name", sorted(CHAT_PARTS))
def test_a_chat_part_reads_every_sdk_key_and_refuses_another(name: str) -> None:
    """Before: ``{"type": "text", "text": "hi", "bogus": 1}`` became plain text, the key gone."""
    types, extra, role, part, inner_types, inner = CHAT_PARTS[name]
    assert _keys(*types) | extra == set(part)
    _chat(role, part)
    with pytest.raises(InvalidInput, match=rf"message 1 \({role}\) content part 0.*key 'bogus'"):
        _chat(role, {**part, "bogus": 1})
    if inner is not None:
        assert _keys(*inner_types) == set(part[inner])
        with pytest.raises(InvalidInput, match=rf"content part 0 {inner}.*key 'bogus'"):
            _chat(role, {**part, inner: {**part[inner], "bogus": 1}})


@pytest.mark.parametrize("name", sorted(TOOL_CALLS))
def test_a_chat_tool_call_reads_every_sdk_key_and_refuses_another(name: str) -> None:
    types, call, inner_types, inner = TOOL_CALLS[name]
    assert _keys(*types) == set(call)
    assert _keys(*inner_types) == set(call[inner])
    _tool_call(call)
    with pytest.raises(InvalidInput, match=r"tool call 0: key 'bogus'"):
        _tool_call({**call, "bogus": 1})
    with pytest.raises(InvalidInput, match=rf"tool call 0 {inner}: key 'bogus'"):
        _tool_call({**call, inner: {**call[inner], "bogus": 1}})


@pytest.mark.parametrize("name", sorted(RESPONSES_PARTS))
def test_a_responses_part_reads_every_sdk_key_and_refuses_another(name: str) -> None:
    types, role, part = RESPONSES_PARTS[name]
    assert _keys(*types) == set(part)
    _responses(role, part)
    with pytest.raises(InvalidInput, match=r"item 1 \(message\) part 0.*key 'bogus'"):
        _responses(role, {**part, "bogus": 1})
