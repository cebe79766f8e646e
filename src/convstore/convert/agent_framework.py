"""Microsoft Agent Framework messages as convstore blocks, and back; pure JSON, no I/O.

Both directions work on a message's dict form (``Message.to_dict()`` / ``Message.from_dict``
in ``agent_framework``), so this module never imports the framework:

- :func:`message_blocks` turns one message into a role and checked blocks. ``text`` is a text
  block (with its ``annotations``), ``text_reasoning`` a reasoning block (``protected_data``
  as its ``encrypted_content``), ``data`` and ``uri`` an image (``image/*`` media types
  convstore keeps) or a document, ``hosted_file`` a document by ``file_id``; a
  ``function_call`` a ``tool_use`` (a hosted one, ``hosted: true``, a ``hosted_tool_use``),
  a ``function_result`` a ``tool_result`` (an ``exception`` makes it ``is_error``; its
  ``items`` give its text, images and documents); the hosted tools' calls and results
  (code interpreter, image generation, MCP server, search) hosted blocks keeping the content's
  dict whole in ``provider_data``; ``error`` a text block. ``usage`` and the approval
  controls (``function_approval_request`` / ``_response``) carry no block. Any other content
  type (shell, computer, vector store, OAuth consent) is refused with one line naming it.
  A ``tool`` message is the user's, as convstore keeps tool results.
- :func:`message_dict` is the reverse: a role and blocks as a message dict the framework reads
  (a user message of tool results is a ``tool`` message again).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from convstore.convert.parts import (
    annotated_text,
    checked,
    document_from,
    image_from_url,
    readable_output,
    refuse,
    tool_arguments,
)
from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.domain.events import Role
from convstore.domain.images import IMAGE_MEDIA_TYPES

JSONDict = dict[str, Any]

ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "user",
}
"""The convstore role of each Agent Framework role (a tool's results are the user's)."""

HOSTED_CALLS: dict[str, str] = {
    "code_interpreter_tool_call": "code_interpreter",
    "image_generation_tool_call": "image_generation",
    "mcp_server_tool_call": "mcp",
    "search_tool_call": "search",
}
"""Calls a provider runs itself, and the tool name a hosted block gets when the content has
none of its own (an MCP call names its tool)."""

HOSTED_RESULTS: dict[str, str] = {
    "code_interpreter_tool_result": "code_interpreter",
    "image_generation_tool_result": "image_generation",
    "mcp_server_tool_result": "mcp",
    "search_tool_result": "search",
}
"""Results of the calls in :data:`HOSTED_CALLS`."""

NO_BLOCK = frozenset({"usage", "function_approval_request", "function_approval_response"})
"""Content types that carry no block (token counts, and the approval controls the framework
keeps beside the call they are about)."""

ACCEPTED = (
    "text",
    "text_reasoning",
    "data",
    "uri",
    "hosted_file",
    "error",
    "function_call",
    "function_result",
    *HOSTED_CALLS,
    *HOSTED_RESULTS,
    *sorted(NO_BLOCK),
)

_DATA_URI = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,", re.IGNORECASE)


def message_blocks(message: Mapping[str, Any], where: str = "message") -> tuple[Role, list[Block]]:
    """One Agent Framework message (its ``to_dict()`` form) as a role and checked blocks."""
    role = message.get("role")
    if role not in ROLES:
        refuse("role", role, where, tuple(ROLES))
    blocks: list[Block] = []
    for index, content in enumerate(message.get("contents") or []):
        block = content_block(content, f"{where} content {index}")
        if block is not None:
            blocks.append(block)
    return ROLES[role], blocks


def content_block(content: Mapping[str, Any], where: str) -> Block | None:
    """One content (its dict form) as a block; ``None`` for a content with no block."""
    kind = content.get("type")
    match kind:
        case "text":
            return annotated_text(str(content.get("text") or ""), content.get("annotations"), where)
        case "text_reasoning":
            fields = {
                "text": content.get("text") or "",
                "encrypted_content": content.get("protected_data"),
            }
            return checked(lambda: ReasoningBlock.model_validate(_present(fields)), where)
        case "data" | "uri":
            return _media(content, where)
        case "hosted_file":
            return document_from(
                where,
                file_id=content.get("file_id"),
                media_type=content.get("media_type"),
                name=content.get("name"),
            )
        case "error":
            code = content.get("error_code")
            text = f"Error{f' ({code})' if code else ''}: {content.get('message') or ''}".rstrip()
            details = content.get("error_details")
            return TextBlock(text=f"{text}\n{details}" if details else text)
        case "function_call":
            return _call(content, where)
        case "function_result":
            return _result(content, where)
        case _ if kind in HOSTED_CALLS:
            return _hosted_call(content, HOSTED_CALLS[kind], where)
        case _ if kind in HOSTED_RESULTS:
            return _hosted_result(content, HOSTED_RESULTS[kind], where)
        case _ if kind in NO_BLOCK:
            return None
        case _:
            refuse("content type", kind, where, ACCEPTED)
    return None  # unreachable: refuse raises


def _present(fields: Mapping[str, Any]) -> JSONDict:
    return {key: value for key, value in fields.items() if value is not None}


def _media(content: Mapping[str, Any], where: str) -> Block:
    uri = str(content.get("uri") or "")
    media_type = content.get("media_type")
    found = _DATA_URI.match(uri)
    if found:
        media_type = found["media"].lower()
    if media_type in IMAGE_MEDIA_TYPES and found is None:
        fields = {"url": uri, "media_type": media_type}
        return checked(lambda: ImageBlock.model_validate(fields), where)
    if media_type in IMAGE_MEDIA_TYPES or (media_type is None and found is None):
        return image_from_url(uri, where)
    if found:
        return document_from(where, data=uri, name=content.get("name"))
    return document_from(where, url=uri, media_type=media_type, name=content.get("name"))


def _call(content: Mapping[str, Any], where: str) -> Block:
    arguments = content.get("arguments")
    given: Any = {} if arguments is None else tool_arguments(arguments, where)
    fields = {"id": content.get("call_id"), "name": content.get("name"), "input": given}
    if content.get("hosted"):
        hosted = fields | {"server": content.get("server_name"), "provider_data": dict(content)}
        return checked(lambda: HostedToolUseBlock.model_validate(_present(hosted)), where)
    return checked(lambda: ToolUseBlock.model_validate(fields), where)


def _result(content: Mapping[str, Any], where: str) -> Block:
    parts: list[Block] = []
    for index, item in enumerate(content.get("items") or []):
        part = content_block(item, f"{where} item {index}")
        if isinstance(part, TextBlock | ImageBlock | DocumentBlock):
            parts.append(part)
        elif part is not None:
            refuse("result item", item.get("type"), where, ("text", "data", "uri", "hosted_file"))
    output: str | list[Block]
    if all(isinstance(part, TextBlock) for part in parts):
        texts = [part.text for part in parts if isinstance(part, TextBlock)]
        output = "\n".join(texts) if parts else _text_of(content.get("result"))
    else:
        output = parts
    fields = {
        "tool_use_id": content.get("call_id"),
        "content": output,
        "is_error": content.get("exception") is not None,
    }
    return checked(lambda: ToolResultBlock.model_validate(fields), where)


def _text_of(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _hosted_call(content: Mapping[str, Any], name: str, where: str) -> Block:
    arguments = content.get("arguments")
    fields = {
        "id": content.get("call_id"),
        "name": content.get("tool_name") or name,
        "input": {} if arguments is None else tool_arguments(arguments, where),
        "server": content.get("server_name"),
        "provider_data": dict(content),
    }
    return checked(lambda: HostedToolUseBlock.model_validate(_present(fields)), where)


def _hosted_result(content: Mapping[str, Any], name: str, where: str) -> Block:
    output = content.get("output", content.get("outputs"))
    fields = {
        "tool_use_id": content.get("call_id"),
        "name": name,
        "content": readable_output(output if output is not None else ""),
        "is_error": content.get("status") in {"failed", "error"},
        "provider_data": dict(content),
    }
    return checked(lambda: HostedToolResultBlock.model_validate(fields), where)


# -- back: blocks as a message dict ------------------------------------------------------------


def message_dict(role: Role, blocks: Sequence[Block]) -> JSONDict:
    """A role and blocks as an Agent Framework message dict (``Message.from_dict`` reads it)."""
    tool = role == "user" and bool(blocks) and all(isinstance(b, ToolResultBlock) for b in blocks)
    contents = [block_content(block) for block in blocks]
    return {"type": "message", "role": "tool" if tool else role, "contents": contents}


def block_content(block: Block) -> JSONDict:
    """One block as an Agent Framework content dict."""
    match block:
        case TextBlock():
            text: JSONDict = {"type": "text", "text": block.text}
            if block.annotations:
                text["annotations"] = block.annotations
            return text
        case ReasoningBlock():
            return _present(
                {
                    "type": "text_reasoning",
                    "text": block.text,
                    "protected_data": block.encrypted_content,
                }
            )
        case ImageBlock():
            return _media_content(block.url, block.media_type, block.data, None)
        case DocumentBlock():
            if block.file_id is not None:
                fields = {
                    "file_id": block.file_id,
                    "media_type": block.media_type,
                    "name": block.name,
                }
                return _present({"type": "hosted_file", **fields})
            if block.text is not None:
                data = base64.b64encode(block.text.encode()).decode()
                return _media_content(None, block.media_type or "text/plain", data, block.name)
            return _media_content(block.url, block.media_type, block.data, block.name)
        case ToolUseBlock():
            return {
                "type": "function_call",
                "call_id": block.id,
                "name": block.name,
                "arguments": block.input,
            }
        case ToolResultBlock():
            # As Content.from_function_result builds it: the items, and their text joined.
            parts = block.content
            items: list[JSONDict] = (
                [{"type": "text", "text": parts}]
                if isinstance(parts, str)
                else [block_content(part) for part in parts]
            )
            texts = [str(i["text"]) for i in items if i["type"] == "text" and i["text"]]
            result: JSONDict = {
                "type": "function_result",
                "call_id": block.tool_use_id,
                "result": "\n".join(texts),
                "items": items,
            }
            if block.is_error:
                result["exception"] = (
                    _text_of(block.content) if isinstance(block.content, str) else "error"
                )
            return result
        case HostedToolUseBlock():
            if block.provider_data is not None:
                return dict(block.provider_data)
            call: JSONDict = {"call_id": block.id, "name": block.name, "arguments": block.input}
            return _present(
                {"type": "function_call", **call, "hosted": True, "server_name": block.server}
            )
        case HostedToolResultBlock():
            if block.provider_data is not None:
                return dict(block.provider_data)
            return {"type": "text", "text": _text_of(block.content)}
        case _:
            assert_never(block)


def _media_content(
    url: str | None, media_type: str | None, data: str | None, name: str | None
) -> JSONDict:
    if url is not None:
        return _present({"type": "uri", "uri": url, "media_type": media_type, "name": name})
    if data is None or media_type is None:
        msg = "a media block has neither a url nor base64 data with its media type"
        raise InvalidInput(msg)
    uri = f"data:{media_type};base64,{data}"
    return _present({"type": "data", "uri": uri, "media_type": media_type, "name": name})
