"""Pieces the OpenAI converters share: reading SDK objects as dicts, tool-call arguments,
images by data URL or address, and the one error a converter raises.

Nothing here does I/O. Every refusal is an :class:`~convstore.domain.errors.InvalidInput` whose one
line names the item (or part) type at fault and where it is.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar, cast

from pydantic import BaseModel, ValidationError

from convstore.domain.blocks import Block, DocumentBlock, ImageBlock, TextBlock
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.json_values import strict_loads
from convstore.domain.parsing import format_validation_error, parse_block

_T = TypeVar("_T")

_DATA_URL = re.compile(r"data:(?P<media>[\w.+-]+/[\w.+-]+)(?P<params>(;[^,;]*)*);base64,", re.I)


def as_dict(value: object, where: str) -> dict[str, Any]:
    """A provider object as a plain dict: a mapping as it is, an SDK (pydantic) model as the
    fields it was given or parsed with. The converters only read what this returns."""
    if type(value) is dict:
        return value  # the common case, first and without a copy
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, Mapping):
        return dict(value)
    msg = f"{where}: expected an object, got {type(value).__name__}"
    raise InvalidInput(msg)


def as_list(value: object, where: str) -> list[Any]:
    """``value`` as a list; refuses a string or a mapping (a common mix-up)."""
    if isinstance(value, list | tuple):
        return list(value)
    msg = f"{where}: expected a list, got {type(value).__name__}"
    raise InvalidInput(msg)


def text_of(value: object, where: str) -> str:
    """A field that must be a string."""
    if isinstance(value, str):
        return value
    msg = f"{where}: expected a string, got {type(value).__name__}"
    raise InvalidInput(msg)


def tool_arguments(raw: object, where: str) -> dict[str, Any] | str:
    """Tool-call arguments as the model emitted them: the object when the text is a JSON
    object, else the raw text itself (recorded faithfully, never refused, never repaired)."""
    if isinstance(raw, Mapping):
        return dict(raw)
    return arguments_text(text_of(raw, where))


def arguments_text(text: str) -> dict[str, Any] | str:
    """Arguments text as recorded: the object it is when it is strictly a JSON object, else
    the text exactly as emitted. Strictly: ``NaN``, ``Infinity`` and numbers too large for a
    float (``1e999``) are not JSON, so they keep the call as its raw text instead of getting
    the whole call refused for a non-finite number (every converter uses this one reader)."""
    try:
        parsed = strict_loads(text, unique_keys=False)
    except ValueError:
        return text
    return parsed if isinstance(parsed, dict) else text


def _without_encrypted(value: object) -> object:
    if isinstance(value, Mapping):
        return {
            key: _without_encrypted(item)
            for key, item in value.items()
            if not (isinstance(key, str) and key.lower().startswith("encrypted"))
        }
    if isinstance(value, list | tuple):
        return [_without_encrypted(item) for item in value]
    return value


def readable_output(value: object) -> str:
    """A hosted tool's output as the text a model can read: a string as it is, anything else
    as its JSON without the provider's encrypted fields (``encrypted_content``,
    ``encryptedContent``, ``encrypted_index``: opaque bytes only the provider reads back,
    kept verbatim in the block's ``provider_data``)."""
    if isinstance(value, str):
        return value
    return json.dumps(_without_encrypted(value), ensure_ascii=False)


def checked(make: Callable[[], _T], where: str) -> _T:
    """Build a block, turning a validation failure into one line naming ``where``."""
    try:
        return make()
    except ValidationError as exc:
        msg = f"{where}: {format_validation_error(exc)}"
        raise InvalidInput(msg) from None


def image_from_url(url: object, where: str) -> ImageBlock:
    """An image block from a ``data:`` URL (base64 data and its media type) or an
    ``http``/``https`` address (kept as given, never fetched)."""
    text = text_of(url, where)
    found = _DATA_URL.match(text)
    if found:
        media = found["media"].lower()
        data = text[found.end() :]
        fields = {"media_type": media, "data": data}
        return checked(lambda: ImageBlock.model_validate(fields), where)
    if text.lower().startswith(("http://", "https://")):
        return checked(lambda: ImageBlock(url=text), where)
    shown = text if len(text) <= 40 else text[:37] + "..."
    msg = f"{where}: image url {shown!r} is neither a base64 data: URL nor an http(s) address"
    raise InvalidInput(msg)


def document_from(
    where: str,
    *,
    data: object = None,
    media_type: object = None,
    text: object = None,
    url: object = None,
    file_id: object = None,
    name: object = None,
    context: object = None,
) -> DocumentBlock:
    """A document block from one source: base64 ``data`` (or a ``data:`` URL of it, whose
    media type then stands), ``text``, an ``http(s)`` ``url`` or a provider's ``file_id``."""
    if isinstance(data, str) and (found := _DATA_URL.match(data)):
        media_type, data = found["media"].lower(), data[found.end() :]
    if isinstance(data, str) and isinstance(media_type, str) and media_type.startswith("text/"):
        # A text file sent as bytes is kept as its text: any model can read that.
        with contextlib.suppress(ValueError):  # not base64 or not UTF-8: kept as data
            text, data = base64.b64decode(data, validate=True).decode("utf-8"), None
    fields = {
        "media_type": media_type,
        "data": data,
        "text": text,
        "url": url,
        "file_id": file_id,
        "name": name or None,
        "context": context,
    }
    given = {key: value for key, value in fields.items() if value is not None}
    block = checked(lambda: DocumentBlock.model_validate(given), where)
    return cast("DocumentBlock", checked_block(block, where))


