"""Claude Code session transcripts (``~/.claude/projects/*/*.jsonl``) into histories.

A transcript is JSON lines. Claude Code writes one line per content block: the lines of one
assistant message share ``message.id``, and each tool result usually has a user line of its
own. The rules, in the order they apply to a line:

- not valid JSON (or nested more than 200 levels deep), not an object, or with no string ``type``:
  skipped, reported with its line number in :attr:`History.skipped`;
- ``user`` / ``assistant`` lines carry messages. One whose ``message`` is not an object with
  a ``content`` (a string or a list), or whose content list holds something that is not a
  block object, is malformed: skipped and reported. A line repeating the ``uuid`` of a line
  already taken is skipped and reported. ``isMeta`` lines (command expansions, caveats) are
  counted in :attr:`History.ignored` as ``isMeta``;
- a ``system`` line of subtype ``compact_boundary`` and the next ``isCompactSummary`` user
  line become a :class:`HistoryCompaction` (the summary replaces everything before the
  boundary). Other ``system`` lines count as ``system/<subtype>``; every other type
  (``summary``, ``file-history-snapshot``, ``progress``, ``queue-operation`` …) counts under
  its own name. A ``summary`` or ``custom-title`` line also gives the main history its title;
- blocks are converted as Anthropic blocks (:mod:`convstore.convert.anthropic`): text (its
  citations kept), ``thinking`` with its signature, ``redacted_thinking``, ``tool_use``,
  ``tool_result`` with ``is_error`` and text / image / document parts, images, documents,
  and the provider's own tools (``server_tool_use``, the server ``*_tool_result`` blocks,
  ``mcp_tool_use`` / ``mcp_tool_result``) as hosted blocks. A block of any other type, or one
  that does not check (an image whose bytes are not its declared type), is left out and
  reported; an image inside a tool result is replaced by a text marker, so the result itself
  is kept. A call (``tool_use`` or hosted) whose id was already taken is left out and
  reported;
- consecutive assistant lines with the same ``message.id`` form one message; consecutive
  user lines holding only tool results form one message;
- a user line that is only ``[Request interrupted by user…]`` marks the assistant message
  just before it interrupted; when the message before it is not an assistant's, the line is
  kept as text;
- each message keeps what its lines say about it (:attr:`HistoryMessage.at` and ``meta``):
  the first line's ``timestamp``, and the assistant's ``model``, ``message.id``,
  ``stop_reason`` and ``usage`` (a later line of the same message wins), with every line's
  ``uuid`` (``extra["uuids"]``) and ``requestId`` (``extra["request_id"]``).

Sidechain lines (``isSidechain``: a subagent's own conversation) go to one history per agent:
by ``agentId`` where the line has one, else by following ``parentUuid`` back to the first
line of the sidechain. Histories come main first, then agents in order of first appearance;
each agent's ``parent`` is the main history's index (0) when the file has a main thread.
Keys: ``claude-code:<sessionId>`` and ``claude-code:<sessionId>:<agentId>``. A file of one
agent's lines alone (Claude Code keeps them in ``agent-<id>.jsonl`` beside the session's)
names its parent by key instead (:attr:`History.parent_key`, ``claude-code:<sessionId>``), so
importing it links it to the session imported before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from convstore.convert.anthropic import block_from_anthropic
from convstore.convert.history import History, HistoryCompaction, HistoryMessage, Skipped
from convstore.convert.source_meta import anthropic_meta, source_time
from convstore.domain.blocks import (
    Block,
    HostedToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.domain.events import MessageMeta, Role
from convstore.domain.json_values import NestedTooDeepError, strict_loads

INTERRUPTION_PREFIX = "[Request interrupted by user"
"""How Claude Code records that the user stopped a turn."""

INTERRUPTED_REASON = "interrupted by user"

MESSAGE_TYPES = ("user", "assistant")


class MalformedLine(ValueError):
    """A line has the right type but not the shape Claude Code writes."""


@dataclass(slots=True)
class LineMessage:
    """The message part of one transcript line, converted."""

    role: Role
    blocks: list[Block]
    message_id: str | None
    """``message.id`` of an assistant line (lines of one message share it)."""
    problems: list[str]
    """Blocks of the line left out, and why."""
    at: datetime | None = None
    """The line's ``timestamp``."""
    meta: MessageMeta | None = None
    """The line's model, usage, stop reason and ids (``uuid``, ``requestId``)."""


