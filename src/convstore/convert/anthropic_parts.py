"""The pieces every Anthropic converter shares: reading SDK objects as plain data, and the
leaf blocks (text with its citations, images, documents, the parts of a tool's output).

Pure, no I/O; each refusal is one :class:`~convstore.domain.errors.InvalidInput` naming the
type at fault and where it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from convstore.convert.parts import check_keys, document_from
from convstore.domain.blocks import Block, DocumentBlock, ImageBlock, TextBlock, ToolResultPart
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.parsing import parse_block


def plain(value: object) -> Any:
    """``value`` as plain data: an SDK model dumped (recursively) with the fields it was given
    or parsed with (so a provider's explicit ``null`` stays and nothing is added), anything
    else as it is.

    Shallow on purpose: each level of the conversion calls it on what it reads next, so a
    typed object nested in a dict (``{"role": ..., "content": response.content}``) is
    dumped where it is met, and plain dicts are never copied.
    """
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    return value


def kind_name(value: object) -> str:
    """The Python type of ``value``, for a refusal."""
    return type(value).__name__


def checked(data: Mapping[str, Any], where: str) -> Block:
    """A block from its JSON, checked, refused in one line naming ``where``."""
    try:
        return parse_block(data)
    except InvalidBlock as exc:
        msg = f"{where}: {exc}"
        raise InvalidInput(msg) from None


def string(block: Mapping[str, Any], field: str, where: str) -> str:
    """A block's field that must be a string."""
    value = block.get(field)
    if not isinstance(value, str):
        msg = f"{where}: {block.get('type')} block needs a string {field!r}"
        raise InvalidInput(msg)
    return value


TEXT_KEYS = frozenset({"type", "text", "citations", "cache_control"})
"""The keys of a ``text`` block (``cache_control`` is dropped); any other is refused."""
IMAGE_KEYS = frozenset({"type", "source", "cache_control", "transformations"})
"""The keys of an ``image`` block (``cache_control`` and the beta ``transformations``, a setting
for how the server prepares it, are dropped); any other is refused."""
DOCUMENT_KEYS = frozenset({"type", "source", "title", "context", "citations", "cache_control"})
"""The keys of a ``document`` block (its ``context``, ``citations`` setting and ``cache_control``
are dropped); any other is refused."""
SOURCE_KEYS: dict[str, frozenset[str]] = {
    "base64": frozenset({"type", "media_type", "data"}),
    "text": frozenset({"type", "media_type", "data"}),
    "url": frozenset({"type", "url"}),
    "file": frozenset({"type", "file_id"}),
}
"""The keys of an image's or a document's ``source``, by its type; any other is refused."""


def _source(data: Mapping[str, Any], kind: str, where: str) -> Mapping[str, Any]:
    """An image's or a document's ``source`` object, its keys checked for its type."""
    source = plain(data.get("source"))
    if not isinstance(source, Mapping):
        msg = f"{where}: {'an image' if kind == 'image' else 'a document'} needs a source object"
        raise InvalidInput(msg)
    known = SOURCE_KEYS.get(str(source.get("type")))
    if known is not None:
        check_keys(source, known, f"{where} ({kind}) source")
    return source


def text_block(data: Mapping[str, Any], where: str) -> TextBlock:
    """A ``text`` block, its ``citations`` (every location type) kept verbatim as the text's
    annotations."""
    check_keys(data, TEXT_KEYS, f"{where} (text)")
    citations = plain(data.get("citations"))
    fields: dict[str, Any] = {"type": "text", "text": string(data, "text", where)}
    if citations:
        fields["annotations"] = [plain(citation) for citation in citations]
    block = checked(fields, where)
    assert isinstance(block, TextBlock)
    return block


def image(data: Mapping[str, Any], where: str) -> ImageBlock:
    """An ``image`` block by its source: ``base64`` (checked) or ``url`` (kept, never
    fetched)."""
    check_keys(data, IMAGE_KEYS, f"{where} (image)")
    source = _source(data, "image", where)
    match source.get("type"):
        case "base64":
            data = {
                "type": "image",
                "media_type": source.get("media_type"),
                "data": source.get("data"),
            }
        case "url":
            data = {"type": "image", "url": source.get("url")}
        case other:
            msg = f"{where}: unsupported image source type {other!r} (accepted: base64, url)"
            raise InvalidInput(msg)
    block = checked(data, where)
    assert isinstance(block, ImageBlock)
    return block


DOCUMENT_SOURCES: tuple[str, ...] = ("base64", "text", "url", "file")
"""The ``document`` source types the converters accept (a ``content`` source is refused)."""


def document(data: Mapping[str, Any], where: str, *, name: object = None) -> DocumentBlock:
    """A ``document`` block by its source; its ``title`` (else ``name``) is its name, its
    ``context`` its context; the ``citations`` setting is dropped (a request's switch, not
    content)."""
    check_keys(data, DOCUMENT_KEYS, f"{where} (document)")
    source = _source(data, "document", where)
    title = data.get("title") or name
    context = data.get("context") or None
    match source.get("type"):
        case "base64":
            return document_from(
                where,
                data=source.get("data"),
                media_type=source.get("media_type"),
                name=title,
                context=context,
            )
        case "text":
            media = source.get("media_type")
            return document_from(
                where, text=source.get("data"), media_type=media, name=title, context=context
            )
        case "url":
            return document_from(where, url=source.get("url"), name=title, context=context)
        case "file":
            return document_from(where, file_id=source.get("file_id"), name=title, context=context)
        case other:
            msg = (
                f"{where}: unsupported document source type {other!r} "
                f"(accepted: {', '.join(DOCUMENT_SOURCES)})"
            )
            raise InvalidInput(msg)


CONTAINER_UPLOAD_KEYS = frozenset({"type", "file_id", "cache_control"})
"""The keys of a ``container_upload`` block; any other is refused."""


def container_upload(data: Mapping[str, Any], where: str) -> DocumentBlock:
    """A ``container_upload`` (a file put in the code execution container): a document by
    its ``file_id``."""
    check_keys(data, CONTAINER_UPLOAD_KEYS, f"{where} (container_upload)")
    return document_from(where, file_id=string(data, "file_id", where))


SEARCH_RESULT_KEYS = frozenset({"type", "source", "title", "content", "citations", "cache_control"})
"""The keys of a ``search_result`` block; any other is refused."""


def search_result(data: Mapping[str, Any], where: str) -> TextBlock:
    """A ``search_result`` block (an application's own search hit) as one text: a head line
    ``[Search result: title (source)]``, then its text blocks, one a line."""
    check_keys(data, SEARCH_RESULT_KEYS, f"{where} (search_result)")
    title, source = string(data, "title", where), string(data, "source", where)
    content = plain(data.get("content"))
    if not isinstance(content, list):
        msg = f"{where}: search_result content must be a list of text blocks"
        raise InvalidInput(msg)
    texts = []
    for index, item in enumerate(content):
        part = plain(item)
        if not isinstance(part, Mapping) or part.get("type") != "text":
            found = part.get("type") if isinstance(part, Mapping) else kind_name(part)
            msg = f"{where}, text {index}: search_result content must be text, not {found!r}"
            raise InvalidInput(msg)
        texts.append(string(part, "text", f"{where}, text {index}"))
    return TextBlock(text="\n".join([f"[Search result: {title} ({source})]", *texts]))


TOOL_RESULT_PART_TYPES: tuple[str, ...] = (
    "text",
    "image",
    "document",
    "search_result",
    "tool_reference",
)
"""The block types accepted inside a ``tool_result``'s content list (``browser_state`` is
refused: it has no readable form yet)."""


TOOL_REFERENCE_KEYS = frozenset({"type", "tool_name", "cache_control"})
"""The keys of a ``tool_reference`` part of a tool's output; any other is refused."""


def tool_output(content: object, where: str) -> str | list[ToolResultPart]:
    """A ``tool_result``'s (or an ``mcp_tool_result``'s) content: a string, or its parts as
    text, images and documents (a ``search_result`` as its text, a ``tool_reference`` as
    ``[Tool reference: name]``)."""
    content = plain(content)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        msg = f"{where}: tool result content must be a string or a list, not {kind_name(content)}"
        raise InvalidInput(msg)
    parts: list[ToolResultPart] = []
    for index, item in enumerate(content):
        here = f"{where}, part {index}"
        part = plain(item)
        if not isinstance(part, Mapping):
            msg = f"{here}: expected a content block object, got {kind_name(part)}"
            raise InvalidInput(msg)
        match part.get("type"):
            case "text":
                parts.append(text_block(part, here))
            case "image":
                parts.append(image(part, here))
            case "document":
                parts.append(document(part, here))
            case "search_result":
                parts.append(search_result(part, here))
            case "tool_reference":
                check_keys(part, TOOL_REFERENCE_KEYS, f"{here} (tool_reference)")
                parts.append(TextBlock(text=f"[Tool reference: {string(part, 'tool_name', here)}]"))
            case other:
                msg = (
                    f"{here}: unsupported tool_result content type {other!r} "
                    f"(accepted: {', '.join(TOOL_RESULT_PART_TYPES)})"
                )
                raise InvalidInput(msg)
    return parts


def parts_json(content: str | list[ToolResultPart]) -> str | list[dict[str, Any]]:
    """A tool output as block JSON, for :func:`checked`."""
    if isinstance(content, str):
        return content
    return [part.model_dump(exclude_none=True) for part in content]
