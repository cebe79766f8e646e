"""Deprecated alias of :mod:`convstore.recording.anthropic`, where the recorders moved in 0.4.

Kept for one release (see CHANGELOG.md); import from :mod:`convstore.recording.anthropic`.
"""

from __future__ import annotations

import importlib
from typing import Any

_MOVED = importlib.import_module("convstore.recording.anthropic")


def __getattr__(name: str) -> Any:
    return getattr(_MOVED, name)
