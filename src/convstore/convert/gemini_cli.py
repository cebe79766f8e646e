"""Gemini CLI sessions (``~/.gemini/tmp/<project>/chats/session-*``) into a history.

Two layouts are read. The older ``session-*.json`` is one object: ``sessionId``,
``projectHash``, ``startTime``, ``lastUpdated``, ``messages`` (and optionally ``summary``,
``kind``, ``directories``, ``memoryScratchpad``). The newer append-only ``.jsonl`` starts with
that metadata (without ``messages``) and then holds one record a line: a message record
(``id`` …; a later record with the same ``id`` replaces the earlier one in place), a
``{"$set": {...}}`` metadata update (a ``$set`` of ``messages`` replaces them all), or a
``{"$rewindTo": ID}`` that drops that message and every later one (all of them when the id is
unknown), as Gemini CLI itself reads the file.

Message records (``type``): ``user`` → a user message of its ``content`` (a string or Gemini
``Part`` objects: ``text``, ``inlineData`` / ``fileData`` images, and documents of any other
type but audio and video, ``fileData.displayName`` their name); ``gemini`` → an assistant
message: its ``thoughts`` (``subject`` and ``description``) as reasoning, its ``content``
(``text`` parts; ``thought: true`` ones as reasoning; ``inlineData`` / ``fileData`` the model
generated as images or documents; ``executableCode`` → a ``hosted_tool_use`` named
``code_execution`` whose input is the part's fields, and ``codeExecutionResult`` → its
``hosted_tool_result``, the ``output`` as text, an error unless the ``outcome`` is
``OUTCOME_OK``; the part itself kept in ``provider_data``), then each of ``toolCalls`` as a
``tool_use`` (``id``, ``name``, ``args``) with its ``result`` (``functionResponse.response``:
``output`` as text, else its JSON; ``inlineData`` images and documents beside it) as a
``tool_result`` in a user message right after; ``status: "error"`` marks it an error. The
CLI's own ``google_web_search`` (grounded in Google Search) is such a call: the CLI ran it.
``info``, ``error`` and ``warning`` records are the CLI's own notices (never sent to the
model): counted as ignored.

Code execution parts carry an ``id`` in newer API versions; without one, the call is named
``RECORD-ID:code N`` (its record and position) and a result answers the latest call of its
record that has none yet.

``sessionId`` is the key (a second import is refused); ``summary`` the title. Refused, naming
the record and part: any other part or key, and audio and video ``inlineData`` /
``fileData``. Each message is at its record's ``timestamp``; the results of a turn's tool
calls at the latest call's.
"""

from __future__ import annotations

import json
from collections import Counter
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
from convstore.domain.json_values import StrictJSONError, strict_loads

METADATA_KEYS = frozenset(
    {
        "sessionId",
        "projectHash",
        "startTime",
        "lastUpdated",
        "messages",
        "summary",
        "memoryScratchpad",
        "directories",
        "kind",
    }
)
MESSAGE_TYPES = ("user", "gemini", "info", "error", "warning")
MESSAGE_KEYS = frozenset(
    {
        "id",
        "timestamp",
        "type",
        "content",
        "displayContent",
        "toolCalls",
        "thoughts",
        "tokens",
        "model",
    }
)
TOOL_CALL_KEYS = frozenset(
    {
        "id",
        "name",
        "args",
        "result",
        "status",
        "timestamp",
        "agentId",
        "displayName",
        "description",
        "resultDisplay",
        "renderOutputAsMarkdown",
    }
)
USER_FIELDS = ("text", "inlineData", "fileData", "functionResponse")
ASSISTANT_FIELDS = (
    "text",
    "functionCall",
    "inlineData",
    "fileData",
    "executableCode",
    "codeExecutionResult",
)
RESULT_FIELDS = ("text", "inlineData", "fileData", "functionResponse")
"""The Gemini ``Part`` fields read in user content, model content and a tool's result."""
_PART_EXTRAS = frozenset({"thought", "thoughtSignature", "partMetadata"})


