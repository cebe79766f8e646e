"""A conversation as a readable Markdown transcript: roles, blocks, tool rounds, images.

A pure function of the events. Each message is a heading with its number, role and (when it
did not simply end, or a rewind withdrew it) its status; text passes through as the Markdown
it usually is; reasoning is a quote; tool calls and results are fenced blocks (the fence is
longer than any run of backticks inside, so no content can close it early); a compaction is a
ruled note after the last message it replaces. A call the provider ran itself (and its result)
says so in its heading line, with its MCP server when it has one; the provider's own payload is
kept in the record, not written here. Sources a text's annotations cite follow it on one line,
and documents inside a tool's output read as documents do. Images become references to files
the caller writes (the :class:`ImageFile` list says which) or, with no place for files,
one-line markers. A message's recorded metadata (model, tokens, stop reason) follows its
heading in italics.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import assert_never
from uuid import UUID

from convstore.domain.blocks import (
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
)
from convstore.domain.events import ConversationStarted, Event, happened
from convstore.engine.plan import interruption_marker
from convstore.projections.messages import RecordedMessage, collect_history
from convstore.projections.prose import (
    HOSTED,
    describe_meta,
    document_caption,
    document_context,
    hosted_mark,
    reasoning_text,
    source_claim,
    sources_line,
    text_prose,
)


@dataclass(frozen=True, slots=True)
class ImageFile:
    """An image the transcript refers to: write ``data`` (base64) to ``path``."""

    path: str
    """Relative to the transcript: ``<image directory>/image-<n>.<ext>``."""
    data: str


@dataclass(slots=True)
class Transcript:
    """The Markdown text and the image files it refers to."""

    text: str
    images: list[ImageFile] = field(default_factory=list)


def markdown_transcript(events: Iterable[Event], *, image_dir: str | None = None) -> Transcript:
    """The conversation as Markdown.

    ``image_dir`` is the directory (relative to the transcript) images are written to; with
    ``None`` each image becomes a marker instead and :attr:`Transcript.images` stays empty.
    """
    started: list[ConversationStarted] = []

    def note_start(stream: Iterable[Event]) -> Iterable[Event]:
        for event in stream:
            if isinstance(event, ConversationStarted):
                started.append(event)
            yield event

    history = collect_history(note_start(events))
    writer = _Writer(image_dir)
    if started:
        writer.head(started[0])
    through: dict[UUID, list[str]] = {}
    for compaction in history.compactions:
        through.setdefault(compaction.through, []).append(compaction.summary)
    for number, message in enumerate(history.messages, 1):
        writer.message(number, message)
        for summary in through.get(message.message_id, []):
            writer.compaction(summary)
    return Transcript("\n".join(writer.lines).rstrip("\n") + "\n", writer.images)


def _hosted(block: AnyToolUse | AnyToolResult) -> str:
    """The mark a hosted call or result carries in its heading line (none for the caller's
    own), and a note that the provider's own payload is kept (never shown here)."""
    match block:
        case HostedToolUseBlock():
            mark = f" · {hosted_mark(block.server)}"
        case HostedToolResultBlock():
            mark = f" · {HOSTED}"
        case ToolUseBlock() | ToolResultBlock():
            return ""
        case _:
            assert_never(block)
    return mark + (" · provider data kept" if block.provider_data else "")


