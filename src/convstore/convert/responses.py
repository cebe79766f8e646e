"""OpenAI Responses API items into convstore blocks.

Accepts dicts (the input params are TypedDicts) and the ``openai`` SDK's typed output items
(``ResponseOutputMessage``, ``ResponseFunctionToolCall``, ``ResponseReasoningItem``, …). What
each item type becomes:

- ``message`` (also the short form without ``type``): role ``user`` → a user message,
  ``system`` / ``developer`` → a system message, ``assistant`` → assistant text. Content is a
  string or a list of ``input_text``, ``output_text``, ``refusal``, ``input_image`` and
  ``input_file`` (a ``document``: ``file_data``, ``file_id`` or ``file_url``; ``filename``) parts
  (``image_url`` a ``data:`` URL or an ``http(s)`` address; ``detail`` is ignored).
- ``function_call`` → a ``tool_use`` block (``call_id``, ``name``; ``arguments`` parsed when it
  is a JSON object, else kept as the raw text).
- ``function_call_output`` → a ``tool_result`` block; ``output`` is a string or a list of
  ``input_text`` / ``input_image`` parts.
- ``reasoning`` → a reasoning block: its ``content`` ``reasoning_text`` parts when present,
  else its ``summary`` text parts, joined by a blank line; ``encrypted_content`` rides along
  on the block (replay of history shows the text only). An item with neither text nor
  encrypted content adds nothing (an assistant turn of nothing else is left out).

Consecutive assistant-side items (assistant messages, reasoning, function calls) form one
assistant message; consecutive ``function_call_output`` items one user message. Any other item
or part type (hosted tool calls, ``file_search_call``, ``item_reference``, …)
is refused with one :class:`~convstore.domain.errors.InvalidInput` naming it and its position; a
refused input converts to nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal

from convstore.convert.history import History, HistoryMessage
from convstore.convert.parts import (
    as_dict,
    as_list,
    check_keys,
    checked,
    image_from_url,
    openai_file,
    refuse,
    text_of,
    tidy,
    tool_arguments,
)
from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.domain.events import MessageMeta

ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
"""The item types the converter accepts."""

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
"""The roles a ``message`` item may have."""

MESSAGE_PARTS = ("input_text", "output_text", "refusal", "input_image", "input_file")
"""Content part types accepted in a ``message`` item."""

OUTPUT_PARTS = ("input_text", "input_image")
"""Part types accepted in a ``function_call_output`` item's ``output`` list."""