def line_meta(line: Mapping[str, Any]) -> MessageMeta | None:
    """What a message line says about its message besides its blocks: an assistant's
    ``model``, ``message.id``, ``stop_reason`` and ``usage``, and every line's ``uuid`` (in
    ``extra["uuids"]``: the lines merged into the message) and ``requestId``."""
    message = line.get("message")
    fields = message if isinstance(message, Mapping) and line.get("type") == "assistant" else {}
    uuid, request = line.get("uuid"), line.get("requestId")
    extra: dict[str, Any] = {
        "uuids": [uuid] if isinstance(uuid, str) else None,
        "request_id": request if isinstance(request, str) else None,
    }
    return anthropic_meta(fields, extra)


def _merged_meta(older: MessageMeta | None, newer: MessageMeta | None) -> MessageMeta | None:
    """Two lines' metadata as one message's: the newer's fields win, line uuids add up."""
    if older is None or newer is None:
        return older or newer
    uuids = [*_list(older.extra.get("uuids")), *_list(newer.extra.get("uuids"))]
    merged = older.merged(newer)
    return merged.model_copy(update={"extra": {**merged.extra, "uuids": uuids}})


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def line_message(line: Mapping[str, Any]) -> LineMessage:
    """The role and blocks of one ``user`` or ``assistant`` line.

    Raises :class:`MalformedLine` when the line is not shaped like a message line. A block
    that does not convert is left out and described in ``problems``.
    """
    role = line.get("type")
    if role not in MESSAGE_TYPES:
        msg = f"a {role!r} line carries no message"
        raise MalformedLine(msg)
    message = line.get("message")
    if not isinstance(message, Mapping):
        msg = f"its message is {type(message).__name__}, not an object"
        raise MalformedLine(msg)
    content = message.get("content")
    checked: Role = "user" if role == "user" else "assistant"
    message_id = message.get("id") if isinstance(message.get("id"), str) else None
    at, meta = source_time(line.get("timestamp")), line_meta(line)
    if isinstance(content, str):
        return LineMessage(checked, [TextBlock(text=content)], message_id, [], at, meta)
    if not isinstance(content, list):
        msg = "its message has no content list or string"
        raise MalformedLine(msg)
    for index, block in enumerate(content):
        if not isinstance(block, Mapping):
            msg = f"content item {index} is {type(block).__name__}, not a block object"
            raise MalformedLine(msg)
    blocks: list[Block] = []
    problems: list[str] = []
    for index, block in enumerate(content):
        kept, problem = _line_block(block, f"block {index}")
        if kept is not None:
            blocks.append(kept)
        if problem is not None:
            problems.append(problem)
    return LineMessage(checked, blocks, message_id, problems, at, meta)


def _line_block(block: Mapping[str, Any], where: str) -> tuple[Block | None, str | None]:
    """A block converted, or left out with the reason; a tool result whose images do not
    check keeps its other parts, each bad image replaced by a marker."""
    try:
        return block_from_anthropic(block, where), None
    except InvalidInput as exc:
        problem = str(exc)
    content = block.get("content")
    if block.get("type") != "tool_result" or not isinstance(content, list):
        return None, problem
    parts: list[object] = []
    for index, part in enumerate(content):
        if isinstance(part, Mapping) and part.get("type") == "image":
            try:
                block_from_anthropic(part, f"{where}, part {index}")
            except InvalidInput as exc:
                parts.append({"type": "text", "text": f"[Image not kept: {exc}]"})
                continue
        parts.append(part)
    try:
        return block_from_anthropic({**block, "content": parts}, where), problem
    except InvalidInput:
        return None, problem


@dataclass(slots=True)
class _Thread:
    """One history being rebuilt: the main thread or one agent's sidechain."""

    history: History
    last_message_id: str | None = None
    """``message.id`` of the newest message when it is an assistant's, to merge lines."""
    tool_ids: set[str] = field(default_factory=set)


def histories_from_transcript(text: str) -> list[History]:
    """Every history in a Claude Code transcript: the main thread first, then each agent's.

    Never raises for bad lines: they are skipped and reported on the history they belong to
    (the first history when that cannot be told).
    """
    reader = _Reader()
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            reader.read(number, raw)
    return reader.histories()


