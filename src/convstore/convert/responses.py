"""OpenAI Responses API items into convstore blocks.

Accepts dicts (the input params are TypedDicts) and the ``openai`` SDK's typed output items
(``ResponseOutputMessage``, ``ResponseFunctionToolCall``, ``ResponseReasoningItem``, …). What
each item type becomes:

- ``message`` (also the short form without ``type``): role ``user`` → a user message,
  ``system`` / ``developer`` → a system message, ``assistant`` → assistant text. Content is a
  string or a list of ``input_text``, ``output_text`` (its ``annotations`` kept verbatim on
  the text block; ``logprobs`` dropped), ``refusal``, ``input_image`` and ``input_file`` (a
  ``document``: ``file_data``, ``file_id`` or ``file_url``; ``filename``) parts (``image_url`` a
  ``data:`` URL or an ``http(s)`` address; ``detail`` is ignored).
- ``function_call`` → a ``tool_use`` block (``call_id``, ``name``; ``arguments`` parsed when it
  is a JSON object, else kept as the raw text).
- ``function_call_output`` → a ``tool_result`` block (named by its ``name`` when it has one);
  ``output`` is a string or a list of ``input_text``, ``input_image`` and ``input_file`` (a
  document) parts.
- ``reasoning`` → a reasoning block: its ``content`` ``reasoning_text`` parts when present,
  else its ``summary`` text parts, joined by a blank line; ``encrypted_content`` rides along
  on the block (replay of history shows the text only). An item with neither text nor
  encrypted content adds nothing (an assistant turn of nothing else is left out).

- hosted tool items (``web_search_call``, ``mcp_call``, …) and caller-run tool items
  (``computer_call``, ``shell_call``, …) → see :mod:`convstore.convert.responses_tools`.

Consecutive assistant-side items (assistant messages, reasoning, calls, hosted calls and their
results) form one assistant message; consecutive tool outputs one user message. The item types
of :data:`REFUSED_ITEMS`, and any other item or part type, are refused with one
:class:`~convstore.domain.errors.InvalidInput` naming it and its position; a refused input
converts to nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from convstore.convert.history import History, HistoryMessage
from convstore.convert.parts import (
    as_dict,
    as_list,
    check_keys,
    checked,
    refuse,
    responses_parts,
    text_of,
    tidy,
    tool_arguments,
)
from convstore.convert.responses_tools import (
    CALLER_RUN,
    HOSTED,
    Side,
    tool_item_blocks,
    tool_output,
)
from convstore.domain.blocks import Block, ReasoningBlock, TextBlock, ToolUseBlock
from convstore.domain.errors import InvalidInput
from convstore.domain.events import MessageMeta

OWN_ITEMS = ("message", "function_call", "function_call_output", "reasoning")
ITEM_TYPES = (*OWN_ITEMS, *HOSTED, *CALLER_RUN)
"""The item types the converter accepts (see :mod:`convstore.convert.responses_tools` for
the tool items)."""

REFUSED_ITEMS = (
    "item_reference",
    "compaction",
    "compaction_trigger",
    "additional_tools",
    "configuration_update",
)
"""Item types of the SDK's unions that are refused: a reference to an item the provider
stored (its content is not in the input), an encrypted compaction (no readable summary), and
request settings (tools offered, a configuration change), which are not conversation."""

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
"""The roles a ``message`` item may have."""

MESSAGE_PARTS = ("input_text", "output_text", "refusal", "input_image", "input_file")
"""Content part types accepted in a ``message`` item."""

ITEM_KEYS: dict[str, frozenset[str]] = {
    "message": frozenset({"type", "role", "content", "id", "status", "phase", "end_turn"}),
    "function_call": frozenset(
        {"type", "call_id", "name", "arguments", "id", "status", "namespace", "caller", "async"}
    ),
    "function_call_output": frozenset(
        {"type", "call_id", "output", "id", "status", "name", "namespace", "caller", "created_by"}
    ),
    "reasoning": frozenset({"type", "id", "summary", "content", "encrypted_content", "status"}),
}
"""The keys each item type may have; any other is refused, never dropped."""


def _message_blocks(item: Mapping[str, Any], where: str) -> list[Block]:
    content = item.get("content")
    if isinstance(content, str):
        return [TextBlock(text=content)]
    return list(responses_parts(content, where, MESSAGE_PARTS))


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
    if kind in ITEM_KEYS:
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
            return tool_output(fields, where)
        case "reasoning":
            return "assistant", _reasoning(fields, where)
        case _:
            return tool_item_blocks(kind, fields, where)


def response_messages(items: Iterable[object]) -> list[HistoryMessage]:
    """Responses API items as convstore messages, in order (see the module docstring)."""
    converted: list[HistoryMessage] = []
    run_side: Side | None = None
    run: list[Block] = []
    first = last = 0  # the run's items

    def close() -> None:
        if run_side is not None and (run or run_side != "assistant"):
            role = "user" if run_side == "results" else run_side
            where = f"item {first}" if first == last else f"items {first} to {last}"
            converted.append(HistoryMessage(role, tidy(run), where=where))

    for index, item in enumerate(items):
        side, blocks = item_blocks(item, f"item {index}")
        if side in ("assistant", "results") and side == run_side:
            run += blocks
            last = index
            continue
        close()
        run_side, run, first, last = side, list(blocks), index, index
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
        system = (TextBlock(text=instructions),)
        messages.insert(0, HistoryMessage("system", system, where="body instructions"))
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
