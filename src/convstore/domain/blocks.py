"""Content blocks: the parts a message is made of.

Each kind is a frozen pydantic model; :data:`Block` is the discriminated union over ``type``.
The JSON is the shape users know from provider content blocks. Unknown fields are an error,
and no value is coerced (``strict``): what is accepted round-trips exactly.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal, TypeAlias, assert_never, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.version import VERSION

from convstore.domain.images import ImageMediaType, dimensions, sniff_media_type

PYDANTIC_VERSION = tuple(int(part) for part in VERSION.split(".")[:2])

DEFERRED = ConfigDict(defer_build=PYDANTIC_VERSION >= (2, 14))
"""The domain's models and adapters build their validators and serializers on first use, not
at import: a process that decodes no event (one that only lists conversations, say) never
builds them. Only from pydantic 2.14 on,
whose first-use build is thread-safe (before it, threads instantiating a model being built
could validate with its base class's validator); with an older one they build at import."""


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, **DEFERRED)


def _annotations_typed(
    value: list[dict[str, JsonValue]] | None,
) -> list[dict[str, JsonValue]] | None:
    """``value`` when every annotation is an object with a non-empty string ``type``."""
    for position, annotation in enumerate(value or ()):
        kind = annotation.get("type")
        if not isinstance(kind, str) or not kind:
            msg = f"annotation {position} needs a non-empty string type"
            raise ValueError(msg)
    return value


class TextBlock(_Block):
    """Plain text, written by any role.

    ``annotations`` are what the provider attached to the text, kept verbatim as it gave them:
    Anthropic's ``citations`` (``char_location``, ``page_location``,
    ``web_search_result_location``, …) and OpenAI's ``annotations`` (``url_citation``,
    ``file_citation``, ``file_path``, …), each an object with a ``type``.
    """

    type: Literal["text"] = "text"
    text: str
    # Left out of the JSON when absent, so a text block without annotations is written as
    # it was before they existed (a store of format 1 stays readable by convstore 0.2.0).
    annotations: list[dict[str, JsonValue]] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    @field_validator("annotations")
    @classmethod
    def _typed(cls, value: list[dict[str, JsonValue]] | None) -> list[dict[str, JsonValue]] | None:
        return _annotations_typed(value)


class ReasoningBlock(_Block):
    """The model's reasoning (thinking) text.

    Providers attach data that has no prose form but that a live tool round must send back:
    Anthropic's ``signature`` on a thinking block (and the encrypted ``data`` of a
    ``redacted_thinking`` block, kept in ``encrypted_content`` with ``redacted`` set), and a
    Responses API reasoning item's ``encrypted_content``. They ride along here; replay of
    persisted history uses the prose form only.
    """

    type: Literal["reasoning"] = "reasoning"
    text: str
    signature: str | None = None
    encrypted_content: str | None = None
    redacted: bool = False


def _http_url(value: str | None, what: str, hint: str) -> str | None:
    """``value`` when it is an ``http``/``https`` address (kept as given, never fetched)."""
    if value is not None and not value.lower().startswith(("http://", "https://")):
        msg = f"{what} must be an http:// or https:// address{hint}"
        raise ValueError(msg)
    return value


def _base64_within(value: str | None, info: ValidationInfo, what: str, limit: str) -> str | None:
    """``value`` when it is valid base64 of no more bytes than the context's ``limit``."""
    if value is None:
        return None
    most = (info.context or {}).get(limit)
    size = len(value) // 4 * 3 - value[-2:].count("=")
    if most is not None and size > most:
        # Checked on the base64 length, before decoding, so memory stays bounded.
        msg = f"{what} is {size:,} bytes; the limit is {most:,}"
        raise ValueError(msg)
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        msg = f"{what} data is not valid base64 ({exc})"
        raise ValueError(msg) from None
    return value