def openai_file(
    part: Mapping[str, Any], where: str, *, url_key: str | None = None
) -> DocumentBlock:
    """A document from an OpenAI file's fields: ``file_data`` (a ``data:`` URL, or bare base64:
    a PDF when its bytes say so), ``file_id``, or (Responses) ``file_url``; ``filename``."""
    data = part.get("file_data")
    media_type = None
    if isinstance(data, str) and not _DATA_URL.match(data):
        media_type = "application/pdf" if data.startswith("JVBERi0") else "application/octet-stream"
    return document_from(
        where,
        data=data,
        media_type=media_type,
        file_id=part.get("file_id"),
        url=part.get(url_key) if url_key else None,
        name=part.get("filename"),
    )


def _responses_image(part: Mapping[str, Any], where: str) -> ImageBlock:
    if part.get("image_url") is None and part.get("file_id") is not None:
        msg = f"{where}: an input_image given by file_id cannot be recorded; give its image_url"
        raise InvalidInput(msg)
    return image_from_url(part.get("image_url"), f"{where} image_url")


RESPONSES_PART_KEYS: dict[str, frozenset[str]] = {
    "input_text": frozenset({"type", "text", "prompt_cache_breakpoint"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
    "refusal": frozenset({"type", "refusal"}),
    "input_image": frozenset({"type", "image_url", "file_id", "detail", "prompt_cache_breakpoint"}),
    "input_file": frozenset(
        {
            "type",
            "file_id",
            "file_data",
            "file_url",
            "filename",
            "detail",
            "prompt_cache_breakpoint",
        }
    ),
}
"""The keys of each Responses content part (``logprobs``, ``detail`` and
``prompt_cache_breakpoint`` are read and dropped); any other is refused."""


def responses_parts(
    content: object, where: str, accepted: tuple[str, ...]
) -> list[TextBlock | ImageBlock | DocumentBlock]:
    """A Responses content list of the ``accepted`` part types: ``input_text``,
    ``output_text`` (its ``annotations`` kept verbatim on the text), ``refusal``,
    ``input_image`` (an image by data URL or address) and ``input_file`` (a document)."""
    blocks: list[TextBlock | ImageBlock | DocumentBlock] = []
    for index, raw in enumerate(as_list(content, f"{where} content")):
        at = f"{where} part {index}"
        part = as_dict(raw, at)
        kind = part.get("type")
        if kind not in accepted:
            refuse("part type", kind, at, accepted)
        check_keys(part, RESPONSES_PART_KEYS[str(kind)], at)
        if kind == "input_image":
            blocks.append(_responses_image(part, at))
        elif kind == "input_file":
            blocks.append(openai_file(part, at, url_key="file_url"))
        else:
            field = "refusal" if kind == "refusal" else "text"
            text = text_of(part.get(field), f"{at} {field}")
            blocks.append(annotated_text(text, part.get("annotations"), at))
    return blocks


def annotated_text(text: str, annotations: object, where: str) -> TextBlock:
    """A text block with what the provider attached to it (``annotations``: a list of
    objects with a ``type``), verbatim; an absent or empty list attaches nothing."""
    if not annotations:
        return TextBlock(text=text)
    given = [
        as_dict(a, f"{where} annotation {i}") for i, a in enumerate(as_list(annotations, where))
    ]
    return checked(lambda: TextBlock.model_validate({"text": text, "annotations": given}), where)


def checked_block(block: Block, where: str) -> Block:
    """A block within the default limits, refused in one line naming ``where``."""
    try:
        return parse_block(block)
    except InvalidBlock as exc:
        msg = f"{where}: {exc}"
        raise InvalidInput(msg) from None


def refuse(kind: str, value: object, where: str, accepted: tuple[str, ...]) -> NoReturn:
    """Refuse an item or part type (a role, a field) the converter does not know."""
    msg = f"{where}: {kind} {value!r} is not supported; accepted: {', '.join(accepted)}"
    raise InvalidInput(msg)


def tidy(blocks: list[Block]) -> tuple[Block, ...]:
    """A message's blocks without empty text blocks beside other content (providers send
    ``content: ""`` next to tool calls); a message of nothing but empty text keeps it. An
    empty text that carries annotations (sources cited with no text of their own) is kept."""
    kept = [
        b for b in blocks if not (isinstance(b, TextBlock) and b.text == "" and not b.annotations)
    ]
    return tuple(kept) if kept else tuple(blocks[:1])


def check_keys(fields: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    """Refuse a key the converter does not read: an unknown key is content it would drop (a
    Vercel ``parts`` list given as a Chat Completions message), so it is never ignored."""
    unknown = [key for key in fields if key not in known]
    if unknown:
        named = ", ".join(repr(key) for key in unknown)
        keys = f"key {named} is" if len(unknown) == 1 else f"keys {named} are"
        msg = (
            f"{where}: {keys} not part of this format (accepted: "
            f"{', '.join(sorted(known))}); is the input another format?"
        )
        raise InvalidInput(msg)
