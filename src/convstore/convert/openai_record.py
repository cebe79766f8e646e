"""Deprecated alias of :mod:`convstore.recording.openai`, where the recorders moved in 0.4.

Kept for one release (see CHANGELOG.md); import from :mod:`convstore.recording.openai`.
"""

from __future__ import annotations

import importlib
from typing import Any

_MOVED = importlib.import_module("convstore.recording.openai")


def __getattr__(name: str) -> Any:
    return getattr(_MOVED, name)
