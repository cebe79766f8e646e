"""The replay oracle: the straightforward replay, kept in the tests to guard the engine.

The engine (:mod:`convstore.engine`) folds events into a storable, incremental
``ReplayState`` and renders it with every shortcut it has (sealed messages kept as their text,
decisions made once per render, images read back by version). This is the other way to
compute the same thing, written for clarity only: collect the history
(:func:`convstore.projections.messages.collect_history`), plan each wire message part by part
from its blocks' prose (:func:`convstore.projections.prose.block_segments`), and render the
plan; pressure counts the plan's parts. Properties (tests/test_replay_model.py,
tests/test_fit_tool_results.py) hold the engine equal to it in every mode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal, TypeAlias, assert_never
from uuid import UUID

from convstore.domain.blocks import (
    AnyToolResult,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import Compacted, Event, Role
from convstore.engine.plan import (
    BLANK_MESSAGE,
    CANNOT_SEE,
    HISTORY_STARTS,
    NO_RESULT,
    NOTHING_RECORDED,
    SUMMARY_HEAD,
    JSONDict,
    ReplayOptions,
    Shape,
    interruption_marker,
    replay_options,
)
from convstore.engine.pressure import (
    MESSAGE_FRAMING_TOKENS,
    REQUEST_FRAMING_TOKENS,
    MessagePressure,
    Pressure,
    TokenCounter,
    document_tokens,
    image_tokens,
)
from convstore.engine.render import anthropic_document_source, anthropic_image_source
from convstore.projections.messages import RecordedBlock, RecordedMessage, collect_history
from convstore.projections.prose import (
    BLOCK_SEPARATOR,
    PART_SEPARATOR,
    Document,
    Image,
    Text,
    block_segments,
    document_context,
    document_marker,
    document_native,
    document_text,
    image_marker,
    text_prose,
    tool_result_head,
)
from convstore.projections.wording import CANNOT_READ, NOT_NATIVE

Segment: TypeAlias = Text | Image | Document

PartKind: TypeAlias = Literal[
    "text",
    "tool_use",
    "tool_result",
    "reasoning",
    "image",
    "document",
    "hosted_tool_use",
    "hosted_tool_result",
    "summary",
    "marker",
]

CALLS = (ToolUseBlock, HostedToolUseBlock)
"""Calls, the caller's or the provider's: either is answered by a result with its id."""
RESULTS = (ToolResultBlock, HostedToolResultBlock)
"""Results, of the caller's tools or the provider's: microcompact clears either."""


@dataclass(frozen=True, slots=True)
class Part:
    """What one block (or one marker) contributes to a wire message."""

    kind: PartKind
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class PlannedMessage:
    """One wire message to be: its role and its parts in order."""

    role: Role
    parts: tuple[Part, ...]
    message_id: UUID | None = None
    """The stored message this is, or ``None`` for a compaction summary."""

    def segments(self) -> list[Segment]:
        """The message's content: adjacent text joined by a blank line, blank text dropped."""
        joined: list[Segment] = []
        for segment in (s for p in self.parts for s in p.segments):
            if isinstance(segment, Text) and joined and isinstance(joined[-1], Text):
                joined[-1] = Text(joined[-1].text + BLOCK_SEPARATOR + segment.text)
            else:
                joined.append(segment)
        return [s for s in joined if not (isinstance(s, Text) and not s.text.strip())]


def _hidden_because(role: Role, vision: bool) -> tuple[str, str] | None:
    """Why images and PDFs in a message of ``role`` are not sent natively, or ``None`` if
    they are.

    Both providers accept images and PDFs in user messages only.
    """
    if not vision:
        return CANNOT_SEE, CANNOT_READ
    if role == "user":
        return None
    return f"{role} messages cannot carry images", f"{role} messages cannot carry documents"


def _document_segment(document: DocumentBlock, role: Role, vision: bool) -> Segment:
    """A document's one segment: a text document's prose always (any model reads text); a PDF
    by data or URL natively when the model can see and the message is a user message; else
    its marker saying why it was not read."""
    if document.text is not None:
        return Text(document_text(document))
    if not document_native(document):
        return Text(document_marker(document, NOT_NATIVE))
    if not vision:
        return Text(document_marker(document, CANNOT_READ))
    if role != "user":
        return Text(document_marker(document, f"{role} messages cannot carry documents"))
    unsent = "" if document.url is None else document_marker(document, NOT_NATIVE)
    return Document(
        document.media_type, document.data, document.url, document.name, unsent, document.context
    )


