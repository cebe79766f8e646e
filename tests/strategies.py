"""Hypothesis strategies: valid blocks of every kind, and whole conversation histories.

Histories are lists of events made only by the domain's own commands (``Conversation.start``,
``record_message``, ``start_message``, ``append_block``, ``end_message``,
``interrupt_message``, ``compact``), each event folded into the writer state as it is
recorded, so every generated history is one the store could really hold. They cover every
role, empty messages, messages left open (a writer killed mid-turn), interrupted messages with
and without a reason, blocks landing in an earlier message that is still open, tool results
whose call is missing, parallel tool calls, calls the provider ran (hosted) with their result
in the same message or with none, text carrying the providers' annotations, documents inside
tool output, unicode and whitespace-only text, and compactions through any message.

Images are real: tiny but complete PNG (made here with ``zlib`` and ``struct``), JPEG, GIF and
WebP files, kept as the base64 text blocks carry.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias
from uuid import UUID

from hypothesis import strategies as st

from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolResultPart,
    ToolUseBlock,
)
from convstore.domain.conversation import Conversation
from convstore.domain.events import ROLES, Event, Role

# -- tiny real images ----------------------------------------------------------------------

MediaType: TypeAlias = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]


def png_bytes(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A complete 8-bit RGB PNG of one colour: signature, IHDR, one IDAT, IEND, with CRCs."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) & 0xFFFFFFFF
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the row's pixels
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# A 1x1 grey baseline JPEG (JFIF, one quantisation table, standard Huffman tables).
_JPEG_1X1 = (
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdA"
    "SFxOQERXRTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/wAALCAABAAEBAREA/8QAHwAAAQUBAQEBAQEAAAAA"
    "AAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEI"
    "I0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1"
    "dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi"
    "4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEBAAA/AOkr/9k="
)
# GIF87a, 1x1 and 2x2, each with a global colour table and the ';' trailer.
_GIF_1X1 = "R0lGODdhAQABAIEAAP+AAAAAAAAAAAAAACwAAAAAAQABAAAIBAABBAQAOw=="
_GIF_2X2 = "R0lGODdhAgACAIEAAACA/wAAAAAAAAAAACwAAAAAAgACAAAIBgABCAQQEAA7"
# WebP 1x1: one lossless (VP8L) and one lossy (VP8) file.
_WEBP_LOSSLESS_1X1 = "UklGRhwAAABXRUJQVlA4TBAAAAAvAAAAAAdQwP5H/wMR0f8A"
_WEBP_LOSSY_1X1 = (
    "UklGRjoAAABXRUJQVlA4IC4AAADwAQCdASoBAAEAAsBMJaACdLoB+AAAYgAA7PMr+b/8KtwxDNV/87BsS7XgAAAA"
)

TINY_IMAGES: dict[MediaType, tuple[str, ...]] = {
    "image/png": (
        _b64(png_bytes(1, 1, (255, 128, 0))),
        _b64(png_bytes(3, 2, (0, 64, 255))),
    ),
    "image/jpeg": (_JPEG_1X1,),
    "image/gif": (_GIF_1X1, _GIF_2X2),
    "image/webp": (_WEBP_LOSSLESS_1X1, _WEBP_LOSSY_1X1),
}
"""Base64 of tiny valid images, by media type."""

IMAGE_BLOCKS: tuple[ImageBlock, ...] = tuple(
    ImageBlock(media_type=media_type, data=data)
    for media_type, datas in TINY_IMAGES.items()
    for data in datas
)

# -- text ----------------------------------------------------------------------------------

WHITESPACE_TEXTS = ("", " ", "\n", "\t \n", "\u00a0", "\u3000 \u2003", "\r\n\r\n")
UNICODE_TEXTS = (
    "héllo wörld",
    "日本語のテキスト",
    "emoji 🚀🧪 and a ZWJ family 👩\u200d👩\u200d👧",
    "right-to-left \u202eأبجد\u202c",
    "combining e\u0301 and \u00e9",
    'quotes "double" and \\backslash\\',
    "line one\nline two\n\nline four",
    "Tool use: fake(not really a call)",
    "[Interrupted]",
)


def texts(max_size: int = 40) -> st.SearchStrategy[str]:
    """Any text: arbitrary unicode, plus whitespace-only and awkward samples more often."""
    return st.one_of(
        st.text(max_size=max_size),
        st.sampled_from(WHITESPACE_TEXTS),
        st.sampled_from(UNICODE_TEXTS),
    )


def tool_names() -> st.SearchStrategy[str]:
    """Tool names: mostly identifiers, sometimes any non-empty text (the domain allows it)."""
    return st.one_of(
        st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True),
        st.text(min_size=1, max_size=12),
    )


def json_values() -> st.SearchStrategy[Any]:
    """Any JSON value (finite floats only)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        texts(12),
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(texts(8), children, max_size=3),
        ),
        max_leaves=8,
    )


