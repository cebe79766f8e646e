"""The prose form of every block kind, as the segments a wire message is built from.

A segment is either text or an image the model will be shown natively. The dispatch over block
kinds is a ``match`` ending in ``assert_never``: a new kind without a prose form fails
``mypy --strict``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias, assert_never

from pydantic import JsonValue

from convstore.domain.blocks import (
    PDF,
    AnyToolResult,
    AnyToolUse,
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_documents,
    block_images,
)
from convstore.domain.events import MessageMeta
from convstore.projections.wording import BLOCK_SEPARATOR as BLOCK_SEPARATOR  # noqa: PLC0414
from convstore.projections.wording import CANNOT_READ, NOT_NATIVE
from convstore.projections.wording import PART_SEPARATOR as PART_SEPARATOR  # noqa: PLC0414


@dataclass(frozen=True, slots=True)
class Text:
    """Text to send."""

    text: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image to send natively: base64 ``data`` of ``media_type``, or a ``url``."""

    media_type: str | None
    data: str | None
    url: str | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """A PDF to send natively: base64 ``data``, or a ``url``; ``name`` its file name, and
    ``unsent`` the marker a shape with no native form for it sends instead."""

    media_type: str | None
    data: str | None
    url: str | None
    name: str | None
    unsent: str
    context: str | None = None
    """What the sender said about the document, sent beside it."""


Segment: TypeAlias = Text | Image
"""What :func:`block_segments` gives: a document is always text there (its prose, or its
marker); only the replay engine sends one natively, as a :class:`Document`."""

Hidden: TypeAlias = tuple[str, str]
"""Why a message's images and PDFs are not sent natively (they complete the markers'
sentences): the images' reason, then the documents'."""


REDACTED_REASONING = "[encrypted by the provider: its content cannot be shown]"
"""The prose of reasoning the provider returned only in encrypted form (a redacted thinking
block, or a reasoning item with encrypted content and no summary)."""


def reasoning_text(block: ReasoningBlock) -> str:
    """What reasoning shows as: its text, or :data:`REDACTED_REASONING` when the provider gave
    it only encrypted (a redacted thinking block, or an encrypted reasoning item with no
    summary). Replay's prose and the Markdown transcript both read it here."""
    return shown_reasoning(block.text, block.redacted, block.encrypted_content)


def shown_reasoning(text: str, redacted: bool, encrypted_content: str | None) -> str:
    """:func:`reasoning_text` of a reasoning block's fields."""
    if (redacted or encrypted_content) and not text.strip():
        return REDACTED_REASONING
    return text


def image_marker(image: ImageBlock, why: str) -> str:
    """The text that stands where an image was not shown, saying so plainly."""
    if image.url is not None:
        kind = f"an {image.media_type} image" if image.media_type else "an image"
        return f"[Image not shown: {kind} (at {image.url}) was here, but {why}.]"
    return (
        f"[Image not shown: an {image.media_type} image ({image.byte_size:,} bytes) "
        f"was here, but {why}.]"
    )


def document_marker(document: DocumentBlock, why: str) -> str:
    """The text that stands where a document was not sent: its name, media type and size (or
    where it is), saying plainly that the model did not read it."""
    caption = document_caption(document)
    return f"[Document not read: {caption} was here, but {why}.{_context(document)}]"


def document_context(context: str) -> str:
    """A document's context as prose: what the sender said about it."""
    return f"Its context: {context}"


def _context(document: DocumentBlock) -> str:
    return "" if document.context is None else f" {document_context(document.context)}"


def document_caption(document: DocumentBlock) -> str:
    """A document named for people: its name, media type and size or where it is."""
    facts = [document.media_type or ("text/plain" if document.text is not None else "file")]
    if document.url is not None:
        facts.append(f"at {document.url}")
    elif document.file_id is not None:
        facts.append(f"file id {document.file_id}")
    else:
        facts.append(f"{document.byte_size:,} bytes")
    name = f"{document.name} " if document.name else ""
    return f"{name}({', '.join(facts)})"


