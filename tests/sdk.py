"""The real provider SDKs' request types as validators of what convstore emits.

How the validator works, and why it has two layers:

1. **Keys and values, by walking the SDK's TypedDicts** (:func:`request_problems`). The request
   body is walked together with the SDK type (``CompletionCreateParamsNonStreaming`` or
   ``MessageCreateParamsNonStreaming``): at every TypedDict the dict must have no key outside
   the TypedDict's annotations and every required key; each value is checked against its
   annotation recursively (unions: some arm must fit; ``Literal``: one of its values; lists and
   ``Iterable``: every item). Required keys are read from the ``Required[...]`` /
   ``NotRequired[...]`` wrappers in the resolved annotations: ``__required_keys__`` is empty on
   these classes here (the SDK modules use ``from __future__ import annotations``, so the
   wrappers are strings when ``typing_extensions.TypedDict`` sorts the keys on Python 3.11).
2. **pydantic** (:func:`pydantic_problems`): ``TypeAdapter(list[Request],
   config=ConfigDict(extra="forbid", strict=True))`` over ``[body]``. The request type must be
   wrapped: ``TypeAdapter`` refuses ``config`` for a TypedDict itself. The config then reaches
   nested TypedDicts, but not reliably: the anthropic SDK gives some of its TypedDicts a pydantic
   config of their own (``Base64ImageSourceParam``, for one), under which unknown keys are
   ignored again, and with the SDK versions installed here pydantic alone accepts an unknown key
   on an anthropic image source and on an anthropic text block. ``Iterable`` fields are also
   validated lazily, so the result is walked to force every nested iterator. So pydantic is a
   second opinion on values; layer 1 is what makes "no unknown key" hold everywhere.

A body is accepted only when both layers find nothing. tests/test_replay_sdk.py shows that each
kind of mistake (unknown key at the top, on a message, on a content part, inside a nested part;
a missing required key; a wrong literal; a wrong value type) is rejected.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import typing_extensions
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import ConfigDict, TypeAdapter, ValidationError

Provider: TypeAlias = Literal["openai", "anthropic"]

REQUEST_TYPES: dict[Provider, type[Any]] = {
    "openai": CompletionCreateParamsNonStreaming,
    "anthropic": MessageCreateParamsNonStreaming,
}

FORBID_EXTRA = ConfigDict(extra="forbid", strict=True)

ADAPTERS: dict[Provider, TypeAdapter[Any]] = {
    "openai": TypeAdapter(list[CompletionCreateParamsNonStreaming], config=FORBID_EXTRA),
    "anthropic": TypeAdapter(list[MessageCreateParamsNonStreaming], config=FORBID_EXTRA),
}


def request_body(provider: Provider, fragment: Mapping[str, Any]) -> dict[str, Any]:
    """A whole request: replay's fragment plus the provider's other required fields."""
    if provider == "openai":
        return {"model": "gpt-4o", **fragment}
    return {"model": "claude-sonnet-4-5", "max_tokens": 1024, **fragment}


# -- layer 1: walk the TypedDicts ----------------------------------------------------------------

_WRAPPERS = tuple(
    wrapper
    for wrapper in (
        typing_extensions.Required,
        typing_extensions.NotRequired,
        getattr(typing_extensions, "ReadOnly", None),
        getattr(typing, "Required", None),
        getattr(typing, "NotRequired", None),
    )
    if wrapper is not None
)
_SEQUENCE_ORIGINS: tuple[Any, ...] = (list, tuple, Iterable, Sequence)


def _unwrap(annotation: Any) -> tuple[Any, bool | None]:
    """The annotation without ``Annotated``/``Required``/``NotRequired``, and what they said."""
    required: bool | None = None
    while True:
        origin = typing_extensions.get_origin(annotation)
        if origin is typing_extensions.Annotated:
            annotation = annotation.__origin__
        elif origin in _WRAPPERS:
            if origin in (typing_extensions.Required, getattr(typing, "Required", None)):
                required = True
            elif origin is not getattr(typing_extensions, "ReadOnly", None):
                required = False
            annotation = typing_extensions.get_args(annotation)[0]
        else:
            return annotation, required


_FIELDS: dict[type[Any], dict[str, tuple[Any, bool]]] = {}


def _fields(typed_dict: type[Any]) -> dict[str, tuple[Any, bool]]:
    """Each key of a TypedDict: its bare annotation and whether it is required (cached)."""
    if typed_dict in _FIELDS:
        return _FIELDS[typed_dict]
    hints = typing_extensions.get_type_hints(typed_dict, include_extras=True)
    fields: dict[str, tuple[Any, bool]] = {}
    for key, hint in hints.items():
        annotation, required = _unwrap(hint)
        if required is None:
            required = key in typed_dict.__required_keys__
        fields[key] = (annotation, required)
    _FIELDS[typed_dict] = fields
    return fields


def _is_sequence_type(origin: Any) -> bool:
    return origin in _SEQUENCE_ORIGINS or getattr(origin, "__name__", "") == "SequenceNotStr"


Checker: TypeAlias = Callable[[object, Any, str], list[str]]


def request_problems(value: object, annotation: Any, where: str = "body") -> list[str]:
    """Every way ``value`` breaks ``annotation``, unknown keys included; empty when it fits."""
    annotation, _ = _unwrap(annotation)
    origin = typing_extensions.get_origin(annotation)
    checker: Checker
    if annotation is Any or annotation is object:
        checker = _anything
    elif origin is typing.Union or origin is types.UnionType:
        checker = _union_problems
    elif origin is typing_extensions.Literal or origin is typing.Literal:
        checker = _literal_problems
    elif typing_extensions.is_typeddict(annotation):
        checker = _typed_dict_problems
    elif _is_sequence_type(origin):
        checker = _sequence_problems
    elif origin in (dict, Mapping):
        checker = _mapping_problems
    else:
        checker = _scalar_problems
    return checker(value, annotation, where)


def _anything(value: object, annotation: Any, where: str) -> list[str]:
    return []


def _union_problems(value: object, annotation: Any, where: str) -> list[str]:
    arms = [request_problems(value, arm, where) for arm in typing_extensions.get_args(annotation)]
    if any(not problems for problems in arms):
        return []
    return min(arms, key=lambda problems: _closeness(problems, where))


def _literal_problems(value: object, annotation: Any, where: str) -> list[str]:
    allowed = typing_extensions.get_args(annotation)
    if any(type(value) is type(option) and value == option for option in allowed):
        return []
    return [f"{where}: {value!r} is not one of {allowed}"]


def _sequence_problems(value: object, annotation: Any, where: str) -> list[str]:
    if not isinstance(value, list | tuple):
        return [f"{where}: expected a list, got {type(value).__name__}"]
    args = typing_extensions.get_args(annotation)
    item = args[0] if args else Any
    return [p for i, v in enumerate(value) for p in request_problems(v, item, f"{where}[{i}]")]


def _mapping_problems(value: object, annotation: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected an object, got {type(value).__name__}"]
    key_type, value_type = typing_extensions.get_args(annotation) or (Any, Any)
    return [
        problem
        for k, v in value.items()
        for problem in request_problems(k, key_type, f"{where}.<key>")
        + request_problems(v, value_type, f"{where}.{k}")
    ]


def _depth(location: str) -> int:
    return location.count(".") + location.count("[")


def _closeness(problems: list[str], where: str) -> tuple[bool, int, int]:
    """Ranks a union arm's problems, so the error names the arm that was meant.

    Worst is an arm whose own literal (a ``role`` or ``type``) does not match; then the arm
    that fit least deep; then the one with more problems.
    """
    locations = [problem.split(": ", 1)[0] for problem in problems]
    own_literal_missed = any(
        _depth(location) == _depth(where) + 1 and " is not one of " in problem
        for location, problem in zip(locations, problems, strict=True)
    )
    return own_literal_missed, -min(map(_depth, locations)), len(problems)


def _scalar_problems(value: object, annotation: Any, where: str) -> list[str]:
    annotation = typing_extensions.get_origin(annotation) or annotation
    if annotation is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    elif annotation is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif annotation is type(None) or annotation is None:
        fits = value is None
    elif isinstance(annotation, type):
        try:
            fits = isinstance(value, annotation)
        except TypeError:
            fits = False
    else:
        return [f"{where}: cannot check against {annotation!r}"]
    return [] if fits else [f"{where}: {type(value).__name__} is not {annotation!r}"]


def _typed_dict_problems(value: object, typed_dict: type[Any], where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected a {typed_dict.__name__} object, got {type(value).__name__}"]
    fields = _fields(typed_dict)
    problems = [f"{where}: unknown key {key!r}" for key in value if key not in fields]
    for key, (annotation, required) in fields.items():
        if key in value:
            problems += request_problems(value[key], annotation, f"{where}.{key}")
        elif required:
            problems.append(f"{where}: missing required key {key!r}")
    return problems


# -- layer 2: pydantic, with lazy iterables forced -------------------------------------------------


def _force(value: object) -> object:
    """``value`` with every lazily validating iterator run to the end (raising what it finds)."""
    if isinstance(value, Mapping):
        return {key: _force(item) for key, item in value.items()}
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, list | tuple | Iterator) or type(value).__name__ == "ValidatorIterator":
        return [_force(item) for item in typing.cast(Iterable[object], value)]
    return value


def pydantic_problems(provider: Provider, body: object) -> list[str]:
    """What pydantic, over the SDK's request type, finds wrong with ``body``."""
    try:
        _force(ADAPTERS[provider].validate_python([body]))
    except ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return []


def rejections(provider: Provider, body: object) -> list[str]:
    """Everything either layer finds wrong with ``body``; empty means the SDK accepts it."""
    return request_problems(body, REQUEST_TYPES[provider]) + pydantic_problems(provider, body)
