"""OpenAI Codex CLI rollout files (``~/.codex/sessions/**/rollout-*.jsonl``) into a history.

Every line is ``{"timestamp", "type", "payload"}``. What each line type becomes:

- ``session_meta``: its ``payload.id`` is the history's key (so a second import is refused);
  its ``base_instructions`` (what Codex sends as the Responses ``instructions``) become the
  first, system, message. Nothing else of it is recorded.
- ``response_item``: the model's history. Its items are Responses API items and are read as
  :func:`convstore.convert.responses.item_blocks` reads them (``message``, ``function_call`` /
  ``function_call_output``, ``reasoning``, ``custom_tool_call`` / ``custom_tool_call_output``,
  ``local_shell_call``, and the provider's tools: see below), so an item gives the same blocks
  from a rollout as from a Responses body. ``ghost_snapshot`` items (the harness's git
  snapshots) are counted as ignored. Consecutive assistant-side items form one assistant
  message.
- ``compacted``: a compaction whose summary is its ``message``, through the last message so far.
- ``event_msg`` ``turn_aborted``: the assistant message it cut short is marked interrupted
  (with the event's ``reason``).
- other ``event_msg`` lines and ``turn_context``: counted as ignored (they repeat what the
  response items hold, or describe the turn's settings). The first ``user_message`` event
  (what the user typed) is the history's title too; without one (the older layout), the first
  user text that is not Codex's own context (:func:`_first_question`).

The older layout (a bare ``{id, timestamp, instructions, git}`` header line, bare response
items, ``{"record_type": "state"}`` markers) is read the same way.

What is Codex's own, done before and after that reading (:func:`_as_responses_item`,
:func:`_put_back`): the tool items Codex shares with the API are checked against the keys
codex-rs writes (:data:`CODEX_KEYS`); a ``web_search_call`` written without an ``id`` gets
``web_search_call:line N`` (its line, stable across imports) while its ``provider_data``
stays the item as written; a ``local_shell_call`` with only an ``id`` (Codex in Chat
Completions mode) takes it as its call id; a ``custom_tool_call``'s ``status`` is dropped (as
every caller-run call's is) and a ``custom_tool_call_output``'s ``name`` names its result.
``local_shell_call`` outputs arrive as ``function_call_output`` items; one that reports a
non-zero exit code (:func:`_exit_code`) is an error result.

So a ``web_search_call`` is a ``hosted_tool_use`` named ``web_search`` (input: its
``action``) and a result holding its ``status`` (the rollout keeps no pages); an
``image_generation_call`` a hosted call (input: its ``revised_prompt``) and its result, the
image (its format read from its bytes) or, with none, its status; a ``tool_search_call`` /
``tool_search_output`` run by the server a hosted call and result (the tools found, one a
line), run by Codex (``execution: "client"``) a ``tool_use`` and ``tool_result``.

Refused, naming the line and item: any other item or line type. A ``compaction`` item
(encrypted, with no readable summary) is skipped and reported. Each message is at the
``timestamp`` of its first line (the instructions at the session header's); a line without one
(the older layout's bare items) gives its message none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from convstore.convert.history import History, HistoryCompaction, HistoryMessage, Skipped
from convstore.convert.parts import as_dict, check_keys, refuse, text_of, tidy
from convstore.convert.responses import ITEM_TYPES, item_blocks
from convstore.convert.responses_tools import Side
from convstore.convert.source_meta import source_time
from convstore.domain.blocks import Block, HostedToolUseBlock, TextBlock, ToolResultBlock
from convstore.domain.errors import InvalidInput
from convstore.domain.json_values import StrictJSONError, strict_loads
from convstore.domain.previews import preview_of

LINE_TYPES = ("session_meta", "response_item", "compacted", "event_msg", "turn_context")
LINE_KEYS = frozenset({"timestamp", "type", "payload"})
IGNORED_ITEMS = ("ghost_snapshot",)

CODEX_KEYS: dict[str, frozenset[str]] = {
    "custom_tool_call": frozenset({"type", "id", "status", "call_id", "name", "input"}),
    "custom_tool_call_output": frozenset({"type", "call_id", "name", "output"}),
    "local_shell_call": frozenset({"type", "id", "call_id", "status", "action"}),
    "web_search_call": frozenset({"type", "id", "status", "action"}),
    "image_generation_call": frozenset({"type", "id", "status", "revised_prompt", "result"}),
    "tool_search_call": frozenset({"type", "id", "call_id", "status", "execution", "arguments"}),
    "tool_search_output": frozenset({"type", "id", "call_id", "status", "execution", "tools"}),
}
"""The keys codex-rs writes on the tool items it shares with the Responses API; any other
is refused, naming it, before the item is read."""


def _as_responses_item(item: Mapping[str, Any], number: int) -> dict[str, Any]:
    """A Codex item as the Responses API item it stands for (see :func:`_put_back`)."""
    fields = dict(item)
    match fields.get("type"):
        case "web_search_call" if not fields.get("id"):
            fields["id"] = f"web_search_call:line {number}"
        case "local_shell_call" if not fields.get("call_id"):
            fields["call_id"] = fields.get("id")  # Codex in Chat Completions mode
        case "custom_tool_call":
            fields.pop("status", None)  # dropped, as every caller-run call's status is
        case "custom_tool_call_output":
            fields.pop("name", None)
        case _:
            pass
    return fields


def _put_back(written: Mapping[str, Any], blocks: list[Block], where: str) -> list[Block]:
    """What is Codex's own, back on the blocks read from its item: a web search call's
    ``provider_data`` is the item as written (without the id given to it), a custom tool
    output's ``name`` is its result's name."""
    match written.get("type"):
        case "web_search_call":
            kept = dict(written)
            return [
                block.model_copy(update={"provider_data": kept})
                if isinstance(block, HostedToolUseBlock)
                else block
                for block in blocks
            ]
        case "custom_tool_call_output" if written.get("name") is not None:
            name = text_of(written["name"], f"{where} name")
            return [block.model_copy(update={"name": name}) for block in blocks]
        case "function_call_output" if _exit_code(written.get("output")) not in (None, 0):
            return [
                block.model_copy(update={"is_error": True})
                if isinstance(block, ToolResultBlock)
                else block
                for block in blocks
            ]
        case _:
            return blocks


_EXIT_LINE = re.compile(r"Exit code: (-?\d+)\n")


def _exit_code(output: object) -> int | None:
    """The exit code a Codex shell output reports, if it reports one: the older JSON form's
    ``metadata.exit_code`` (``{"output": …, "metadata": {"exit_code": 1, …}}``), or the
    newer text's first line (``Exit code: 1``)."""
    if not isinstance(output, str):
        return None
    if output.startswith("{"):
        try:
            parsed = strict_loads(output, unique_keys=False)
        except ValueError:
            return None
        metadata = parsed.get("metadata") if isinstance(parsed, dict) else None
        code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return code if isinstance(code, int) and not isinstance(code, bool) else None
    found = _EXIT_LINE.match(output)
    return int(found.group(1)) if found else None


