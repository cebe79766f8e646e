"""Anthropic Messages shapes into convstore blocks: pure conversions, no I/O.

Accepted, as dicts or as the ``anthropic`` SDK's typed objects (anything with
``model_dump``):

- a response ``Message`` (``type: "message"``): one assistant message;
- request ``MessageParam`` dicts (``role`` + ``content``, a string or a list of blocks);
- a request body (``system`` as a string or a list of text blocks, then ``messages``).

Content blocks accepted: ``text``, ``image`` (a ``base64`` or ``url`` source), ``document``
(a ``base64``, ``text``, ``url`` or ``file`` source; its ``title`` kept as its name, its
``context`` and ``citations`` settings dropped), ``thinking``
(its ``signature`` kept), ``redacted_thinking`` (its ``data`` kept as encrypted content),
``tool_use`` and ``tool_result`` (``is_error``; content a string or ``text`` / ``image``
blocks). Anything else (``server_tool_use``, ``web_search_tool_result``, a ``content`` document,
``search_result``, ``container_upload`` …) is refused with one :class:`InvalidInput` naming
the type and where it is; nothing is recorded. Fields with no convstore meaning
(``cache_control``, ``citations``) are dropped; a response's ``id``, ``model``,
``stop_reason`` and ``usage`` become its message's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from convstore.convert.history import History, HistoryMessage
from convstore.convert.parts import check_keys, document_from
from convstore.convert.source_meta import anthropic_meta
from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
)
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.events import Role
from convstore.domain.parsing import parse_block

CONTENT_TYPES: tuple[str, ...] = (
    "text",
    "image",
    "document",
    "thinking",
    "redacted_thinking",
    "tool_use",
    "tool_result",
)
"""Every Anthropic content block type the converters accept."""

TOOL_RESULT_PART_TYPES: tuple[str, ...] = ("text", "image")
"""The block types accepted inside a ``tool_result``'s content list."""


def plain(value: object) -> Any:
    """``value`` as plain data: an SDK model dumped (recursively), anything else as it is.

    Shallow on purpose: each level of the conversion calls it on what it reads next, so a
    typed object nested in a dict (``{"role": ..., "content": response.content}``) is
    dumped where it is met, and plain dicts are never copied.
    """
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    return value


def _kind(value: object) -> str:
    return type(value).__name__


def _image(source: object, where: str) -> ImageBlock:
    if not isinstance(source, Mapping):
        msg = f"{where}: an image needs a source object"
        raise InvalidInput(msg)
    match source.get("type"):
        case "base64":
            data = {
                "type": "image",
                "media_type": source.get("media_type"),
                "data": source.get("data"),
            }
        case "url":
            data = {"type": "image", "url": source.get("url")}
        case other:
            msg = f"{where}: unsupported image source type {other!r} (accepted: base64, url)"
            raise InvalidInput(msg)
    block = _checked(data, where)
    assert isinstance(block, ImageBlock)
    return block


DOCUMENT_SOURCES: tuple[str, ...] = ("base64", "text", "url", "file")
"""The ``document`` source types the converters accept (a ``content`` source is refused)."""


def _document(data: Mapping[str, Any], where: str) -> DocumentBlock:
    source = plain(data.get("source"))
    if not isinstance(source, Mapping):
        msg = f"{where}: a document needs a source object"
        raise InvalidInput(msg)
    title = data.get("title")
    match source.get("type"):
        case "base64":
            return document_from(
                where, data=source.get("data"), media_type=source.get("media_type"), name=title
            )
        case "text":
            media = source.get("media_type")
            return document_from(where, text=source.get("data"), media_type=media, name=title)
        case "url":
            return document_from(where, url=source.get("url"), name=title)
        case "file":
            return document_from(where, file_id=source.get("file_id"), name=title)
        case other:
            msg = (
                f"{where}: unsupported document source type {other!r} "
                f"(accepted: {', '.join(DOCUMENT_SOURCES)})"
            )
            raise InvalidInput(msg)


def _checked(data: Mapping[str, Any], where: str) -> Block:
    try:
        return parse_block(data)
    except InvalidBlock as exc:
        msg = f"{where}: {exc}"
        raise InvalidInput(msg) from None


