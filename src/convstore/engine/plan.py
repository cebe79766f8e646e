"""Replay: the recorded conversation as provider wire messages.

A pure function of the events and of what the caller says about the request: whether the
model can see images, and (optionally) how much to compact. Exactly one wire message per
stored message in the replayed window, in order. Every block crosses as prose; no tool roles,
no tool-call ids and no tool blocks appear, so a tool round cut off mid-turn is a plain
recorded fact that can never make a request fail.

Replay runs in two steps. :func:`plan` decides what each wire message holds, part by part
(each part is one block's prose, or a marker); the renderers turn a plan into the OpenAI or
Anthropic shape. Context-pressure counting reads the same plan, so it counts exactly what is
sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias, assert_never
from uuid import UUID

from convstore.domain.blocks import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from convstore.domain.errors import InvalidInput
from convstore.domain.events import Compacted, Event, Role
from convstore.domain.parsing import describe_value, parse_flag, parse_optional_count
from convstore.projections.messages import RecordedBlock, RecordedMessage, collect_history
from convstore.projections.prose import (
    BLOCK_SEPARATOR,
    Image,
    Segment,
    Text,
    block_segments,
    merge_text,
)
from convstore.projections.wording import BLANK_MESSAGE as BLANK_MESSAGE  # noqa: PLC0414 - re-exported
from convstore.projections.wording import CANNOT_SEE as CANNOT_SEE  # noqa: PLC0414 - re-exported
from convstore.projections.wording import NO_RESULT as NO_RESULT  # noqa: PLC0414 - re-exported
from convstore.projections.wording import NOTHING_RECORDED as NOTHING_RECORDED  # noqa: PLC0414 - re-exported
from convstore.projections.wording import SUMMARY_HEAD as SUMMARY_HEAD  # noqa: PLC0414 - re-exported
from convstore.projections.wording import interruption_marker as interruption_marker  # noqa: PLC0414 - re-exported

Shape: TypeAlias = Literal["openai", "anthropic"]
SHAPES: tuple[Shape, ...] = ("openai", "anthropic")

JSONDict: TypeAlias = dict[str, Any]

PartKind: TypeAlias = Literal[
    "text", "tool_use", "tool_result", "reasoning", "image", "summary", "marker"
]


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
        joined = merge_text([s for p in self.parts for s in p.segments], BLOCK_SEPARATOR)
        return [s for s in joined if not (isinstance(s, Text) and not s.text.strip())]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """What the caller says about the request; everything replay varies on.

    One value for :meth:`Store.replay <convstore.Store.replay>`, ``live_request``,
    ``pressure`` and ``fit_tool_results`` (and the CLI's ``--shape``, ``--vision``, ``--full``
    and ``--keep-tool-results``), so a request and its token count are asked for alike.
    Checked when made: a wrong value is :class:`~convstore.InvalidInput`, naming the field.
    Vary one with :func:`dataclasses.replace`.
    """

    shape: Shape = "openai"
    """The provider wire shape: OpenAI Chat Completions or Anthropic Messages."""
    vision: bool = False
    """Whether the model can see images (else a marker says one was not shown)."""
    full: bool = False
    """Ignore compaction: replay every stored message."""
    keep_tool_results: int | None = None
    """Microcompact: clear the output of every tool result but the newest N."""

    def __post_init__(self) -> None:
        parse_shape(self.shape)
        parse_flag(self.vision, "vision")
        parse_flag(self.full, "full")
        parse_optional_count(self.keep_tool_results, "keep_tool_results")


def parse_shape(shape: object) -> Shape:
    """A wire shape named by the caller, or :class:`InvalidInput` listing the shapes."""
    for known in SHAPES:
        if shape == known:
            return known
    msg = f"unknown shape {describe_value(shape)}; use one of: {', '.join(SHAPES)}"
    raise InvalidInput(msg)


def replay_options(
    options: ReplayOptions | None = None,
    *,
    shape: Shape | str | None = None,
    vision: bool | None = None,
    full: bool | None = None,
    keep_tool_results: int | None = None,
) -> ReplayOptions:
    """``options`` (default :class:`ReplayOptions()`) with each keyword that is given (not
    ``None``) put in place of its field: the keywords are a shorthand kept beside
    ``options=``."""
    if options is None:
        options = ReplayOptions()
    elif not isinstance(options, ReplayOptions):
        msg = f"options must be a ReplayOptions, not {describe_value(options)}"
        raise InvalidInput(msg)
    if shape is None and vision is None and full is None and keep_tool_results is None:
        return options
    return ReplayOptions(
        shape=options.shape if shape is None else parse_shape(shape),
        vision=options.vision if vision is None else vision,
        full=options.full if full is None else full,
        keep_tool_results=(
            options.keep_tool_results if keep_tool_results is None else keep_tool_results
        ),
    )


def _hidden_because(role: Role, vision: bool) -> str | None:
    """Why images in a message of ``role`` are not sent natively, or ``None`` if they are.

    Both providers accept images in user messages only.
    """
    if not vision:
        return CANNOT_SEE
    if role == "user":
        return None
    return f"{role} messages cannot carry images"


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
        if isinstance(b.block, ToolResultBlock)
    ]
    return set(results[: max(len(results) - keep, 0)])


def _unanswered_calls(messages: list[RecordedMessage]) -> set[str]:
    """Ids of the tool calls no result answers, made before the last message: the history has
    moved past them (a call in the last message may still be getting its result)."""
    answered = {
        b.block.tool_use_id
        for m in messages
        for b in m.blocks
        if isinstance(b.block, ToolResultBlock)
    }
    return {
        b.block.id
        for m in messages[:-1]
        for b in m.blocks
        if isinstance(b.block, ToolUseBlock) and b.block.id not in answered
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
        segments = block_segments(
            recorded.block,
            recorded.tool_name,
            hidden,
            cleared=(message.message_id, position) in cleared,
        )
        kind: PartKind = "summary" if summary else recorded.block.type
        parts.append(Part(kind, tuple(segments)))
        block = recorded.block
        if isinstance(block, ToolUseBlock) and block.id in unanswered:
            parts.append(Part("marker", (Text(NO_RESULT),)))
    blank = all(isinstance(s, Text) and not s.text.strip() for p in parts for s in p.segments)
    if blank:  # its texts are all whitespace: the marker stands in for them
        parts = [Part("marker", (Text(BLANK_MESSAGE if parts else NOTHING_RECORDED),))]
    if message.status == "interrupted":
        parts.append(Part("marker", (Text(interruption_marker(message.interrupt_reason)),)))
    return PlannedMessage(message.role, tuple(parts), None if summary else message.message_id)


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
        return [
            _message_plan(
                m,
                vision=options.vision,
                cleared=cleared,
                summary=i == summary_at,
                unanswered=self.unanswered,
            )
            for i, m in enumerate(window)
        ]

    def clearing(self, options: ReplayOptions) -> Clearing:
        """Clear tool results oldest first, one per step (``options.keep_tool_results`` is not
        read: the steps go through every value of it)."""
        window, summary_at = self.window(options.full)
        planned = self.plan(replace(options, keep_tool_results=None))
        results = sum(isinstance(b.block, ToolResultBlock) for m in window for b in m.blocks)
        return Clearing(planned, results, self._steps(window, summary_at, options.vision))

    def _steps(
        self, window: list[RecordedMessage], summary_at: int | None, vision: bool
    ) -> Iterator[tuple[int, PlannedMessage]]:
        for index, message in enumerate(window):
            positions = [
                p for p, b in enumerate(message.blocks) if isinstance(b.block, ToolResultBlock)
            ]
            for count in range(1, len(positions) + 1):
                cleared = {(message.message_id, p) for p in positions[:count]}
                yield (
                    index,
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
        case _:
            assert_never(segment)


def anthropic_image_source(image: Image | ImageBlock) -> JSONDict:
    """The Messages API ``source`` of an image: by URL, or its base64 data."""
    if image.url is not None:
        return {"type": "url", "url": image.url}
    return {"type": "base64", "media_type": image.media_type, "data": image.data}


def _anthropic_block(segment: Segment) -> JSONDict:
    match segment:
        case Text():
            return {"type": "text", "text": segment.text}
        case Image():
            return {"type": "image", "source": anthropic_image_source(segment)}
        case _:
            assert_never(segment)


def openai_message(message: PlannedMessage) -> JSONDict:
    """One Chat Completions message: content a string, or parts when an image is shown."""
    segments = message.segments()
    if any(isinstance(s, Image) for s in segments):
        return {"role": message.role, "content": [_openai_part(s) for s in segments]}
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
            return {"system": BLOCK_SEPARATOR.join(system), "messages": wire}
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
