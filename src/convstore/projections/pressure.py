"""Context pressure: the tokens of exactly what replay sends, by block kind and by message.

Counting reads the same plan the renderers turn into wire messages, so every block is counted
as it is actually sent: text, tool input, tool output, reasoning, the markers that stand in
for unseen images or cleared output, the compaction summary, and images sent natively
(estimated from their pixel dimensions with the providers' published formulas).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from convstore.domain.images import dimensions
from convstore.projections.prose import Image, Text
from convstore.projections.replay import PlannedMessage, Shape

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
    role: str
    tokens: int


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


def _segment_tokens(segment: Text | Image, shape: Shape, count: TokenCounter) -> int:
    if isinstance(segment, Text):
        return count(segment.text) if segment.text.strip() else 0
    return image_tokens(segment, shape)


def measure(
    planned: list[PlannedMessage], shape: Shape, count: TokenCounter, tokenizer: str = ""
) -> Pressure:
    """Count the tokens of a replay plan as ``shape`` sends it."""
    by_kind: dict[str, int] = {}
    by_message: list[MessagePressure] = []
    for index, message in enumerate(planned):
        sent = sum(_segment_tokens(s, shape, count) for s in message.segments())
        sent += MESSAGE_FRAMING_TOKENS
        attributed = 0
        for part in message.parts:
            tokens = sum(_segment_tokens(s, shape, count) for s in part.segments)
            by_kind[part.kind] = by_kind.get(part.kind, 0) + tokens
            attributed += tokens
        by_kind["framing"] = by_kind.get("framing", 0) + sent - attributed
        by_message.append(MessagePressure(index, message.role, sent))
    total = sum(m.tokens for m in by_message) + REQUEST_FRAMING_TOKENS
    by_kind["framing"] = by_kind.get("framing", 0) + REQUEST_FRAMING_TOKENS
    return Pressure(total=total, by_kind=by_kind, by_message=by_message, tokenizer=tokenizer)


def fit_keep(
    planner: Callable[[int | None], list[PlannedMessage]],
    shape: Shape,
    count: TokenCounter,
    max_tokens: int,
    results: int,
) -> tuple[int | None, Pressure]:
    """The most tool results microcompact can keep with the request within ``max_tokens``.

    ``planner(keep)`` plans the replay keeping ``keep`` results (``None``: all of them), and
    ``results`` is how many there are. Clearing older output never adds tokens, so a binary
    search finds the largest fitting ``keep``. Returns ``None`` when everything fits as it
    is, and ``0`` (every output cleared) when even that does not fit; with the pressure of
    the request at that setting.
    """
    whole = measure(planner(None), shape, count)
    if whole.total <= max_tokens:
        return None, whole
    low, high = 0, results  # low: candidate floor; the answer is in [0, results]
    best = measure(planner(0), shape, count)
    while low < high:
        middle = (low + high + 1) // 2
        pressure = measure(planner(middle), shape, count)
        if pressure.total <= max_tokens:
            low, best = middle, pressure
        else:
            high = middle - 1
    return low, best
