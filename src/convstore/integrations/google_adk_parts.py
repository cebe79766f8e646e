"""ADK events as convstore runtime entries and blocks, and back (for
:mod:`convstore.integrations.google_adk`).

One ADK ``Event`` is one runtime entry and at most one message, recorded in one write
(:meth:`convstore.Store.record_entries`). Each content part that has a block kind becomes that
block, so its content is stored once, where replay, audit and search see it:

========================  ==================================================================
ADK part                  convstore block
========================  ==================================================================
``text``                  ``text``
``text`` + ``thought``    ``reasoning``
``function_call``         ``tool_use`` (its id, name and args)
``function_response``     ``tool_result`` (the response as JSON text)
``inline_data``           ``image`` (PNG, JPEG, GIF, WebP), else ``document`` (base64 data)
``file_data``             ``image`` / ``document`` by address (http/https), else ``document``
                          by ``file_id`` (the URI)
========================  ==================================================================

The entry keeps the rest: the event without its parts (id, invocation id, author, branch,
timestamp, actions, usage, …) and, for each part, what its block does not hold (a thought
signature, a call's ``will_continue``, a blob's display name, …). A part with no block kind
(executable code, a code execution result, …), or one its block would refuse (image bytes that
are not the image they claim), is kept whole in the entry and has no block. Reading back joins
the two into the event exactly as it was appended.
"""

from __future__ import annotations

import copy
import json
from typing import Any, assert_never, cast, get_args

from google.adk.events.event import Event
from google.genai import types
from pydantic import JsonValue, ValidationError

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
from convstore.domain.conversation import EntryMessage
from convstore.domain.events import Role
from convstore.domain.images import ImageMediaType
from convstore.projections.prose import Text, block_segments, tool_use_text
from convstore.projections.wording import BLOCK_SEPARATOR, CANNOT_READ, CANNOT_SEE, NO_RESULT

ENTRY_KEY = "adk_event"
"""The key of an entry that holds an ADK event (its envelope)."""

PARTS_KEY = "adk_parts"
"""The key of the entry's list of part records: ``{"block": i, "rest": {...}}`` or
``{"part": {...}}`` (kept whole)."""

IMAGE_TYPES: frozenset[str] = frozenset(get_args(ImageMediaType))

HANDED_OVER_AUTHOR = "convstore"
"""The default author of an event that shows an assistant message recorded without an ADK
event (by another framework, through the same conversation): ADK presents it to its agent as
another agent's turn."""


def _json(model: Any) -> dict[str, Any]:
    return cast("dict[str, Any]", model.model_dump(mode="json", exclude_none=True))


def _http(uri: str) -> bool:
    return uri.lower().startswith(("http://", "https://"))


def _call_block(
    pj: dict[str, Any], role: Role, seen_calls: set[str]
) -> tuple[Block, dict[str, Any]] | None:
    call = pj["function_call"]
    call_id, name = call.get("id"), call.get("name")
    if role != "assistant" or not call_id or not name or call_id in seen_calls:
        return None
    rest = copy.deepcopy(pj)
    for key in ("id", "name", "args"):
        rest["function_call"].pop(key, None)
    if "args" not in call:
        rest["absent"] = "args"
    seen_calls.add(call_id)
    return ToolUseBlock(id=call_id, name=name, input=call.get("args", {})), rest


def _response_block(pj: dict[str, Any], role: Role) -> tuple[Block, dict[str, Any]] | None:
    response = pj["function_response"]
    call_id = response.get("id")
    if role != "user" or not call_id or "response" not in response:
        return None
    body = response["response"]
    rest = copy.deepcopy(pj)
    for key in ("id", "name", "response"):
        rest["function_response"].pop(key, None)
    block = ToolResultBlock(
        tool_use_id=call_id,
        name=response.get("name") or None,
        content=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
        is_error=isinstance(body, dict) and set(body) == {"error"},
    )
    if block.name is None and "name" in response:
        rest["function_response"]["name"] = response["name"]
    return block, rest