def _other_line(
    history: History,
    kind: str,
    payload: Mapping[str, Any],
    number: int,
    where: str,
    *,
    at: object,
) -> None:
    """A line other than a ``response_item``: the session's key, a compaction, or ignored."""
    if kind == "session_meta":
        if history.key is None and isinstance(payload.get("id"), str):
            history.key = payload["id"]
            base = payload.get("base_instructions")
            text = base.get("text") if isinstance(base, Mapping) else None
            _instructions(history, text, where, at)
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
    said = payload.get("message")
    if sub == "user_message" and history.title is None and isinstance(said, str) and said.strip():
        history.title = preview_of(said)  # what the user typed first (counted as ignored too)
    last = history.messages[-1] if history.messages else None
    if sub == "turn_aborted" and last is not None and last.role == "assistant":
        reason = payload.get("reason")
        shown = reason if isinstance(reason, str) else None
        history.messages[-1] = replace(last, status="interrupted", reason=shown)
        return
    history.ignored[f"{kind}:{sub}" if isinstance(sub, str) else kind] += 1


LEGACY_HEADER_KEYS = frozenset({"id", "timestamp", "instructions", "git"})


def _instructions(history: History, text: object, where: str, at: object) -> None:
    """The session's instructions (Codex sends them as the Responses ``instructions``) as
    the first, system, message, at the time of the line that gives them."""
    if text is None or text == "":
        return
    block = TextBlock(text=text_of(text, f"{where} instructions"))
    message = HistoryMessage("system", (block,), at=source_time(at), where=where)
    history.messages.insert(0, message)
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
            _instructions(history, line.get("instructions"), where, line.get("timestamp"))
        return None
    if line.get("record_type") == "state":
        history.ignored["state"] += 1
        return None
    if isinstance(line.get("type"), str) and line["type"] not in LINE_TYPES:
        return {"type": "response_item", "payload": line}
    return line


def _line(raw: str, where: str) -> dict[str, Any]:
    try:
        return as_dict(strict_loads(raw, unique_keys=False), where)
    except StrictJSONError as exc:
        msg = f"{where}: not a JSON object ({exc})"
        raise InvalidInput(msg) from None
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
    if item_type not in ITEM_TYPES:
        refuse("item type", item_type, where, ITEM_TYPES)
    if item_type in CODEX_KEYS:
        check_keys(payload, CODEX_KEYS[str(item_type)], at)
    side, blocks = item_blocks(_as_responses_item(payload, number), where)
    return side, _put_back(payload, blocks, at)


def histories_from_rollout(text: str) -> list[History]:
    """A Codex rollout file's text as one :class:`History` (see the module docstring)."""
    history = History()
    side: Side | None = None
    run: list[Block] = []
    run_at: datetime | None = None  # the time of the run's first line
    first = last = 0  # the run's line numbers

    def close() -> None:
        if side is not None and run:
            role = "user" if side == "results" else side
            where = f"line {first}" if first == last else f"lines {first} to {last}"
            history.messages.append(HistoryMessage(role, tidy(run), at=run_at, where=where))

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
            _other_line(history, str(kind), payload, number, where, at=line.get("timestamp"))
            continue
        read = _response_item(history, payload, number, where)
        if read is None:
            continue
        item_side, blocks = read
        if item_side in ("assistant", "results") and item_side == side:
            run += blocks
            last = number
            continue
        close()
        side, run, run_at = item_side, list(blocks), source_time(line.get("timestamp"))
        first = last = number
    close()
    if history.title is None:
        history.title = _first_question(history)
    return [history]


_CONTEXT = re.compile(r"\s*(<[A-Za-z_]+>|# AGENTS\.md instructions)")
"""How the user-role messages Codex writes itself begin (``<environment_context>``,
``<user_instructions>``, ``<turn_aborted>`` …, the ``AGENTS.md`` instructions)."""


def _first_question(history: History) -> str | None:
    """The first user text that is not Codex's own context, as a title: for a rollout whose
    ``event_msg`` lines (which give what the user typed) are missing, as in the older layout."""
    for message in history.messages:
        if message.role != "user":
            continue
        for block in message.blocks:
            if isinstance(block, TextBlock) and block.text.strip():
                if _CONTEXT.match(block.text):
                    break  # the whole message is context
                return preview_of(block.text)
    return None
