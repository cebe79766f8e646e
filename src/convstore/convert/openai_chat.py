"""OpenAI Chat Completions messages into convstore blocks.

Accepts dicts (the request params are TypedDicts) and the ``openai`` SDK's typed objects
(``ChatCompletionMessage``, ``ChatCompletion``). What each role becomes:

- ``system`` and ``developer`` → a ``system`` message; ``user`` → a ``user`` message. Content is
  a string or a list of ``text`` and ``image_url`` parts (a ``data:`` URL becomes base64 data
  and its media type, an ``http(s)`` address an image by URL; ``detail`` is ignored).
- ``assistant`` → an ``assistant`` message: ``reasoning_content`` (DeepSeek) first, as a
  reasoning block; then ``content`` (a string or ``text`` / ``refusal`` parts) and ``refusal``
  as text; then each of ``tool_calls`` as a ``tool_use`` block. ``function.arguments`` is a
  JSON string: a JSON object becomes the input, anything else is kept as the raw text.
- ``tool`` → consecutive ones form ONE ``user`` message of ``tool_result`` blocks; the tool's
  name comes from the matching call (or the message's own ``name``), else the store records
  ``unknown``.

A user message's ``file`` part (``file_data`` as a ``data:`` URL or base64, or ``file_id``;
``filename``) is a ``document`` block. Anything else (the ``function`` role and the legacy
``function_call``, ``input_audio`` parts, …) is refused with one
:class:`~convstore.domain.errors.InvalidInput` naming it and where it is; a refused input
converts to nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from convstore.convert.history import History, HistoryMessage
from convstore.convert.parts import (
    annotated_text,
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
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.domain.events import Role

ROLES = ("system", "developer", "user", "assistant", "tool")
"""The message roles the converter accepts."""

USER_PARTS = ("text", "image_url", "file")
"""Content part types accepted in user messages."""

ASSISTANT_PARTS = ("text", "refusal")
"""Content part types accepted in assistant messages."""

TEXT_PARTS = ("text",)
"""Content part types accepted in system, developer and tool messages."""

TOOL_CALL_TYPES = ("function", "custom")

_ASSISTANT_KEYS = {
    "tool_calls",
    "refusal",
    "reasoning_content",
    "reasoning",
    "reasoning_details",
    "function_call",
    "audio",
}
MESSAGE_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "annotations", *_ASSISTANT_KEYS}),
    "tool": frozenset({"role", "content", "tool_call_id", "name"}),
}
"""The keys each role's message may have; any other is refused (it would be content the
converter drops). ``audio`` is accepted only empty."""
"""Tool call types accepted in an assistant message's ``tool_calls``."""


PART_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "prompt_cache_breakpoint", "cache_control"}),
    "refusal": frozenset({"type", "refusal"}),
    "image_url": frozenset({"type", "image_url", "prompt_cache_breakpoint"}),
    "file": frozenset({"type", "file", "prompt_cache_breakpoint"}),
}
"""The keys of each content part, any other refused: the SDK's, and OpenRouter's
``cache_control`` on text (settings such as it and ``prompt_cache_breakpoint`` are dropped)."""
IMAGE_URL_KEYS = frozenset({"url", "detail"})
FILE_KEYS = frozenset({"file_data", "file_id", "filename"})
TOOL_CALL_KEYS: dict[str, frozenset[str]] = {
    "function": frozenset({"id", "type", "function"}),
    "custom": frozenset({"id", "type", "custom"}),
}
FUNCTION_KEYS = frozenset({"name", "arguments"})
CUSTOM_KEYS = frozenset({"name", "input"})


