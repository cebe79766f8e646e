"""OpenAI Codex CLI rollout files (``~/.codex/sessions/**/rollout-*.jsonl``) into a history.

Every line is ``{"timestamp", "type", "payload"}``. What each line type becomes:

- ``session_meta``: its ``payload.id`` is the history's key (so a second import is refused);
  its ``base_instructions`` (what Codex sends as the Responses ``instructions``) become the
  first, system, message. Nothing else of it is recorded.
- ``response_item``: the model's history, read as Responses API items (``message``,
  ``function_call`` / ``function_call_output``, ``reasoning`` with its summary or content),
  plus Codex's own ``custom_tool_call`` / ``custom_tool_call_output`` and ``local_shell_call``
  (→ a ``tool_use`` named ``local_shell`` whose input is the ``action``; its output arrives
  as a ``function_call_output``). ``ghost_snapshot`` items (the harness's git snapshots) are
  counted as ignored. Consecutive assistant-side items form one assistant message.
- ``compacted``: a compaction whose summary is its ``message``, through the last message so far.
- ``event_msg`` ``turn_aborted``: the assistant message it cut short is marked interrupted
  (with the event's ``reason``).
- other ``event_msg`` lines and ``turn_context``: counted as ignored (they repeat what the
  response items hold, or describe the turn's settings).

The older layout (a bare ``{id, timestamp, instructions, git}`` header line, bare response
items, ``{"record_type": "state"}`` markers) is read the same way.

Tools the provider ran (the whole item kept verbatim in the block's ``provider_data``):

- ``web_search_call`` → a ``hosted_tool_use`` named ``web_search`` whose input is its
  ``action`` (``search`` with its query, ``open_page``, ``find_in_page``); the rollout holds
  no results, so there is no result block. Codex does not write the call's ``id``: a call
  without one gets ``web_search_call:line N`` (its line), stable across imports.
- ``image_generation_call`` → a ``hosted_tool_use`` named ``image_generation`` (input: its
  ``revised_prompt``) and its ``hosted_tool_result``: the generated image (``result``, base64,
  its format read from its bytes), an error when ``status`` is ``failed``; ``provider_data``
  is the item without the image.
- ``tool_search_call`` / ``tool_search_output`` with ``execution: "server"`` → a hosted call
  named ``tool_search`` (input: its ``arguments``) and its result (the ``tools`` found, as
  JSON) in the same assistant message; with ``execution: "client"`` Codex ran the search,
  so they are a ``tool_use`` and a ``tool_result``, like any caller-run round.

Refused, naming the line and item: any other item or line type. A ``compaction`` item
(encrypted, with no readable summary) is skipped and reported. Each line's ``timestamp`` is
in the source; convstore's history has no place for it yet, so it is not kept.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from convstore.convert.history import History, HistoryCompaction, HistoryMessage, Skipped
from convstore.convert.parts import as_dict, check_keys, checked, refuse, text_of, tidy
from convstore.convert.responses import ITEM_TYPES, item_blocks
from convstore.convert.responses_tools import Side
from convstore.domain.blocks import (
    Block,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.domain.images import sniff_media_type

LINE_TYPES = ("session_meta", "response_item", "compacted", "event_msg", "turn_context")
LINE_KEYS = frozenset({"timestamp", "type", "payload"})
CODEX_ITEMS = ("custom_tool_call", "custom_tool_call_output", "local_shell_call")
HOSTED_ITEMS = (
    "web_search_call",
    "image_generation_call",
    "tool_search_call",
    "tool_search_output",
)
"""Items of tools the provider runs (a tool search may also be run by Codex itself)."""
IGNORED_ITEMS = ("ghost_snapshot",)

ITEM_KEYS: dict[str, frozenset[str]] = {
    "custom_tool_call": frozenset({"type", "id", "status", "call_id", "name", "input"}),
    "custom_tool_call_output": frozenset({"type", "call_id", "name", "output"}),
    "local_shell_call": frozenset({"type", "id", "call_id", "status", "action"}),
    "web_search_call": frozenset({"type", "id", "status", "action"}),
    "image_generation_call": frozenset({"type", "id", "status", "revised_prompt", "result"}),
    "tool_search_call": frozenset({"type", "id", "call_id", "status", "execution", "arguments"}),
    "tool_search_output": frozenset({"type", "id", "call_id", "status", "execution", "tools"}),
}


def _codex_item(item: Mapping[str, Any], kind: str, where: str) -> tuple[Side, list[Block]]:
    check_keys(item, ITEM_KEYS[kind], where)
    if kind == "custom_tool_call":
        data = {
            "id": item.get("call_id"),
            "name": item.get("name"),
            "input": text_of(item.get("input"), f"{where} input"),
        }
        return "assistant", [checked(lambda: ToolUseBlock.model_validate(data), where)]
    if kind == "custom_tool_call_output":
        output = item.get("output")
        result = {
            "tool_use_id": item.get("call_id"),
            "name": item.get("name"),
            "content": output if isinstance(output, str) else json.dumps(output),
        }
        return "results", [checked(lambda: ToolResultBlock.model_validate(result), where)]
    call = {
        "id": item.get("call_id") or item.get("id"),
        "name": "local_shell",
        "input": as_dict(item.get("action"), f"{where} action"),
    }
    return "assistant", [checked(lambda: ToolUseBlock.model_validate(call), where)]


def _hosted_item(
    item: Mapping[str, Any], kind: str, number: int, where: str
) -> tuple[Side, list[Block]]:
    """An item of a tool the provider ran, as hosted blocks (a client-run tool search as a
    caller's tool round); see the module docstring."""
    check_keys(item, ITEM_KEYS[kind], where)
    verbatim = dict(item)
    if kind == "web_search_call":
        action = item.get("action")
        call = {
            "id": item.get("id") or f"web_search_call:line {number}",
            "name": "web_search",
            "input": {} if action is None else as_dict(action, f"{where} action"),
            "provider_data": verbatim,
        }
        return "assistant", [checked(lambda: HostedToolUseBlock.model_validate(call), where)]
    if kind == "image_generation_call":
        return "assistant", _image_generation(item, where)
    server = item.get("execution") == "server"
    call_id = item.get("call_id") or item.get("id")
    if kind == "tool_search_call":
        arguments = item.get("arguments")
        fields = {
            "id": call_id,
            "name": "tool_search",
            "input": {} if arguments is None else as_dict(arguments, f"{where} arguments"),
        }
        if server:
            data = {**fields, "provider_data": verbatim}
            return "assistant", [checked(lambda: HostedToolUseBlock.model_validate(data), where)]
        return "assistant", [checked(lambda: ToolUseBlock.model_validate(fields), where)]
    result = {
        "tool_use_id": call_id,
        "name": "tool_search",
        "content": json.dumps(item.get("tools"), ensure_ascii=False),
    }
    if server:
        data = {**result, "provider_data": verbatim}
        return "assistant", [checked(lambda: HostedToolResultBlock.model_validate(data), where)]
    return "results", [checked(lambda: ToolResultBlock.model_validate(result), where)]


def _image_generation(item: Mapping[str, Any], where: str) -> list[Block]:
    """An image generation call and its result: the image (its format read from its bytes),
    or, with no image, its status."""
    prompt = item.get("revised_prompt")
    call_id = item.get("id")
    call = {
        "id": call_id,
        "name": "image_generation",
        "input": {} if prompt is None else {"revised_prompt": prompt},
        "provider_data": {key: value for key, value in item.items() if key != "result"},
    }
    use = checked(lambda: HostedToolUseBlock.model_validate(call), where)
    encoded = item.get("result") or ""
    status = item.get("status")
    content: str | list[Block] = f"status: {status}" if isinstance(status, str) else ""
    if encoded:
        try:
            media = sniff_media_type(base64.b64decode(text_of(encoded, f"{where} result")))
        except binascii.Error:
            media = None
        image = {"media_type": media or "image/png", "data": encoded}
        content = [checked(lambda: ImageBlock.model_validate(image), f"{where} result")]
    result = {
        "tool_use_id": call_id,
        "name": "image_generation",
        "content": content,
        "is_error": status == "failed",
    }
    return [use, checked(lambda: HostedToolResultBlock.model_validate(result), where)]


def _other_line(
    history: History, kind: str, payload: Mapping[str, Any], number: int, where: str
) -> None:
    """A line other than a ``response_item``: the session's key, a compaction, or ignored."""
    if kind == "session_meta":
        if history.key is None and isinstance(payload.get("id"), str):
            history.key = payload["id"]
            base = payload.get("base_instructions")
            text = base.get("text") if isinstance(base, Mapping) else None
            _instructions(history, text, where)
        return
    if kind == "compacted":
        summary = text_of(payload.get("message"), f"{where} message")
        if history.messages:
            through = len(history.messages) - 1
            history.compactions.append(HistoryCompaction(summary, through))
        else:
            history.skipped.append(Skipped("a compaction before any message", number))
        return
    sub = payload.get("type")
    last = history.messages[-1] if history.messages else None
    if sub == "turn_aborted" and last is not None and last.role == "assistant":
        reason = payload.get("reason")
        shown = reason if isinstance(reason, str) else None
        history.messages[-1] = replace(last, status="interrupted", reason=shown)
        return
    history.ignored[f"{kind}:{sub}" if isinstance(sub, str) else kind] += 1


LEGACY_HEADER_KEYS = frozenset({"id", "timestamp", "instructions", "git"})


def _instructions(history: History, text: object, where: str) -> None:
    """The session's instructions (Codex sends them as the Responses ``instructions``) as
    the first, system, message."""
    if text is None or text == "":
        return
    block = TextBlock(text=text_of(text, f"{where} instructions"))
    history.messages.insert(0, HistoryMessage("system", (block,)))
    history.compactions[:] = [replace(c, through=c.through + 1) for c in history.compactions]


def _legacy(line: dict[str, Any], number: int, history: History) -> dict[str, Any] | None:
    """A line of the older rollout layout (before every line was ``{timestamp, type,
    payload}``) in the newer one: the bare session header (``id``, ``timestamp``,
    ``instructions``, ``git``) keys the history, ``{"record_type": "state"}`` markers are
    ignored, and bare response items are wrapped. ``None`` for a line fully handled here."""
    if "payload" in line:
        return line
    where = f"line {number}"
    if "type" not in line and "record_type" not in line and "id" in line:
        check_keys(line, LEGACY_HEADER_KEYS, f"{where} (session header)")
        if history.key is None and isinstance(line["id"], str):
            history.key = line["id"]
            _instructions(history, line.get("instructions"), where)
        return None
    if line.get("record_type") == "state":
        history.ignored["state"] += 1
        return None
    if isinstance(line.get("type"), str) and line["type"] not in LINE_TYPES:
        return {"type": "response_item", "payload": line}
    return line


def _line(raw: str, where: str) -> dict[str, Any]:
    try:
        return as_dict(json.loads(raw), where)
    except ValueError:
        msg = f"{where}: not a JSON object"
        raise InvalidInput(msg) from None


def _response_item(
    history: History, payload: Mapping[str, Any], number: int, where: str
) -> tuple[Side, list[Block]] | None:
    """A ``response_item``'s side and blocks; ``None`` for one that is ignored or skipped."""
    item_type = payload.get("type")
    at = f"{where}, item {item_type!r}"
    if item_type in IGNORED_ITEMS:
        history.ignored[str(item_type)] += 1
        return None
    if item_type in ("compaction", "compaction_summary"):
        reason = "an encrypted compaction item (no readable summary)"
        history.skipped.append(Skipped(reason, number))
        return None
    if item_type in HOSTED_ITEMS:
        return _hosted_item(payload, str(item_type), number, at)
    if item_type in CODEX_ITEMS:
        return _codex_item(payload, str(item_type), at)
    if item_type not in ITEM_TYPES:
        refuse("item type", item_type, where, (*ITEM_TYPES, *CODEX_ITEMS, *HOSTED_ITEMS))
    return item_blocks(payload, where)


def histories_from_rollout(text: str) -> list[History]:
    """A Codex rollout file's text as one :class:`History` (see the module docstring)."""
    history = History()
    side: Side | None = None
    run: list[Block] = []

    def close() -> None:
        if side is not None and run:
            role = "user" if side == "results" else side
            history.messages.append(HistoryMessage(role, tidy(run)))

    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"line {number}"
        line = _legacy(_line(raw, where), number, history)
        if line is None:
            continue
        kind = line.get("type")
        if kind not in LINE_TYPES:
            refuse("line type", kind, where, LINE_TYPES)
        where = f"line {number} ({kind})"
        check_keys(line, LINE_KEYS, where)
        payload = as_dict(line.get("payload"), f"{where} payload")
        if kind != "response_item":
            aborted = kind == "event_msg" and payload.get("type") == "turn_aborted"
            if kind == "compacted" or aborted:  # both are about the messages so far
                close()
                side, run = None, []
            _other_line(history, str(kind), payload, number, where)
            continue
        read = _response_item(history, payload, number, where)
        if read is None:
            continue
        item_side, blocks = read
        if item_side in ("assistant", "results") and item_side == side:
            run += blocks
            continue
        close()
        side, run = item_side, list(blocks)
    close()
    return [history]
