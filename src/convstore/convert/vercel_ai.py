"""Vercel AI SDK (v5 and later) ``UIMessage`` arrays into convstore messages.

The input is a JSON array of ``UIMessage`` objects (``id``, ``role``, ``parts``, optional
``metadata``), or a ``useChat`` request body holding one under ``messages``. What each part
becomes:

- ``text`` → text; ``reasoning`` → reasoning (an Anthropic ``signature`` or OpenAI
  ``reasoningEncryptedContent`` in ``providerMetadata`` rides along on the block).
- ``tool-NAME`` and ``dynamic-tool`` (``toolName``) → a ``tool_use`` block (``toolCallId``,
  ``input``); its outcome (``state`` ``output-available`` → ``output``, ``output-error`` →
  ``errorText`` as an error) → a ``tool_result`` block in a user message placed right after
  the assistant blocks of that step. A call still streaming, awaiting approval or denied has
  no result. ``output`` is kept as its text when a string, else as its JSON.
- A tool part the provider executed (``providerExecuted: true``: web search, code execution,
  …) → a ``hosted_tool_use`` and, once it has an outcome, its ``hosted_tool_result``, both in
  the assistant message (the provider ran it inside the turn); the part's other fields
  (``output`` verbatim, ``callProviderMetadata``, ``resultProviderMetadata``, ``state``, …)
  in ``provider_data``; the result's content is the ``output`` as text (its JSON without the
  provider's encrypted fields).
- ``file`` (from any role, the assistant's generated files too) with an ``image/*`` media
  type → an image block (``url`` a ``data:`` URL or an http(s) address); any other but audio
  and video → a document block (``filename`` its name).
- ``source-url`` and ``source-document`` → annotations, each the part itself, on the text
  they stand beside: the nearest text part before them in the same step, else the first one
  after them; a step with sources and no text keeps them on an empty text block of their own.
- ``step-start`` closes the step (counted as ignored: it carries nothing).

Refused, naming the part and its position: audio and video ``file`` parts,
``reasoning-file``, ``custom`` and ``data-*`` parts (the application's own data). An unknown
key on a message or part is refused too, and so is a message with no parts. ``UIMessage``
carries no timestamps; ``metadata`` is application-defined and is not recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
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
)
from convstore.domain.blocks import (
    AnyToolUse,
    Block,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.domain.events import Role

ROLES = ("system", "user", "assistant")
MESSAGE_KEYS = frozenset({"id", "role", "parts", "metadata"})
PART_TYPES = (
    "text",
    "reasoning",
    "tool-NAME",
    "dynamic-tool",
    "file",
    "source-url",
    "source-document",
    "step-start",
)
"""The part types the converter accepts (``tool-NAME`` stands for any ``tool-`` prefix)."""

PENDING_PARTS = ("reasoning-file", "custom")
"""Part types refused (``data-*`` parts too): no block kind holds them."""

_TOOL_KEYS = frozenset(
    {
        "type",
        "toolName",
        "toolCallId",
        "title",
        "toolMetadata",
        "providerExecuted",
        "state",
        "input",
        "rawInput",
        "output",
        "errorText",
        "callProviderMetadata",
        "resultProviderMetadata",
        "preliminary",
        "approval",
    }
)
PART_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "state", "providerMetadata"}),
    "reasoning": frozenset({"type", "id", "text", "state", "providerMetadata"}),
    "file": frozenset(
        {"type", "mediaType", "filename", "url", "providerReference", "providerMetadata"}
    ),
    "step-start": frozenset({"type"}),
    "source-url": frozenset({"type", "sourceId", "url", "title", "providerMetadata"}),
    "source-document": frozenset(
        {"type", "sourceId", "mediaType", "title", "filename", "providerMetadata"}
    ),
    "tool": _TOOL_KEYS,
}
TOOL_STATES = (
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
)


def _reasoning(part: Mapping[str, Any], where: str) -> ReasoningBlock:
    meta = part.get("providerMetadata") or {}
    anthropic = as_dict(meta.get("anthropic") or {}, f"{where} providerMetadata.anthropic")
    openai = as_dict(meta.get("openai") or {}, f"{where} providerMetadata.openai")
    data = {
        "text": text_of(part.get("text"), f"{where} text"),
        "signature": anthropic.get("signature"),
        "encrypted_content": openai.get("reasoningEncryptedContent"),
    }
    if anthropic.get("redactedData") is not None:
        data.update(text="", encrypted_content=anthropic["redactedData"], redacted=True)
    return checked(lambda: ReasoningBlock.model_validate(data), where)


def _result_text(output: object) -> str:
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False)


_HOSTED_FIELDS = frozenset({"type", "toolCallId", "input", "errorText"})
"""A hosted tool part's keys that the blocks hold; the rest (its ``output`` too, verbatim)
goes in ``provider_data``."""


def _tool(part: Mapping[str, Any], kind: str, where: str) -> tuple[AnyToolUse, Block | None]:
    """A tool part as its call and, once it has an outcome, its result: hosted blocks when
    the provider executed it, else a caller's ``tool_use`` and ``tool_result``."""
    hosted = part.get("providerExecuted") is True
    use_class = HostedToolUseBlock if hosted else ToolUseBlock
    result_class = HostedToolResultBlock if hosted else ToolResultBlock
    extra = {key: value for key, value in part.items() if key not in _HOSTED_FIELDS}
    provider = {"provider_data": extra} if hosted else {}
    name = part.get("toolName") if kind == "dynamic-tool" else kind.removeprefix("tool-")
    state = part.get("state")
    if state not in TOOL_STATES:
        refuse("tool state", state, where, TOOL_STATES)
    raw = part.get("input")
    arguments: dict[str, Any] | str
    if isinstance(raw, Mapping):
        arguments = dict(raw)
    elif raw is None and state in ("input-streaming", "output-error"):
        arguments = _result_text(part["rawInput"]) if "rawInput" in part else {}
    else:
        arguments = _result_text(raw)
    call_id = part.get("toolCallId")
    data = {"id": call_id, "name": name, "input": arguments, **provider}
    call: AnyToolUse = checked(lambda: use_class.model_validate(data), where)
    result: Block | None = None
    if state == "output-available":
        output = readable_output(part["output"]) if hosted else _result_text(part["output"])
        fields = {"tool_use_id": call_id, "name": name, "content": output}
        result = checked(lambda: result_class.model_validate({**fields, **provider}), where)
    elif state == "output-error":
        text = text_of(part.get("errorText"), f"{where} errorText")
        fields = {"tool_use_id": call_id, "name": name, "content": text, "is_error": True}
        result = checked(lambda: result_class.model_validate({**fields, **provider}), where)
    return call, result