def tool_inputs() -> st.SearchStrategy[dict[str, Any]]:
    """A tool call's input: a JSON object."""
    return st.dictionaries(texts(10), json_values(), max_size=4)


# -- blocks --------------------------------------------------------------------------------


ANNOTATIONS: tuple[dict[str, Any], ...] = (
    # OpenAI Responses / Chat Completions
    {
        "type": "url_citation",
        "start_index": 0,
        "end_index": 4,
        "url": "https://example.com/a",
        "title": "Example A",
    },
    {"type": "file_citation", "file_id": "file-abc123", "filename": "notes.pdf", "index": 2},
    {"type": "file_path", "file_id": "file-xyz", "index": 0},
    # Anthropic
    {
        "type": "web_search_result_location",
        "url": "https://example.org/b",
        "title": "Example B",
        "encrypted_index": "EoYBCkYIBxgC",
        "cited_text": "the cited words",
    },
    {
        "type": "char_location",
        "cited_text": "quoted",
        "document_index": 0,
        "document_title": "Report",
        "start_char_index": 0,
        "end_char_index": 6,
    },
    {
        "type": "page_location",
        "cited_text": "p",
        "document_index": 1,
        "document_title": None,
        "start_page_number": 1,
        "end_page_number": 2,
    },
)
"""What providers attach to text, shaped as their SDK types give it: citations naming a source
(a URL and title, a document title, a file name) and some naming none."""


def text_blocks() -> st.SearchStrategy[TextBlock]:
    """Text blocks, including empty, whitespace-only and unicode text, some carrying the
    provider's annotations (cited sources, or none that name a source)."""
    annotated = st.builds(
        lambda text, annotations: TextBlock(text=text, annotations=annotations),
        texts(),
        st.lists(st.sampled_from(ANNOTATIONS), max_size=3),
    )
    return st.one_of(texts().map(lambda text: TextBlock(text=text)), annotated)


def reasoning_blocks() -> st.SearchStrategy[ReasoningBlock]:
    """Reasoning blocks, including empty, whitespace-only and unicode text, some carrying a
    provider signature or encrypted content, some redacted (encrypted only)."""
    plain = texts().map(lambda text: ReasoningBlock(text=text))
    signed = st.builds(
        lambda text, signature: ReasoningBlock(text=text, signature=signature),
        texts(),
        st.text(min_size=1, max_size=12),
    )
    redacted = st.text(min_size=1, max_size=12).map(
        lambda data: ReasoningBlock(text="", encrypted_content=data, redacted=True)
    )
    encrypted = st.builds(
        lambda text, data: ReasoningBlock(text=text, encrypted_content=data),
        texts(),
        st.text(min_size=1, max_size=12),
    )
    return st.one_of(plain, signed, redacted, encrypted)


IMAGE_URLS = ("https://example.com/cat.png", "http://img.example.org/a/b.jpg?x=1")
"""Addresses of images given by URL (never fetched)."""


def image_blocks() -> st.SearchStrategy[ImageBlock]:
    """Image blocks holding one of the tiny real images, or given by URL."""
    by_url = st.builds(
        lambda url, media_type: ImageBlock(url=url, media_type=media_type),
        st.sampled_from(IMAGE_URLS),
        st.none() | st.sampled_from(["image/png", "image/jpeg"]),
    )
    return st.one_of(st.sampled_from(IMAGE_BLOCKS), by_url)


TINY_PDF = base64.b64encode(
    b"%PDF-1.4\n1 0 obj <</Type /Pages /Kids [2 0 R] /Count 1>> endobj\n"
    b"2 0 obj <</Type /Page /Parent 1 0 R>> endobj\n%%EOF\n"
).decode()
"""Base64 of a tiny one-page PDF (a valid header and page tree; no content stream)."""


