"""Deprecated alias: dump and load moved to :mod:`convstore.store.transfer`, and
``export_conversation`` to :mod:`convstore.app.export`, in 0.4.

Kept for one release (see CHANGELOG.md).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORT = importlib.import_module("convstore.app.export")
_TRANSFER = importlib.import_module("convstore.store.transfer")


def __getattr__(name: str) -> Any:
    return getattr(_EXPORT if hasattr(_EXPORT, name) else _TRANSFER, name)
