"""Pydantic AI message history (``ModelMessagesTypeAdapter`` JSON) into convstore messages.

The input is the JSON list ``ModelMessagesTypeAdapter.dump_json(messages)`` writes: each
message an object with ``kind`` ``request`` or ``response`` and ``parts`` tagged by
``part_kind``. It is read as plain JSON (Pydantic AI need not be installed). What becomes what:

- ``request``: its ``instructions``, when they differ from the last request's, → a system
  message first; ``system-prompt`` parts → a system message; ``user-prompt`` (a string, or a
  list of strings, ``text-content``, images as ``image-url`` or ``binary`` with an
  ``image/*`` media type, and documents as ``document-url`` or any other ``binary`` but audio
  and video), ``tool-return`` (→ ``tool_result``; an ``outcome`` of ``failed`` or
  ``retried``, Pydantic AI's ``ERROR_OUTCOMES``, marks it an error; multimodal content as
  text, image and document parts, any other non-string content as its JSON), ``retry-prompt``
  (with a tool call id → an error ``tool_result``, else user text) and ``retry-feedback``
  (user text) → a user message, in order.
- ``response``: ``text`` → text (its ``citations`` → the block's ``annotations``, one per
  cited source: ``web_citation`` / ``document_citation`` with the source's fields, the
  citation's ``anchor`` and its position ``citation``), ``thinking`` → reasoning (with its
  ``signature``), ``tool-call`` → ``tool_use`` (``args`` a dict or a JSON string), ``file`` →
  an image block (an image) or a document block (any other file but audio and video),
  ``builtin-tool-call`` → ``hosted_tool_use`` and ``builtin-tool-return`` →
  ``hosted_tool_result`` (a tool the provider ran: web search, code execution, image
  generation, a remote MCP server's tool ``mcp_server:LABEL``, whose label becomes the
  block's ``server``), with ``provider_name``, ``provider_details`` and the part's other
  fields kept in ``provider_data``.

Refused, naming the part and its position: ``compaction``, ``speech``, ``audio-url``,
``video-url``, ``uploaded-file``, audio and video ``binary`` content, and the instruction and
delta parts. An unknown key, part kind or message kind is refused too. A response is at its
``timestamp``; the messages a request becomes each at the ``timestamp`` of its first part (else
the request's own, which newer releases write).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from typing import Any

from convstore.convert.history import History, HistoryMessage
from convstore.convert.parts import (
    as_dict,
    as_list,
    check_keys,
    checked,
    document_from,
    image_from_url,
    readable_output,
    refuse,
    text_of,
    tidy,
    tool_arguments,
)
from convstore.convert.source_meta import source_time
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

_COMMON = {"conversation_id", "kind", "metadata", "parts", "run_id", "state", "timestamp"}
MESSAGE_KEYS: dict[str, frozenset[str]] = {
    "request": frozenset({*_COMMON, "instructions"}),
    "response": frozenset(
        {
            *_COMMON,
            "canonical_system",
            "duration",
            "failed_attempts",
            "finish_reason",
            "history_digest",
            "model_id",
            "model_name",
            "provider_details",
            "provider_name",
            "provider_response_id",
            "provider_url",
            "request_timestamp",
            "usage",
            "vendor_details",
            "vendor_id",
            "workspace_ref",
        }
    ),
}
"""The keys of each message kind; any other is refused."""

_PROVIDER = {"id", "part_kind", "provider_details", "provider_name"}
_CALL = {*_PROVIDER, "args", "tool_call_id", "tool_kind", "tool_name", "ui_visibility"}
"""A tool call's keys; ``ui_visibility`` is what a UI adapter shows a client, never sent to the
model (Pydantic AI 2.78)."""
_RETURN = {
    "content",
    "content_file_digests",
    "metadata",
    "outcome",
    "part_kind",
    "retry",
    "ui_visibility",
}
REQUEST_PARTS: dict[str, frozenset[str]] = {
    "system-prompt": frozenset(
        {"content", "context_id", "dynamic_ref", "metadata", "part_kind", "scope", "timestamp"}
    ),
    "user-prompt": frozenset({"content", "part_kind", "timestamp"}),
    "tool-return": frozenset({*_RETURN, "timestamp", "tool_call_id", "tool_kind", "tool_name"}),
    "retry-prompt": frozenset({"content", "part_kind", "timestamp", "tool_call_id", "tool_name"}),
    "retry-feedback": frozenset({"content", "part_kind", "retry", "timestamp"}),
}
RESPONSE_PARTS: dict[str, frozenset[str]] = {
    "text": frozenset({*_PROVIDER, "content", "citations"}),
    "thinking": frozenset({*_PROVIDER, "content", "signature"}),
    "tool-call": frozenset(_CALL),
    "file": frozenset({*_PROVIDER, "content"}),
    "builtin-tool-call": frozenset(_CALL),
    "builtin-tool-return": frozenset(
        {*_RETURN - {"retry"}, "provider_details", "provider_name", "timestamp"}
        | {"tool_call_id", "tool_kind", "tool_name"}
    ),
}
ERROR_OUTCOMES = ("failed", "retried")
"""The tool-return outcomes that reach the model as an error (Pydantic AI's own
``ERROR_OUTCOMES``): a denial or an interruption is sent as an ordinary result."""

MCP_SERVER = "mcp_server:"
"""How Pydantic AI names a remote MCP server's native tool: ``mcp_server:LABEL``."""