def document_blocks() -> st.SearchStrategy[DocumentBlock]:
    """Documents of every source: a PDF's data or URL (sent natively where they can be), text
    (crosses as prose), a file id, a binary that is not a PDF, a URL of unknown type."""
    names = st.none() | st.sampled_from(["report.pdf", "notes.txt", "näme with spaces"])
    contexts = st.none() | st.sampled_from(["Q3 figures, draft", "line one\nline two"])
    return st.one_of(
        st.builds(
            lambda n, c: DocumentBlock(
                media_type="application/pdf", data=TINY_PDF, name=n, context=c
            ),
            names,
            contexts,
        ),
        st.builds(
            lambda t, m, n, c: DocumentBlock(text=t, media_type=m, name=n, context=c),
            texts(),
            st.none() | st.just("text/markdown"),
            names,
            contexts,
        ),
        st.builds(
            lambda m, n, c: DocumentBlock(
                url="https://example.com/doc.pdf", media_type=m, name=n, context=c
            ),
            st.none() | st.just("application/pdf"),
            names,
            contexts,
        ),
        st.builds(lambda n: DocumentBlock(file_id="file-abc123", name=n), names),
        st.just(DocumentBlock(media_type="application/octet-stream", data="AAEC")),
    )


def tool_ids() -> st.SearchStrategy[str]:
    """Tool call ids, shaped like providers' or arbitrary non-empty text."""
    return st.one_of(
        st.from_regex(r"(call_|toolu_)[A-Za-z0-9]{1,8}", fullmatch=True),
        st.text(min_size=1, max_size=10),
    )