def _file(part: Mapping[str, Any], field: str, where: str) -> ImageBlock | DocumentBlock:
    """Inline or referenced data: an image, or a document of any type but audio and video."""
    data = as_dict(part[field], f"{where} {field}")
    media = text_of(data.get("mimeType"), f"{where} {field}.mimeType")
    if media.startswith(("image/", "audio/", "video/")):  # _image refuses the last two
        return _image(part, field, where)
    if field == "fileData":
        uri = text_of(data.get("fileUri"), f"{where} fileData.fileUri")
        return document_from(where, url=uri, media_type=media, name=data.get("displayName"))
    return document_from(where, data=data.get("data"), media_type=media)


def _image(part: Mapping[str, Any], field: str, where: str) -> ImageBlock:
    data = as_dict(part[field], f"{where} {field}")
    media = text_of(data.get("mimeType"), f"{where} {field}.mimeType")
    if not media.startswith("image/"):
        msg = f"{where}: {field} of media type {media!r} cannot be recorded yet"
        raise InvalidInput(msg)
    if field == "fileData":
        return image_from_url(data.get("fileUri"), f"{where} fileData.fileUri")
    fields = {"media_type": media, "data": data.get("data")}
    return checked(partial(ImageBlock.model_validate, fields), where)


def _part_field(part: Mapping[str, Any], where: str, accepted: tuple[str, ...]) -> str:
    fields = [key for key in part if key not in _PART_EXTRAS]
    if len(fields) != 1 or fields[0] not in accepted:
        found = fields[0] if fields else None
        refuse("part", found, where, accepted)
    return fields[0]


def _response_text(part: Mapping[str, Any], where: str) -> str:
    """A ``functionResponse``'s ``response``: its ``output`` when that is all it holds, else
    its JSON (an ``error``, or structured output)."""
    response = as_dict(part["functionResponse"], f"{where} functionResponse").get("response")
    output = response.get("output") if isinstance(response, Mapping) else None
    if isinstance(output, str) and isinstance(response, Mapping) and len(response) == 1:
        return output
    return json.dumps(response, ensure_ascii=False)


