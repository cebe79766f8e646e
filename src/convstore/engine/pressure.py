"""Context pressure: the tokens of exactly what replay sends, by block kind and by message.

Counting reads the replay engine's own render (:class:`convstore.engine.render.Plan`): each
message's content exactly as the wire carries it, and the same content block by block for the
breakdown. So every block is counted as it is actually sent: text, tool input, tool output,
reasoning, the markers that stand in for unseen images or cleared output, the compaction
summary, and images sent natively (estimated from their pixel dimensions with the providers'
published formulas).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from convstore.domain.images import dimensions
from convstore.engine.plan import Shape
from convstore.engine.render import Content, Plan, Source
from convstore.projections.prose import Document, Image

TokenCounter = Callable[[str], int]

MESSAGE_FRAMING_TOKENS = 3
"""Tokens each message costs beyond its content (role and delimiters), per OpenAI's guide."""
REQUEST_FRAMING_TOKENS = 3
"""Tokens every request costs beyond its messages (the reply's priming)."""

ASSUMED_SIZE = (1024, 1024)
"""Pixel size assumed for an image whose header gives none, or that is given by URL."""


def openai_image_tokens(width: int, height: int) -> int:
    """OpenAI's published cost of an image at detail ``high`` (what ``auto`` picks for large ones).

    Fit within 2048 x 2048, scale the shortest side down to 768, then 170 tokens per 512 px
    tile plus 85.
    """
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def anthropic_image_tokens(width: int, height: int) -> int:
    """Anthropic's published estimate: width x height / 750, after fitting the long edge
    within 1568 px (larger images are scaled down before the model sees them)."""
    scale = min(1.0, 1568 / max(width, height))
    return math.ceil(width * scale * height * scale / 750)


PDF_PAGE_TOKENS = 2_250
"""Tokens assumed per PDF page sent natively: the middle of Anthropic's published 1,500 to
3,000 per page (each page crosses as its text and an image of it; OpenAI's file inputs do the
same)."""

_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")


def pdf_pages(data: bytes) -> int:
    """Pages of a PDF, counted from its ``/Type /Page`` objects (at least 1: a PDF by URL, or
    one whose pages sit in compressed object streams, counts as one page)."""
    return max(1, len(_PAGE.findall(data)))


def document_tokens(document: Document) -> int:
    """Tokens a natively sent PDF costs: :data:`PDF_PAGE_TOKENS` per page (in both shapes).
    When the shape sends its marker instead (a PDF by URL in the OpenAI shape) the marker is
    counted as text by the caller."""
    raw = base64.b64decode(document.data) if document.data is not None else b""
    return PDF_PAGE_TOKENS * pdf_pages(raw)


def image_tokens(image: Image, shape: Shape) -> int:
    """Tokens a natively sent image costs in ``shape``."""
    raw = base64.b64decode(image.data) if image.data is not None else b""
    width, height = dimensions(raw) or ASSUMED_SIZE
    if shape == "openai":
        return openai_image_tokens(width, height)
    return anthropic_image_tokens(width, height)


@dataclass(frozen=True, slots=True)
class MessagePressure:
    """One wire message's share."""

    index: int
    """Its place in replay order, counting from 0, system messages included (with the OpenAI
    shape, the request's ``messages[index]``)."""
    role: str
    tokens: int

    @property
    def number(self) -> int:
        """Its number as a person reads it: counting from 1, as `show` numbers messages."""
        return self.index + 1


@dataclass(frozen=True, slots=True)
class Pressure:
    """The token count of a replayed request, with its breakdown.

    ``by_kind`` sums to ``total``: each block kind, ``summary``, ``marker``, and ``framing``
    (message delimiters, the blank lines joining blocks, and tokenizer effects at joins).
    """

    total: int
    by_kind: dict[str, int] = field(default_factory=dict)
    by_message: list[MessagePressure] = field(default_factory=list)
    tokenizer: str = ""


def _item_tokens(item: str | Image | Document, shape: Shape, count: TokenCounter) -> int:
    if isinstance(item, str):
        return count(item) if item.strip() else 0
    if isinstance(item, Document):
        if item.data is None and shape == "openai":
            return count(item.unsent)
        return document_tokens(item)
    return image_tokens(item, shape)


