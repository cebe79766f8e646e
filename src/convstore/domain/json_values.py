"""Checks on free-form JSON (a tool call's input) that the JSON parsers do not make.

Done iteratively, so a hostile input cannot exhaust the stack while being checked.
"""

from __future__ import annotations

import json
import math
from itertools import accumulate
from typing import Any, NoReturn

MAX_DEPTH = 100
"""Deepest nesting accepted; pydantic's JSON reader stops at 200, so stored events always
decode."""

MAX_INPUT_DEPTH = 200
"""Deepest nesting a JSON input (a whole document, or one line of a line format) may have:
nothing deeper could be stored (pydantic's JSON reader stops at 200), and the standard parser
and every walk over what it returns stay far inside Python's recursion limit."""

MAX_INT_DIGITS = 4300
"""Most digits an integer may have: pydantic's JSON reader refuses a longer one ("number out
of range"), and so does Python's ``int(str)`` under its default limit. Found by experiment
(pydantic-core 2.50: 4,300 digits read back, 4,301 do not)."""

_INT_BOUND = 10**MAX_INT_DIGITS


def json_problem(value: object) -> str | None:
    """Why ``value`` cannot be stored as JSON that reads back identically, or ``None``."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return problem
        elif isinstance(item, int) and not -_INT_BOUND < item < _INT_BOUND:
            return f"an integer has more than {MAX_INT_DIGITS:,} digits, which JSON readers refuse"
        elif isinstance(item, float) and not math.isfinite(item):
            return f"the number {item} is not finite (JSON has no infinity or NaN)"
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str) and (problem := _text_problem(key)):
                    return problem
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
    return None


def _text_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"text holds a lone surrogate (\\u{ord(text[exc.start]):04x}), which is not Unicode"
    return None


class StrictJSONError(ValueError):
    """JSON the standard parser accepts but convstore does not (NaN, an infinite number, a
    key twice in one object, nesting past :data:`MAX_INPUT_DEPTH`)."""


class NestedTooDeepError(StrictJSONError):
    """JSON nested more than :data:`MAX_INPUT_DEPTH` levels deep."""


def strict_loads(text: str, *, unique_keys: bool = True) -> Any:
    """``text`` parsed as JSON as the standard defines it: ``NaN``, ``Infinity`` and numbers
    too large for a float (``1e999``) are refused, and with ``unique_keys`` a key twice in one
    object; so is nesting deeper than :data:`MAX_INPUT_DEPTH`, before anything is parsed.
    Raises ``ValueError`` (:class:`StrictJSONError` for these, ``JSONDecodeError`` for
    malformed text). Every JSON input convstore reads goes through here."""
    if _nesting(text) > MAX_INPUT_DEPTH:
        msg = f"nested more than {MAX_INPUT_DEPTH} levels deep"
        raise NestedTooDeepError(msg)
    return _DECODERS[unique_keys].decode(text)


_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")


def _nesting(text: str) -> int:
    """How deep ``text``'s arrays and objects nest, read as JSON without parsing it (exact for
    valid JSON; for invalid JSON some number, which the parser then refuses anyway).

    Linear and mostly in C: escaped backslashes and quotes are dropped, the text is split at
    the remaining quotes so that every other piece is outside a string, and the brackets of
    those pieces are summed as +1 and -1. Text with fewer opening brackets than the limit is
    not scanned at all.
    """
    if text.count("[") + text.count("{") <= MAX_INPUT_DEPTH:
        return 0
    outside = "".join(text.replace("\\\\", "").replace('\\"', "").split('"')[::2])
    brackets = outside.encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _reject_constant(name: str) -> NoReturn:
    msg = f"{name} is not a JSON number"
    raise StrictJSONError(msg)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        msg = f"{text} is too large for a JSON number"
        raise StrictJSONError(msg)
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            msg = f"key {key!r} appears twice in one object"
            raise StrictJSONError(msg)
        result[key] = value
    return result


_DECODERS = {
    unique: json.JSONDecoder(
        parse_constant=_reject_constant,
        parse_float=_finite_float,
        object_pairs_hook=_no_duplicate_keys if unique else None,
    )
    for unique in (True, False)
}
"""The two strict parsers, made once (``json.loads`` with hooks makes one a call)."""