class ImageBlock(_Block):
    """An image: either the base64 ``data`` it arrived in (checked against its media type), or
    a ``url`` it was given by (an ``http``/``https`` address, kept as given and never fetched).
    """

    type: Literal["image"] = "image"
    media_type: ImageMediaType | None = None
    data: str | None = None
    url: str | None = None

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str | None) -> str | None:
        return _http_url(value, "image url", " (give other images as data)")

    @field_validator("data")
    @classmethod
    def _data_is_base64(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _base64_within(value, info, "image", "max_image_bytes")

    @model_validator(mode="after")
    def _data_matches_media_type(self) -> ImageBlock:
        if (self.data is None) == (self.url is None):
            msg = "an image needs exactly one of data (base64) or url"
            raise ValueError(msg)
        if self.data is None:
            return self
        if self.media_type is None:
            msg = "an image given as data needs its media_type"
            raise ValueError(msg)
        raw = self.raw_bytes()
        sniffed = sniff_media_type(raw)
        if sniffed != self.media_type:
            found = sniffed or "not a PNG, JPEG, GIF or WebP image"
            msg = f"image data does not match media_type {self.media_type} (found: {found})"
            raise ValueError(msg)
        if dimensions(raw) is None:
            msg = f"{self.media_type} data is truncated or corrupt: its size cannot be read"
            raise ValueError(msg)
        return self

    def raw_bytes(self) -> bytes:
        """The decoded image bytes (empty for an image given by URL)."""
        if self.data is None:
            return b""
        return base64.b64decode(self.data, validate=True)

    @property
    def byte_size(self) -> int:
        """Size of the decoded image in bytes, computed from the base64 length (0 for a URL)."""
        if self.data is None:
            return 0
        padding = self.data[-2:].count("=")
        return len(self.data) * 3 // 4 - padding


PDF = "application/pdf"
"""The media type of a PDF, the one binary document kind replay can send natively."""


class DocumentBlock(_Block):
    """A document (a PDF, plain text or any other file), from exactly one source: base64
    ``data`` of ``media_type`` (a PDF's bytes are checked to start ``%PDF-``), its ``text``
    (``media_type`` a ``text/…`` type, ``text/plain`` unless told), a ``url`` it was given by
    (``http``/``https``, kept and never fetched) or a provider's ``file_id``; ``name`` is the
    file name or title it came with, ``context`` what the sender said about it (Anthropic's
    document ``context``: not part of the document, but shown to the model beside it).
    """

    type: Literal["document"] = "document"
    media_type: Annotated[str, Field(pattern=r"^[\w.+-]+/[\w.+-]+$", max_length=255)] | None = None
    data: str | None = None
    text: str | None = None
    url: str | None = None
    file_id: Annotated[str, Field(min_length=1)] | None = None
    name: Annotated[str, Field(min_length=1)] | None = None
    # Left out of the JSON when absent, like a text's annotations: a document without one is
    # written as before the field existed.
    context: Annotated[str, Field(min_length=1)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str | None) -> str | None:
        return _http_url(value, "document url", "")

    @field_validator("data")
    @classmethod
    def _data_is_base64(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _base64_within(value, info, "document", "max_document_bytes")

    @model_validator(mode="after")
    def _one_source(self) -> DocumentBlock:
        sources = [self.data, self.text, self.url, self.file_id]
        if sum(source is not None for source in sources) != 1:
            msg = "a document needs exactly one of data (base64), text, url or file_id"
            raise ValueError(msg)
        if self.data is not None:
            if self.media_type is None:
                msg = "a document given as data needs its media_type"
                raise ValueError(msg)
            if self.media_type == PDF and not base64.b64decode(self.data[:8]).startswith(b"%PDF-"):
                msg = "document data is not a PDF (its bytes do not start with %PDF-)"
                raise ValueError(msg)
        if (
            self.text is not None
            and self.media_type is not None
            and not self.media_type.startswith("text/")
        ):
            msg = f"a document given as text needs a text/ media_type, not {self.media_type}"
            raise ValueError(msg)
        return self

    @property
    def byte_size(self) -> int:
        """Size of the document in bytes: decoded data, or its text as UTF-8 (0 when given by
        URL or file id)."""
        if self.data is not None:
            return len(self.data) * 3 // 4 - self.data[-2:].count("=")
        if self.text is not None:
            return len(self.text.encode("utf-8", "surrogatepass"))
        return 0


ToolResultPart: TypeAlias = Annotated[
    TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")
]
"""What a tool's output may hold besides plain text: text, images and documents."""


class ToolUseBlock(_Block):
    """A tool call the assistant made: its id, the tool's name and its input.

    ``input`` is the arguments object; or, when the model emitted arguments that are not a
    JSON object (models do), the raw text exactly as emitted: recorded faithfully, never
    refused and never repaired.
    """

    type: Literal["tool_use"] = "tool_use"
    id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    input: dict[str, JsonValue] | str


class ToolResultBlock(_Block):
    """What a tool returned (or the error it raised) for the call with ``tool_use_id``.

    ``name`` is optional: when absent, the store resolves it from the matching ``tool_use``
    recorded earlier in the conversation.
    """

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[ToolResultPart]
    is_error: bool = False
    name: Annotated[str, Field(min_length=1)] | None = None


class HostedToolUseBlock(_Block):
    """A tool call the provider ran itself, on its own servers (web search, web fetch, code
    execution, file search, image generation, a remote MCP server's tool, …), as the model
    asked for it: its id, the tool's name and its input.

    ``server`` names the MCP server for a call to one. ``provider_data`` is the provider's own
    item or block exactly as it came (ids, status, anything with no prose form), kept so
    nothing is lost; replay never sends it.
    """

    type: Literal["hosted_tool_use"] = "hosted_tool_use"
    id: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    input: dict[str, JsonValue] | str
    server: Annotated[str, Field(min_length=1)] | None = None
    provider_data: dict[str, JsonValue] | None = None


class HostedToolResultBlock(_Block):
    """What a tool the provider ran returned (or the error it gave) for the hosted call with
    ``tool_use_id``: its readable ``content`` (search results as text, code output, a
    generated image, a fetched document), and the provider's own block or item exactly as it
    came in ``provider_data`` (encrypted page content, file ids, …; replay never sends it).

    ``name`` is optional, resolved like a tool result's from the hosted call recorded earlier.
    """

    type: Literal["hosted_tool_result"] = "hosted_tool_result"
    tool_use_id: Annotated[str, Field(min_length=1)]
    content: str | list[ToolResultPart]
    is_error: bool = False
    name: Annotated[str, Field(min_length=1)] | None = None
    provider_data: dict[str, JsonValue] | None = None


Block: TypeAlias = Annotated[
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ReasoningBlock
    | ImageBlock
    | DocumentBlock
    | HostedToolUseBlock
    | HostedToolResultBlock,
    Field(discriminator="type"),
]

AnyToolUse: TypeAlias = ToolUseBlock | HostedToolUseBlock
"""A call, run by the caller's code or by the provider."""

AnyToolResult: TypeAlias = ToolResultBlock | HostedToolResultBlock
"""A call's outcome, run by the caller's code or by the provider."""


def union_members(union: object) -> tuple[type[Any], ...]:
    """The classes of an ``Annotated[A | B | …, Field(discriminator=…)]`` union, in order.

    Every list of kinds is derived from its union this way, never typed out by hand, so a new
    kind cannot be left out of one.
    """
    return get_args(get_args(union)[0])


BLOCK_CLASSES: tuple[type[_Block], ...] = union_members(Block)
BLOCK_TYPES: frozenset[str] = frozenset(
    str(cls.model_fields["type"].default) for cls in BLOCK_CLASSES
)

BLOCK_ADAPTER: TypeAdapter[Block] = TypeAdapter(Block, config=DEFERRED)
BLOCKS_ADAPTER: TypeAdapter[list[Block]] = TypeAdapter(list[Block], config=DEFERRED)


def block_images(block: Block) -> list[ImageBlock]:
    """Every image a block holds: itself, or the image parts of a tool result's output."""
    match block:
        case ImageBlock():
            return [block]
        case ToolResultBlock() | HostedToolResultBlock():
            if isinstance(block.content, str):
                return []
            return [part for part in block.content if isinstance(part, ImageBlock)]
        case TextBlock() | ReasoningBlock() | ToolUseBlock() | DocumentBlock():
            return []
        case HostedToolUseBlock():
            return []
        case _:
            assert_never(block)


def block_documents(block: Block) -> list[DocumentBlock]:
    """Every document a block holds: itself, or the document parts of a tool result's output."""
    match block:
        case DocumentBlock():
            return [block]
        case ToolResultBlock() | HostedToolResultBlock():
            if isinstance(block.content, str):
                return []
            return [part for part in block.content if isinstance(part, DocumentBlock)]
        case TextBlock() | ReasoningBlock() | ToolUseBlock() | ImageBlock():
            return []
        case HostedToolUseBlock():
            return []
        case _:
            assert_never(block)


def block_json(block: Block) -> str:
    """The block as compact JSON, leaving out only an unset optional ``name``."""
    return block.model_dump_json(exclude_none=True)
