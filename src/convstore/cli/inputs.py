"""Reading blocks from files and stdin, strictly."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from convstore.domain.errors import InvalidInput
from convstore.domain.json_values import StrictJSONError, strict_loads
from convstore.domain.limits import Limits


def _read(source: str | None, what: str) -> tuple[str, str]:
    """Text from a file path, or from stdin for ``-`` or nothing; and where it came from.

    Reads at most the input limit (and one byte more, to know it was exceeded).
    """
    limit = Limits.from_env().max_input_bytes
    if source in (None, "-"):
        if sys.stdin.isatty():
            msg = f"no input: give a FILE argument or pipe {what} on stdin"
            raise InvalidInput(msg)
        raw = sys.stdin.buffer.read(limit + 1)
        where = "stdin"
    else:
        try:
            with Path(source).open("rb") as handle:
                raw = handle.read(limit + 1)
        except OSError as exc:
            msg = f"cannot read {source}: {exc.strerror or exc}"
            raise InvalidInput(msg) from None
        where = source
    if len(raw) > limit:
        msg = f"{where} is larger than {limit:,} bytes (CONVSTORE_MAX_INPUT_BYTES)"
        raise InvalidInput(msg)
    try:
        return raw.decode("utf-8"), where
    except UnicodeDecodeError as exc:
        msg = f"{where} is not valid UTF-8 (byte {exc.start})"
        raise InvalidInput(msg) from None


def read_text(source: str | None) -> str:
    """Plain UTF-8 text from a file or stdin."""
    return _read(source, "text")[0]


def read_json(source: str | None) -> Any:
    """JSON from a file path, or from stdin for ``-`` or nothing; strict about what it takes."""
    return parse_json(*_read(source, "JSON"))


def read_input(source: str | None, what: str) -> tuple[str, str]:
    """Text from a file or stdin (within the input limit), and where it came from."""
    return _read(source, what)


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed as JSON, strictly (no NaN, no duplicate keys, finite numbers)."""
    try:
        return strict_loads(text)
    except json.JSONDecodeError as exc:
        msg = f"malformed JSON in {where}: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise InvalidInput(msg) from None
    except StrictJSONError as exc:
        msg = f"malformed JSON in {where}: {exc}"
        raise InvalidInput(msg) from None
    except ValueError as exc:  # e.g. an integer past Python's 4,300-digit limit
        msg = f"malformed JSON in {where}: {exc}"
        raise InvalidInput(msg) from None


def json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "a number, true, false or null"