ITEM_KEYS: dict[str, frozenset[str]] = {
    "message": frozenset({"type", "role", "content", "id", "status", "phase", "end_turn"}),
    "function_call": frozenset(
        {"type", "call_id", "name", "arguments", "id", "status", "namespace"}
    ),
    "function_call_output": frozenset({"type", "call_id", "output", "id", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
}
"""The keys each item type may have; any other is refused, never dropped."""

Side = Literal["assistant", "results", "user", "system"]


def _image(part: Mapping[str, Any], where: str) -> ImageBlock:
    if part.get("image_url") is None and part.get("file_id") is not None:
        msg = f"{where}: an input_image given by file_id cannot be recorded; give its image_url"
        raise InvalidInput(msg)
    return image_from_url(part.get("image_url"), f"{where} image_url")


def _parts(
    content: object, where: str, accepted: tuple[str, ...]
) -> list[TextBlock | ImageBlock | DocumentBlock]:
    blocks: list[TextBlock | ImageBlock | DocumentBlock] = []
    for index, raw in enumerate(as_list(content, f"{where} content")):
        at = f"{where} part {index}"
        part = as_dict(raw, at)
        kind = part.get("type")
        if kind not in accepted:
            refuse("part type", kind, at, accepted)
        if kind == "input_image":
            blocks.append(_image(part, at))
        elif kind == "input_file":
            blocks.append(openai_file(part, at, url_key="file_url"))
        else:
            field = "refusal" if kind == "refusal" else "text"
            blocks.append(TextBlock(text=text_of(part.get(field), f"{at} {field}")))
    return blocks


def _message_blocks(item: Mapping[str, Any], where: str) -> list[Block]:
    content = item.get("content")
    if isinstance(content, str):
        return [TextBlock(text=content)]
    return list(_parts(content, where, MESSAGE_PARTS))


def _reasoning(item: Mapping[str, Any], where: str) -> list[Block]:
    """The reasoning block of a ``reasoning`` item; none when it carries neither text nor
    encrypted content (models often return such empty items)."""
    texts: list[str] = []
    for field, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        for index, raw in enumerate(as_list(item.get(field) or [], f"{where} {field}")):
            at = f"{where} {field} part {index}"
            part = as_dict(raw, at)
            if part.get("type") != kind:
                refuse("part type", part.get("type"), at, (kind,))
            texts.append(text_of(part.get("text"), f"{at} text"))
        if texts:
            break
    # Not marked ``redacted``: that flag means an Anthropic ``redacted_thinking`` block, which
    # live_request would send back to Anthropic as such.
    data = {"text": "\n\n".join(texts), "encrypted_content": item.get("encrypted_content")}
    if not data["text"] and not data["encrypted_content"]:
        return []
    return [checked(lambda: ReasoningBlock.model_validate(data), where)]


def item_blocks(item: object, where: str = "item") -> tuple[Side, list[Block]]:
    """One item as the side it belongs to and its blocks."""
    fields = as_dict(item, where)
    kind = fields.get("type", "message" if "role" in fields else None)
    if kind not in ITEM_TYPES:
        refuse("item type", kind, where, ITEM_TYPES)
    where = f"{where} ({kind})"
    check_keys(fields, ITEM_KEYS[kind], where)
    match kind:
        case "message":
            role = fields.get("role")
            if role not in MESSAGE_ROLES:
                refuse("role", role, where, MESSAGE_ROLES)
            side: Side = "system" if role in ("system", "developer") else role
            return side, _message_blocks(fields, where)
        case "function_call":
            data = {
                "id": fields.get("call_id"),
                "name": fields.get("name"),
                "input": tool_arguments(fields.get("arguments", ""), f"{where} arguments"),
            }
            return "assistant", [checked(lambda: ToolUseBlock.model_validate(data), where)]
        case "function_call_output":
            raw = fields.get("output")
            output = raw if isinstance(raw, str) else _parts(raw, where, OUTPUT_PARTS)
            result = {"tool_use_id": fields.get("call_id"), "content": output}
            return "results", [checked(lambda: ToolResultBlock.model_validate(result), where)]
        case _:
            return "assistant", _reasoning(fields, where)


def response_messages(items: Iterable[object]) -> list[HistoryMessage]:
    """Responses API items as convstore messages, in order (see the module docstring)."""
    converted: list[HistoryMessage] = []
    run_side: Side | None = None
    run: list[Block] = []

    def close() -> None:
        if run_side is not None and (run or run_side != "assistant"):
            role = "user" if run_side == "results" else run_side
            converted.append(HistoryMessage(role, tidy(run)))

    for index, item in enumerate(items):
        side, blocks = item_blocks(item, f"item {index}")
        if side in ("assistant", "results") and side == run_side:
            run += blocks
            continue
        close()
        run_side, run = side, list(blocks)
    close()
    return converted


def history_from_responses(data: object) -> History:
    """A Responses API request body (its ``input``: a string or an item list) or an item list
    as a :class:`History`; ``instructions`` in a body becomes the first, system, message.
    A body's ``previous_response_id`` (the history goes on in a response the provider
    stored) is kept on the first message's metadata (``extra``) and on the history."""
    instructions: str | None = None
    if isinstance(data, Mapping) and "input" in data:
        raw = data["input"]
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
        if data.get("instructions") is not None:
            instructions = text_of(data["instructions"], "body instructions")
        items = as_list(items, "body input")
    elif isinstance(data, list | tuple):
        items = list(data)
    else:
        msg = "expected a Responses API request body with 'input', or a list of input items"
        raise InvalidInput(msg)
    messages = response_messages(items)
    if instructions:
        messages.insert(0, HistoryMessage("system", (TextBlock(text=instructions),)))
    previous = data.get("previous_response_id") if isinstance(data, Mapping) else None
    if isinstance(previous, str) and previous and messages:
        # The body goes on from a response the provider stored: the history before it is
        # not in the input. Kept on the first message, so what it followed stays known.
        first = messages[0]
        meta = MessageMeta(extra={"previous_response_id": previous})
        messages[0] = replace(first, meta=meta if first.meta is None else first.meta.merged(meta))
    return History(
        messages=messages,
        previous_response_id=previous if isinstance(previous, str) and previous else None,
    )