def _result_segments(
    block: AnyToolResult, tool_name: str | None, role: Role, vision: bool
) -> list[Segment]:
    """A result's head and output, uncleared: text parts with their sources, images by the
    image rule and documents by the document rule (as in a message of ``role``), the head
    joined bare to the text after it and the other texts joined by a newline."""
    head = tool_result_head(block, tool_name)
    if isinstance(block.content, str):
        return [Text(head + block.content)]
    hidden = _hidden_because(role, vision)
    pieces: list[Segment] = [Text(head)]
    for part in block.content:
        match part:
            case TextBlock():
                pieces.append(Text(text_prose(part)))
            case ImageBlock():
                shown = Image(part.media_type, part.data, part.url)
                pieces.append(shown if hidden is None else Text(image_marker(part, hidden[0])))
            case DocumentBlock():
                pieces.append(_document_segment(part, role, vision))
            case _:
                assert_never(part)
    merged: list[Segment] = []
    for position, piece in enumerate(pieces):
        last = merged[-1] if merged else None
        if isinstance(piece, Text) and isinstance(last, Text):
            glue = "" if position == 1 else PART_SEPARATOR
            merged[-1] = Text(last.text + glue + piece.text)
        else:
            merged.append(piece)
    return merged


def _summary_message(compaction: Compacted) -> RecordedMessage:
    block = TextBlock(text=SUMMARY_HEAD + compaction.summary)
    return RecordedMessage(
        message_id=compaction.through,
        role="user",
        started_at=compaction.timestamp,
        blocks=[RecordedBlock(block, None)],
        status="ended",
    )


def replay_window(
    messages: list[RecordedMessage], compaction: Compacted | None
) -> tuple[list[RecordedMessage], int | None]:
    """The messages replay sends, and where the summary stands among them (if anywhere).

    After a compaction: the system messages up to the boundary, the summary, then every
    message after the boundary.
    """
    if compaction is None:
        return messages, None
    boundary = next((i for i, m in enumerate(messages) if m.message_id == compaction.through), None)
    if boundary is None:  # cannot happen for a recorded compaction; replay everything
        return messages, None
    kept_system = [m for m in messages[: boundary + 1] if m.role == "system"]
    window = [*kept_system, _summary_message(compaction), *messages[boundary + 1 :]]
    return window, len(kept_system)


def _cleared_results(messages: list[RecordedMessage], keep: int | None) -> set[tuple[UUID, int]]:
    """(message id, block position) of every tool result whose output is cleared."""
    if keep is None:
        return set()
    results = [
        (m.message_id, i)
        for m in messages
        for i, b in enumerate(m.blocks)
        if isinstance(b.block, RESULTS)
    ]
    return set(results[: max(len(results) - keep, 0)])


def _unanswered_calls(messages: list[RecordedMessage]) -> set[str]:
    """Ids of the tool calls no result answers, made before the last message: the history has
    moved past them (a call in the last message may still be getting its result)."""
    answered = {
        b.block.tool_use_id for m in messages for b in m.blocks if isinstance(b.block, RESULTS)
    }
    return {
        b.block.id
        for m in messages[:-1]
        for b in m.blocks
        if isinstance(b.block, CALLS) and b.block.id not in answered
    }