def history_from_entries(entries: Iterable[object]) -> History:
    """The messages one batch of transcript entries carries, as one history.

    For a runtime that hands lines over in batches (the Claude Agent SDK's session store):
    every line goes to the same history whatever its ``isSidechain``, and a compaction
    summary always becomes a compaction, with ``through`` ``-1`` when no message of the
    batch precedes it (it then replaces every message recorded before the batch). Line
    numbers count entries from 1.
    """
    reader = _Reader(single_thread=True)
    for number, entry in enumerate(entries, start=1):
        reader.read_line(number, entry)
    return reader.main.history


class _Reader:
    """The state of one transcript being read line by line."""

    def __init__(self, *, single_thread: bool = False) -> None:
        self.single_thread = single_thread
        self.main = _Thread(History())
        self.agents: dict[str, _Thread] = {}
        self.agent_of_uuid: dict[str, str] = {}
        self.seen_uuids: dict[str, int] = {}
        self.session_id: str | None = None
        self.stray: list[Skipped] = []
        self.main_seen = False
        self.title: str | None = None

    def read(self, number: int, raw: str) -> None:
        try:
            line = strict_loads(raw, unique_keys=False)
        except NestedTooDeepError:
            self.stray.append(Skipped("not read: JSON nested too deeply", number))
            return
        except ValueError as exc:
            self.stray.append(Skipped(f"not valid JSON ({exc})", number))
            return
        self.read_line(number, line)

    def read_line(self, number: int, line: object) -> None:
        if not isinstance(line, dict):
            self.stray.append(Skipped(f"not a JSON object but {type(line).__name__}", number))
            return
        kind = line.get("type")
        if not isinstance(kind, str):
            self.stray.append(Skipped("an object with no 'type'", number))
            return
        if self.session_id is None and isinstance(line.get("sessionId"), str):
            self.session_id = line["sessionId"]
        self._note_title(kind, line)
        thread = self.main
        if line.get("isSidechain") is True and not self.single_thread:
            agent = _agent_of(line, self.agent_of_uuid)
            thread = self.agents.setdefault(agent, _Thread(History(key=agent)))
        elif kind in (*MESSAGE_TYPES, "system"):
            self.main_seen = True
        if kind == "system":
            subtype = line.get("subtype")
            if subtype != "compact_boundary":  # the summary line that follows records it
                thread.history.ignored[f"system/{subtype}"] += 1
        elif kind in MESSAGE_TYPES:
            self._message_line(thread, kind, line, number)
        else:
            thread.history.ignored[kind] += 1

    def _note_title(self, kind: str, line: Mapping[str, Any]) -> None:
        if kind not in ("summary", "custom-title"):
            return
        found = line.get("summary") if kind == "summary" else line.get("customTitle")
        if isinstance(found, str) and found.strip() and (self.title is None or kind != "summary"):
            self.title = found

    def _message_line(
        self, thread: _Thread, kind: str, line: Mapping[str, Any], number: int
    ) -> None:
        history = thread.history
        uuid = line.get("uuid")
        if isinstance(uuid, str) and uuid in self.seen_uuids:
            reason = f"repeats the uuid {uuid!r} of line {self.seen_uuids[uuid]}"
            history.skipped.append(Skipped(reason, number))
            return
        if line.get("isMeta") is True:
            history.ignored["isMeta"] += 1
            _remember(uuid, number, self.seen_uuids)
            return
        try:
            converted = line_message(line)
        except MalformedLine as exc:
            history.skipped.append(Skipped(f"malformed {kind} line: {exc}", number))
            return
        _remember(uuid, number, self.seen_uuids)
        history.skipped.extend(Skipped(problem, number) for problem in converted.problems)
        if line.get("isCompactSummary") is True:
            _compact(thread, converted, standalone=self.single_thread)
        else:
            _add(thread, converted, number)

    def histories(self) -> list[History]:
        ordered = list(self.agents.values())
        if self.main_seen or not ordered:
            ordered.insert(0, self.main)
            for agent_thread in ordered[1:]:
                agent_thread.history.parent = 0
        elif self.session_id is not None:
            for agent_thread in ordered:
                agent_thread.history.parent_key = f"claude-code:{self.session_id}"
        histories = [thread.history for thread in ordered]
        histories[0].skipped[:0] = self.stray
        for history in histories:
            history.skipped.sort(key=lambda s: s.line or 0)
            if self.session_id is None:
                history.key = None
            elif history.key is None:
                history.key = f"claude-code:{self.session_id}"
            else:
                history.key = f"claude-code:{self.session_id}:{history.key}"
        if self.main_seen:
            histories[0].title = self.title
        return histories


