"""Anthropic Messages shapes into convstore blocks: pure conversions, no I/O.

Accepted, as dicts or as the ``anthropic`` SDK's typed objects (anything with
``model_dump``):

- a response ``Message`` (``type: "message"``): one assistant message;
- request ``MessageParam`` dicts (``role`` + ``content``, a string or a list of blocks);
- a request body (``system`` as a string or a list of text blocks, then ``messages``).

Content blocks accepted (:data:`CONTENT_TYPES`): ``text`` (its ``citations`` kept verbatim as
the text's annotations), ``image`` (a ``base64`` or ``url`` source), ``document`` (a
``base64``, ``text``, ``url`` or ``file`` source; its ``title`` kept as its name, its
``context`` as its context, its ``citations`` setting dropped), ``search_result`` (as one text),
``container_upload`` (a document by ``file_id``), ``thinking`` (its ``signature`` kept),
``redacted_thinking`` (its ``data`` kept as encrypted content), ``tool_use`` and
``tool_result`` (``is_error``; content a string or text, image, document, ``search_result``
and ``tool_reference`` parts), and the blocks of tools the provider ran
(:mod:`convstore.convert.anthropic_hosted`): ``server_tool_use``, every server
``*_tool_result``, ``mcp_tool_use`` and ``mcp_tool_result``. Anything else (``compaction``,
``mcp_tool_listing``, a ``content`` document, an unknown ``*_tool_result`` …) is refused with
one :class:`InvalidInput` naming the type and where it is; nothing is recorded.
Any key a block (or its ``source``) has beyond the SDK's is refused the same way. Dropped,
being settings rather than content: ``cache_control``, a document's ``citations`` setting, an
image's ``transformations``, a ``tool_use``'s ``caller`` and ``toolset_name``. A response's
``id``, ``model``, ``stop_reason`` and ``usage`` become its message's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from convstore.convert.anthropic_hosted import (
    SERVER_RESULT_TYPES,
    hosted_result,
    hosted_use,
    mcp_result,
)
from convstore.convert.anthropic_parts import (
    checked,
    container_upload,
    document,
    image,
    kind_name,
    parts_json,
    plain,
    search_result,
    string,
    text_block,
    tool_output,
)
from convstore.convert.history import History, HistoryMessage
from convstore.convert.parts import check_keys
from convstore.convert.source_meta import anthropic_meta
from convstore.domain.blocks import Block, ReasoningBlock, TextBlock
from convstore.domain.errors import InvalidInput
from convstore.domain.events import Role

CONTENT_TYPES: tuple[str, ...] = (
    "text",
    "image",
    "document",
    "search_result",
    "container_upload",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
    "server_tool_use",
    "mcp_tool_use",
    "mcp_tool_result",
    *SERVER_RESULT_TYPES,
)
"""Every Anthropic content block type the converters accept."""


THINKING_KEYS = frozenset({"type", "thinking", "signature"})
REDACTED_THINKING_KEYS = frozenset({"type", "data"})
TOOL_USE_KEYS = frozenset(
    {"type", "id", "name", "input", "caller", "toolset_name", "cache_control"}
)
"""A ``tool_use`` block's keys: its ``caller`` (how a programmatic call was made), ``toolset_name``
and ``cache_control`` are dropped; any key outside these is refused, as on every block."""
TOOL_RESULT_KEYS = frozenset(
    {"type", "tool_use_id", "content", "is_error", "toolset_name", "cache_control"}
)


def _input(data: Mapping[str, Any]) -> object:
    """A call's input as recorded: an object or raw text as given, anything else as JSON."""
    raw = data.get("input", {})
    return raw if isinstance(raw, str | dict) else json.dumps(raw)


def block_from_anthropic(block: object, where: str = "block") -> Block:
    """One Anthropic content block (dict or SDK object) as a convstore block.

    Raises :class:`InvalidInput` naming the type and ``where`` for anything not accepted.
    """
    data = plain(block)
    if not isinstance(data, Mapping):
        msg = f"{where}: expected a content block object, got {kind_name(data)}"
        raise InvalidInput(msg)
    kind = data.get("type")
    match kind:
        case "text":
            return text_block(data, where)
        case "thinking":
            check_keys(data, THINKING_KEYS, f"{where} (thinking)")
            signature = data.get("signature")
            return ReasoningBlock(
                text=string(data, "thinking", where),
                signature=signature if isinstance(signature, str) and signature else None,
            )
        case "redacted_thinking":
            check_keys(data, REDACTED_THINKING_KEYS, f"{where} (redacted_thinking)")
            return ReasoningBlock(
                text="", encrypted_content=string(data, "data", where), redacted=True
            )
        case "tool_use":
            check_keys(data, TOOL_USE_KEYS, f"{where} (tool_use)")
            fields = {"id": data.get("id"), "name": data.get("name"), "input": _input(data)}
            return checked({"type": "tool_use", **fields}, where)
        case "tool_result":
            check_keys(data, TOOL_RESULT_KEYS, f"{where} (tool_result)")
            is_error = data.get("is_error")
            content = tool_output(data.get("content"), where)
            return checked(
                {
                    "type": "tool_result",
                    "tool_use_id": data.get("tool_use_id"),
                    "content": parts_json(content),
                    "is_error": is_error if isinstance(is_error, bool) else False,
                },
                where,
            )
        case "image":
            return image(data, where)
        case "document":
            return document(data, where)
        case "search_result":
            return search_result(data, where)
        case "container_upload":
            return container_upload(data, where)
        case "server_tool_use" | "mcp_tool_use":
            return hosted_use(data, where, _input(data))
        case "mcp_tool_result":
            return mcp_result(data, where)
        case str() if kind in SERVER_RESULT_TYPES:
            return hosted_result(data, where)
        case _:
            msg = (
                f"{where}: unsupported Anthropic content block type {kind!r} "
                f"(accepted: {', '.join(CONTENT_TYPES)})"
            )
            raise InvalidInput(msg)