def _part_kind(part: Mapping[str, Any], where: str) -> str:
    kind = part.get("type")
    if not isinstance(kind, str):
        refuse("part type", kind, where, PART_TYPES)
    if kind in PENDING_PARTS or kind.startswith("data-"):
        msg = f"{where}: a {kind!r} part cannot be recorded yet (no convstore block kind for it)"
        raise InvalidInput(msg)
    if kind.startswith("tool-") or kind == "dynamic-tool":
        return "tool"
    if kind not in PART_KEYS:
        refuse("part type", kind, where, PART_TYPES)
    return kind


def _file(part: Mapping[str, Any], where: str) -> Block:
    media = text_of(part.get("mediaType"), f"{where} mediaType")
    if media.lower().startswith(("audio/", "video/")):
        msg = (
            f"{where}: a file part of media type {media!r} cannot be recorded yet "
            "(images and documents have block kinds)"
        )
        raise InvalidInput(msg)
    if not media.lower().startswith("image/"):
        url = text_of(part.get("url"), f"{where} url")
        name = part.get("filename")
        if url.startswith("data:"):
            return document_from(where, data=url, name=name)
        return document_from(where, url=url, media_type=media, name=name)
    return image_from_url(part.get("url"), f"{where} url")


class _Steps:
    """One message's steps as convstore messages: each step's blocks, then (after an
    assistant step) a user message of the results of the calls it made."""

    def __init__(self, role: Role, where: str) -> None:
        self.role = role
        self.where = where
        self.out: list[HistoryMessage] = []
        self.blocks: list[Block] = []
        self.results: list[Block] = []
        self.sources: list[dict[str, Any]] = []  # sources not yet beside a text of this step
        # The step's latest text: its place in blocks, its text and the sources it cites,
        # which are put on it once, when it is sealed (a source added by rebuilding the block
        # each time made a message of many sources quadratic).
        self.citing: tuple[int, str, list[dict[str, Any]]] | None = None

    def seal(self) -> None:
        """Put the sources cited on the step's latest text on its block."""
        if self.citing is not None:
            index, text, sources = self.citing
            if sources:
                self.blocks[index] = TextBlock(text=text, annotations=sources)
            self.citing = None

    def flush(self) -> None:
        self.seal()
        if self.sources:
            self.blocks.append(TextBlock(text="", annotations=self.sources))
        if self.blocks:
            self.out.append(HistoryMessage(self.role, tidy(self.blocks), where=self.where))
        if self.results:
            results_at = f"{self.where}'s tool results"
            self.out.append(HistoryMessage("user", tuple(self.results), where=results_at))
        self.blocks, self.results, self.sources = [], [], []

    def add(self, kind: str, part: Mapping[str, Any], at: str) -> None:
        if self.results and kind != "tool":
            self.flush()
        if kind in ("source-url", "source-document"):
            # on the nearest text before it in this step, else waiting for the next one
            (self.citing[2] if self.citing else self.sources).append(dict(part))
        elif kind == "text":
            text = text_of(part.get("text"), f"{at} text")
            self.seal()
            self.citing = (len(self.blocks), text, self.sources)
            self.blocks.append(TextBlock(text=text))
            self.sources = []
        elif kind == "reasoning":
            self.blocks.append(_reasoning(part, at))
        elif kind == "file":
            self.blocks.append(_file(part, at))
        else:
            call, result = _tool(part, str(part.get("type")), at)
            self.blocks.append(call)
            if isinstance(result, HostedToolResultBlock):
                self.blocks.append(result)  # the provider ran it within the assistant's turn
            elif result is not None:
                self.results.append(result)