PENDING_PARTS = (
    "compaction",
    "speech",
    "instruction",
    "instruction-baseline",
    "instruction-delta",
    "instruction-digest",
    "model-settings-delta",
    "tool-availability-delta",
    "capability-load-delta",
    "capability",
)
"""Part kinds refused: a provider's compaction (encrypted, or a summary in the middle of a
response), speech, the instruction and delta parts (the run's settings, not content), and a
capability's part (an application-defined kind whose rendering, as instruction, user turn or
framed data, only its registered class knows)."""

CONTENT_KINDS: dict[str, frozenset[str]] = {
    "image-url": frozenset(
        {"url", "force_download", "vendor_metadata", "kind", "media_type", "identifier"}
    ),
    "document-url": frozenset(
        {"url", "force_download", "vendor_metadata", "kind", "media_type", "identifier"}
    ),
    "binary": frozenset({"data", "media_type", "vendor_metadata", "kind", "identifier"}),
    "text-content": frozenset({"content", "kind", "metadata"}),
}
"""The kinds of user content (besides plain strings) the converter accepts."""


_STANDARD_BASE64 = str.maketrans("-_", "+/")


def _json_text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _binary(item: Mapping[str, Any], where: str) -> ImageBlock | DocumentBlock:
    """Binary content: an image, or a document of any type but audio and video."""
    media = text_of(item.get("media_type"), f"{where} media_type")
    # Pydantic serialises bytes as URL-safe base64; the blocks hold the standard alphabet
    # (the same bytes).
    encoded = text_of(item.get("data"), f"{where} data").translate(_STANDARD_BASE64)
    if not media.startswith("image/"):
        if media.startswith(("audio/", "video/")):
            msg = f"{where}: binary content of media type {media!r} cannot be recorded yet"
            raise InvalidInput(msg)
        return document_from(where, data=encoded, media_type=media)
    data = {"media_type": media, "data": encoded}
    return checked(partial(ImageBlock.model_validate, data), where)


def _document_url(item: Mapping[str, Any], where: str) -> DocumentBlock:
    url = text_of(item.get("url"), f"{where} url")
    if url.startswith("data:"):
        return document_from(where, data=url)
    return document_from(where, url=url, media_type=item.get("media_type"))


def _user_content(content: object, where: str) -> list[Block]:
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[Block] = []
    for index, raw in enumerate(as_list(content, f"{where} content")):
        at = f"{where} content {index}"
        if isinstance(raw, str):
            blocks.append(TextBlock(text=raw))
            continue
        item = as_dict(raw, at)
        kind = item.get("kind")
        if kind not in CONTENT_KINDS:
            if not isinstance(kind, str):
                refuse("content kind", kind, at, tuple(CONTENT_KINDS))
            msg = (
                f"{at}: user content of kind {kind!r} cannot be recorded yet "
                f"(accepted: {', '.join(CONTENT_KINDS)})"
            )
            raise InvalidInput(msg)
        check_keys(item, CONTENT_KINDS[kind], f"{at} ({kind})")
        if kind == "image-url":
            blocks.append(image_from_url(item.get("url"), f"{at} url"))
        elif kind == "binary":
            blocks.append(_binary(item, at))
        elif kind == "document-url":
            blocks.append(_document_url(item, at))
        else:
            blocks.append(TextBlock(text=text_of(item.get("content"), f"{at} content")))
    return blocks


def _is_content(item: object) -> bool:
    return isinstance(item, str) or (
        isinstance(item, Mapping) and item.get("kind") in CONTENT_KINDS
    )


def _result_content(content: object, where: str) -> str | list[Block]:
    """A tool's return as text (its JSON unless a string), or as text, image and document
    parts when it is multimodal content (``binary``, ``image-url``, ``document-url``,
    ``text-content``)."""
    if isinstance(content, Mapping) and _is_content(content):
        content = [content]
    items: list[Any] = content if isinstance(content, list) else []
    if any(not isinstance(i, str) for i in items) and all(_is_content(i) for i in items):
        return _user_content(items, where)
    return _json_text(content)