def _message_plan(
    message: RecordedMessage,
    *,
    vision: bool,
    cleared: set[tuple[UUID, int]],
    summary: bool,
    unanswered: frozenset[str],
) -> PlannedMessage:
    hidden = _hidden_because(message.role, vision)
    parts: list[Part] = []
    for position, recorded in enumerate(message.blocks):
        block = recorded.block
        segments: list[Segment]
        if isinstance(block, DocumentBlock):
            segments = [_document_segment(block, message.role, vision)]
        elif isinstance(block, RESULTS) and (message.message_id, position) not in cleared:
            segments = _result_segments(block, recorded.tool_name, message.role, vision)
        else:
            cut = (message.message_id, position) in cleared
            segments = list(block_segments(block, recorded.tool_name, hidden, cleared=cut))
        kind: PartKind = "summary" if summary else block.type
        parts.append(Part(kind, tuple(segments)))
        if isinstance(block, CALLS) and block.id in unanswered:
            parts.append(Part("marker", (Text(NO_RESULT),)))
    blank = all(isinstance(s, Text) and not s.text.strip() for p in parts for s in p.segments)
    if blank:
        # Nothing but blank text: the marker alone says so (no blank lines before it).
        parts = [Part("marker", (Text(BLANK_MESSAGE if parts else NOTHING_RECORDED),))]
    if message.status == "interrupted":
        parts.append(Part("marker", (Text(interruption_marker(message.interrupt_reason)),)))
    return PlannedMessage(message.role, tuple(parts), None if summary else message.message_id)


LEAD = PlannedMessage("user", (Part("marker", (Text(HISTORY_STARTS),)),))
"""The user message replay puts first when the history opens with the assistant."""


def _lead_at(window: list[RecordedMessage]) -> int | None:
    """Where ``LEAD`` goes: before the first non-system message, if it is the assistant's
    (Bedrock, Mistral and chat templates refuse any other first turn than the user's)."""
    first = next((i for i, m in enumerate(window) if m.role != "system"), None)
    return first if first is not None and window[first].role == "assistant" else None


@dataclass(frozen=True, slots=True)
class Clearing:
    """Microcompact one tool result at a time: the plan keeping every result, then, clearing
    the oldest result still kept at each step, the one message that changes. After ``n``
    steps the plan is the one for ``keep_tool_results=results - n``."""

    planned: list[PlannedMessage]
    """The plan with every tool result kept (as ``keep_tool_results=None``)."""
    results: int
    """How many tool results the replayed window holds (so how many steps there are)."""
    steps: Iterator[tuple[int, PlannedMessage]]
    """Each step: the index in ``planned`` of the message that changes, and its new plan."""


@dataclass(frozen=True, slots=True)
class Folded:
    """A conversation's events folded once for replay: every plan, whatever the options, is
    made from this, so a caller asking for several (a budget search, a live round) reads and
    folds the events only once."""

    visible: list[RecordedMessage]
    """The messages no rewind withdrew, in start order."""
    compactions: list[Compacted]
    """The compactions through a visible message, in order (the newest wins)."""
    unanswered: frozenset[str]
    """Ids of the calls no result answers that the history has moved past."""

    def window(self, full: bool) -> tuple[list[RecordedMessage], int | None]:
        """The messages replay sends, and where the summary stands (see :func:`replay_window`)."""
        compaction = None if full or not self.compactions else self.compactions[-1]
        return replay_window(self.visible, compaction)

    def plan(self, options: ReplayOptions | None = None) -> list[PlannedMessage]:
        """What each wire message of the replay holds, part by part."""
        options = options or ReplayOptions()
        window, summary_at = self.window(options.full)
        cleared = _cleared_results(window, options.keep_tool_results)
        planned = [
            _message_plan(
                m,
                vision=options.vision,
                cleared=cleared,
                summary=i == summary_at,
                unanswered=self.unanswered,
            )
            for i, m in enumerate(window)
        ]
        lead = _lead_at(window)
        if lead is not None:
            planned.insert(lead, LEAD)
        return planned

    def clearing(self, options: ReplayOptions) -> Clearing:
        """Clear tool results oldest first, one per step (``options.keep_tool_results`` is not
        read: the steps go through every value of it)."""
        window, summary_at = self.window(options.full)
        planned = self.plan(replace(options, keep_tool_results=None))
        results = sum(isinstance(b.block, RESULTS) for m in window for b in m.blocks)
        return Clearing(planned, results, self._steps(window, summary_at, options.vision))

    def _steps(
        self, window: list[RecordedMessage], summary_at: int | None, vision: bool
    ) -> Iterator[tuple[int, PlannedMessage]]:
        lead = _lead_at(window)
        for index, message in enumerate(window):
            at = index + (lead is not None and index >= lead)
            positions = [p for p, b in enumerate(message.blocks) if isinstance(b.block, RESULTS)]
            for count in range(1, len(positions) + 1):
                cleared = {(message.message_id, p) for p in positions[:count]}
                yield (
                    at,
                    _message_plan(
                        message,
                        vision=vision,
                        cleared=cleared,
                        summary=index == summary_at,
                        unanswered=self.unanswered,
                    ),
                )


