"""Properties of replay over generated histories, in every mode replay has.

Every property is checked in both shapes, with vision off and on, with compaction honoured and
ignored (``full``), and with microcompact off and on (``keep_tool_results``). The expectations
are worked out from the events alone, by a fold written for these tests (not
:mod:`convstore.projections.messages`), and compared with what replay emits. The replayed
window follows the documented rule: after the newest compaction, the system messages up to its
boundary, then the summary as one user message, then every message after the boundary.
"""

from __future__ import annotations

import base64
import json
import struct
import typing
import zlib
from collections.abc import Container
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, assert_never, cast
from uuid import NAMESPACE_URL, UUID, uuid5

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.domain.blocks import (
    AnyToolResult,
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
from convstore.domain.events import (
    EVENT_ADAPTER,
    BlockAppended,
    BlockRecorded,
    Compacted,
    ConversationRenamed,
    ConversationStarted,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    LabelsRemoved,
    LabelsSet,
    MessageEnded,
    MessageInterrupted,
    MessageMeta,
    MessageMetaRecorded,
    MessageStarted,
    RewindUndone,
    Rewound,
    Role,
    TokenUsage,
)
from convstore.engine.model import hidden_because
from convstore.engine.plan import HISTORY_STARTS, SHAPES, SUMMARY_HEAD, Shape, replay
from convstore.projections.prose import Image, Text, block_segments
from tests.strategies import BLOCK_STRATEGIES, TINY_IMAGES, histories

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

KEEP = st.integers(0, 3)
"""How many tool results microcompact keeps, when it is on."""


@dataclass(frozen=True)
class Mode:
    """One way to call replay."""

    shape: Shape
    vision: bool
    full: bool
    keep_tool_results: int | None


def modes(keep: int) -> list[Mode]:
    """Both shapes, vision off and on, compaction honoured and ignored, microcompact off and on."""
    return [
        Mode(shape, vision, full, keep_tool_results)
        for shape in SHAPES
        for vision in (False, True)
        for full in (False, True)
        for keep_tool_results in (None, keep)
    ]


def run(events: typing.Iterable[Event], mode: Mode) -> dict[str, Any]:
    """Replay ``events`` in ``mode``."""
    return replay(
        events,
        shape=mode.shape,
        vision=mode.vision,
        full=mode.full,
        keep_tool_results=mode.keep_tool_results,
    )


# -- the stored messages, folded independently ------------------------------------------------


@dataclass
class Stored:
    """One stored message (or a compaction's summary) as these tests see it."""

    message_id: UUID | None
    role: Role
    blocks: list[tuple[Block, str]] = field(default_factory=list)
    interrupted: bool = False
    reason: str | None = None
    withdrawn: bool = False


@dataclass
class History:
    """The stored messages in start order, and the newest compaction (summary, boundary)."""

    messages: list[Stored]
    compaction: tuple[str, UUID] | None


def fold(events: list[Event]) -> History:
    """The history's messages still visible (no rewind withdrew them), each block with the
    tool name a result should show, and the newest compaction through a visible message."""
    messages: dict[UUID, Stored] = {}
    call_names: dict[str, str] = {}
    compactions: list[tuple[str, UUID]] = []
    rewinds: dict[int, set[UUID]] = {}
    for event in events:
        match event:
            case ConversationStarted() | MessageEnded() | EntriesRecorded() | EntriesDeleted():
                pass
            case ConversationRenamed() | LabelsSet() | LabelsRemoved() | MessageMetaRecorded():
                pass  # metadata: never part of replay
            case MessageStarted():
                messages[event.message_id] = Stored(event.message_id, event.role)
            case BlockAppended() | BlockRecorded():
                if isinstance(event, BlockRecorded) and event.message_id not in messages:
                    messages[event.message_id] = Stored(event.message_id, event.role)
                block = event.block
                name = ""
                if isinstance(block, ToolUseBlock | HostedToolUseBlock):
                    call_names[block.id] = block.name
                elif isinstance(block, ToolResultBlock | HostedToolResultBlock):
                    name = block.name or call_names.get(block.tool_use_id, "unknown")
                messages[event.message_id].blocks.append((block, name))
            case MessageInterrupted():
                messages[event.message_id].interrupted = True
                messages[event.message_id].reason = event.reason
            case Compacted():
                compactions.append((event.summary, event.through))
            case Rewound():
                ids = list(messages)
                after = 0 if event.to is None else ids.index(event.to) + 1
                rewinds[event.originator_version] = set(ids[after:])
                for message_id in ids[after:]:
                    messages[message_id].withdrawn = True
            case RewindUndone():
                rewinds.pop(event.rewind)
                for message_id, message in messages.items():
                    message.withdrawn = any(message_id in ids for ids in rewinds.values())
            case _:
                assert_never(event)
    visible = [m for m in messages.values() if not m.withdrawn]
    shown = {m.message_id for m in visible}
    live = [c for c in compactions if c[1] in shown]
    return History(visible, live[-1] if live else None)


def window(history: History, mode: Mode) -> list[Stored]:
    """The messages replay sends in ``mode``: all of them, or the compacted window."""
    if mode.full or history.compaction is None:
        return history.messages
    summary, through = history.compaction
    boundary = [m.message_id for m in history.messages].index(through)
    kept = [m for m in history.messages[: boundary + 1] if m.role == "system"]
    summary_message = Stored(None, "user", [(TextBlock(text=SUMMARY_HEAD + summary), "")])
    return [*kept, summary_message, *history.messages[boundary + 1 :]]


LEAD = Stored(None, "user", [(TextBlock(text=HISTORY_STARTS), "")])
"""The one wire message that is no stored message: put first when the assistant's is."""


def sent_window(history: History, mode: Mode) -> list[Stored]:
    """The window as sent: ``LEAD`` before its first non-system message if that is the
    assistant's (the exception to one wire message per stored message)."""
    sent = window(history, mode)
    first = next((i for i, m in enumerate(sent) if m.role != "system"), None)
    if first is not None and sent[first].role == "assistant":
        return [*sent[:first], LEAD, *sent[first:]]
    return sent


def cleared(messages: list[Stored], mode: Mode) -> set[tuple[int, int]]:
    """(message, block) positions of the tool results whose output microcompact clears.

    All but the newest ``keep_tool_results`` results of the window, newest meaning last in
    replay order.
    """
    if mode.keep_tool_results is None:
        return set()
    results = [
        (i, j)
        for i, message in enumerate(messages)
        for j, (block, _name) in enumerate(message.blocks)
        if isinstance(block, ToolResultBlock | HostedToolResultBlock)
    ]
    return set(results[: max(len(results) - mode.keep_tool_results, 0)])


# -- the wire, read back into parts -----------------------------------------------------------


@dataclass(frozen=True)
class WireImage:
    """An image sent natively: its media type and base64 data, or its URL."""

    media_type: str | None
    data: str | None
    url: str | None = None


WirePart = str | WireImage


def openai_parts(message: dict[str, Any]) -> list[WirePart]:
    """A Chat Completions message's content as text and image parts."""
    content = message["content"]
    if isinstance(content, str):
        return [content]
    parts: list[WirePart] = []
    for part in content:
        if part["type"] == "text":
            parts.append(part["text"])
        elif part["type"] == "file":
            header, data = part["file"]["file_data"].split(",", 1)
            assert header == "data:application/pdf;base64"
            parts.append(WireImage("application/pdf", data))
        else:
            assert part["type"] == "image_url", part
            if not part["image_url"]["url"].startswith("data:"):
                parts.append(WireImage(None, None, part["image_url"]["url"]))
                continue
            header, data = part["image_url"]["url"].split(",", 1)
            assert header.startswith("data:")
            assert header.endswith(";base64")
            parts.append(WireImage(header.removeprefix("data:").removesuffix(";base64"), data))
    return parts


def anthropic_parts(message: dict[str, Any]) -> list[WirePart]:
    """A Messages API message's content blocks as text and image parts."""
    parts: list[WirePart] = []
    for block in message["content"]:
        if block["type"] == "text":
            parts.append(block["text"])
        elif block["type"] == "document":
            source = block["source"]
            if source["type"] == "url":
                parts.append(WireImage(None, None, source["url"]))
            else:
                assert source["type"] == "base64"
                parts.append(WireImage(source["media_type"], source["data"]))
        else:
            assert block["type"] == "image", block
            source = block["source"]
            if source["type"] == "url":
                parts.append(WireImage(None, None, source["url"]))
                continue
            assert source["type"] == "base64"
            parts.append(WireImage(source["media_type"], source["data"]))
    return parts


@dataclass
class Wire:
    """A replay read back: each non-system message's role and parts, and the system text."""

    messages: list[tuple[str, list[WirePart]]]
    system: str | None


def read_wire(out: dict[str, Any], shape: Shape) -> Wire:
    """Replay output in ``shape`` as roles and parts."""
    if shape == "openai":
        assert set(out) == {"messages"}
        return Wire([(m["role"], openai_parts(m)) for m in out["messages"]], None)
    assert set(out) <= {"messages", "system"}
    return Wire([(m["role"], anthropic_parts(m)) for m in out["messages"]], out.get("system"))


# -- what each stored message must show ------------------------------------------------------


def compact_json(value: object) -> str:
    """Compact JSON of a tool call's input."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def image_fragments(image: ImageBlock, native: bool) -> list[WirePart]:
    """A native image, or the marker's words that say which image was not shown."""
    if native:
        if image.url is not None:
            return [WireImage(None, None, image.url)]
        return [WireImage(image.media_type, image.data)]
    if image.url is not None:
        return ["[Image not shown: ", f"(at {image.url}) was here"]
    assert image.data is not None
    size = len(base64.b64decode(image.data))
    return [f"[Image not shown: an {image.media_type} image (", f"{size:,} bytes)"]


def text_fragments(block: TextBlock) -> list[WirePart]:
    """A text as is (unless blank), then the opening of its sources line when an annotation
    names a url, a title or a file name."""
    out: list[WirePart] = [block.text] if block.text.strip() else []
    named = ("url", "title", "document_title", "filename", "source")
    if any(
        isinstance(a.get(key), str) and a[key] for a in block.annotations or () for key in named
    ):
        out.append("[Sources: ")
    return out


def result_fragments(
    block: AnyToolResult, tool_name: str, native: bool, output_cleared: bool, shape: Shape
) -> list[WirePart]:
    """A tool result's head and output: text as is (unless blank), images and documents as
    above; a hosted call's result says the provider ran it.

    Cleared output is checked for its marker's words, not for the size the marker states.
    """
    hosted = ", run by the provider" if isinstance(block, HostedToolResultBlock) else ""
    head = f"{'Error' if block.is_error else 'Result'} ({tool_name}{hosted}): "
    if output_cleared:
        return [head + "[Output cleared to save context: ", " bytes]"]
    if isinstance(block.content, str):
        return [head + block.content]
    out: list[WirePart] = [head]
    for part in block.content:
        match part:
            case ImageBlock():
                out += image_fragments(part, native)
            case DocumentBlock():
                out += document_fragments(part, native, shape)
            case TextBlock():
                out += text_fragments(part)
            case _:
                assert_never(part)
    return out


def document_fragments(document: DocumentBlock, native: bool, shape: Shape) -> list[WirePart]:
    """A text document's head and text; a PDF (data, or by URL where the shape takes one)
    natively; else the marker's opening words."""
    if document.text is not None:
        name = f" {document.name}" if document.name else ""
        kind = document.media_type or "text/plain"
        told = "" if document.context is None else f". Its context: {document.context}"
        return [f"[Document{name} ({kind}){told}]:\n{document.text}"]
    is_pdf = document.media_type == "application/pdf"
    if native and is_pdf and document.data is not None:
        return [WireImage("application/pdf", document.data)]
    if native and is_pdf and document.url is not None and shape == "anthropic":
        return [WireImage(None, None, document.url)]
    return ["[Document not read: "]


def unanswered_calls(history: History) -> set[str]:
    """Calls with no result anywhere in the visible history, made before its last message."""
    answered = {
        block.tool_use_id
        for m in history.messages
        for block, _ in m.blocks
        if isinstance(block, ToolResultBlock | HostedToolResultBlock)
    }
    return {
        block.id
        for m in history.messages[:-1]
        for block, _ in m.blocks
        if isinstance(block, ToolUseBlock | HostedToolUseBlock) and block.id not in answered
    }


def expected_fragments(
    message: Stored,
    vision: bool,
    cleared_blocks: Container[int] = (),
    unanswered: Container[str] = (),
    shape: Shape = "anthropic",
) -> list[WirePart]:
    """What must appear, in this order, in the wire form of ``message``: a call whose result
    never landed is followed by the marker saying so."""
    native = vision and message.role == "user"
    out: list[WirePart] = []
    for position, (block, tool_name) in enumerate(message.blocks):
        match block:
            case TextBlock():
                out += text_fragments(block)
            case ReasoningBlock():
                if not block.text.strip() and (block.redacted or block.encrypted_content):
                    out.append("[Reasoning]: [encrypted by the provider")
                else:
                    out.append(f"[Reasoning]: {block.text}")
            case ToolUseBlock() | HostedToolUseBlock():
                shown = block.input if isinstance(block.input, str) else compact_json(block.input)
                by = ""
                if isinstance(block, HostedToolUseBlock):
                    server = f", MCP server {block.server}" if block.server else ""
                    by = f" (run by the provider{server})"
                out.append(f"Tool use{by}: {block.name}({shown})")
                if block.id in unanswered:
                    out.append("[No result was recorded for this call.]")
            case ToolResultBlock() | HostedToolResultBlock():
                out += result_fragments(block, tool_name, native, position in cleared_blocks, shape)
            case ImageBlock():
                out += image_fragments(block, native)
            case DocumentBlock():
                out += document_fragments(block, native, shape)
            case _:
                assert_never(block)
    if message.interrupted:
        out.append(f"[Interrupted: {message.reason}]" if message.reason else "[Interrupted]")
    return out


def missing_fragment(fragments: list[WirePart], parts: list[WirePart]) -> WirePart | None:
    """The first fragment not found after the ones before it in ``parts``, or ``None``."""
    index, offset = 0, 0
    for fragment in fragments:
        while index < len(parts):
            part = parts[index]
            if isinstance(fragment, str) and isinstance(part, str):
                found = part.find(fragment, offset)
                if found >= 0:
                    offset = found + len(fragment)
                    break
            elif fragment == part:
                index, offset = index + 1, 0
                break
            index, offset = index + 1, 0
        else:
            return fragment
    return None


def test_fragment_search_can_fail() -> None:
    """The in-order search used below reports a fragment that is absent or out of order."""
    parts: list[WirePart] = ["alpha beta", WireImage("image/png", "AAAA"), "gamma"]
    assert missing_fragment(["alpha", WireImage("image/png", "AAAA"), "gamma"], parts) is None
    assert missing_fragment(["beta", "alpha"], parts) == "alpha"
    assert missing_fragment(["gamma", WireImage("image/png", "AAAA")], parts) == WireImage(
        "image/png", "AAAA"
    )


# -- (a) one wire message per stored message ---------------------------------------------------


@SETTINGS
@given(histories(), KEEP)
def test_one_wire_message_per_stored_message(events: list[Event], keep: int) -> None:
    """Each message of the replayed window is one wire message, in start order, role kept;
    the one exception is ``LEAD``, one user message first when the assistant's would be."""
    history = fold(events)
    for mode in modes(keep):
        wire = read_wire(run(events, mode), mode.shape)
        sent = sent_window(history, mode)
        added = len(sent) - len(window(history, mode))
        assert added in (0, 1)  # the exception, counted: at most one message added
        roles = [role for role, _parts in wire.messages]
        if mode.shape == "openai":
            assert roles == [m.role for m in sent]
            continue
        assert roles == [m.role for m in sent if m.role != "system"]
        assert bool(wire.system) == any(m.role == "system" for m in sent)


@SETTINGS
@given(histories(), KEEP)
def test_full_replay_ignores_compaction(events: list[Event], keep: int) -> None:
    """With ``full``, replay is exactly what it would be had no compaction been recorded."""
    uncompacted = [e for e in events if not isinstance(e, Compacted)]
    for mode in modes(keep):
        if mode.full:
            assert run(events, mode) == run(uncompacted, mode)


@SETTINGS
@given(histories())
def test_microcompact_keeping_every_result_changes_nothing(events: list[Event]) -> None:
    """Keeping at least as many tool results as were recorded replays as without the option."""
    results = sum(
        isinstance(e, BlockAppended)
        and isinstance(e.block, ToolResultBlock | HostedToolResultBlock)
        for e in events
    )
    for mode in modes(results):
        if mode.keep_tool_results is not None:
            unchanged = Mode(mode.shape, mode.vision, mode.full, None)
            assert run(events, mode) == run(events, unchanged)


# -- (b) no tool protocol anywhere -----------------------------------------------------------


FORBIDDEN_KEYS = {"tool_calls", "tool_call_id", "tool_use_id", "function_call"}
FORBIDDEN_BLOCK_TYPES = {
    "tool_use",
    "tool_result",
    "server_tool_use",
    "web_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "hosted_tool_use",
    "hosted_tool_result",
    "function",
}


def protocol_leaks(value: object, where: str = "$") -> list[str]:
    """Every place in a JSON value where tool-call protocol shows."""
    leaks: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{where}.{key}"
            if key in FORBIDDEN_KEYS:
                leaks.append(f"key {here}")
            if key == "role" and item == "tool":
                leaks.append(f"tool role at {here}")
            if key == "type" and item in FORBIDDEN_BLOCK_TYPES:
                leaks.append(f"{item} block at {where}")
            leaks += protocol_leaks(item, here)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            leaks += protocol_leaks(item, f"{where}[{index}]")
    return leaks


def test_leak_walker_finds_leaks() -> None:
    """The protocol walker used below does report tool roles, ids and blocks (it can fail)."""
    leaky = {
        "messages": [
            {"role": "tool", "tool_call_id": "c", "content": "x"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c"}]},
        ]
    }
    assert len(protocol_leaks(leaky)) == 4


@SETTINGS
@given(histories(), KEEP)
def test_no_tool_protocol_in_the_wire(events: list[Event], keep: int) -> None:
    """No tool role, tool-call id, tool_calls key or tool block appears anywhere in a replay."""
    for mode in modes(keep):
        assert protocol_leaks(run(events, mode)) == []


# -- (c) every block's content crosses --------------------------------------------------------


@SETTINGS
@given(histories(), KEEP)
def test_every_block_appears_in_the_replay(events: list[Event], keep: int) -> None:
    """Each block's prose (text, reasoning, call, result, image or marker) is there, in order."""
    history = fold(events)
    for mode in modes(keep):
        wire = read_wire(run(events, mode), mode.shape)
        sent = sent_window(history, mode)
        clear = cleared(sent, mode)
        calls = unanswered_calls(history)
        expected = [
            (
                m,
                expected_fragments(
                    m, mode.vision, {j for i, j in clear if i == index}, calls, mode.shape
                ),
            )
            for index, m in enumerate(sent)
        ]
        kept = [(m, f) for m, f in expected if mode.shape == "openai" or m.role != "system"]
        carried = [f for _, f in kept]
        if mode.shape == "anthropic" and kept and kept[-1][0].role == "assistant":
            # The Anthropic shape trims whitespace ending a final assistant turn.
            last = carried[-1]
            if last and isinstance(last[-1], str):
                carried[-1] = [*last[:-1], last[-1].rstrip()]
        for fragments, (_role, parts) in zip(carried, wire.messages, strict=True):
            assert missing_fragment(fragments, parts) is None, (mode, fragments, parts)
            native = [f for f in fragments if isinstance(f, WireImage)]
            assert [p for p in parts if isinstance(p, WireImage)] == native
        if mode.shape == "anthropic":
            system = [f for m, fs in expected if m.role == "system" for f in fs]
            assert all(isinstance(f, str) for f in system)
            assert missing_fragment(system, [wire.system or ""]) is None, (mode, wire.system)


# -- (d) nothing blank on the wire ------------------------------------------------------------


@SETTINGS
@given(histories(), KEEP)
def test_no_wire_content_is_blank(events: list[Event], keep: int) -> None:
    """No message, text part or system prompt that is sent is empty or whitespace-only."""
    for mode in modes(keep):
        wire = read_wire(run(events, mode), mode.shape)
        for _role, parts in wire.messages:
            assert parts, "a message with no content"
            for part in parts:
                assert isinstance(part, WireImage) or part.strip(), parts
        if wire.system:
            assert wire.system.strip()


# -- (e) a pure function of its inputs ---------------------------------------------------------


def disguised(events: list[Event]) -> list[Event]:
    """The same history with every id and timestamp changed (and revalidated from JSON)."""
    when = datetime(2001, 2, 3, 4, 5, 6, tzinfo=UTC).isoformat()

    def other(uuid: UUID) -> str:
        return str(uuid5(NAMESPACE_URL, str(uuid)))

    out: list[Event] = []
    for event in events:
        data = event.model_dump(mode="json")
        data["originator_id"] = other(event.originator_id)
        data["timestamp"] = when
        match event:
            case Compacted():
                data["through"] = other(event.through)
            case (
                MessageStarted()
                | BlockAppended()
                | BlockRecorded()
                | MessageEnded()
                | MessageInterrupted()
                | MessageMetaRecorded()
            ):
                data["message_id"] = other(event.message_id)
            case Rewound():
                data["to"] = None if event.to is None else other(event.to)
            case (
                ConversationStarted()
                | EntriesRecorded()
                | EntriesDeleted()
                | RewindUndone()
                | ConversationRenamed()
                | LabelsSet()
                | LabelsRemoved()
            ):
                pass
            case _:
                assert_never(event)
        out.append(EVENT_ADAPTER.validate_json(json.dumps(data)))
    return out


@SETTINGS
@given(histories(), KEEP)
def test_replay_is_deterministic_and_pure(events: list[Event], keep: int) -> None:
    """Same events give the same JSON-safe output, whatever the ids, times or iterable kind."""
    before = [event.model_dump_json() for event in events]
    other = disguised(events)
    for mode in modes(keep):
        out = run(events, mode)
        assert run(events, mode) == out
        assert run(iter(events), mode) == out
        assert run(other, mode) == out
        assert json.loads(json.dumps(out, ensure_ascii=False, allow_nan=False)) == out
    assert [event.model_dump_json() for event in events] == before


# -- every block kind has a prose form ---------------------------------------------------------

BLOCK_KINDS: tuple[type[Any], ...] = typing.get_args(typing.get_args(Block)[0])


def test_block_union_is_what_the_strategies_cover() -> None:
    """The Block union has eight kinds and the strategies generate every one of them."""
    assert len(BLOCK_KINDS) == 8
    assert set(BLOCK_KINDS) == set(BLOCK_STRATEGIES)


@SETTINGS
@given(st.data())
def test_every_block_kind_has_a_prose_form(data: st.DataObject) -> None:
    """block_segments turns a block of every Block member into at least one non-blank segment."""
    for kind in BLOCK_KINDS:
        block = data.draw(BLOCK_STRATEGIES[kind], label=kind.__name__)
        assert isinstance(block, kind)
        for hidden in (None, hidden_because("user", vision=False)):
            segments = block_segments(block, "some_tool", hidden)
            assert segments
            assert all(isinstance(s, Text | Image) for s in segments)
            if not isinstance(block, TextBlock):
                assert any(isinstance(s, Image) or s.text.strip() for s in segments)


def test_prose_dispatch_refuses_an_unknown_kind() -> None:
    """An object outside the Block union is refused loudly, not dropped from the prose."""
    with pytest.raises(AssertionError):
        block_segments(cast(Any, object()), None, None)


# -- the test images are real images -----------------------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and raw scanlines of a PNG, checking the signature and every chunk CRC."""
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    position, chunks = 8, []
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        payload = data[position + 8 : position + 8 + length]
        (crc,) = struct.unpack(">I", data[position + 8 + length : position + 12 + length])
        assert crc == zlib.crc32(kind + payload) & 0xFFFFFFFF
        chunks.append((kind, payload))
        position += 12 + length
    assert [kind for kind, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height = struct.unpack(">II", chunks[0][1][:8])
    return width, height, zlib.decompress(chunks[1][1])


def test_tiny_images_are_real_images() -> None:
    """Each test image is a whole file of its media type, not just the right magic bytes."""
    for data in TINY_IMAGES["image/png"]:
        width, height, raw = png_pixels(base64.b64decode(data))
        assert len(raw) == height * (1 + 3 * width)
    for data in TINY_IMAGES["image/jpeg"]:
        raw = base64.b64decode(data)
        assert raw.startswith(b"\xff\xd8\xff\xe0")
        assert raw.endswith(b"\xff\xd9")
    for data in TINY_IMAGES["image/gif"]:
        raw = base64.b64decode(data)
        assert raw[:6] in (b"GIF87a", b"GIF89a")
        assert raw.endswith(b";")
    for data in TINY_IMAGES["image/webp"]:
        raw = base64.b64decode(data)
        assert raw[:4] == b"RIFF"
        assert raw[8:12] == b"WEBP"
        assert struct.unpack("<I", raw[4:8])[0] == len(raw) - 8
        assert raw[12:16] in (b"VP8 ", b"VP8L")


@SETTINGS
@given(histories(), KEEP)
def test_no_result_marker_only_after_calls_the_history_moved_past(
    events: list[Event], keep: int
) -> None:
    """The no-result marker appears exactly once per unanswered call made before the last
    visible message that replay sends, and nowhere else."""
    history = fold(events)
    calls = unanswered_calls(history)
    for mode in modes(keep):
        sent = window(history, mode)
        shown = [
            b for m in sent for b, _ in m.blocks if isinstance(b, ToolUseBlock | HostedToolUseBlock)
        ]
        wanted = sum(1 for b in shown if b.id in calls)
        text = json.dumps(run(events, mode), ensure_ascii=False)
        assert text.count("[No result was recorded for this call.]") == wanted, mode


def with_metadata(events: list[Event], where: list[int]) -> list[Event]:
    """``events`` with a rename, labels set and removed, and metadata for the newest message
    inserted after the events at ``where`` (versions renumbered)."""
    out: list[Event] = []
    started: list[UUID] = []
    for index, event in enumerate(events):
        out.append(event)
        if isinstance(event, MessageStarted):
            started.append(event.message_id)
        if index not in where:
            continue
        base = {"originator_id": event.originator_id, "originator_version": 1}
        base["timestamp"] = event.timestamp
        out.append(ConversationRenamed(**base, title=f"title {index}"))
        out.append(LabelsSet(**base, labels={"k": str(index)}))
        out.append(LabelsRemoved(**base, keys=["k"]))
        if started:
            meta = MessageMeta(model="m", usage=TokenUsage(input_tokens=index), latency_ms=1.5)
            out.append(MessageMetaRecorded(**base, message_id=started[-1], meta=meta))
    # Renumbered: an undo names its rewind by version, so it follows its rewind's new one.
    renumbered = {id(event): version for version, event in enumerate(out, start=1)}
    new_version = {e.originator_version: renumbered[id(e)] for e in events}
    return [
        event.model_copy(
            update={"originator_version": version}
            | ({"rewind": new_version[event.rewind]} if isinstance(event, RewindUndone) else {})
        )
        for version, event in enumerate(out, start=1)
    ]


@SETTINGS
@given(histories(), st.lists(st.integers(0, 40), max_size=6), KEEP)
def test_metadata_never_changes_replay(events: list[Event], where: list[int], keep: int) -> None:
    """Renames, labels and message metadata anywhere in a history leave replay unchanged."""
    other = with_metadata(events, where)
    for mode in modes(keep):
        assert run(other, mode) == run(events, mode)
