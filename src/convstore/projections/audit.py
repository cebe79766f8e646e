"""Facts the audit read model records about each block: pure functions, no I/O.

The rows themselves are written by :mod:`convstore.audit.db`; what each block
contributes (its searchable text, its size, the facts of its images) is decided here, so a
rebuild and an incremental catch-up cannot disagree.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import assert_never

from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.images import dimensions
from convstore.projections.prose import tool_input_json, tool_output_text


@dataclass(frozen=True, slots=True)
class ImageFacts:
    """An image as the audit sees it: what it is, how big, and a hash to find repeats."""

    part: int | None
    """Position inside a tool result's content, or ``None`` for an image block of its own."""
    sha256: str | None
    """Of the image's bytes; ``None`` for an image given by URL (never fetched)."""
    media_type: str | None
    byte_size: int
    width: int | None
    height: int | None


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """One block's searchable text, its size in bytes, and the images it holds."""

    kind: str
    text: str | None
    byte_size: int
    images: tuple[ImageFacts, ...] = ()


def image_facts(image: ImageBlock, part: int | None = None) -> ImageFacts:
    """Hash, size and pixel dimensions of an image (none of them for an image given by URL)."""
    if image.url is not None:
        return ImageFacts(part, None, image.media_type, 0, None, None)
    raw = image.raw_bytes()
    size = dimensions(raw)
    return ImageFacts(
        part=part,
        sha256=hashlib.sha256(raw).hexdigest(),
        media_type=image.media_type,
        byte_size=len(raw),
        width=size[0] if size else None,
        height=size[1] if size else None,
    )


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def block_facts(block: Block) -> BlockFacts:
    """What the audit records of one block."""
    match block:
        case TextBlock() | ReasoningBlock():
            return BlockFacts(block.type, block.text, _utf8_size(block.text))
        case ToolUseBlock():
            text = f"{block.name}({tool_input_json(block)})"
            return BlockFacts(block.type, text, _utf8_size(text))
        case ToolResultBlock():
            text = tool_output_text(block)
            images: tuple[ImageFacts, ...] = ()
            if not isinstance(block.content, str):
                images = tuple(
                    image_facts(part, index)
                    for index, part in enumerate(block.content)
                    if isinstance(part, ImageBlock)
                )
            size = _utf8_size(text) + sum(image.byte_size for image in images)
            return BlockFacts(block.type, text, size, images)
        case ImageBlock():
            facts = image_facts(block)
            return BlockFacts(block.type, None, facts.byte_size, (facts,))
        case DocumentBlock():
            # Its name and (a text document's) text are searchable; a binary's bytes are not.
            found = [t for t in (block.name, block.text) if t is not None]
            return BlockFacts(block.type, "\n".join(found) or None, block.byte_size)
        case _:
            assert_never(block)