def document_text(document: DocumentBlock) -> str:
    """The prose of a document given as text: a head naming it, then its text."""
    name = f" {document.name}" if document.name else ""
    told = f".{_context(document)}" if document.context is not None else ""
    head = f"[Document{name} ({document.media_type or 'text/plain'}){told}]"
    return f"{head}:\n{document.text}"


def document_native(document: DocumentBlock) -> bool:
    """Whether a document has a native form in some replayed shape: a PDF, by data or URL."""
    return document.media_type == PDF and (document.data is not None or document.url is not None)


HOSTED = "run by the provider"
"""What the prose of a hosted call and its result says: the provider ran it, not the caller."""


def hosted_mark(server: str | None) -> str:
    """What marks a hosted call: ``run by the provider``, and its MCP server when it has one
    (``run by the provider, MCP server docs``)."""
    return f"{HOSTED}, MCP server {server}" if server else HOSTED


def describe_meta(meta: MessageMeta, *, extra: bool = False) -> str:
    """A message's metadata on one line: model, usage, latency, stop reason, id, and with
    ``extra`` its extras (:func:`extra_json`). Extras are left out unless asked for: what a
    runtime keeps there (an importer's line ids, request ids) is bookkeeping, not what a
    person reading the transcript wants on every message."""
    parts = [meta.model or ""]
    usage = meta.usage
    if usage is not None:
        counted = [
            f"{value:,} {name.removesuffix('_tokens').replace('_', ' ')}"
            for name, value in usage
            if value is not None
        ]
        parts.append(" / ".join(counted) + " tokens" if counted else "")
    if meta.latency_ms is not None:
        parts.append(f"{meta.latency_ms:,.0f} ms")
    if meta.stop_reason:
        parts.append(f"stop: {meta.stop_reason}")
    if meta.provider_message_id:
        parts.append(f"id {meta.provider_message_id}")
    if extra:
        parts.append(extra_json(meta))
    return " · ".join(part for part in parts if part)


def extra_json(meta: MessageMeta) -> str:
    """A message's metadata extras as one line of JSON (keys sorted); ``""`` for none."""
    return json.dumps(meta.extra, ensure_ascii=False, sort_keys=True) if meta.extra else ""


def source_claim(claimed_at: datetime | None) -> str:
    """What follows a message's time when its source dated it later than the store recorded
    it (:attr:`~convstore.projections.messages.RecordedMessage.claimed_at`): the source's
    claim, shown as such; nothing otherwise."""
    if claimed_at is None:
        return ""
    return f" (the source dates it {claimed_at:%Y-%m-%d %H:%M:%S} UTC, after it was recorded)"


def tool_use_text(block: AnyToolUse) -> str:
    """A call's prose: ``Tool use: name(input)``; a hosted call says the provider ran it
    (``Tool use (run by the provider): web_search({…})``, with its MCP server when it has one)."""
    match block:
        case ToolUseBlock():
            return call_prose(block.name, block.input, hosted=False, server=None)
        case HostedToolUseBlock():
            return call_prose(block.name, block.input, hosted=True, server=block.server)
        case _:
            assert_never(block)


def call_prose(
    name: str, tool_input: dict[str, JsonValue] | str, *, hosted: bool, server: str | None
) -> str:
    """:func:`tool_use_text` of a call's fields (``hosted``: the provider ran it)."""
    shown = input_json(tool_input)
    if hosted:
        return f"Tool use ({hosted_mark(server)}): {name}({shown})"
    return f"Tool use: {name}({shown})"