def fenced(text: str, info: str = "") -> str:
    """``text`` in a code fence no run of backticks inside it can close."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def quoted(text: str) -> str:
    """``text`` as a Markdown block quote, every line of it."""
    return "\n".join(f"> {line}".rstrip() for line in text.split("\n"))


class _Writer:
    def __init__(self, image_dir: str | None) -> None:
        self.image_dir = image_dir
        self.lines: list[str] = []
        self.images: list[ImageFile] = []

    def emit(self, *paragraphs: str) -> None:
        for paragraph in paragraphs:
            self.lines.extend((paragraph, ""))

    def head(self, started: ConversationStarted) -> None:
        self.emit(f"# {started.title or 'Conversation'}")
        facts = [
            f"conversation `{started.originator_id}`",
            f"started {happened(started):%Y-%m-%d %H:%M:%S} UTC",
        ]
        if started.parent_id is not None:
            facts.append(f"branched from `{started.parent_id}`")
        if started.source is not None:
            facts.append(f"imported from `{started.source}`")
        self.emit(" · ".join(facts))

    def message(self, number: int, message: RecordedMessage) -> None:
        status = {"ended": "", "open": " · never ended", "interrupted": " · interrupted"}
        withdrawn = " · withdrawn by a rewind (not replayed)" if message.withdrawn else ""
        claim = source_claim(message.claimed_at)
        stamp = f" · {message.started_at:%Y-%m-%d %H:%M:%S} UTC{claim}"
        self.emit(f"## {number} · {message.role}{status[message.status]}{withdrawn}{stamp}")
        if message.meta is not None and (described := describe_meta(message.meta)):
            self.emit(f"*{described}*")
        if not message.blocks:
            self.emit("*(nothing was recorded for this message)*")
        for recorded in message.blocks:
            self.block(recorded.block, recorded.tool_name)
        if message.status == "interrupted":
            self.emit(f"*{interruption_marker(message.interrupt_reason)}*")

    def compaction(self, summary: str) -> None:
        self.emit(
            "---",
            "**Compacted.** Replay starts here with this summary in place of the messages above:",
            quoted(summary),
            "---",
        )

    def block(self, block: Block, tool_name: str | None) -> None:
        match block:
            case TextBlock():
                self.emit(block.text if block.text.strip() else "*(blank text)*")
                line = sources_line(block.annotations)
                if line is not None:
                    self.emit(line)
            case ReasoningBlock():
                self.emit(quoted(f"**Reasoning**\n\n{reasoning_text(block)}"))
            case ToolUseBlock() | HostedToolUseBlock():
                if isinstance(block.input, str):
                    body, info = block.input, ""
                else:
                    body, info = json.dumps(block.input, indent=2, ensure_ascii=False), "json"
                self.emit(
                    f"**Tool use** `{block.name}` · call `{block.id}`{_hosted(block)}",
                    fenced(body, info),
                )
            case ToolResultBlock() | HostedToolResultBlock():
                label = "Error" if block.is_error else "Result"
                name = tool_name or block.name or "unknown"
                self.emit(f"**{label}** `{name}` · call `{block.tool_use_id}`{_hosted(block)}")
                parts = (
                    [TextBlock(text=block.content)]
                    if isinstance(block.content, str)
                    else block.content
                )
                # In the order recorded: each run of text parts one fence, each image and
                # document where it stood (an output of only those has no empty fence).
                texts: list[str] = []
                for part in parts:
                    if isinstance(part, TextBlock):
                        texts.append(text_prose(part))
                        continue
                    if texts:
                        self.emit(fenced("\n".join(texts)))
                        texts = []
                    if isinstance(part, ImageBlock):
                        self.emit(self.image(part))
                    else:
                        self.document(part)
                if texts:
                    self.emit(fenced("\n".join(texts)))
            case ImageBlock():
                self.emit(self.image(block))
            case DocumentBlock():
                self.document(block)
            case _:
                assert_never(block)

    def document(self, document: DocumentBlock) -> None:
        """A document, at the top level or inside a tool's output: its caption, its text."""
        self.emit(f"**Document** {document_caption(document)}")
        if document.context is not None:
            self.emit(f"*{document_context(document.context)}*")
        if document.text is not None:
            self.emit(fenced(document.text))

    def image(self, image: ImageBlock) -> str:
        kind = image.media_type or "image"
        if image.data is None:
            return f"![{kind} by URL](<{image.url}>)"
        size = f"{image.byte_size:,} bytes"
        if self.image_dir is None:
            return f"*[image: {kind}, {size}]*"
        assert image.media_type is not None
        extension = image.media_type.split("/")[1]  # png, jpeg, gif, webp
        path = f"{self.image_dir}/image-{len(self.images) + 1}.{extension}"
        self.images.append(ImageFile(path, image.data))
        return f"![{kind}, {size}](<{path}>)"