def tool_use_blocks(
    tool_id: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[ToolUseBlock]:
    """Tool calls with a JSON-object input, or raw arguments text that is not one (models
    emit it); ``tool_id`` draws the id (default: any)."""
    raw_arguments = st.sampled_from(['{"path": "a', "[1, 2]", "not json", ""]) | texts(12)
    return st.builds(
        lambda id_, name, input_: ToolUseBlock(id=id_, name=name, input=input_),
        tool_id if tool_id is not None else tool_ids(),
        tool_names(),
        st.one_of(tool_inputs(), raw_arguments),
    )


def tool_result_contents() -> st.SearchStrategy[str | list[ToolResultPart]]:
    """A tool result's content: a string, or a list of text, image and document parts."""
    part: st.SearchStrategy[ToolResultPart] = st.one_of(
        text_blocks(), image_blocks(), document_blocks()
    )
    return st.one_of(texts(), st.lists(part, max_size=3))


def tool_result_blocks(
    tool_use_id: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[ToolResultBlock]:
    """Tool results, errors or not, named or not; ``tool_use_id`` draws the call id."""
    return st.builds(
        lambda id_, content, is_error, name: ToolResultBlock(
            tool_use_id=id_, content=content, is_error=is_error, name=name
        ),
        tool_use_id if tool_use_id is not None else tool_ids(),
        tool_result_contents(),
        st.booleans(),
        st.none() | tool_names(),
    )


HOSTED_TOOLS = ("web_search", "web_fetch", "code_execution", "file_search", "image_generation")
"""Names of tools providers run themselves."""


def hosted_tool_use_blocks(
    tool_id: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[HostedToolUseBlock]:
    """Calls the provider ran: a JSON-object or raw input, some to an MCP server, some
    carrying the provider's own item (``tool_id`` draws the id, default any)."""
    provider_data = st.none() | st.dictionaries(texts(8), json_values(), max_size=3)
    return st.builds(
        lambda id_, name, input_, server, data: HostedToolUseBlock(
            id=id_, name=name, input=input_, server=server, provider_data=data
        ),
        tool_id if tool_id is not None else tool_ids(),
        st.sampled_from(HOSTED_TOOLS) | tool_names(),
        st.one_of(tool_inputs(), texts(12)),
        st.none() | st.sampled_from(["deepwiki", "näme server"]),
        provider_data,
    )


def hosted_tool_result_blocks(
    tool_use_id: st.SearchStrategy[str] | None = None,
) -> st.SearchStrategy[HostedToolResultBlock]:
    """Outcomes of calls the provider ran: text, images and documents, errors or not, named
    or not, some carrying the provider's own block (``tool_use_id`` draws the call id)."""
    provider_data = st.none() | st.dictionaries(texts(8), json_values(), max_size=3)
    return st.builds(
        lambda id_, content, is_error, name, data: HostedToolResultBlock(
            tool_use_id=id_, content=content, is_error=is_error, name=name, provider_data=data
        ),
        tool_use_id if tool_use_id is not None else tool_ids(),
        tool_result_contents(),
        st.booleans(),
        st.none() | tool_names(),
        provider_data,
    )


BLOCK_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    TextBlock: text_blocks(),
    ToolUseBlock: tool_use_blocks(),
    ToolResultBlock: tool_result_blocks(),
    ReasoningBlock: reasoning_blocks(),
    ImageBlock: image_blocks(),
    DocumentBlock: document_blocks(),
    HostedToolUseBlock: hosted_tool_use_blocks(),
    HostedToolResultBlock: hosted_tool_result_blocks(),
}
"""One strategy per block kind, keyed by the block's class."""


def blocks() -> st.SearchStrategy[Block]:
    """Any single valid block, of any kind."""
    return st.one_of(*BLOCK_STRATEGIES.values())


# -- histories -----------------------------------------------------------------------------


class HistoryBuilder:
    """Records a conversation through the domain's commands, folding in each event."""

    def __init__(self, conversation_id: UUID, title: str | None = None) -> None:
        self.state = Conversation(id=conversation_id)
        self.events: list[Event] = []
        self.record([Conversation.start(conversation_id, title)])

    def record(self, events: Sequence[Event]) -> None:
        """Fold ``events`` into the state and keep them, in order."""
        for event in events:
            self.state.apply(event)
            self.events.append(event)

    def message(self, role: Role, blocks: list[Block], *, leave_open: bool = False) -> UUID:
        """Record a whole message in one go; returns its id."""
        events = self.state.record_message(role, blocks, leave_open=leave_open)
        self.record(events)
        started = events[0]
        assert started.type == "message_started"
        return started.message_id

    def start(self, role: Role) -> UUID:
        """Open a message (streaming); returns its id."""
        started = self.state.start_message(role)
        self.record([started])
        return started.message_id

    def append(self, message_id: UUID, block: Block) -> None:
        """Append one block to an open message."""
        self.record([self.state.append_block(message_id, block)])

    def end(self, message_id: UUID) -> None:
        """End an open message."""
        self.record([self.state.end_message(message_id)])

    def interrupt(self, message_id: UUID, reason: str | None = None) -> None:
        """Interrupt an open message."""
        self.record([self.state.interrupt_message(message_id, reason)])

    def compact(self, summary: str, through: UUID) -> None:
        """Record a compaction: replay shows ``summary`` in place of messages to ``through``."""
        self.record([self.state.compact(summary, through)])

    def rewind(self, to: UUID | None) -> None:
        """Record a rewind: every message after ``to`` (all, for ``None``) is withdrawn."""
        self.record([self.state.rewind(to)])

    def undo_rewind(self, rewind: int) -> None:
        """Undo the rewind recorded at version ``rewind``."""
        self.record([self.state.undo_rewind(rewind)])

    def visible_messages(self) -> list[UUID]:
        """The messages no rewind withdrew, in start order."""
        return [mid for mid, message in self.state.messages.items() if not message.withdrawn]

    def open_messages(self) -> list[UUID]:
        """The messages still open (and not withdrawn), in start order."""
        return [
            mid
            for mid, message in self.state.messages.items()
            if message.status == "open" and not message.withdrawn
        ]


BlockKind: TypeAlias = Literal[
    "text",
    "reasoning",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "hosted_tool_use",
    "hosted_tool_result",
]
Finish: TypeAlias = Literal["end", "interrupt", "leave_open"]

_KINDS_BY_ROLE: dict[Role, tuple[BlockKind, ...]] = {
    "system": ("text", "text", "reasoning", "image", "document"),
    # tool_use twice: assistant messages often carry several (parallel) calls. A hosted call
    # is often followed by its result in the same message (drawn with it), sometimes not.
    "assistant": (
        "text",
        "reasoning",
        "image",
        "document",
        "tool_use",
        "tool_use",
        "hosted_tool_use",
        "hosted_tool_result",
    ),
    "user": ("text", "reasoning", "image", "document", "tool_result", "tool_result"),
}


def summaries() -> st.SearchStrategy[str]:
    """Compaction summaries: any text that is not blank (the domain refuses blank ones)."""
    return st.one_of(st.text(min_size=1, max_size=40), st.sampled_from(UNICODE_TEXTS)).filter(
        str.strip
    )


@st.composite
def histories(
    draw: st.DrawFn,
    max_messages: int = 8,
    max_blocks: int = 5,
    compactions: bool = True,
    opening: Role | None = None,
) -> list[Event]:
    """A whole conversation's events, as the domain's commands record them.

    Any role may open a history (one recorded from mid-way opens with the assistant); with
    ``opening``, the first message is that role's, whatever follows.

    With ``compactions``, some histories also hold one or more compactions, each through any
    message recorded so far (open, ended or interrupted, of any role). Some hold rewinds, to
    any visible message or to the start.
    """
    title = draw(st.none() | texts().filter(lambda t: "\x00" not in t))  # as the store takes
    builder = HistoryBuilder(draw(st.uuids()), title)
    used_ids: set[str] = set()

    def fresh_tool_id() -> str:
        tool_id = draw(tool_ids())
        while tool_id in used_ids:
            tool_id += "'"
        used_ids.add(tool_id)
        return tool_id

    def draw_blocks(role: Role) -> list[Block]:
        """One block of ``role``'s kinds, or a hosted call with its result right after it."""
        kind = draw(st.sampled_from(_KINDS_BY_ROLE[role]))
        block: Block
        match kind:
            case "text":
                block = draw(text_blocks())
            case "reasoning":
                block = draw(reasoning_blocks())
            case "image":
                block = draw(image_blocks())
            case "document":
                block = draw(document_blocks())
            case "tool_use":
                block = draw(tool_use_blocks(st.just(fresh_tool_id())))
            case "tool_result":
                block = draw(tool_result_blocks(answered_id()))
            case "hosted_tool_use":
                call = draw(hosted_tool_use_blocks(st.just(fresh_tool_id())))
                if draw(st.booleans()):
                    return [call, draw(hosted_tool_result_blocks(st.just(call.id)))]
                block = call
            case "hosted_tool_result":
                block = draw(hosted_tool_result_blocks(answered_id()))
        return [block]

    def answered_id() -> st.SearchStrategy[str]:
        """Either a call recorded earlier, or one that never landed (missing)."""
        known = sorted(builder.state.tool_names)
        call = st.sampled_from(known) if known else st.nothing()
        return call | tool_ids().filter(lambda i: i not in builder.state.tool_names)

    def draw_message_blocks(role: Role) -> list[Block]:
        return [b for _ in range(draw(st.integers(0, max_blocks))) for b in draw_blocks(role)]

    def finish(message_id: UUID, how: Finish) -> None:
        if how == "end":
            builder.end(message_id)
        elif how == "interrupt":
            builder.interrupt(message_id, draw(st.none() | texts(20)))

    finishes: st.SearchStrategy[Finish] = st.sampled_from(("end", "interrupt", "leave_open"))
    if opening is not None:
        first = draw_message_blocks(opening)
        builder.message(opening, first, leave_open=draw(st.booleans()))
    for _ in range(draw(st.integers(0, max_messages))):
        visible = builder.visible_messages()
        if compactions and visible and draw(st.integers(0, 5)) == 0:
            through = draw(st.sampled_from(visible))
            builder.compact(draw(summaries()), through)
            continue
        if visible and draw(st.integers(0, 9)) == 0:
            builder.rewind(draw(st.none() | st.sampled_from(visible)))
            continue
        if builder.state.rewinds and draw(st.integers(0, 5)) == 0:
            builder.undo_rewind(draw(st.sampled_from(sorted(builder.state.rewinds))))
            continue
        still_open = builder.open_messages()
        if still_open and draw(st.integers(0, 3)) == 0:
            # A late block for (or the closing of) a message started before later ones.
            message_id = draw(st.sampled_from(still_open))
            if draw(st.booleans()):
                for block in draw_blocks(builder.state.messages[message_id].role):
                    builder.append(message_id, block)
            finish(message_id, draw(finishes))
            continue
        role = draw(st.sampled_from(ROLES))
        blocks_ = draw_message_blocks(role)
        if draw(st.booleans()):
            builder.message(role, blocks_, leave_open=draw(st.booleans()))
        else:
            message_id = builder.start(role)
            for block in blocks_:
                builder.append(message_id, block)
            finish(message_id, draw(finishes))
    return builder.events