def tool_result_head(block: AnyToolResult, tool_name: str | None) -> str:
    """What a result's prose starts with: ``Result (name): `` or ``Error (name): ``; a hosted
    call's result says the provider ran it (``Result (web_search, run by the provider): ``)."""
    match block:
        case ToolResultBlock():
            return result_head(block.is_error, tool_name or block.name, hosted=False)
        case HostedToolResultBlock():
            return result_head(block.is_error, tool_name or block.name, hosted=True)
        case _:
            assert_never(block)


def result_head(is_error: bool, name: str | None, *, hosted: bool) -> str:
    """:func:`tool_result_head` of a result's fields: ``name`` is the tool's resolved name."""
    label = "Error" if is_error else "Result"
    if hosted:
        return f"{label} ({name or 'unknown'}, {HOSTED}): "
    return f"{label} ({name or 'unknown'}): "


def annotation_source(annotation: dict[str, JsonValue]) -> str | None:
    """What one annotation on text cites, for people and for prose: ``title (url)``, the url,
    or the cited document's title or file name (read inside the object named by its type when
    it nests them, as Chat Completions does); ``None`` when it names no source (a
    ``file_path`` link, or a citation of a document given without a title)."""
    nested = annotation.get(str(annotation.get("type")))
    # Chat Completions nests a citation's fields under its type ("url_citation": {url, title}).
    fields = nested if isinstance(nested, dict) else annotation
    strings = {key: value for key, value in fields.items() if isinstance(value, str) and value}
    title = strings.get("title") or strings.get("document_title")
    url = strings.get("url")
    if url is not None:
        return f"{title} ({url})" if title else url
    return title or strings.get("filename") or strings.get("source")


def sources_line(annotations: list[dict[str, JsonValue]] | None) -> str | None:
    """The line replay adds after a text whose annotations cite sources:
    ``[Sources: A (https://a); B]``, each source once, in the order first cited; ``None``
    when none names one."""
    found = dict.fromkeys(
        source for source in map(annotation_source, annotations or ()) if source is not None
    )
    return f"[Sources: {'; '.join(found)}]" if found else None


def text_prose(block: TextBlock) -> str:
    """A text block's prose: the text, then the sources its annotations cite, on a line of
    their own (what the provider attached to the text is kept in the record either way)."""
    return prose_of_text(block.text, block.annotations)


def prose_of_text(text: str, annotations: list[dict[str, JsonValue]] | None) -> str:
    """:func:`text_prose` of a text block's fields."""
    line = sources_line(annotations) if annotations else None
    return text if line is None else f"{text}{PART_SEPARATOR}{line}"


def tool_input_json(block: AnyToolUse) -> str:
    """A tool call's input as compact JSON, keys in the order they were recorded; raw
    arguments that were not a JSON object are shown exactly as the model emitted them."""
    return input_json(block.input)


def input_json(tool_input: dict[str, JsonValue] | str) -> str:
    """:func:`tool_input_json` of a call's ``input`` field."""
    return tool_input if isinstance(tool_input, str) else _compact_json(tool_input)