def _blob_block(pj: dict[str, Any]) -> tuple[Block, dict[str, Any]] | None:
    blob = pj["inline_data"]
    data, mime = blob.get("data"), blob.get("mime_type")
    if not isinstance(data, str) or not isinstance(mime, str):
        return None
    rest = copy.deepcopy(pj)
    rest["inline_data"].pop("data")
    rest["inline_data"].pop("mime_type")
    block: Block
    if mime in IMAGE_TYPES:
        block = ImageBlock(media_type=cast("ImageMediaType", mime), data=data)
    else:
        name = rest["inline_data"].pop("display_name", None) or None
        block = DocumentBlock(media_type=mime, data=data, name=name)
    return block, rest


def _file_block(pj: dict[str, Any]) -> tuple[Block, dict[str, Any]] | None:
    file = pj["file_data"]
    uri, mime = file.get("file_uri"), file.get("mime_type")
    if not isinstance(uri, str) or not uri:
        return None
    rest = copy.deepcopy(pj)
    rest["file_data"].pop("file_uri")
    block: Block
    if _http(uri) and mime in IMAGE_TYPES:
        rest["file_data"].pop("mime_type")
        block = ImageBlock(media_type=cast("ImageMediaType", mime), url=uri)
    else:
        if mime is not None:
            rest["file_data"].pop("mime_type")
        name = rest["file_data"].pop("display_name", None) or None
        web = _http(uri)
        block = DocumentBlock(
            media_type=mime, name=name, url=uri if web else None, file_id=None if web else uri
        )
    return block, rest


def part_block(
    part: types.Part, role: Role, seen_calls: set[str]
) -> tuple[Block, dict[str, Any]] | None:
    """The block a part becomes and what of the part it does not hold (``None``: the part is
    kept whole). ``seen_calls`` are the call ids already recorded (a call id is a block's
    only once in a conversation); a call given a block is added to it."""
    pj = _json(part)
    try:
        if "function_call" in pj:
            return _call_block(pj, role, seen_calls)
        if "function_response" in pj:
            return _response_block(pj, role)
        if "inline_data" in pj:
            return _blob_block(pj)
        if "file_data" in pj:
            return _file_block(pj)
        if "text" in pj:
            rest = {k: v for k, v in pj.items() if k != "text"}
            text = pj["text"]
            block: Block = ReasoningBlock(text=text) if pj.get("thought") else TextBlock(text=text)
            return block, rest
    except ValidationError:
        return None
    return None


def _joined(block: Block, record: dict[str, Any]) -> dict[str, Any]:
    """A part's JSON from its block and the rest its record kept."""
    pj: dict[str, Any] = copy.deepcopy(record["rest"])
    pj.pop("absent", None)
    match block:
        case TextBlock() | ReasoningBlock():
            pj["text"] = block.text
        case ToolUseBlock():
            call = pj.setdefault("function_call", {})
            call.update({"id": block.id, "name": block.name})
            if record["rest"].get("absent") != "args":
                call["args"] = block.input
        case ToolResultBlock():
            response = pj.setdefault("function_response", {})
            response["id"] = block.tool_use_id
            if block.name is not None:
                response["name"] = block.name
            assert isinstance(block.content, str)
            response["response"] = json.loads(block.content)
        case ImageBlock():
            if block.data is not None:
                pj.setdefault("inline_data", {}).update(
                    {"data": block.data, "mime_type": block.media_type}
                )
            else:
                pj.setdefault("file_data", {}).update(
                    {"file_uri": block.url, "mime_type": block.media_type}
                )
        case DocumentBlock():
            named = {} if block.name is None else {"display_name": block.name}
            typed = {} if block.media_type is None else {"mime_type": block.media_type}
            if block.data is not None:
                pj.setdefault("inline_data", {}).update({"data": block.data, **typed, **named})
            else:
                pj.setdefault("file_data", {}).update(
                    {"file_uri": block.url or block.file_id, **typed, **named}
                )
        case HostedToolUseBlock() | HostedToolResultBlock():
            msg = f"an ADK part cannot come from a {block.type} block"
            raise ValueError(msg)
        case _:
            assert_never(block)
    return pj


def event_role(event: Event) -> Role:
    """The convstore role of an event's message: ADK's ``user`` content is the user's, a
    model's (or any agent's) the assistant's."""
    role = event.content.role if event.content else None
    if role == "user" or (role is None and event.author == "user"):
        return "user"
    return "assistant"


