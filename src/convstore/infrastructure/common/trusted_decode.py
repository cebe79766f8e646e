"""Replay's decoder: a compact state read back into its event without validating it again.

Every event in the log was validated (and its values checked) before it was written, and
``verify`` decodes every row through the validating adapter
(:func:`~convstore.infrastructure.common.mapper.decode_compact`). Replay, which reads a
conversation's rows on every first load, rebuilds the events with the models' own fields
instead: the body is parsed by pydantic's JSON reader, each field takes the value as parsed
(or a UUID, a nested model, a block built the same way), and the model is assembled as
``model_construct`` does, without its overhead (:mod:`convstore.domain.assembly`). No model's
validator is built for it, so a fresh process that only replays never pays for building
them.

What it cannot rebuild so, it hands to the validating decoder, whole: an event whose class or
any field it meets carries a validator of its own, a value of a type its field does not take
as parsed (a timestamp kept in the body, a tool result's list of parts), anything unexpected.
The plans are derived from the models' fields, never listed by hand, and
``tests/test_trusted_decode.py`` holds that the two decoders give equal events for every
event and block kind.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from uuid import UUID

from pydantic import BaseModel, JsonValue
from pydantic_core import from_json

from convstore.domain.assembly import assembly
from convstore.domain.events import EVENT_ADAPTER, EVENT_CLASSES, ROLES, BlockRecorded, Event
from convstore.engine.model import StoredBlock
from convstore.infrastructure.common import mapper

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HEADER_FIELDS = frozenset({"originator_id", "originator_version", "type"})
"""What every compact state's header holds: a body holding one of them is not ours."""


@functools.lru_cache(maxsize=4096)
def _uuid(raw: bytes) -> UUID:
    """A header's id: a conversation's rows share one, a message's blocks another."""
    return UUID(bytes=raw)


_NONE = type(None)
_SCALARS = frozenset({str, int, bool, _NONE})


class _Fallback(Exception):
    """The value cannot be rebuilt without validation: the validating decoder takes it."""


def _members(annotation: Any) -> list[Any]:
    """A field's annotation as the types of its union, ``Annotated`` taken off."""
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [annotation]


def _is_json(annotation: Any) -> bool:
    """Whether values of ``annotation`` are exactly what the JSON reader returns."""
    if annotation is JsonValue or annotation in _SCALARS or get_origin(annotation) is Literal:
        return True
    origin = get_origin(annotation)
    if origin is dict:
        key, value = get_args(annotation)
        return key is str and _is_json(value)
    if origin is list:
        return all(_is_json(arg) for arg in get_args(annotation))
    return False


Convert = Callable[[Any], Any]


def _converter(annotation: Any) -> Convert | None:
    """How a field's parsed JSON value becomes its value; ``None``: it is taken as parsed."""
    members = _members(annotation)
    if all(m in _SCALARS or get_origin(m) is Literal for m in members):
        return _scalar_check(members)
    if all(_is_json(member) for member in members):
        return None
    if set(members) <= {UUID, _NONE}:
        return lambda value: None if value is None else UUID(value)
    if float in members and all(_is_json(m) or m is float for m in members):
        return lambda value: float(value) if type(value) is int else value
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    if models and len(models) + members.count(_NONE) == len(members):
        by_type = _by_type(models)
        if by_type is not None:
            return lambda value: None if value is None else _build_tagged(by_type, value)
    plain = tuple(m for m in members if m in _SCALARS)
    if plain:  # a union with other types: a value of a plain one is taken as parsed

        def taken_if_plain(value: Any) -> Any:
            if type(value) in plain:
                return value
            raise _Fallback

        return taken_if_plain
    return _refuse


def _scalar_check(members: list[Any]) -> Convert:
    """A field of scalars and literals: its value taken as parsed when it is of one of them
    (a damaged row's ``"index": "1"`` is left to the validator, which refuses it)."""
    types_ = frozenset(m for m in members if m in _SCALARS)
    literals = frozenset(
        (type(arg), arg) for m in members if get_origin(m) is Literal for arg in get_args(m)
    )

    def checked(value: Any) -> Any:
        if type(value) in types_ or (type(value), value) in literals:
            return value
        raise _Fallback

    return checked


def _refuse(value: Any) -> Any:
    raise _Fallback


class _Plan:
    """How one model is assembled from its parsed fields."""

    __slots__ = ("assemble", "converters")

    def __init__(self, cls: type[BaseModel]) -> None:
        self.assemble = assembly(cls)
        self.converters: dict[str, Convert | None] = {}
        """Every field by name: how its parsed value becomes its value (``None``: taken as
        parsed). A name missing here is no field of the model: the validator refuses it."""
        decorators = cls.__pydantic_decorators__
        checked = {
            field
            for validator in decorators.field_validators.values()
            for field in validator.info.fields
        }
        for name, field in cls.model_fields.items():
            self.converters[name] = _refuse if name in checked else _converter(field.annotation)

    def build(self, fields: dict[str, Any], given: dict[str, Any] | None = None) -> BaseModel:
        """The model of ``fields`` (as parsed, converted here in place) and ``given`` (typed
        already: what a compact state's header holds)."""
        converters = self.converters
        for name, value in fields.items():  # values replaced, never keys: iteration holds
            try:
                convert = converters[name]
            except KeyError:
                raise _Fallback from None
            if convert is not None:
                fields[name] = convert(value)
        if given:
            fields.update(given)
        if not self.assemble.required <= fields.keys():
            raise _Fallback  # a required field missing: the validator says so
        return self.assemble(fields)


_PLANS: dict[type[BaseModel], _Plan | None] = {}