def _content(content: object, where: str, accepted: tuple[str, ...]) -> list[Block]:
    """A message's ``content``: ``None``, a string, or a list of parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [TextBlock(text=content)]
    blocks: list[Block] = []
    for index, raw in enumerate(as_list(content, f"{where} content")):
        at = f"{where} content part {index}"
        part = as_dict(raw, at)
        kind = part.get("type")
        if kind not in accepted:
            refuse("part type", kind, at, accepted)
        check_keys(part, PART_KEYS[str(kind)], at)
        if kind == "text":
            blocks.append(TextBlock(text=text_of(part.get("text"), f"{at} text")))
        elif kind == "refusal":
            blocks.append(TextBlock(text=text_of(part.get("refusal"), f"{at} refusal")))
        elif kind == "file":
            file = as_dict(part.get("file"), f"{at} file")
            check_keys(file, FILE_KEYS, f"{at} file")
            blocks.append(openai_file(file, f"{at} file"))
        else:
            image = as_dict(part.get("image_url"), f"{at} image_url")
            check_keys(image, IMAGE_URL_KEYS, f"{at} image_url")
            blocks.append(image_from_url(image.get("url"), f"{at} image_url.url"))
    return blocks


def tool_call_block(call: object, where: str) -> ToolUseBlock:
    """One entry of an assistant message's ``tool_calls`` as a ``tool_use`` block."""
    fields = as_dict(call, where)
    kind = fields.get("type", "function")
    if kind not in TOOL_CALL_TYPES:
        refuse("tool call type", kind, where, TOOL_CALL_TYPES)
    check_keys(fields, TOOL_CALL_KEYS[str(kind)], where)
    arguments: dict[str, Any] | str
    if kind == "custom":
        custom = as_dict(fields.get("custom"), f"{where} custom")
        check_keys(custom, CUSTOM_KEYS, f"{where} custom")
        name, arguments = custom.get("name"), text_of(custom.get("input"), f"{where} input")
    else:
        function = as_dict(fields.get("function"), f"{where} function")
        check_keys(function, FUNCTION_KEYS, f"{where} function")
        name = function.get("name")
        arguments = tool_arguments(function.get("arguments", ""), f"{where} arguments")
    call_id = fields.get("id")
    return checked(
        lambda: ToolUseBlock.model_validate({"id": call_id, "name": name, "input": arguments}),
        where,
    )


def assistant_blocks(message: object, where: str = "assistant message") -> tuple[Block, ...]:
    """The blocks of one assistant message (a dict or an SDK ``ChatCompletionMessage``)."""
    fields = as_dict(message, where)
    if fields.get("function_call") is not None:
        refuse("field", "function_call", where, ("tool_calls",))
    if fields.get("audio"):
        msg = f"{where}: audio cannot be recorded (no block kind holds it yet)"
        raise InvalidInput(msg)
    blocks: list[Block] = []
    reasoning = fields.get("reasoning_content")
    if reasoning:
        blocks.append(ReasoningBlock(text=text_of(reasoning, f"{where} reasoning_content")))
    blocks += reasoning_blocks(fields, where)
    content = _content(fields.get("content"), where, ASSISTANT_PARTS)
    if fields.get("annotations"):
        # Chat Completions gives a message's annotations once, for its whole text: they ride
        # on the last text block (the only one, unless content came as parts).
        texts = [i for i, b in enumerate(content) if isinstance(b, TextBlock)]
        last = texts[-1] if texts else len(content)
        found = content[last] if texts else None
        text = found.text if isinstance(found, TextBlock) else ""
        block = annotated_text(text, fields["annotations"], f"{where} annotations")
        content = [*content[:last], block, *content[last + 1 :]]
    blocks += content
    if fields.get("refusal"):
        blocks.append(TextBlock(text=text_of(fields["refusal"], f"{where} refusal")))
    for index, call in enumerate(as_list(fields.get("tool_calls") or [], f"{where} tool_calls")):
        blocks.append(tool_call_block(call, f"{where} tool call {index}"))
    return tidy(blocks)


REASONING_DETAILS = ("reasoning.text", "reasoning.summary", "reasoning.encrypted")
"""The ``reasoning_details`` entry types (OpenRouter) an assistant message may carry."""