def blocks_from_content(content: object, where: str) -> list[Block]:
    """A message's ``content`` (a string or a list of blocks) as convstore blocks."""
    content = plain(content)
    if isinstance(content, str):
        return [TextBlock(text=content)]
    if not isinstance(content, list):
        msg = f"{where}: content must be a string or a list of blocks, not {kind_name(content)}"
        raise InvalidInput(msg)
    return [block_from_anthropic(b, f"{where}, block {i}") for i, b in enumerate(content)]


MESSAGE_KEYS = frozenset({"role", "content"})
"""The keys of a request ``MessageParam``; any other is refused."""


def message_from_param(param: object, where: str = "message") -> HistoryMessage:
    """One request ``MessageParam`` (``role`` user or assistant, ``content``)."""
    data = plain(param)
    if not isinstance(data, Mapping):
        msg = f"{where}: expected a message object, got {kind_name(data)}"
        raise InvalidInput(msg)
    role = data.get("role")
    if role not in ("user", "assistant"):
        msg = f"{where}: role must be 'user' or 'assistant', not {role!r}"
        raise InvalidInput(msg)
    check_keys(data, MESSAGE_KEYS, f"{where} ({role})")
    checked: Role = "user" if role == "user" else "assistant"
    blocks = tuple(blocks_from_content(data.get("content"), where))
    return HistoryMessage(checked, blocks, where=f"{where} ({role})")


def message_from_response(message: object) -> HistoryMessage:
    """A response ``Message`` (``type: "message"``) as one assistant message, with its
    ``model``, ``id``, ``stop_reason`` and ``usage`` as the message's metadata."""
    data = plain(message)
    if not isinstance(data, Mapping) or data.get("type") != "message":
        msg = "expected an Anthropic response Message (an object with type 'message')"
        raise InvalidInput(msg)
    if data.get("role", "assistant") != "assistant":
        msg = f"a response Message has role 'assistant', not {data.get('role')!r}"
        raise InvalidInput(msg)
    blocks = tuple(blocks_from_content(data.get("content"), "response"))
    return HistoryMessage("assistant", blocks, meta=anthropic_meta(data), where="response")


def system_message(system: object) -> HistoryMessage | None:
    """A request's ``system`` (a string or a list of text blocks) as a system message."""
    system = plain(system)
    if not system:
        return None
    if isinstance(system, str):
        return HistoryMessage("system", (TextBlock(text=system),), where="system")
    if not isinstance(system, list):
        msg = f"system must be a string or a list of text blocks, not {kind_name(system)}"
        raise InvalidInput(msg)
    blocks: list[Block] = []
    for index, block in enumerate(system):
        where = f"system, block {index}"
        if not isinstance(block, Mapping) or block.get("type") != "text":
            found = block.get("type") if isinstance(block, Mapping) else kind_name(block)
            msg = f"{where}: system blocks must be text, not {found!r}"
            raise InvalidInput(msg)
        blocks.append(TextBlock(text=string(block, "text", where)))
    return HistoryMessage("system", tuple(blocks), where="system")


def history_from_messages(data: object) -> History:
    """A Messages request body, a list of ``MessageParam``, or a response ``Message``.

    A body's ``system`` becomes a system message first; a response is one assistant turn.
    Everything is checked before anything is returned: one unsupported block anywhere raises
    :class:`InvalidInput` naming its type and position.
    """
    data = plain(data)
    history = History()
    if isinstance(data, Mapping) and data.get("type") == "message":
        history.messages.append(message_from_response(data))
        return history
    if isinstance(data, Mapping):
        if "messages" not in data:
            msg = "expected a Messages request body (with 'messages'), a list, or a Message"
            raise InvalidInput(msg)
        system = system_message(data.get("system"))
        if system is not None:
            history.messages.append(system)
        data = data["messages"]
    if not isinstance(data, Sequence) or isinstance(data, str | bytes):
        msg = f"messages must be a list, not {kind_name(data)}"
        raise InvalidInput(msg)
    for index, param in enumerate(data):
        history.messages.append(message_from_param(param, f"message {index}"))
    return history