def _plan(cls: type[BaseModel]) -> _Plan | None:
    """The plan of ``cls``, or ``None`` when a validator of the whole model must see it."""
    if cls not in _PLANS:
        _PLANS[cls] = None  # while it is being made (a model that holds itself falls back)
        has_own = bool(cls.__pydantic_decorators__.model_validators) or (
            cls.model_config.get("extra") == "allow"
        )
        _PLANS[cls] = None if has_own else _Plan(cls)
    return _PLANS[cls]


def _by_type(models: list[type[BaseModel]]) -> dict[str, type[BaseModel]] | None:
    """Models told apart by their ``type`` literal (a block union), or the one model."""
    if len(models) == 1:
        return {"": models[0]}
    found: dict[str, type[BaseModel]] = {}
    for model in models:
        field = model.model_fields.get("type")
        if field is None or not isinstance(field.default, str):
            return None
        found[field.default] = model
    return found


def _build_tagged(by_type: dict[str, type[BaseModel]], value: Any) -> BaseModel:
    if type(value) is not dict:
        raise _Fallback
    cls = by_type.get("") or by_type.get(value.get("type", ""))
    plan = None if cls is None else _plan(cls)
    if plan is None:
        raise _Fallback
    return plan.build(value)


_EVENT_PLANS: dict[int, tuple[_Plan | None, str]] = {
    mapper.KIND_CODES.index(str(cls.model_fields["type"].default)) + 1: (
        _plan(cls),
        str(cls.model_fields["type"].default),
    )
    for cls in EVENT_CLASSES
}


def decode_stored(codec: mapper.PydanticMapper, state: bytes) -> Event:
    """The event a stored state holds (unwrapped as ``codec`` stores it), as
    :meth:`~convstore.infrastructure.common.mapper.PydanticMapper.decode_state` gives it, rebuilt
    by :func:`decode_trusted` where its form allows (a format-1 store's full JSON is
    validated)."""
    plain = codec.unwrapped(state)
    if plain[:1] == b"{":
        return EVENT_ADAPTER.validate_json(plain)
    return decode_trusted(plain)


_NOT_REBUILT: tuple[type[Exception], ...] = (
    _Fallback,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
)
"""What sends a state to the validating decoder."""


def decode_trusted(state: bytes) -> Event:
    """The event a compact state holds, rebuilt from its fields as they were written; one it
    cannot rebuild so is decoded (and validated) by
    :func:`~convstore.infrastructure.common.mapper.decode_compact`."""
    try:
        return _rebuilt(state)
    except _NOT_REBUILT:
        return mapper.decode_compact(state)


def _rebuilt(state: bytes) -> Event:
    _head, version_end, has_time, has_message, at = mapper.layout_of(state)
    plan, kind = _EVENT_PLANS[state[1] & mapper.KIND_MASK]
    if plan is None:
        raise _Fallback
    body = mapper.unpacked(state[0], state[at:])
    # pydantic's JSON reader (Rust, already a dependency) parses twice as fast as the
    # standard one, to the same plain values; what it refuses, the validating decoder judges.
    fields: dict[str, Any] = from_json(b"{" + body[1:]) if body != b"}" else {}
    if not fields.keys().isdisjoint(_HEADER_FIELDS):
        raise _Fallback  # the header holds these: a body holding them is not ours
    given: dict[str, Any] = {
        "originator_id": _uuid(state[2:18]),
        "originator_version": int.from_bytes(state[18:version_end], "big"),
        "type": kind,
    }
    at_field = version_end
    if has_time:
        micros = int.from_bytes(state[at_field : at_field + 8], "big")
        given["timestamp"] = _EPOCH + timedelta(microseconds=micros)
        at_field += 8
    if has_message:
        given["message_id"] = _uuid(state[at_field : at_field + 16])
    return plan.build(fields, given)  # type: ignore[return-value]


_BLOCK_RECORDED = mapper.KIND_CODES.index(str(BlockRecorded.model_fields["type"].default)) + 1
_BLOCK_FIELDS = frozenset(BlockRecorded.model_fields) - _HEADER_FIELDS - {"message_id"}
"""What a compact block event's body may hold (the message id is in its header)."""
_ROLES = frozenset(ROLES)


def stored_block(plain: bytes, event: Callable[[], Event]) -> StoredBlock | None:
    """A compact block event's state (``plain``: as the codec unwraps it) as the fold reads
    it, without building a model (``event`` decodes the whole event when the fold needs it);
    ``None`` for any other state, or one whose fields the fold reads are not of their types
    (the decoder judges it then).

    The fields the fold does not read (the opening block's metadata) are not checked here:
    they were checked before they were written, and ``verify`` decodes every row whole."""
    if len(plain) < 2 or plain[1] & mapper.KIND_MASK != _BLOCK_RECORDED:
        return None
    try:
        _head, version_end, _has_time, has_message, at = mapper.layout_of(plain)
        body = mapper.unpacked(plain[0], plain[at:])
        fields = from_json(b"{" + body[1:])
    except ValueError:  # a body that does not inflate, or JSON that does not parse
        return None
    if not has_message or type(fields) is not dict or not _BLOCK_FIELDS.issuperset(fields):
        return None
    role, index, block = fields.get("role"), fields.get("index"), fields.get("block")
    closes, tool_name = fields.get("closes"), fields.get("tool_name")
    if (
        role not in _ROLES
        or type(index) is not int
        or index < 0
        or type(block) is not dict
        or (closes is not None and closes is not True)
        or (tool_name is not None and type(tool_name) is not str)
    ):
        return None
    return StoredBlock(
        int.from_bytes(plain[18:version_end], "big"),
        plain[at - 16 : at].hex(),  # the message id ends the header
        role,
        index,
        closes is True,
        tool_name,
        block,
        event,
    )
