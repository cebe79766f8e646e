"""The Anthropic converter reads every key the SDK gives a content block and refuses any other,
naming it: an unknown key on a ``text``, ``image``, ``document``, ``thinking``,
``redacted_thinking``, ``tool_use`` or ``tool_result`` block (or its source) is content it would
otherwise drop without a word."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from anthropic.types import (
    Base64ImageSourceParam,
    Base64PDFSourceParam,
    DocumentBlock,
    DocumentBlockParam,
    ImageBlockParam,
    PlainTextSourceParam,
    RedactedThinkingBlock,
    RedactedThinkingBlockParam,
    TextBlock,
    TextBlockParam,
    ThinkingBlock,
    ThinkingBlockParam,
    ToolReferenceBlockParam,
    ToolResultBlockParam,
    ToolUseBlock,
    ToolUseBlockParam,
    URLImageSourceParam,
    URLPDFSourceParam,
)
from anthropic.types.beta import (
    BetaFileDocumentSourceParam,
    BetaImageBlockParam,
    BetaRequestDocumentBlockParam,
    BetaTextBlockParam,
    BetaToolResultBlockParam,
    BetaToolUseBlock,
    BetaToolUseBlockParam,
)

from convstore.convert.anthropic import block_from_anthropic, history_from_messages
from convstore.domain.errors import InvalidInput

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d4944415478da63f8cfc0f01f0005000201e5270de20000000049454e44ae426082"
    )
).decode()
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n%%EOF\n").decode()
CACHE = {"type": "ephemeral"}


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


# Each shape with every key its SDK types have, and where it is placed (a user or an assistant
# message, or inside a tool_result's content).
FULL: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "text": (
        (TextBlock, TextBlockParam, BetaTextBlockParam),
        {"type": "text", "text": "Walruses.", "citations": None, "cache_control": CACHE},
    ),
    "image": (
        (ImageBlockParam, BetaImageBlockParam),
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
            "cache_control": CACHE,
            "transformations": {},
        },
    ),
    "document": (
        (DocumentBlock, DocumentBlockParam, BetaRequestDocumentBlockParam),
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": PDF},
            "title": "report.pdf",
            "context": None,
            "citations": {"enabled": True},
            "cache_control": CACHE,
        },
    ),
    "thinking": (
        (ThinkingBlock, ThinkingBlockParam),
        {"type": "thinking", "thinking": "Look first.", "signature": "EqQB"},
    ),
    "redacted_thinking": (
        (RedactedThinkingBlock, RedactedThinkingBlockParam),
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
    ),
    "tool_use": (
        (ToolUseBlock, ToolUseBlockParam, BetaToolUseBlock, BetaToolUseBlockParam),
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "ls",
            "input": {"path": "."},
            "caller": {"type": "direct"},
            "toolset_name": None,
            "cache_control": CACHE,
        },
    ),
    "tool_result": (
        (ToolResultBlockParam, BetaToolResultBlockParam),
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": "a.txt",
            "is_error": False,
            "toolset_name": None,
            "cache_control": CACHE,
        },
    ),
    "tool_reference": (
        (ToolReferenceBlockParam,),
        {"type": "tool_reference", "tool_name": "ls", "cache_control": CACHE},
    ),
}

SOURCES: dict[str, tuple[Any, dict[str, Any]]] = {
    "image base64": (Base64ImageSourceParam, {"type": "base64", "media_type": "image/png"}),
    "image url": (URLImageSourceParam, {"type": "url", "url": "https://example.org/a.png"}),
    "document base64": (Base64PDFSourceParam, {"type": "base64", "media_type": "application/pdf"}),
    "document text": (PlainTextSourceParam, {"type": "text", "media_type": "text/plain"}),
    "document url": (URLPDFSourceParam, {"type": "url", "url": "https://example.org/a.pdf"}),
    "document file": (BetaFileDocumentSourceParam, {"type": "file", "file_id": "file_1"}),
}
SOURCE_DATA = {"image base64": PNG, "document base64": PDF, "document text": "Notes."}


def _convert(name: str, block: dict[str, Any]) -> object:
    """Convert ``block`` where it belongs: a tool_reference inside a tool_result's content."""
    if name == "tool_reference":
        block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [block]}
    return block_from_anthropic(block, "block 0")


@pytest.mark.parametrize("name", sorted(FULL))
def test_every_sdk_key_is_read(name: str) -> None:
    """The fixture holds every key the SDK types have (a key a new SDK adds fails here until
    the converter reads or drops it on purpose), and it converts."""
    types, block = FULL[name]
    assert _keys(*types) == set(block)
    _convert(name, block)


@pytest.mark.parametrize("name", sorted(FULL))
def test_an_unknown_block_key_is_refused_by_name(name: str) -> None:
    """Before: the block converted and the key was gone (``{"type": "text", "text": "x",
    "bogus": 1}`` recorded as plain text)."""
    _types, block = FULL[name]
    with pytest.raises(InvalidInput, match=r"block 0.*key 'bogus' is not part of this format"):
        _convert(name, {**block, "bogus": 1})


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_an_unknown_source_key_is_refused_by_name(name: str) -> None:
    kind, source = SOURCES[name]
    if name in SOURCE_DATA:
        source = {**source, "data": SOURCE_DATA[name]}
    assert _keys(kind) == set(source)
    outer = name.split(maxsplit=1)[0]
    block_from_anthropic({"type": outer, "source": source}, "block 0")
    with pytest.raises(InvalidInput, match=r"block 0.*source.*key 'bogus'"):
        block_from_anthropic({"type": outer, "source": {**source, "bogus": 1}}, "block 0")


def test_a_refused_key_names_its_message_and_block() -> None:
    """Through a whole body, the line says where the key is, as every converter's does."""
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "x", "bogus": 1}]},
        ]
    }
    with pytest.raises(InvalidInput, match=r"^message 1, block 0 \(text\): key 'bogus'"):
        history_from_messages(body)
