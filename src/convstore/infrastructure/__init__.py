"""The backends: what every backend shares (``common``), one folder per backend (``sqlite``,
``postgres``), each implementing :class:`convstore.ports.backend.Backend`, and the registry
below, **the one place a backend is chosen** from a store's location.

A location with no ``scheme://`` is a file path, which :data:`FILE_BACKEND` keeps; a URL is
kept by the backend its scheme names in :data:`BACKENDS` (``postgresql+psycopg`` is looked up
as itself, then as ``postgresql``). Each is a ``"module:Class"`` string, loaded on first use,
so a backend's driver is imported only by the stores that need it. Adding a backend is one
folder under ``infrastructure/`` and one line in :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib
import re
import threading
from typing import TYPE_CHECKING

from convstore.domain.errors import InvalidInput
from convstore.infrastructure.common.locations import redact, url_scheme

if TYPE_CHECKING:
    from convstore.ports.backend import Backend

FILE_BACKEND = "convstore.infrastructure.sqlite.backend:SQLiteBackend"
"""The backend of a location that is a file path."""

BACKENDS: dict[str, str] = {
    "postgresql": "convstore.infrastructure.postgres.backend:PostgresBackend",
    "postgres": "convstore.infrastructure.postgres.backend:PostgresBackend",
    "nats": "convstore.infrastructure.nats.backend:NatsBackend",
}
"""Each URL scheme a store may be named by (lowercase), and the backend that keeps it."""

_LOADED: dict[str, Backend] = {}
_LOADING = threading.Lock()

_LOOKALIKE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):/?(?!/)")
"""A registered scheme followed by ``:`` and at most one ``/``: a URL passed through
``pathlib.Path``, which folds ``//`` into ``/``."""


def load_backend(target: str) -> Backend:
    """The backend a ``"module:Class"`` string names, made once per process."""
    with _LOADING:
        backend = _LOADED.get(target)
        if backend is None:
            module, _, name = target.partition(":")
            backend = _LOADED[target] = getattr(importlib.import_module(module), name)()
        return backend


def _registered(scheme: str) -> str | None:
    return BACKENDS.get(scheme) or BACKENDS.get(scheme.split("+", 1)[0])


def backend_for(location: str) -> Backend:
    """The backend that keeps the store at ``location`` (a file path or a URL).

    Refuses with :class:`~convstore.InvalidInput` a URL whose scheme no backend has, and a
    path that is a registered backend's URL with its ``//`` folded (the password would
    otherwise be shown as part of a file name)."""
    scheme = url_scheme(location)
    if scheme is None:
        lookalike = _LOOKALIKE.match(location)
        target = lookalike and _registered(lookalike.group(1).lower())
        if target:
            kind, _colon, rest = location.partition(":")
            shown = load_backend(target).show(f"{kind}://{rest.lstrip('/')}")
            msg = (
                f"{shown} looks like a {load_backend(target).name} URL without the '//' after"
                " its scheme (a pathlib.Path drops one '/'): pass the URL as text"
            )
            raise InvalidInput(msg)
        return load_backend(FILE_BACKEND)
    target = _registered(scheme)
    if target is None:
        msg = (
            f"unknown store URL scheme {scheme!r} in {redact(location)}: use a SQLite file path"
            ", a postgresql:// URL or a nats:// URL"
        )
        raise InvalidInput(msg)
    return load_backend(target)