def event_entry(
    event: Event, seen_calls: set[str]
) -> tuple[dict[str, JsonValue], EntryMessage | None]:
    """The runtime entry and the message (if any part has a block) an event is recorded as."""
    envelope = _json(event)
    envelope.pop("id", None)
    role = event_role(event)
    records: list[dict[str, Any]] = []
    blocks: list[Block] = []
    content = envelope.get("content")
    if content is not None and event.content is not None:
        for part in event.content.parts or []:
            found = part_block(part, role, seen_calls)
            if found is None:
                records.append({"part": _json(part)})
            else:
                records.append({"block": len(blocks), "rest": found[1]})
                blocks.append(found[0])
        content.pop("parts", None)
        if event.content.parts is not None:
            content["parts"] = None  # a marker: the parts are in the records
    entry: dict[str, Any] = {ENTRY_KEY: envelope, PARTS_KEY: records}
    if event.id:
        entry["uuid"] = event.id
    message: EntryMessage | None = (role, blocks, "ended", None) if blocks else None
    return cast("dict[str, JsonValue]", entry), message


def entry_event(entry: dict[str, JsonValue], blocks: list[Block]) -> Event:
    """The event an entry and its message's blocks were recorded from."""
    envelope = copy.deepcopy(cast("dict[str, Any]", entry[ENTRY_KEY]))
    if isinstance(entry.get("uuid"), str):
        envelope["id"] = entry["uuid"]
    content = envelope.get("content")
    if content is not None and "parts" in content:
        parts: list[dict[str, Any]] = []
        for record in cast("list[dict[str, Any]]", entry[PARTS_KEY]):
            if "part" in record:
                parts.append(record["part"])
            else:
                parts.append(_joined(blocks[record["block"]], record))
        content["parts"] = parts
    return Event.model_validate(envelope)


def unanswered_calls(events: list[Event]) -> set[str]:
    """The ids of the function calls in ``events`` that no response answers and no event
    marks long-running (a run killed inside its tool, or a tool still running)."""
    answered = {r.id for e in events for r in e.get_function_responses() if r.id}
    waiting = {i for e in events for i in (e.long_running_tool_ids or ())}
    return {
        c.id
        for e in events
        for c in e.get_function_calls()
        if c.id and c.id not in answered and c.id not in waiting
    }


def unanswered_calls_as_prose(events: list[Event], unanswered: set[str]) -> list[Event]:
    """``events`` with every call of ``unanswered`` (:func:`unanswered_calls`) written as the
    text convstore's replay gives a call that never returned (``Tool use: name({...})`` and
    the note that no result was recorded), so the next request holds no call left hanging and
    the model still sees what it asked for."""
    shown: list[Event] = []
    for event in events:
        if not any(c.id in unanswered for c in event.get_function_calls()):
            shown.append(event)
            continue
        assert event.content is not None
        parts: list[types.Part] = []
        for part in event.content.parts or []:
            call = part.function_call
            if call is None or call.id not in unanswered:
                parts.append(part)
                continue
            args = _json(call).get("args", {})
            block = ToolUseBlock(id=call.id, name=call.name or "unknown", input=args)
            parts.append(types.Part(text=tool_use_text(block) + BLOCK_SEPARATOR + NO_RESULT))
        content = event.content.model_copy(update={"parts": parts})
        shown.append(event.model_copy(update={"content": content}))
    return shown


def handed_over_event(
    message_id: str,
    role: Role,
    timestamp: float,
    blocks: list[tuple[Block, str | None]],
    assistant: str = HANDED_OVER_AUTHOR,
) -> Event:
    """A message recorded without an ADK event (another framework's, in a conversation handed
    over to ADK) as an event holding its prose, as replay words it for a model that cannot see
    (each block with its tool name, when it is a result): ``author`` is ``assistant`` for an
    assistant's, ``user`` for any other (a system message too). Its id is the message's."""
    texts: list[str] = []
    for block, tool_name in blocks:
        for segment in block_segments(block, tool_name, (CANNOT_SEE, CANNOT_READ)):
            assert isinstance(segment, Text)  # a model that cannot see is sent text only
            texts.append(segment.text)
    author, content_role = (assistant, "model") if role == "assistant" else ("user", "user")
    text = BLOCK_SEPARATOR.join(texts)
    return Event(
        id=message_id,
        invocation_id="",
        author=author,
        timestamp=timestamp,
        content=types.Content(role=content_role, parts=[types.Part(text=text)]),
    )
