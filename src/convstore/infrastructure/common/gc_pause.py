"""Pausing the cyclic garbage collector while a bulk read builds many acyclic objects."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a read builds many short-lived objects.

    Decoded events hold no reference cycles; with the collector running, each of its passes
    walks every event built so far, which made replay of long conversations superlinear.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