_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` without building an encoder
per call (``dumps`` makes one whenever it is given options): a fold writes one per tool call."""


def _part_text(part: TextBlock | ImageBlock | DocumentBlock) -> str | None:
    match part:
        case TextBlock():
            return part.text
        case ImageBlock():
            return None
        case DocumentBlock():
            return part.text
        case _:
            assert_never(part)


def tool_output_text(block: AnyToolResult) -> str:
    """The text parts of a tool result's output (a text document's text included), joined by
    newlines; images and other documents left out."""
    if isinstance(block.content, str):
        return block.content
    texts = (_part_text(part) for part in block.content)
    return PART_SEPARATOR.join(text for text in texts if text is not None)


def tool_output_size(block: AnyToolResult) -> int:
    """Bytes of a tool result's output: its text as UTF-8 plus its decoded images and
    binary documents."""
    size = text_bytes(tool_output_text(block))
    binary = sum(document.byte_size for document in block_documents(block) if document.text is None)
    return size + sum(image.byte_size for image in block_images(block)) + binary


def text_bytes(text: str) -> int:
    """Bytes of an output's text as UTF-8 (a lone surrogate a tool returned counted as
    written)."""
    return len(text.encode("utf-8", "surrogatepass"))


def cleared_marker(block: AnyToolResult) -> str:
    """What stands in for a tool result's output that microcompact cleared."""
    return cleared_of(tool_output_size(block))


def cleared_of(size: int) -> str:
    """:func:`cleared_marker` of an output of ``size`` bytes."""
    return f"[Output cleared to save context: {size:,} bytes]"


def _image(image: ImageBlock, hidden_because: Hidden | None) -> Segment:
    if hidden_because is None:
        return Image(image.media_type, image.data, image.url)
    return Text(image_marker(image, hidden_because[0]))


def block_segments(
    block: Block,
    tool_name: str | None,
    hidden_because: Hidden | None,
    *,
    cleared: bool = False,
    document: Callable[[DocumentBlock], str] | None = None,
) -> list[Segment]:
    """The segments one block becomes.

    ``hidden_because`` is ``None`` when images may be sent natively (a PDF's marker then says
    the model cannot see documents: only the replay engine sends one), otherwise why images
    and PDFs are not (each completes its marker's sentence). ``cleared`` replaces a tool
    result's output (images included) with a marker giving its size. ``document`` words a
    document (at the top level or in a tool's output) for a reader other than a model, such
    as ``convstore show``; by default it is what replay sends when it cannot send it natively.
    """
    words = document or (lambda part: _document_prose(part, hidden_because))
    match block:
        case TextBlock():
            return [Text(text_prose(block))]
        case ReasoningBlock():
            return [Text(f"[Reasoning]: {reasoning_text(block)}")]
        case ToolUseBlock() | HostedToolUseBlock():
            return [Text(tool_use_text(block))]
        case ToolResultBlock() | HostedToolResultBlock():
            head = tool_result_head(block, tool_name)
            if cleared:
                return [Text(head + cleared_marker(block))]
            if isinstance(block.content, str):
                return [Text(head + block.content)]
            parts: list[Segment] = [Text(head)]
            parts.extend(_part_segment(part, hidden_because, words) for part in block.content)
            return merge_text(parts, PART_SEPARATOR, first_joins_bare=True)
        case ImageBlock():
            return [_image(block, hidden_because)]
        case DocumentBlock():
            return [Text(words(block))]
        case _:
            assert_never(block)


def _part_segment(
    part: TextBlock | ImageBlock | DocumentBlock,
    hidden_because: Hidden | None,
    words: Callable[[DocumentBlock], str],
) -> Segment:
    """One part of a tool's output as a segment (a document always as text here)."""
    match part:
        case TextBlock():
            return Text(text_prose(part))
        case ImageBlock():
            return _image(part, hidden_because)
        case DocumentBlock():
            return Text(words(part))
        case _:
            assert_never(part)


def _document_prose(block: DocumentBlock, hidden_because: Hidden | None) -> str:
    """A document as text only (replay's native form is the engine's)."""
    if block.text is not None:
        return document_text(block)
    if not document_native(block):
        return document_marker(block, NOT_NATIVE)
    return document_marker(block, CANNOT_READ if hidden_because is None else hidden_because[1])


def merge_text(
    segments: list[Segment], separator: str, *, first_joins_bare: bool = False
) -> list[Segment]:
    """Join runs of adjacent text segments with ``separator``.

    With ``first_joins_bare`` the first segment (a tool result's head) is joined to the next
    text with nothing between them.
    """
    merged: list[Segment] = []
    for position, segment in enumerate(segments):
        previous = merged[-1] if merged else None
        if isinstance(segment, Text) and isinstance(previous, Text):
            glue = "" if first_joins_bare and position == 1 else separator
            merged[-1] = Text(previous.text + glue + segment.text)
        else:
            merged.append(segment)
    return merged
