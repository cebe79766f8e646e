"""Replay: the recorded conversation as provider wire messages.

A pure function of the events and one fact about the model: whether it can see images.
Exactly one wire message per stored message, in order. Every block crosses as prose; no tool
roles, no tool-call ids and no tool blocks appear, so a tool round cut off mid-turn is a plain
recorded fact that can never make a request fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias, assert_never

from convstore.domain.events import Event, Role
from convstore.projections.messages import RecordedMessage, collect_messages
from convstore.projections.prose import (
    BLOCK_SEPARATOR,
    Image,
    Segment,
    Text,
    block_segments,
    merge_text,
)

Shape: TypeAlias = Literal["openai", "anthropic"]
SHAPES: tuple[Shape, ...] = ("openai", "anthropic")

JSONDict: TypeAlias = dict[str, Any]

NOTHING_RECORDED = "[Nothing was recorded for this message.]"
BLANK_MESSAGE = "[This message's recorded text was blank.]"

_CANNOT_SEE = "this model cannot see images"


def interruption_marker(reason: str | None) -> str:
    """The line that closes a message that was interrupted."""
    return f"[Interrupted: {reason}]" if reason else "[Interrupted]"


def _hidden_because(role: Role, vision: bool) -> str | None:
    """Why images in a message of ``role`` are not sent natively, or ``None`` if they are.

    Both providers accept images in user messages only.
    """
    if not vision:
        return _CANNOT_SEE
    if role == "user":
        return None
    return f"{role} messages cannot carry images"


def message_segments(message: RecordedMessage, *, vision: bool) -> list[Segment]:
    """The segments of one stored message; never empty, never a blank text segment."""
    hidden = _hidden_because(message.role, vision)
    segments: list[Segment] = []
    for recorded in message.blocks:
        segments.extend(block_segments(recorded.block, recorded.tool_name, hidden))
    merged = [
        segment
        for segment in merge_text(segments, BLOCK_SEPARATOR)
        if not (isinstance(segment, Text) and not segment.text.strip())
    ]
    if not merged:
        merged = [Text(BLANK_MESSAGE if message.blocks else NOTHING_RECORDED)]
    if message.status == "interrupted":
        merged = merge_text(
            [*merged, Text(interruption_marker(message.interrupt_reason))], BLOCK_SEPARATOR
        )
    return merged


def _plain_text(segments: list[Segment]) -> str:
    """Segments known to hold no native image, as one string."""
    return BLOCK_SEPARATOR.join(s.text for s in segments if isinstance(s, Text))


def _openai_part(segment: Segment) -> JSONDict:
    match segment:
        case Text():
            return {"type": "text", "text": segment.text}
        case Image():
            url = f"data:{segment.media_type};base64,{segment.data}"
            return {"type": "image_url", "image_url": {"url": url}}
        case _:
            assert_never(segment)


def _anthropic_block(segment: Segment) -> JSONDict:
    match segment:
        case Text():
            return {"type": "text", "text": segment.text}
        case Image():
            source = {"type": "base64", "media_type": segment.media_type, "data": segment.data}
            return {"type": "image", "source": source}
        case _:
            assert_never(segment)


def to_openai(messages: list[RecordedMessage], *, vision: bool) -> JSONDict:
    """Chat Completions ``messages``: content a string, or parts when an image is shown."""
    wire: list[JSONDict] = []
    for message in messages:
        segments = message_segments(message, vision=vision)
        if any(isinstance(s, Image) for s in segments):
            content: str | list[JSONDict] = [_openai_part(s) for s in segments]
        else:
            content = _plain_text(segments)
        wire.append({"role": message.role, "content": content})
    return {"messages": wire}


def to_anthropic(messages: list[RecordedMessage], *, vision: bool) -> JSONDict:
    """Messages API ``system`` and ``messages``; system messages are joined into ``system``."""
    system: list[str] = []
    wire: list[JSONDict] = []
    for message in messages:
        segments = message_segments(message, vision=vision)
        if message.role == "system":
            system.append(_plain_text(segments))
        else:
            wire.append({"role": message.role, "content": [_anthropic_block(s) for s in segments]})
    return {"system": BLOCK_SEPARATOR.join(system), "messages": wire}


def replay(events: Iterable[Event], *, shape: Shape = "openai", vision: bool = False) -> JSONDict:
    """The conversation recorded in ``events`` as a request body fragment in ``shape``."""
    messages = collect_messages(events)
    match shape:
        case "openai":
            return to_openai(messages, vision=vision)
        case "anthropic":
            return to_anthropic(messages, vision=vision)
        case _:
            assert_never(shape)