class _Reader:
    """One session's records into messages; remembers the calls and results seen, since
    Gemini CLI may write a turn's ``functionCall`` / ``functionResponse`` parts into
    ``content`` as well as into ``toolCalls`` (when it syncs its history back)."""

    def __init__(self, ignored: Counter[str]) -> None:
        self.ignored = ignored
        self.answered: set[str] = set()
        self.code_calls: list[str] = []  # this record's code execution calls not yet answered
        self.code_count = 0
        self.record_id = ""

    def content(self, content: object, where: str, *, calls: set[str] | None) -> list[Block]:
        """``content`` as blocks; ``calls`` (the ids in the record's ``toolCalls``) is given for
        an assistant record, ``None`` for a user one."""
        if content is None:
            return []
        if isinstance(content, str):
            return [TextBlock(text=content)] if content else []
        parts = content if isinstance(content, list) else [content]
        blocks: list[Block] = []
        for index, raw in enumerate(parts):
            at = f"{where} content part {index}"
            if isinstance(raw, str):
                blocks.append(TextBlock(text=raw))
                continue
            part = as_dict(raw, at)
            block = self.part(part, at, calls)
            if block is not None:
                blocks.append(block)
        return blocks

    def part(self, part: Mapping[str, Any], at: str, calls: set[str] | None) -> Block | None:
        accepted = ASSISTANT_FIELDS if calls is not None else USER_FIELDS
        field = _part_field(part, at, accepted)
        if field == "text" and part.get("thought"):
            thought = {"text": part["text"], "signature": part.get("thoughtSignature")}
            return checked(partial(ReasoningBlock.model_validate, thought), at)
        if field == "text":
            return TextBlock(text=text_of(part["text"], f"{at} text"))
        if field in ("inlineData", "fileData"):
            return _file(part, field, at)
        if field in ("executableCode", "codeExecutionResult"):
            return self.code(part, field, at)
        inner = as_dict(part[field], f"{at} {field}")
        call_id = inner.get("id")
        if field == "functionCall":
            if calls is not None and call_id in calls:
                self.ignored["functionCall part repeating a toolCall"] += 1
                return None
            call = {
                "id": call_id,
                "name": inner.get("name"),
                "input": tool_arguments(inner.get("args") or {}, f"{at} args"),
            }
            return checked(partial(ToolUseBlock.model_validate, call), at)
        if call_id in self.answered:
            self.ignored["functionResponse part repeating a toolCall result"] += 1
            return None
        result = {
            "tool_use_id": call_id,
            "name": inner.get("name"),
            "content": _response_text(part, at),
        }
        return checked(partial(ToolResultBlock.model_validate, result), at)

    def code(self, part: Mapping[str, Any], field: str, at: str) -> Block:
        """Code the model had the provider run (``executableCode``), or what it returned
        (``codeExecutionResult``), as a hosted call or result; the part kept verbatim."""
        inner = as_dict(part[field], f"{at} {field}")
        given = inner.get("id")
        if field == "executableCode":
            self.code_count += 1
            call_id = given or f"{self.record_id}:code {self.code_count}"
            self.code_calls.append(str(call_id))
            fields = {key: value for key, value in inner.items() if key != "id"}
            call = {
                "id": call_id,
                "name": "code_execution",
                "input": fields,
                "provider_data": dict(part),
            }
            return checked(partial(HostedToolUseBlock.model_validate, call), at)
        if given is None and not self.code_calls:
            msg = f"{at}: a codeExecutionResult answers no executableCode before it"
            raise InvalidInput(msg)
        call_id = given if given is not None else self.code_calls[-1]
        if call_id in self.code_calls:
            self.code_calls.remove(call_id)
        result = {
            "tool_use_id": call_id,
            "name": "code_execution",
            "content": text_of(inner.get("output", ""), f"{at} {field}.output"),
            "is_error": inner.get("outcome") != "OUTCOME_OK",
            "provider_data": dict(part),
        }
        return checked(partial(HostedToolResultBlock.model_validate, result), at)

    def message(self, record: Mapping[str, Any], where: str) -> list[HistoryMessage]:
        kind = record.get("type")
        if kind not in MESSAGE_TYPES:
            refuse("message type", kind, where, MESSAGE_TYPES)
        where = f"{where} ({kind})"
        check_keys(record, MESSAGE_KEYS, where)
        if kind in ("info", "error", "warning"):
            self.ignored[str(kind)] += 1
            return []
        content = record.get("content")
        if kind == "user":
            if not content:
                msg = f"{where}: the user message has no content"
                raise InvalidInput(msg)
            blocks = self.content(content, where, calls=None)
            when = source_time(record.get("timestamp"))
            return [HistoryMessage("user", tidy(blocks), at=when, where=where)] if blocks else []
        return self.model_turn(record, where)

    def model_turn(self, record: Mapping[str, Any], where: str) -> list[HistoryMessage]:
        self.record_id, self.code_calls, self.code_count = str(record.get("id")), [], 0
        blocks: list[Block] = []
        for index, raw in enumerate(as_list(record.get("thoughts") or [], f"{where} thoughts")):
            at = f"{where} thought {index}"
            thought = as_dict(raw, at)
            check_keys(thought, frozenset({"subject", "description", "timestamp"}), at)
            text = "\n\n".join(str(thought.get(k) or "") for k in ("subject", "description"))
            blocks.append(ReasoningBlock(text=text.strip()))
        listed = as_list(record.get("toolCalls") or [], f"{where} toolCalls")
        calls = [as_dict(raw, f"{where} tool call {i}") for i, raw in enumerate(listed)]
        ids = {call["id"] for call in calls if isinstance(call.get("id"), str)}
        blocks += self.content(record.get("content"), where, calls=ids)
        results: list[Block] = []
        for index, call in enumerate(calls):
            at = f"{where} tool call {index}"
            check_keys(call, TOOL_CALL_KEYS, at)
            data = {
                "id": call.get("id"),
                "name": call.get("name"),
                "input": tool_arguments(call.get("args") or {}, f"{at} args"),
            }
            use = checked(partial(ToolUseBlock.model_validate, data), at)
            blocks.append(use)
            result = _result(call, use.id, at)
            if result is not None:
                results.append(result)
                self.answered.add(use.id)
        if not blocks:
            self.ignored["empty gemini message"] += 1
            return []
        when = source_time(record.get("timestamp"))
        out = [HistoryMessage("assistant", tidy(blocks), at=when, where=where)]
        if results:
            # The results came once the calls were done: at the latest call's time.
            times = [t for t in (source_time(c.get("timestamp")) for c in calls) if t is not None]
            latest = max(times, default=when)
            out.append(HistoryMessage("user", tuple(results), at=latest, where=where))
        return out


