"""Deprecated alias: the async store moved to :mod:`convstore.store.aio`, and
``open_async_store`` to :mod:`convstore.app.bootstrap` in 0.4 (now in :mod:`convstore.app.aio`).

Kept for one release (see the changelog); import from :mod:`convstore` instead.
"""

from __future__ import annotations

import importlib
from typing import Any

_OPENING = importlib.import_module("convstore.app.aio")
_AIO = importlib.import_module("convstore.store.aio")


def __getattr__(name: str) -> Any:
    return getattr(_OPENING if name == "open_async_store" else _AIO, name)