def _remember(uuid: object, number: int, seen: dict[str, int]) -> None:
    if isinstance(uuid, str):
        seen[uuid] = number


def _agent_of(line: Mapping[str, Any], agent_of_uuid: dict[str, str]) -> str:
    """The agent a sidechain line belongs to, remembered for the lines that follow it."""
    agent = line.get("agentId")
    parent = line.get("parentUuid")
    uuid = line.get("uuid")
    if not isinstance(agent, str):
        if isinstance(parent, str) and parent in agent_of_uuid:
            agent = agent_of_uuid[parent]
        else:
            agent = f"sidechain-{uuid if isinstance(uuid, str) else len(agent_of_uuid)}"
    if isinstance(uuid, str):
        agent_of_uuid[uuid] = agent
    return agent


def _compact(thread: _Thread, summary: LineMessage, *, standalone: bool = False) -> None:
    """A compaction summary: it replaces every message so far, or opens the history (unless
    ``standalone``: then it replaces what was recorded before, ``through`` -1)."""
    history = thread.history
    text = "\n\n".join(b.text for b in summary.blocks if isinstance(b, TextBlock)).strip()
    if (history.messages or standalone) and text:
        history.compactions.append(HistoryCompaction(text, len(history.messages) - 1))
        thread.last_message_id = None
        return
    if text:
        message = HistoryMessage("user", (TextBlock(text=text),), at=summary.at, meta=summary.meta)
        history.messages.append(message)
        thread.last_message_id = None


def _is_interruption(message: LineMessage) -> bool:
    return (
        message.role == "user"
        and len(message.blocks) == 1
        and isinstance(message.blocks[0], TextBlock)
        and message.blocks[0].text.strip().startswith(INTERRUPTION_PREFIX)
    )


def _only_results(blocks: tuple[Block, ...] | list[Block]) -> bool:
    return bool(blocks) and all(isinstance(b, ToolResultBlock) for b in blocks)


def _add(thread: _Thread, line: LineMessage, number: int) -> None:
    """Fold one converted line into its thread's messages."""
    history = thread.history
    blocks: list[Block] = []
    for block in line.blocks:
        if isinstance(block, ToolUseBlock | HostedToolUseBlock):
            if block.id in thread.tool_ids:
                reason = f"{block.type} id {block.id!r} was already taken; block left out"
                history.skipped.append(Skipped(reason, number))
                continue
            thread.tool_ids.add(block.id)
        blocks.append(block)
    previous = history.messages[-1] if history.messages else None
    if _is_interruption(line) and previous is not None and previous.role == "assistant":
        history.messages[-1] = replace(previous, status="interrupted", reason=INTERRUPTED_REASON)
        thread.last_message_id = None
        return
    if not blocks:
        return
    if (
        line.role == "assistant"
        and previous is not None
        and previous.role == "assistant"
        and line.message_id is not None
        and line.message_id == thread.last_message_id
    ):
        history.messages[-1] = _joined(previous, blocks, line)
        return
    if (
        line.role == "user"
        and previous is not None
        and previous.role == "user"
        and _only_results(blocks)
        and _only_results(previous.blocks)
    ):
        history.messages[-1] = _joined(previous, blocks, line)
        return
    history.messages.append(
        HistoryMessage(line.role, tuple(blocks), at=line.at, meta=line.meta, where=f"line {number}")
    )
    thread.last_message_id = line.message_id if line.role == "assistant" else None


def _joined(previous: HistoryMessage, blocks: list[Block], line: LineMessage) -> HistoryMessage:
    """``previous`` with a later line's blocks and metadata: it keeps its first line's time."""
    return replace(
        previous,
        blocks=(*previous.blocks, *blocks),
        at=previous.at or line.at,
        meta=_merged_meta(previous.meta, line.meta),
    )