def fold(events: Iterable[Event]) -> Folded:
    """Fold a conversation's events (read once) into what replay plans from."""
    history = collect_history(events)
    visible = [m for m in history.messages if not m.withdrawn]
    shown = {m.message_id for m in visible}
    compactions = [c for c in history.compactions if c.through in shown]
    return Folded(visible, compactions, frozenset(_unanswered_calls(visible)))


def plan(events: Iterable[Event], options: ReplayOptions | None = None) -> list[PlannedMessage]:
    """What each wire message of the replay holds, part by part."""
    return fold(events).plan(options)


def _plain_text(segments: list[Segment]) -> str:
    """Segments known to hold no native image, as one string."""
    return BLOCK_SEPARATOR.join(s.text for s in segments if isinstance(s, Text))


def _openai_part(segment: Segment) -> JSONDict:
    match segment:
        case Text():
            return {"type": "text", "text": segment.text}
        case Image():
            url = segment.url or f"data:{segment.media_type};base64,{segment.data}"
            return {"type": "image_url", "image_url": {"url": url}}
        case Document() if segment.data is None:
            return {"type": "text", "text": segment.unsent}
        case Document():
            data = f"data:{segment.media_type};base64,{segment.data}"
            file = {"file_data": data, "filename": segment.name or "document.pdf"}
            return {"type": "file", "file": file}
        case _:
            assert_never(segment)


def _anthropic_block(segment: Segment) -> JSONDict:
    match segment:
        case Text():
            return {"type": "text", "text": segment.text}
        case Image():
            return {"type": "image", "source": anthropic_image_source(segment)}
        case Document():
            block: JSONDict = {"type": "document", "source": anthropic_document_source(segment)}
            if segment.name:
                block["title"] = segment.name
            if segment.context is not None:
                block["context"] = segment.context
            return block
        case _:
            assert_never(segment)


def openai_message(message: PlannedMessage) -> JSONDict:
    """One Chat Completions message: content a string, or parts when an image is shown."""
    segments = message.segments()
    if any(isinstance(s, Image | Document) for s in segments):
        parts = []
        for segment in segments:
            if isinstance(segment, Document) and segment.data is not None and segment.context:
                # A file part has no context field: the context goes as text before it.
                parts.append({"type": "text", "text": f"[{document_context(segment.context)}]"})
            parts.append(_openai_part(segment))
        return {"role": message.role, "content": parts}
    return {"role": message.role, "content": _plain_text(segments)}


def anthropic_content(message: PlannedMessage) -> list[JSONDict]:
    """One Messages API content list."""
    return [_anthropic_block(s) for s in message.segments()]


def render(planned: list[PlannedMessage], shape: Shape) -> JSONDict:
    """A plan in the provider's shape."""
    match shape:
        case "openai":
            return {"messages": [openai_message(m) for m in planned]}
        case "anthropic":
            system = [_plain_text(m.segments()) for m in planned if m.role == "system"]
            turns = [(m.role, anthropic_content(m)) for m in planned if m.role != "system"]
            if turns and turns[-1][0] == "assistant":
                # The Messages API refuses a final assistant turn ending in whitespace.
                last = turns[-1][1][-1]
                last["text"] = last["text"].rstrip()
            wire = [{"role": role, "content": content} for role, content in turns]
            joined = BLOCK_SEPARATOR.join(system)
            # No system prompt: the key is left out, never sent empty (issue 39 item 19).
            return {"system": joined, "messages": wire} if joined else {"messages": wire}
        case _:
            assert_never(shape)


def replay(
    events: Iterable[Event],
    *,
    options: ReplayOptions | None = None,
    shape: Shape | None = None,
    vision: bool | None = None,
    full: bool | None = None,
    keep_tool_results: int | None = None,
) -> JSONDict:
    """The conversation recorded in ``events`` as a request body fragment in the options'
    shape (see :class:`ReplayOptions`; each keyword given replaces its field of ``options``).
    """
    checked = replay_options(
        options, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
    )
    return render(plan(events, checked), checked.shape)


