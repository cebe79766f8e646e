"""Turning caller input (dicts, role names, id strings) into checked domain values.

Each function raises a :class:`~convstore.domain.errors.InvalidInput` subclass with one line that
names the field at fault; nothing here touches storage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from uuid import UUID

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticSerializationError

from convstore.domain.blocks import (
    BLOCK_ADAPTER,
    BLOCK_CLASSES,
    BLOCK_TYPES,
    Block,
    DocumentBlock,
    block_images,
    block_json,
)
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.events import ROLES, Role
from convstore.domain.json_values import json_problem
from convstore.domain.limits import Limits


def _is_branch_label(part: str | int) -> bool:
    """Whether a location part names a union branch (``str``, ``list[…]``), not a field."""
    return isinstance(part, str) and ("[" in part or part in {"str", "list", "dict"})


def _describe(error: ErrorDetails) -> str:
    """One pydantic error as a short phrase naming the field.

    A location that starts with a block kind (``tool_use.input``) reads as
    "tool_use block: input".
    """
    parts = [str(p) for p in error["loc"] if not _is_branch_label(p)]
    kind = f"{parts.pop(0)} block: " if parts and parts[0] in BLOCK_TYPES else ""
    loc = ".".join(parts)
    if len(loc) > 80:
        loc = loc[:40] + "…" + loc[-39:]
    if error["type"] == "missing":
        return f"{kind}missing field '{loc}'"
    if error["type"] == "extra_forbidden":
        return f"{kind}unknown field '{loc}'"
    if error["type"] == "union_tag_not_found":
        return f"{kind}missing field '{'.'.join([*parts, 'type'])}'"
    if error["type"] == "union_tag_invalid":
        context = error.get("ctx", {})
        where = f" at '{loc}'" if loc else ""
        return (
            f"{kind}unknown block type {context.get('tag')!r}{where}; "
            f"use one of: {context.get('expected_tags')}"
        )
    message = error["msg"].removeprefix("Value error, ")
    return f"{kind}{loc}: {message}" if loc else f"{kind}{message}"


def format_validation_error(exc: ValidationError) -> str:
    """One line naming the problems in ``exc`` (the first three) and where they are."""
    described = list(dict.fromkeys(_describe(e) for e in exc.errors(include_url=False)))
    more = f" (and {len(described) - 3} more)" if len(described) > 3 else ""
    return "; ".join(described[:3]) + more


def parse_block(value: Block | Mapping[str, Any], limits: Limits | None = None) -> Block:
    """A block from a model or a JSON-like mapping, within ``limits``; raises
    :class:`InvalidBlock`.

    This is the one check a block passes on its way to the log (the store encodes it without
    reading it back): a block model is checked as its fields, like a mapping, since one made
    with ``model_construct`` was never validated, and a value JSON cannot carry exactly (a
    tuple, a key that is not text, NaN, an integer past the JSON reader's range, nesting past
    its depth) is refused here."""
    limits = limits or Limits()
    fields = value.model_dump() if isinstance(value, BLOCK_CLASSES) else value
    problem = json_problem(fields)
    if problem:
        raise InvalidBlock(problem)
    # A mapping's media are measured against the limits as they are decoded; a model's were
    # decoded when it was made, and are measured below, with the same messages as before.
    context = (
        None
        if isinstance(value, BLOCK_CLASSES)
        else {
            "max_image_bytes": limits.max_image_bytes,
            "max_document_bytes": limits.max_document_bytes,
        }
    )
    try:
        block: Block = BLOCK_ADAPTER.validate_python(fields, context=context)
    except ValidationError as exc:
        raise InvalidBlock(format_validation_error(exc)) from None
    for image in block_images(block):
        if image.byte_size > limits.max_image_bytes:
            msg = f"image is {image.byte_size:,} bytes; the limit is {limits.max_image_bytes:,}"
            raise InvalidBlock(msg)
    if isinstance(block, DocumentBlock) and block.byte_size > limits.max_document_bytes:
        msg = f"document is {block.byte_size:,} bytes; the limit is {limits.max_document_bytes:,}"
        raise InvalidBlock(msg)
    try:
        size = len(block_json(block).encode())
    except PydanticSerializationError as exc:
        msg = f"block cannot be stored as JSON: {exc}"
        raise InvalidBlock(msg) from None
    if size > limits.max_block_bytes:
        msg = f"block is {size:,} bytes as JSON; the limit is {limits.max_block_bytes:,}"
        raise InvalidBlock(msg)
    return block


def parse_role(role: str) -> Role:
    """``role`` checked against the three roles; raises :class:`InvalidInput`."""
    for known in ROLES:
        if role == known:
            return known
    msg = f"unknown role {describe_value(role)}; use one of: {', '.join(ROLES)}"
    raise InvalidInput(msg)


def parse_id(value: UUID | str, what: str) -> UUID:
    """An id given as a UUID or its text; raises :class:`InvalidInput` when it isn't one."""
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            pass
    example = "ids look like 0b8e7c0e-3d6f-4c1a-9a51-5e2f1c9d7a10"
    msg = f"{describe_value(value)} is not a {what} id ({example})"
    raise InvalidInput(msg)