def reasoning_blocks(fields: Mapping[str, Any], where: str) -> list[Block]:
    """OpenRouter's reasoning on an assistant message: each of ``reasoning_details`` as a
    reasoning block (``reasoning.text`` with its ``signature``, ``reasoning.summary``, or
    ``reasoning.encrypted`` whose ``data`` is kept as ``encrypted_content``; their ``id``,
    ``format`` and ``index`` are dropped); the plain ``reasoning`` text, which repeats
    them, only when there are none. The stream assembler reads streamed reasoning with it
    too, once its pieces are joined."""
    details = as_list(fields.get("reasoning_details") or [], f"{where} reasoning_details")
    if not details:
        text = fields.get("reasoning")
        return [ReasoningBlock(text=text_of(text, f"{where} reasoning"))] if text else []
    blocks: list[Block] = []
    for index, raw in enumerate(details):
        at = f"{where} reasoning_details {index}"
        detail = as_dict(raw, at)
        kind = detail.get("type")
        data: dict[str, Any]
        if kind == "reasoning.text":
            data = {"text": detail.get("text") or "", "signature": detail.get("signature")}
        elif kind == "reasoning.summary":
            data = {"text": detail.get("summary")}
        elif kind == "reasoning.encrypted":
            data = {"text": "", "encrypted_content": detail.get("data")}
        else:
            refuse("reasoning detail type", kind, at, REASONING_DETAILS)
        given = {key: value for key, value in data.items() if value is not None}
        blocks.append(checked(lambda: ReasoningBlock.model_validate(given), at))  # noqa: B023
    return blocks


def completion_message(value: object) -> dict[str, Any]:
    """The assistant message of a ``ChatCompletion`` (its first choice), or ``value`` itself
    when it is already a message."""
    fields = as_dict(value, "completion")
    if "choices" not in fields:
        return fields
    choices = as_list(fields["choices"], "completion choices")
    if not choices:
        msg = "completion: it has no choices, so there is no message to record"
        raise InvalidInput(msg)
    return as_dict(as_dict(choices[0], "completion choice 0").get("message"), "choice 0 message")


def tool_result_block(
    message: object, where: str, names: Mapping[str, str] | None = None
) -> ToolResultBlock:
    """One ``tool`` role message as a ``tool_result`` block; ``names`` maps call ids to the
    tool names of calls seen earlier."""
    fields = as_dict(message, where)
    call_id = fields.get("tool_call_id")
    name = (names or {}).get(call_id) if isinstance(call_id, str) else None
    name = name or fields.get("name")
    raw = fields.get("content")
    content: str | list[TextBlock | ImageBlock]
    if raw is None or isinstance(raw, str):
        content = raw or ""
    else:
        content = [b for b in _content(raw, where, TEXT_PARTS) if isinstance(b, TextBlock)]
    data = {"tool_use_id": call_id, "content": content, "name": name}
    return checked(lambda: ToolResultBlock.model_validate(data), where)


def chat_messages(messages: Iterable[object]) -> list[HistoryMessage]:
    """A Chat Completions message list as convstore messages, in order."""
    converted: list[HistoryMessage] = []
    names: dict[str, str] = {}
    results: list[Block] = []
    results_at = ""  # where the tool messages being gathered start
    for index, raw in enumerate(messages):
        where = f"message {index}"
        fields = as_dict(raw, where)
        role = fields.get("role")
        if role not in ROLES:
            refuse("role", role, where, ROLES)
        where = f"message {index} ({role})"
        check_keys(fields, MESSAGE_KEYS[role], where)
        if role == "tool":
            results_at = results_at if results else where
            results.append(tool_result_block(fields, where, names))
            continue
        if results:
            converted.append(HistoryMessage("user", tuple(results), where=results_at))
            results = []
        if role == "assistant":
            blocks = assistant_blocks(fields, where)
            names.update((b.id, b.name) for b in blocks if isinstance(b, ToolUseBlock))
            converted.append(HistoryMessage("assistant", blocks, where=where))
            continue
        target: Role = "user" if role == "user" else "system"
        accepted = USER_PARTS if role == "user" else TEXT_PARTS
        converted.append(
            HistoryMessage(
                target, tidy(_content(fields.get("content"), where, accepted)), where=where
            )
        )
    if results:
        converted.append(HistoryMessage("user", tuple(results), where=results_at))
    return converted


def history_from_chat(data: object) -> History:
    """A Chat Completions request body (``{"messages": [...], ...}``) or a message list as a
    :class:`History`; the body's other fields (model, tools, …) are not part of it."""
    if isinstance(data, Mapping) and "messages" in data:
        messages = as_list(data["messages"], "body messages")
    elif isinstance(data, list | tuple):
        messages = list(data)
    else:
        msg = "expected a Chat Completions request body with 'messages', or a list of messages"
        raise InvalidInput(msg)
    return History(messages=chat_messages(messages))