# -- pressure, counted over the plan's parts -------------------------------------------------


def _segment_tokens(segment: Segment, shape: Shape, count: TokenCounter) -> int:
    if isinstance(segment, Text):
        return count(segment.text) if segment.text.strip() else 0
    if isinstance(segment, Document):
        if segment.data is None and shape == "openai":
            return count(segment.unsent)
        return document_tokens(segment)
    return image_tokens(segment, shape)


@dataclass(frozen=True, slots=True)
class _Counted:
    """One wire message's tokens: as sent, and by part kind (``framing`` last)."""

    sent: int
    by_kind: dict[str, int]


def _count_message(message: PlannedMessage, shape: Shape, count: TokenCounter) -> _Counted:
    sent = sum(_segment_tokens(s, shape, count) for s in message.segments())
    sent += MESSAGE_FRAMING_TOKENS
    by_kind: dict[str, int] = {}
    attributed = 0
    for part in message.parts:
        tokens = sum(_segment_tokens(s, shape, count) for s in part.segments)
        by_kind[part.kind] = by_kind.get(part.kind, 0) + tokens
        attributed += tokens
    by_kind["framing"] = by_kind.get("framing", 0) + sent - attributed
    return _Counted(sent, by_kind)


def _pressure(
    planned: list[PlannedMessage], counted: list[_Counted], tokenizer: str = ""
) -> Pressure:
    """The request's pressure from its messages' counts (in order, so ``by_kind`` lists the
    kinds in the order they first appear)."""
    by_kind: dict[str, int] = {}
    by_message: list[MessagePressure] = []
    for index, (message, counts) in enumerate(zip(planned, counted, strict=True)):
        for kind, tokens in counts.by_kind.items():
            by_kind[kind] = by_kind.get(kind, 0) + tokens
        by_message.append(MessagePressure(index, message.role, counts.sent))
    total = sum(m.tokens for m in by_message) + REQUEST_FRAMING_TOKENS
    by_kind["framing"] = by_kind.get("framing", 0) + REQUEST_FRAMING_TOKENS
    return Pressure(total=total, by_kind=by_kind, by_message=by_message, tokenizer=tokenizer)


def measure(
    planned: list[PlannedMessage], shape: Shape, count: TokenCounter, tokenizer: str = ""
) -> Pressure:
    """Count the tokens of a replay plan as ``shape`` sends it."""
    return _pressure(planned, [_count_message(m, shape, count) for m in planned], tokenizer)


def fit_keep(
    clearing: Clearing, shape: Shape, count: TokenCounter, max_tokens: int
) -> tuple[int | None, Pressure]:
    """The most tool results microcompact can keep with the request within ``max_tokens``.

    Returns ``None`` when everything fits as it is; with the pressure of the request at that
    setting. When no setting fits, returns the one whose request is smallest (the most kept
    among equals), which need not be ``0``: clearing a short output can add tokens (its
    marker is longer). So the count is not monotone in ``keep``: rather than search, this
    clears results oldest first, one at a time, recounting only the message that changed,
    and stops at the first request that fits. So every message is planned and counted about
    once, not once per candidate ``keep``.
    """
    planned = list(clearing.planned)
    counted = [_count_message(m, shape, count) for m in planned]
    total = sum(c.sent for c in counted) + REQUEST_FRAMING_TOKENS
    if total <= max_tokens:
        return None, _pressure(planned, counted)
    whole = list(planned), list(counted)
    steps: list[tuple[int, PlannedMessage, _Counted]] = []
    best, best_total = 0, total
    for cleared, (index, message) in enumerate(clearing.steps, 1):
        counts = _count_message(message, shape, count)
        total += counts.sent - counted[index].sent
        planned[index], counted[index] = message, counts
        if total <= max_tokens:
            return clearing.results - cleared, _pressure(planned, counted)
        steps.append((index, message, counts))
        if total < best_total:
            best, best_total = cleared, total
    # Nothing fits: rebuild the smallest request from the whole one and its first steps.
    planned, counted = whole
    for index, message, counts in steps[:best]:
        planned[index], counted[index] = message, counts
    return (None if best == 0 else clearing.results - best), _pressure(planned, counted)