def _result(call: Mapping[str, Any], call_id: str, where: str) -> ToolResultBlock | None:
    raw = call.get("result")
    if raw is None:
        return None
    parts = raw if isinstance(raw, list) else [raw]
    texts: list[str] = []
    files: list[TextBlock | ImageBlock | DocumentBlock] = []
    for index, item in enumerate(parts):
        at = f"{where} result part {index}"
        if isinstance(item, str):
            texts.append(item)
            continue
        part = as_dict(item, at)
        field = _part_field(part, at, RESULT_FIELDS)
        if field == "functionResponse":
            texts.append(_response_text(part, at))
        elif field == "text":
            texts.append(text_of(part["text"], f"{at} text"))
        else:
            files.append(_file(part, field, at))
    text = "\n".join(texts)
    content: str | list[TextBlock | ImageBlock | DocumentBlock] = (
        [TextBlock(text=text), *files] if files else text
    )
    data = {
        "tool_use_id": call_id,
        "name": call.get("name"),
        "content": content,
        "is_error": call.get("status") == "error",
    }
    return checked(partial(ToolResultBlock.model_validate, data), where)


def _records(text: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The session's metadata and its message records (with where each came from) as Gemini
    CLI reads them: replaced in place by id, cut by rewinds, reset by ``$set`` messages."""
    try:
        whole = strict_loads(text, unique_keys=False)
    except ValueError:
        whole = None
    if isinstance(whole, dict) and "messages" in whole:
        check_keys(whole, METADATA_KEYS, "session")
        messages = as_list(whole["messages"], "session messages")
        records = [(f"message {i}", as_dict(m, f"message {i}")) for i, m in enumerate(messages)]
        return whole, records
    metadata: dict[str, Any] = {}
    by_id: dict[str, tuple[str, dict[str, Any]]] = {}
    position: dict[str, int] = {}  # each key's place in by_id, so a rewind finds its cut at once
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"line {number}"
        try:
            record = as_dict(strict_loads(raw, unique_keys=False), where)
        except StrictJSONError as exc:
            msg = f"{where}: not a JSON object ({exc})"
            raise InvalidInput(msg) from None
        except ValueError:
            msg = f"{where}: not a JSON object"
            raise InvalidInput(msg) from None
        if "$rewindTo" in record:
            check_keys(record, frozenset({"$rewindTo"}), where)
            target = record["$rewindTo"]
            cut = position.get(target, 0) if isinstance(target, str) else 0
            while len(by_id) > cut:  # each record is cut at most once: linear over the file
                del position[by_id.popitem()[0]]
        elif "$set" in record:
            check_keys(record, frozenset({"$set"}), where)
            update = as_dict(record["$set"], f"{where} $set")
            check_keys(update, METADATA_KEYS, f"{where} $set")
            if "messages" in update:
                by_id.clear()
                position.clear()
                for i, m in enumerate(as_list(update.pop("messages"), f"{where} messages")):
                    message = as_dict(m, f"{where} message {i}")
                    key = text_of(message.get("id"), f"{where} message {i} id")
                    _put(by_id, position, key, (f"{where} message {i}", message))
            metadata.update(update)
        elif "id" in record:
            _put(by_id, position, text_of(record["id"], f"{where} id"), (where, record))
        elif "sessionId" in record:
            check_keys(record, METADATA_KEYS - {"messages"}, where)
            metadata.update(record)
        else:
            msg = f"{where}: neither a message, a $set, a $rewindTo nor the session's metadata"
            raise InvalidInput(msg)
    return metadata, list(by_id.values())


def _put(
    by_id: dict[str, tuple[str, dict[str, Any]]],
    position: dict[str, int],
    key: str,
    record: tuple[str, dict[str, Any]],
) -> None:
    """Record ``record`` under ``key``: in place of an earlier one, else last (its place)."""
    if key not in by_id:
        position[key] = len(by_id)
    by_id[key] = record


def histories_from_session(text: str) -> list[History]:
    """A Gemini CLI session file's text (either layout) as one :class:`History`."""
    metadata, records = _records(text)
    history = History()
    reader = _Reader(history.ignored)
    if isinstance(metadata.get("sessionId"), str):
        history.key = metadata["sessionId"]
    if isinstance(metadata.get("summary"), str) and metadata["summary"]:
        history.title = metadata["summary"]
    for where, record in records:
        history.messages += reader.message(record, where)
    return [history]
