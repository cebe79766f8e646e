"""What a source knew about its messages besides their blocks: when, which model, how many
tokens, why it stopped, and its own ids. Read leniently: a value of the wrong shape is left
out (the message is still imported), never refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue, ValidationError

from convstore.domain.events import MessageMeta, TokenUsage

ANTHROPIC_USAGE = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_tokens",
    "cache_creation_input_tokens": "cache_write_tokens",
}
"""An Anthropic ``usage`` object's counts, by the :class:`TokenUsage` field each becomes."""


def source_time(value: object) -> datetime | None:
    """An ISO 8601 time with a zone (``2025-06-01T10:00:00.123Z``) in UTC; ``None`` for
    anything else (no zone: the source's clock is unknown, so the time is not guessed)."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None or moment.utcoffset() is None:
        return None
    return moment.astimezone(UTC)


def anthropic_usage(usage: object) -> TokenUsage | None:
    """The counts of an Anthropic ``usage`` object that are whole numbers of 0 or more."""
    if not isinstance(usage, Mapping):
        return None
    counts = {
        field: usage[name]
        for name, field in ANTHROPIC_USAGE.items()
        if type(usage.get(name)) is int and usage[name] >= 0
    }
    return TokenUsage(**counts) if counts else None


def anthropic_meta(
    message: Mapping[str, Any], extra: Mapping[str, JsonValue] | None = None
) -> MessageMeta | None:
    """The metadata of an Anthropic message object (``model``, ``id``, ``stop_reason``,
    ``usage``) with ``extra`` (the source's other ids); ``None`` when it has none."""
    fields: dict[str, Any] = {
        "model": _text(message.get("model")),
        "provider_message_id": _text(message.get("id")),
        "stop_reason": _text(message.get("stop_reason")),
        "usage": anthropic_usage(message.get("usage")),
        "extra": {key: value for key, value in (extra or {}).items() if value is not None},
    }
    if not any(fields.values()):
        return None
    try:
        return MessageMeta(**fields)
    except ValidationError:  # pragma: no cover - every field was checked above
        return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