def _result(part: Mapping[str, Any], where: str, *, error: bool) -> ToolResultBlock:
    data = {
        "tool_use_id": part.get("tool_call_id"),
        "name": part.get("tool_name"),
        "content": _result_content(part.get("content"), where),
        "is_error": error,
    }
    return checked(partial(ToolResultBlock.model_validate, data), where)


def _part_kind(part: Mapping[str, Any], known: Mapping[str, frozenset[str]], where: str) -> str:
    kind = part.get("part_kind")
    if kind in PENDING_PARTS:
        msg = f"{where}: a {kind!r} part cannot be recorded yet (no convstore block kind for it)"
        raise InvalidInput(msg)
    if kind not in known:
        refuse("part kind", kind, where, tuple(known))
    check_keys(part, known[str(kind)], f"{where} ({kind})")
    return str(kind)


def _annotations(citations: object, where: str) -> list[dict[str, Any]] | None:
    """A text part's ``citations`` as annotations: one per cited source (``web_citation`` or
    ``document_citation``, the source's fields as they are), each with its citation's
    ``anchor`` and position (``citation``), so sources cited together stay together."""
    if citations is None:
        return None
    annotations: list[dict[str, Any]] = []
    for position, raw in enumerate(as_list(citations, where)):
        citation = as_dict(raw, f"{where} {position}")
        check_keys(citation, frozenset({"sources", "anchor"}), f"{where} {position}")
        for index, item in enumerate(as_list(citation.get("sources"), f"{where} {position}")):
            source = as_dict(item, f"{where} {position} source {index}")
            kind = source.get("kind")
            if kind not in ("web", "document"):
                refuse("citation source kind", kind, f"{where} {position}", ("web", "document"))
            fields = {key: value for key, value in source.items() if key != "kind"}
            anchor = {"anchor": citation["anchor"]} if citation.get("anchor") else {}
            annotations.append(
                {"type": f"{kind}_citation", **fields, **anchor, "citation": position}
            )
    return annotations or None


def text_block(part: Mapping[str, Any], where: str) -> TextBlock:
    """A ``text`` part as a text block, its ``citations`` as the block's annotations."""
    text = {
        "text": text_of(part.get("content"), f"{where} content"),
        "annotations": _annotations(part.get("citations"), f"{where} citations"),
    }
    return checked(partial(TextBlock.model_validate, text), where)


def _provider_data(part: Mapping[str, Any], kept: frozenset[str]) -> dict[str, Any] | None:
    """What a part holds beyond the block's fields (``kept``), its unset fields left out."""
    extra = {
        key: value
        for key, value in part.items()
        if key not in kept and value is not None and value != []
    }
    return extra or None


_HOSTED_CALL_FIELDS = frozenset({"part_kind", "tool_call_id", "args", "timestamp"})
_HOSTED_RETURN_FIELDS = frozenset({"part_kind", "tool_call_id", "tool_name"})


def hosted_call(part: Mapping[str, Any], where: str) -> HostedToolUseBlock:
    """A ``builtin-tool-call`` part (``ModelMessagesTypeAdapter`` JSON) as a hosted call: a
    remote MCP server's tool (``mcp_server:LABEL``) keeps the label as ``server`` and the
    called tool's name from its args; ``provider_name``, ``provider_details``, ``id``,
    ``tool_kind`` (and the original ``tool_name`` when it was renamed) in ``provider_data``."""
    name = text_of(part.get("tool_name"), f"{where} tool_name")
    args = part.get("args")
    arguments = {} if args is None else tool_arguments(args, f"{where} args")
    server = name.removeprefix(MCP_SERVER) if name.startswith(MCP_SERVER) else None
    called = arguments.get("tool_name") if isinstance(arguments, dict) else None
    renamed = server is not None and isinstance(called, str) and called != ""
    kept = _HOSTED_CALL_FIELDS if renamed else _HOSTED_CALL_FIELDS | {"tool_name"}
    data = {
        "id": part.get("tool_call_id"),
        "name": called if renamed else name,
        "input": arguments,
        "server": server or None,
        "provider_data": _provider_data(part, kept),
    }
    return checked(partial(HostedToolUseBlock.model_validate, data), where)


def hosted_return(part: Mapping[str, Any], where: str) -> HostedToolResultBlock:
    """A ``builtin-tool-return`` part as a hosted call's result: its content as text (a
    string, else its JSON without the provider's encrypted fields) or as text, image and
    document parts; the outcome marks an error as a tool return's does; everything else but
    the timestamp in ``provider_data`` (the content too, verbatim, when encrypted fields were
    left out of the text)."""
    kept = _HOSTED_RETURN_FIELDS | {"timestamp"}
    if part.get("outcome", "success") == "success":
        kept |= {"outcome"}  # the default says nothing
    content = _result_content(part.get("content"), where)
    readable = readable_output(part.get("content")) if isinstance(content, str) else content
    if readable == content:
        kept |= {"content"}  # all there is of it is in the block already
    content = readable
    data = {
        "tool_use_id": part.get("tool_call_id"),
        "name": part.get("tool_name"),
        "content": content,
        "is_error": part.get("outcome") in ERROR_OUTCOMES,
        "provider_data": _provider_data(part, kept),
    }
    return checked(partial(HostedToolResultBlock.model_validate, data), where)


