"""Checking what a caller gives as conversation labels and message metadata."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from convstore.domain.errors import InvalidInput
from convstore.domain.events import MessageMeta
from convstore.domain.json_values import json_problem
from convstore.domain.limits import Limits
from convstore.domain.parsing import describe_value, parse_name

_KEY = re.compile(r"[A-Za-z0-9._:/-]+")


def parse_label_key(key: object, limits: Limits) -> str:
    """A label key: 1 to ``max_label_key_bytes`` characters from ``A-Z a-z 0-9 . _ - : /``."""
    if not isinstance(key, str):
        msg = f"a label key must be text, not {describe_value(key)}"
        raise InvalidInput(msg)
    if not _KEY.fullmatch(key) or len(key) > limits.max_label_key_bytes:
        msg = (
            f"label key {describe_value(key)} must be 1 to {limits.max_label_key_bytes} "
            "characters from A-Z a-z 0-9 . _ - : /"
        )
        raise InvalidInput(msg)
    return key


def parse_labels(labels: object, limits: Limits) -> dict[str, str]:
    """Labels to set: a non-empty mapping of keys (see :func:`parse_label_key`) to text."""
    if not isinstance(labels, Mapping):
        msg = f"labels must be a mapping of keys to text, not {describe_value(labels)}"
        raise InvalidInput(msg)
    if not labels:
        msg = "give at least one label to set"
        raise InvalidInput(msg)
    checked: dict[str, str] = {}
    for key, value in labels.items():
        name = parse_label_key(key, limits)
        checked[name] = parse_name(value, f"label {name}", limits.max_note_bytes)
    return checked


def parse_label_keys(keys: object, limits: Limits) -> list[str]:
    """Label keys to remove: a non-empty list of keys (not one bare string)."""
    if isinstance(keys, str | bytes) or not isinstance(keys, Iterable):
        msg = f"keys must be a list of label keys, not {describe_value(keys)}"
        raise InvalidInput(msg)
    checked = list(dict.fromkeys(parse_label_key(key, limits) for key in keys))
    if not checked:
        msg = "give at least one label key to remove"
        raise InvalidInput(msg)
    return checked


def parse_meta(meta: MessageMeta | Mapping[str, Any], limits: Limits) -> MessageMeta:
    """Message metadata from a :class:`MessageMeta` or its JSON object, within
    ``max_note_bytes`` as JSON."""
    if isinstance(meta, MessageMeta | Mapping):
        # A model is checked as its fields (one made with model_construct never was).
        fields = meta.model_dump() if isinstance(meta, MessageMeta) else dict(meta)
        if problem := json_problem(fields):
            msg = f"message metadata: {problem}"
            raise InvalidInput(msg)
        try:
            checked = MessageMeta.model_validate(fields)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"]) or "top"
            msg = f"message metadata: {where}: {first['msg']}"
            raise InvalidInput(msg) from None
    else:
        msg = f"meta must be a MessageMeta or a JSON object, not {describe_value(meta)}"
        raise InvalidInput(msg)
    size = len(checked.model_dump_json(exclude_defaults=True).encode())
    if size > limits.max_note_bytes:
        msg = f"message metadata is {size:,} bytes of JSON; the limit is {limits.max_note_bytes:,}"
        raise InvalidInput(msg)
    return checked
