"""The tool round in progress inside a running turn, with real call-id linkage.

Replay of persisted history never links calls to results (see :mod:`convstore.engine.plan`).
The one place linkage is needed is the request made *during* a turn, after the model called
tools and the runtime recorded their results: the provider expects its own calls and their
results in native form. This module builds exactly that round from the recorded blocks (which
carry what the round needs natively: call ids, arguments, thinking signatures); the history
before it is ordinary replay, rendered by the engine from the same events' fold. Once the turn
has moved on, the same messages replay as prose like any other history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import assert_never
from uuid import UUID

from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput, MessageNotFound
from convstore.domain.events import Event
from convstore.engine.model import folded, hidden_because
from convstore.engine.plan import JSONDict, ReplayOptions, Shape, replay_options
from convstore.engine.render import anthropic_document, anthropic_image_source, plan, wire
from convstore.projections.messages import RecordedBlock, RecordedMessage, collect_history
from convstore.projections.prose import (
    Document,
    Hidden,
    Text,
    block_segments,
    document_marker,
    document_native,
    document_text,
    image_marker,
    text_prose,
)
from convstore.projections.wording import NOT_NATIVE


def _split_round(
    messages: list[RecordedMessage], live: UUID
) -> tuple[RecordedMessage, list[ToolResultBlock]]:
    """The live assistant message and the results recorded after it (every call answered)."""
    position = next((i for i, m in enumerate(messages) if m.message_id == live), None)
    if position is None:
        msg = f"message {live} not found in this conversation"
        raise MessageNotFound(msg)
    assistant = messages[position]
    if assistant.role != "assistant":
        msg = (
            f"message {live} is a {assistant.role} message; a live round starts at an assistant one"
        )
        raise InvalidInput(msg)
    calls = [b.block for b in assistant.blocks if isinstance(b.block, ToolUseBlock)]
    results: list[ToolResultBlock] = []
    for message in messages[position + 1 :]:
        blocks = [b.block for b in message.blocks]
        if message.role != "user" or not all(isinstance(b, ToolResultBlock) for b in blocks):
            msg = (
                f"the turn of message {live} has moved on (message {message.message_id} is not "
                "only tool results); replay it as history instead"
            )
            raise InvalidInput(msg)
        results.extend(b for b in blocks if isinstance(b, ToolResultBlock))
    _check_linkage(calls, results)
    return assistant, results


def _check_linkage(calls: list[ToolUseBlock], results: list[ToolResultBlock]) -> None:
    if not calls:
        msg = "the live message made no tool calls"
        raise InvalidInput(msg)
    answered = {r.tool_use_id for r in results}
    if missing := [c.id for c in calls if c.id not in answered]:
        msg = (
            f"tool call(s) {', '.join(missing)} have no result yet; record a result "
            "(or an error result) for every call before building the request"
        )
        raise InvalidInput(msg)
    if orphans := sorted(answered - {c.id for c in calls}):
        msg = f"result(s) for {', '.join(orphans)} answer no call of the live message"
        raise InvalidInput(msg)


def _assistant_prose(blocks: Iterable[RecordedBlock], *, vision: bool) -> list[str]:
    """The assistant's turn's blocks that cross as prose (text, reasoning, images, documents,
    and the calls the provider ran with their results), as replay of history writes them: an
    image or PDF is a marker saying why the model is not shown it."""
    hidden = hidden_because("assistant", vision)
    texts = [
        s.text
        for b in blocks
        for s in block_segments(b.block, b.tool_name, hidden)
        if isinstance(s, Text)
    ]
    return [t for t in texts if t.strip()]


def _result_parts(
    block: ToolResultBlock, hidden: Hidden | None
) -> list[Text | ImageBlock | DocumentBlock]:
    """A result's output in order: text, and its images and PDFs, sent natively when
    ``hidden`` is ``None``, else as markers saying why not. A text document is its prose; a
    document with no native form (a file id, a binary that is not a PDF), its marker."""
    if isinstance(block.content, str):
        return [Text(block.content)]
    parts: list[Text | ImageBlock | DocumentBlock] = []
    for part in block.content:
        match part:
            case TextBlock():
                parts.append(Text(text_prose(part)))
            case ImageBlock():
                parts.append(part if hidden is None else Text(image_marker(part, hidden[0])))
            case DocumentBlock() if part.text is not None:
                parts.append(Text(document_text(part)))
            case DocumentBlock() if not document_native(part):
                parts.append(Text(document_marker(part, NOT_NATIVE)))
            case DocumentBlock():
                parts.append(part if hidden is None else Text(document_marker(part, hidden[1])))
            case _:
                assert_never(part)
    return parts


def openai_round(
    assistant: RecordedMessage, results: list[ToolResultBlock], *, vision: bool
) -> list[JSONDict]:
    """Assistant ``tool_calls``, then one ``tool`` message per call id."""
    calls: list[JSONDict] = []
    prose_blocks: list[RecordedBlock] = []
    for recorded in assistant.blocks:
        block = recorded.block
        match block:
            case ToolUseBlock():
                raw = isinstance(block.input, str)
                arguments = block.input if raw else json.dumps(block.input, ensure_ascii=False)
                function = {"name": block.name, "arguments": arguments}
                calls.append({"id": block.id, "type": "function", "function": function})
            case TextBlock() | ReasoningBlock() | ImageBlock() | DocumentBlock():
                prose_blocks.append(recorded)
            case HostedToolUseBlock() | HostedToolResultBlock():
                # The provider ran it inside the turn: never a tool call of the caller's.
                prose_blocks.append(recorded)
            case ToolResultBlock():
                pass  # refused on append: results never sit in assistant messages
            case _:
                assert_never(block)
    turn: JSONDict = {"role": "assistant", "tool_calls": calls}
    if prose := _assistant_prose(prose_blocks, vision=vision):
        turn["content"] = "\n\n".join(prose)
    wire = [turn]
    hidden = hidden_because("tool", vision)
    for result in results:
        output = "\n".join(p.text for p in _result_parts(result, hidden) if isinstance(p, Text))
        content = f"Error: {output}" if result.is_error else output
        wire.append({"role": "tool", "tool_call_id": result.tool_use_id, "content": content})
    return wire


def anthropic_round(
    assistant: RecordedMessage, results: list[ToolResultBlock], *, vision: bool
) -> list[JSONDict]:
    """Assistant ``tool_use`` blocks, then one user message of ``tool_result`` blocks.

    Reasoning that carries a provider signature goes back as a native ``thinking`` block (and
    redacted reasoning as ``redacted_thinking``): the Messages API requires them inside a tool
    round that used extended thinking. Other reasoning crosses as prose.
    """
    content: list[JSONDict] = []
    for recorded in assistant.blocks:
        block = recorded.block
        match block:
            case ToolUseBlock():
                if isinstance(block.input, str):
                    msg = (
                        f"tool call {block.id}'s arguments were recorded as raw text, not a JSON "
                        "object, which the Anthropic shape cannot carry natively; replay the "
                        "turn as history instead"
                    )
                    raise InvalidInput(msg)
                content.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
            case ReasoningBlock() if block.redacted and block.encrypted_content is not None:
                content.append({"type": "redacted_thinking", "data": block.encrypted_content})
            case ReasoningBlock() if block.signature is not None:
                # Extended thinking: the API wants the block back, signature and all.
                thinking = {"type": "thinking", "thinking": block.text}
                content.append({**thinking, "signature": block.signature})
            case TextBlock() | ReasoningBlock() | ImageBlock() | DocumentBlock():
                prose = _assistant_prose([recorded], vision=vision)
                content.extend({"type": "text", "text": t} for t in prose)
            case HostedToolUseBlock() | HostedToolResultBlock():
                # Prose, never a server-tool block: the record keeps no block the API takes
                # back (its encrypted content, its ids), so the call reads as what happened.
                prose = _assistant_prose([recorded], vision=vision)
                content.extend({"type": "text", "text": t} for t in prose)
            case ToolResultBlock():
                pass  # refused on append: results never sit in assistant messages
            case _:
                assert_never(block)
    hidden = hidden_because("user", vision)
    answers: list[JSONDict] = []
    for result in results:
        parts: list[JSONDict] = []
        for part in _result_parts(result, hidden):
            match part:
                case Text():
                    if part.text.strip():
                        parts.append({"type": "text", "text": part.text})
                case ImageBlock():
                    parts.append({"type": "image", "source": anthropic_image_source(part)})
                case DocumentBlock():
                    sent = Document(
                        part.media_type, part.data, part.url, part.name, "", part.context
                    )
                    parts.append(anthropic_document(sent))
                case _:
                    assert_never(part)
        answers.append(
            {
                "type": "tool_result",
                "tool_use_id": result.tool_use_id,
                "content": parts,
                "is_error": result.is_error,
            }
        )
    return [{"role": "assistant", "content": content}, {"role": "user", "content": answers}]


def live_request(
    events: Iterable[Event],
    live: UUID,
    *,
    options: ReplayOptions | None = None,
    shape: Shape | None = None,
) -> JSONDict:
    """Replay of the history before the live assistant message, then its linked tool round.

    Raises :class:`InvalidInput` when a call has no result, a result answers no call, or the
    turn has already moved on.
    """
    options = replay_options(options, shape=shape)
    events = list(events)  # read once: the round and the history before it come from them
    visible = [m for m in collect_history(events).messages if not m.withdrawn]
    assistant, results = _split_round(visible, live)
    state, load = folded(events)
    history = plan(state, options, load).before(live.hex)
    if history is None:
        msg = f"message {live} was compacted away; it cannot be a live round"
        raise InvalidInput(msg)
    request = wire(history, options.shape)
    build = openai_round if options.shape == "openai" else anthropic_round
    request["messages"].extend(build(assistant, results, vision=options.vision))
    return request