def _content_tokens(content: Content, shape: Shape, count: TokenCounter) -> int:
    if isinstance(content, str):
        return count(content) if content.strip() else 0
    return sum(_item_tokens(s, shape, count) for s in content)


@dataclass(frozen=True, slots=True)
class _Counted:
    """One wire message's tokens: as sent, and by part kind (``framing`` last)."""

    role: str
    sent: int
    by_kind: dict[str, int]


def _count_message(
    planned: Plan, source: Source, cleared_from: int, shape: Shape, count: TokenCounter
) -> _Counted:
    content = planned.content(source, cleared_from)
    sent = _content_tokens(content, shape, count) + MESSAGE_FRAMING_TOKENS
    by_kind: dict[str, int] = {}
    attributed = 0
    for kind, item in planned.parts(source, cleared_from):
        tokens = _item_tokens(item, shape, count)
        by_kind[kind] = by_kind.get(kind, 0) + tokens
        attributed += tokens
    by_kind["framing"] = by_kind.get("framing", 0) + sent - attributed
    role = "user" if isinstance(source, str) else source.role
    return _Counted(role, sent, by_kind)


def _pressure(counted: list[_Counted], tokenizer: str = "") -> Pressure:
    """The request's pressure from its messages' counts (in order, so ``by_kind`` lists the
    kinds in the order they first appear)."""
    by_kind: dict[str, int] = {}
    by_message: list[MessagePressure] = []
    for index, counts in enumerate(counted):
        for kind, tokens in counts.by_kind.items():
            by_kind[kind] = by_kind.get(kind, 0) + tokens
        by_message.append(MessagePressure(index, counts.role, counts.sent))
    total = sum(m.tokens for m in by_message) + REQUEST_FRAMING_TOKENS
    by_kind["framing"] = by_kind.get("framing", 0) + REQUEST_FRAMING_TOKENS
    return Pressure(total=total, by_kind=by_kind, by_message=by_message, tokenizer=tokenizer)


def _count(planned: Plan, shape: Shape, count: TokenCounter) -> list[_Counted]:
    return [
        _count_message(planned, source, cleared_from, shape, count)
        for source, cleared_from in zip(planned.window, planned.cleared_from(), strict=True)
    ]


def measure(planned: Plan, shape: Shape, count: TokenCounter, tokenizer: str = "") -> Pressure:
    """Count the tokens of what replay sends for a plan, as ``shape`` sends it."""
    return _pressure(_count(planned, shape, count), tokenizer)


def fit_keep(
    planned: Plan, shape: Shape, count: TokenCounter, max_tokens: int
) -> tuple[int | None, Pressure]:
    """The most tool results microcompact can keep with the request within ``max_tokens``
    (``planned`` is the plan keeping every result: its ``keep_tool_results`` is ``None``).

    Returns ``None`` when everything fits as it is; with the pressure of the request at that
    setting. When no setting fits, returns the one whose request is smallest (the most kept
    among equals), which need not be ``0``: clearing a short output can add tokens (its
    marker is longer). So the count is not monotone in ``keep``: rather than search, this
    clears results oldest first, one at a time, recounting only the message that changed,
    and stops at the first request that fits. So every message is rendered and counted about
    once, not once per candidate ``keep``.
    """
    counted = _count(planned, shape, count)
    total = sum(c.sent for c in counted) + REQUEST_FRAMING_TOKENS
    if total <= max_tokens:
        return None, _pressure(counted)
    results = sum(s.results for s in planned.window if not isinstance(s, str))
    whole = list(counted)
    steps: list[tuple[int, _Counted]] = []
    best, best_total = 0, total
    cleared = 0
    for index, source in enumerate(planned.window):
        if isinstance(source, str):
            continue
        for step in range(1, source.results + 1):
            cleared += 1
            counts = _count_message(planned, source, step, shape, count)
            total += counts.sent - counted[index].sent
            counted[index] = counts
            if total <= max_tokens:
                return results - cleared, _pressure(counted)
            steps.append((index, counts))
            if total < best_total:
                best, best_total = cleared, total
    # Nothing fits: rebuild the smallest request from the whole one and its first steps.
    counted = whole
    for index, counts in steps[:best]:
        counted[index] = counts
    return (None if best == 0 else results - best), _pressure(counted)