def _request(message: Mapping[str, Any], where: str) -> list[HistoryMessage]:
    """A request's parts as messages, one per run of parts of one role, each at its first
    part's ``timestamp`` (else the request's)."""
    out: list[HistoryMessage] = []
    role: Role | None = None
    blocks: list[Block] = []
    request_at = source_time(message.get("timestamp"))
    run_at = part_at = request_at

    def add(target: Role, new: list[Block]) -> None:
        nonlocal role, blocks, run_at
        if role is not None and role != target:
            out.append(HistoryMessage(role, tidy(blocks), at=run_at, where=where))
            blocks = []
        if role != target:
            run_at = part_at
        role = target
        blocks += new

    for index, raw in enumerate(as_list(message.get("parts"), f"{where} parts")):
        at = f"{where} part {index}"
        part = as_dict(raw, at)
        part_at = source_time(part.get("timestamp")) or request_at
        kind = _part_kind(part, REQUEST_PARTS, at)
        at = f"{at} ({kind})"
        if kind == "system-prompt":
            add("system", [TextBlock(text=text_of(part.get("content"), f"{at} content"))])
        elif kind == "user-prompt":
            add("user", _user_content(part.get("content"), at))
        elif kind == "tool-return":
            add("user", [_result(part, at, error=part.get("outcome") in ERROR_OUTCOMES)])
        elif kind == "retry-prompt" and part.get("tool_call_id") and part.get("tool_name"):
            add("user", [_result(part, at, error=True)])
        else:
            add("user", [TextBlock(text=_json_text(part.get("content")))])
    if role is not None:
        out.append(HistoryMessage(role, tidy(blocks), at=run_at, where=where))
    return out


def _response(message: Mapping[str, Any], where: str) -> HistoryMessage:
    blocks: list[Block] = []
    for index, raw in enumerate(as_list(message.get("parts"), f"{where} parts")):
        at = f"{where} part {index}"
        part = as_dict(raw, at)
        kind = _part_kind(part, RESPONSE_PARTS, at)
        at = f"{at} ({kind})"
        if kind == "text":
            blocks.append(text_block(part, at))
        elif kind == "builtin-tool-call":
            blocks.append(hosted_call(part, at))
        elif kind == "builtin-tool-return":
            blocks.append(hosted_return(part, at))
        elif kind == "thinking":
            data = {"text": part.get("content"), "signature": part.get("signature")}
            blocks.append(checked(partial(ReasoningBlock.model_validate, data), at))
        elif kind == "tool-call":
            args = part.get("args")
            call = {
                "id": part.get("tool_call_id"),
                "name": part.get("tool_name"),
                "input": {} if args is None else tool_arguments(args, f"{at} args"),
            }
            blocks.append(checked(partial(ToolUseBlock.model_validate, call), at))
        else:
            content = as_dict(part.get("content"), f"{at} content")
            if content.get("kind") != "binary":
                refuse("file content kind", content.get("kind"), at, ("binary",))
            blocks.append(_binary(content, f"{at} content"))
    if not blocks:
        msg = f"{where}: the response has no parts (nothing to record)"
        raise InvalidInput(msg)
    when = source_time(message.get("timestamp"))
    return HistoryMessage("assistant", tidy(blocks), at=when, where=where)


def history_from_model_messages(data: object) -> History:
    """A ``ModelMessagesTypeAdapter`` JSON list as a :class:`History` (see the module)."""
    messages = as_list(data, "model messages")
    history = History()
    instructions: str | None = None
    for index, raw in enumerate(messages):
        where = f"message {index}"
        message = as_dict(raw, where)
        kind = message.get("kind")
        if kind not in MESSAGE_KEYS:
            refuse("message kind", kind, where, tuple(MESSAGE_KEYS))
        where = f"message {index} ({kind})"
        check_keys(message, MESSAGE_KEYS[kind], where)
        if kind == "response":
            history.messages.append(_response(message, where))
            continue
        given = message.get("instructions")
        requested = _request(message, where)
        if given is not None and given != instructions:
            text = text_of(given, f"{where} instructions")
            when = requested[0].at if requested else source_time(message.get("timestamp"))
            system = HistoryMessage("system", (TextBlock(text=text),), at=when, where=where)
            history.messages.append(system)
            instructions = text
        history.messages += requested
    return history
