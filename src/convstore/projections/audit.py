"""Facts the audit read model records about each block: pure functions, no I/O.

The rows themselves are written by :mod:`convstore.audit.db`; what each block
contributes (its searchable text, its size, the facts of its images and documents, those
inside a tool's output included) is decided here, so a
rebuild and an incremental catch-up cannot disagree.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import assert_never

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
from convstore.domain.images import dimensions
from convstore.projections.prose import tool_input_json, tool_output_size, tool_output_text


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
class DocumentFacts:
    """A document as the audit sees it: where it sits, what it is, how big, a hash of its
    bytes or text to find repeats, and where it came from when it is not here."""

    part: int | None
    """Position inside a tool result's content, or ``None`` for a document block of its own."""
    sha256: str | None
    """Of its decoded data, or of its text as UTF-8; ``None`` for a URL or a file id."""
    media_type: str | None
    name: str | None
    byte_size: int
    url: str | None
    file_id: str | None


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """One block's searchable text, its size in bytes, and the images and documents it
    holds."""

    kind: str
    text: str | None
    byte_size: int
    images: tuple[ImageFacts, ...] = ()
    documents: tuple[DocumentFacts, ...] = ()


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


def document_facts(document: DocumentBlock, part: int | None = None) -> DocumentFacts:
    """Hash and size of a document (a hash of none given by URL or file id)."""
    if document.data is not None:
        raw: bytes | None = base64.b64decode(document.data)
    elif document.text is not None:
        raw = document.text.encode("utf-8", "surrogatepass")
    else:
        raw = None
    return DocumentFacts(
        part=part,
        sha256=None if raw is None else hashlib.sha256(raw).hexdigest(),
        media_type=document.media_type,
        name=document.name,
        byte_size=document.byte_size,
        url=document.url,
        file_id=document.file_id,
    )


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def block_facts(block: Block) -> BlockFacts:
    """What the audit records of one block."""
    match block:
        case TextBlock() | ReasoningBlock():
            return BlockFacts(block.type, block.text, _utf8_size(block.text))
        case ToolUseBlock() | HostedToolUseBlock():
            text = f"{block.name}({tool_input_json(block)})"
            return BlockFacts(block.type, text, _utf8_size(text))
        case ToolResultBlock() | HostedToolResultBlock():
            parts = [] if isinstance(block.content, str) else list(enumerate(block.content))
            images = tuple(
                image_facts(part, index) for index, part in parts if isinstance(part, ImageBlock)
            )
            documents = tuple(
                document_facts(part, index)
                for index, part in parts
                if isinstance(part, DocumentBlock)
            )
            output = tool_output_text(block)
            return BlockFacts(block.type, output, tool_output_size(block), images, documents)
        case ImageBlock():
            facts = image_facts(block)
            return BlockFacts(block.type, None, facts.byte_size, (facts,))
        case DocumentBlock():
            # Its name and (a text document's) text are searchable; a binary's bytes are not.
            found = [t for t in (block.name, block.text) if t is not None]
            searched = "\n".join(found) or None
            facts_of = (document_facts(block),)
            return BlockFacts(block.type, searched, block.byte_size, documents=facts_of)
        case _:
            assert_never(block)