NIL_ID = UUID(int=0)
"""The nil UUID (all zeros), which no conversation may have: the store keeps it for its own
rows (the hash chains' start marker)."""


def parse_new_id(value: UUID | str, what: str) -> UUID:
    """An id for something being created: like :func:`parse_id`, and never :data:`NIL_ID`."""
    checked = parse_id(value, what)
    if checked == NIL_ID:
        msg = f"the nil UUID ({checked}) cannot be a {what} id: the store keeps it for its own rows"
        raise InvalidInput(msg)
    return checked


def parse_blocks(blocks: Iterable[Block | Mapping[str, Any]], limits: Limits) -> list[Block]:
    """Every block of a whole message, checked; raises :class:`InvalidBlock` naming the first
    bad one. ``blocks`` is a list (or any iterable) of blocks, not one block or a string."""
    if isinstance(blocks, (str, bytes, Mapping, *BLOCK_CLASSES)) or not isinstance(
        blocks, Iterable
    ):
        msg = f"blocks must be a list of blocks, not {type(blocks).__name__}"
        raise InvalidInput(msg)
    parsed: list[Block] = []
    for index, block in enumerate(blocks):
        try:
            parsed.append(parse_block(block, limits))
        except InvalidBlock as exc:
            msg = f"block {index}: {exc}"
            raise InvalidBlock(msg) from None
    return parsed


def parse_text(value: str, what: str, max_bytes: int) -> str:
    """Text that can be stored: a ``str`` of valid Unicode within ``max_bytes`` as UTF-8."""
    if not isinstance(value, str):
        msg = f"{what} must be text, not {type(value).__name__}"
        raise InvalidInput(msg)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        msg = f"{what} holds a lone surrogate (\\u{code:04x}), which is not Unicode"
        raise InvalidInput(msg) from None
    if size > max_bytes:
        msg = f"{what} is {size:,} bytes; the limit is {max_bytes:,}"
        raise InvalidInput(msg)
    return value


def parse_optional_text(value: str | None, what: str, max_bytes: int) -> str | None:
    """Like :func:`parse_text`, and ``None`` passes."""
    return None if value is None else parse_text(value, what, max_bytes)


def parse_name(value: str, what: str, max_bytes: int) -> str:
    """Text that names or describes (a title, a source, a label's value, an erasure's reason):
    like :func:`parse_text`, without NUL. Such text is also kept in index columns (the
    listing, the tombstones), and PostgreSQL's text columns cannot hold NUL; refusing it on
    both backends keeps them answering alike."""
    checked = parse_text(value, what, max_bytes)
    if "\x00" in checked:
        msg = f"{what} holds a NUL character (\\u0000), which names and labels cannot hold"
        raise InvalidInput(msg)
    return checked


def parse_optional_name(value: str | None, what: str, max_bytes: int) -> str | None:
    """Like :func:`parse_name`, and ``None`` passes."""
    return None if value is None else parse_name(value, what, max_bytes)


def parse_flag(value: bool, what: str) -> bool:
    """``True`` or ``False`` itself: ``"no"`` or ``0`` would read as true or false by accident."""
    if not isinstance(value, bool):
        msg = f"{what} must be True or False, not {describe_value(value)}"
        raise InvalidInput(msg)
    return value


MAX_COUNT = 2**63 - 1
"""The largest position or count a store's query takes (a signed 64-bit column in SQLite and
PostgreSQL): past it a driver raises its own overflow error."""


def parse_count(value: int, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number (not a bool, not text) of at least ``minimum`` (and at most ``maximum``,
    when given: :data:`MAX_COUNT` for one that goes into a query)."""
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{what} must be a whole number, not {describe_value(value)}"
        raise InvalidInput(msg)
    if value < minimum:
        msg = f"{what} must be {minimum} or more, not {describe_value(value)}"
        raise InvalidInput(msg)
    if maximum is not None and value > maximum:
        msg = f"{what} must be at most {maximum}, not {describe_value(value)}"
        raise InvalidInput(msg)
    return value


def parse_optional_count(value: int | None, what: str, minimum: int = 0) -> int | None:
    """Like :func:`parse_count`, and ``None`` passes."""
    return None if value is None else parse_count(value, what, minimum)


def describe_value(value: object) -> str:
    """A caller's value for an error message: its repr, cut short, or just its type (a repr
    may be huge, fail, or run the caller's code)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return "a very large number"
    if isinstance(value, str | int | float | bytes | UUID) or value is None:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return f"a {type(value).__name__}"