def message_history(message: object, where: str, ignored: Counter[str]) -> list[HistoryMessage]:
    """One ``UIMessage`` as convstore messages: an assistant message splits where a step's
    tool results go (a user message of ``tool_result`` blocks after that step)."""
    fields = as_dict(message, where)
    role = fields.get("role")
    if role not in ROLES:
        refuse("role", role, where, ROLES)
    where = f"{where} ({role})"
    check_keys(fields, MESSAGE_KEYS, where)
    parts = as_list(fields.get("parts"), f"{where} parts")
    if not parts:
        msg = f"{where}: the message has no parts (nothing to record)"
        raise InvalidInput(msg)
    steps = _Steps(role, where)
    for index, raw in enumerate(parts):
        at = f"{where} part {index}"
        part = as_dict(raw, at)
        kind = _part_kind(part, at)
        check_keys(part, PART_KEYS[kind], f"{at} ({part.get('type')})")
        at = f"{at} ({part.get('type')})"
        if kind == "step-start":
            ignored["step-start"] += 1
            steps.flush()
            continue
        if (kind == "tool" and role != "assistant") or (kind == "reasoning" and role == "user"):
            msg = f"{at}: a {part.get('type')!r} part belongs in an assistant message"
            raise InvalidInput(msg)
        if kind != "text" and role == "system":
            refuse("part type", part.get("type"), at, ("text",))
        steps.add(kind, part, at)
    steps.flush()
    return steps.out


def history_from_ui_messages(data: object) -> History:
    """A ``UIMessage`` array (or a body with ``messages``) as a :class:`History`."""
    if isinstance(data, Mapping) and "messages" in data:
        messages = as_list(data["messages"], "body messages")
    elif isinstance(data, list | tuple):
        messages = list(data)
    else:
        msg = "expected a list of UIMessage objects, or a body with 'messages'"
        raise InvalidInput(msg)
    history = History()
    for index, message in enumerate(messages):
        history.messages += message_history(message, f"message {index}", history.ignored)
    return history