def _tool_result_content(content: object, where: str) -> str | list[TextBlock | ImageBlock]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        msg = f"{where}: tool_result content must be a string or a list, not {_kind(content)}"
        raise InvalidInput(msg)
    parts: list[TextBlock | ImageBlock] = []
    for index, item in enumerate(content):
        here = f"{where}, part {index}"
        part = plain(item)
        if not isinstance(part, Mapping):
            msg = f"{here}: expected a content block object, got {_kind(part)}"
            raise InvalidInput(msg)
        match part.get("type"):
            case "text":
                parts.append(TextBlock(text=_string(part, "text", here)))
            case "image":
                parts.append(_image(part.get("source"), here))
            case other:
                msg = (
                    f"{here}: unsupported tool_result content type {other!r} "
                    f"(accepted: {', '.join(TOOL_RESULT_PART_TYPES)})"
                )
                raise InvalidInput(msg)
    return parts


def _string(block: Mapping[str, Any], field: str, where: str) -> str:
    value = block.get(field)
    if not isinstance(value, str):
        msg = f"{where}: {block.get('type')} block needs a string {field!r}"
        raise InvalidInput(msg)
    return value


def block_from_anthropic(block: object, where: str = "block") -> Block:
    """One Anthropic content block (dict or SDK object) as a convstore block.

    Raises :class:`InvalidInput` naming the type and ``where`` for anything not accepted.
    """
    data = plain(block)
    if not isinstance(data, Mapping):
        msg = f"{where}: expected a content block object, got {_kind(data)}"
        raise InvalidInput(msg)
    kind = data.get("type")
    match kind:
        case "text":
            return TextBlock(text=_string(data, "text", where))
        case "thinking":
            signature = data.get("signature")
            return ReasoningBlock(
                text=_string(data, "thinking", where),
                signature=signature if isinstance(signature, str) and signature else None,
            )
        case "redacted_thinking":
            return ReasoningBlock(
                text="", encrypted_content=_string(data, "data", where), redacted=True
            )
        case "tool_use":
            raw_input = data.get("input", {})
            return _checked(
                {
                    "type": "tool_use",
                    "id": data.get("id"),
                    "name": data.get("name"),
                    "input": raw_input
                    if isinstance(raw_input, str | dict)
                    else json.dumps(raw_input),
                },
                where,
            )
        case "tool_result":
            is_error = data.get("is_error")
            content = _tool_result_content(data.get("content"), where)
            return _checked(
                {
                    "type": "tool_result",
                    "tool_use_id": data.get("tool_use_id"),
                    "content": content
                    if isinstance(content, str)
                    else [part.model_dump(exclude_none=True) for part in content],
                    "is_error": is_error if isinstance(is_error, bool) else False,
                },
                where,
            )
        case "image":
            return _image(data.get("source"), where)
        case "document":
            return _document(data, where)
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
        msg = f"{where}: content must be a string or a list of blocks, not {_kind(content)}"
        raise InvalidInput(msg)
    return [block_from_anthropic(b, f"{where}, block {i}") for i, b in enumerate(content)]


MESSAGE_KEYS = frozenset({"role", "content"})
"""The keys of a request ``MessageParam``; any other is refused."""


def message_from_param(param: object, where: str = "message") -> HistoryMessage:
    """One request ``MessageParam`` (``role`` user or assistant, ``content``)."""
    data = plain(param)
    if not isinstance(data, Mapping):
        msg = f"{where}: expected a message object, got {_kind(data)}"
        raise InvalidInput(msg)
    role = data.get("role")
    if role not in ("user", "assistant"):
        msg = f"{where}: role must be 'user' or 'assistant', not {role!r}"
        raise InvalidInput(msg)
    check_keys(data, MESSAGE_KEYS, f"{where} ({role})")
    checked: Role = "user" if role == "user" else "assistant"
    return HistoryMessage(checked, tuple(blocks_from_content(data.get("content"), where)))


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
    return HistoryMessage("assistant", blocks, meta=anthropic_meta(data))


def system_message(system: object) -> HistoryMessage | None:
    """A request's ``system`` (a string or a list of text blocks) as a system message."""
    system = plain(system)
    if not system:
        return None
    if isinstance(system, str):
        return HistoryMessage("system", (TextBlock(text=system),))
    if not isinstance(system, list):
        msg = f"system must be a string or a list of text blocks, not {_kind(system)}"
        raise InvalidInput(msg)
    blocks: list[Block] = []
    for index, block in enumerate(system):
        where = f"system, block {index}"
        if not isinstance(block, Mapping) or block.get("type") != "text":
            found = block.get("type") if isinstance(block, Mapping) else _kind(block)
            msg = f"{where}: system blocks must be text, not {found!r}"
            raise InvalidInput(msg)
        blocks.append(TextBlock(text=_string(block, "text", where)))
    return HistoryMessage("system", tuple(blocks))


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
        msg = f"messages must be a list, not {_kind(data)}"
        raise InvalidInput(msg)
    for index, param in enumerate(data):
        history.messages.append(message_from_param(param, f"message {index}"))
    return history
