"""The composition root: the one place that turns a location into a working store."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from convstore.backends import backend_for
from convstore.backends.common.application import EventLog
from convstore.backends.common.replay_tables import DEFAULT_CACHE_BYTES
from convstore.backends.sqlite.recorder import default_path
from convstore.domain.errors import InvalidInput, StoreError
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_count
from convstore.ports.backend import Backend, Opening
from convstore.ports.records import failure_detail
from convstore.ports.replay import ReplayModel
from convstore.store import Store

ENV_VAR = "CONVSTORE_DB"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """How a store keeps replay's read model: the in-process cache's budget, and whether the
    model is kept beside the log at all."""

    cache_bytes: int
    model: ReplayModel = True


def resolve_location(location: str | os.PathLike[str] | None) -> str:
    """The location given, else ``$CONVSTORE_DB``, else the default SQLite path."""
    if location is not None and not isinstance(location, str | os.PathLike):
        msg = f"a store location is a path or a URL, not {type(location).__name__}"
        raise InvalidInput(msg)
    if location is None or str(location) == "":
        return os.environ.get(ENV_VAR) or str(default_path())
    text = os.fspath(location)
    if not isinstance(text, str):
        msg = "a store location is a path or a URL given as text, not bytes"
        raise InvalidInput(msg)
    return text


def open_store(
    location: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
    limits: Limits | None = None,
    replay_cache_bytes: int = DEFAULT_CACHE_BYTES,
    replay_model: ReplayModel = True,
) -> Store:
    """Open the store at ``location``: a SQLite file path, a ``postgresql://`` or a ``nats://``
    URL.

    Without a location, ``$CONVSTORE_DB`` or the default path is used (its directory is made
    if missing). With ``create=False`` a location that holds no store (a missing or empty SQLite
    file, a directory, a PostgreSQL schema without convstore's tables, a missing NATS stream)
    raises :class:`NoStore` instead of being made one, so reading never leaves a store behind.
    Any other ``scheme://`` location, and SQLite's own ``file:`` URIs, are refused: a store is
    one file, named by its path.

    ``replay_cache_bytes`` bounds the memory replay keeps between calls (about that many bytes
    of per-message plans, least recently replayed dropped first; 0 keeps none). With
    ``replay_model=False`` this store neither reads nor writes the replay read model beside the
    log (it costs disk: about one more copy of the text); replay then folds the log, cached in
    memory all the same. By default a SQLite store's writer keeps that model current inside
    each append (a few statements more per append; a fresh process then reads one row per
    message); ``replay_model="on_read"`` leaves it to readers, as before 0.4: appends skip
    it, and the first replay of a conversation folds its log and stores the model.
    """
    resolved = resolve_location(location)
    if not isinstance(create, bool):
        msg = f"create must be True or False, not {create!r}"
        raise InvalidInput(msg)
    if limits is not None and not isinstance(limits, Limits):
        msg = f"limits must be a convstore.Limits, not {type(limits).__name__}"
        raise InvalidInput(msg)
    limits = limits or Limits.from_env()
    cache = parse_count(replay_cache_bytes, "replay_cache_bytes")
    if not isinstance(replay_model, bool) and replay_model != "on_read":
        msg = f"replay_model must be True, False or 'on_read', not {replay_model!r}"
        raise InvalidInput(msg)
    replay = ReplaySettings(cache, model=replay_model)
    backend = backend_for(resolved)
    with backend.opening(resolved, create=create, make_directory=not location) as opening:
        return _open(backend, opening, limits=limits, replay=replay)


def fill_new_store(
    location: str | os.PathLike[str] | None,
    fill: Callable[[Store], T],
    *,
    limits: Limits | None = None,
) -> tuple[T, str]:
    """Make a new SQLite store at ``location`` holding what ``fill`` writes into it, all at
    once; returns what ``fill`` returned and the store's location, as :func:`open_store`
    names it.

    The store is made and filled in a private temporary file beside its name, then linked
    into place once ``fill`` has returned: a fill that raises (or a process killed meanwhile)
    leaves no store behind. An existing store there, or one another process makes during the
    fill, is refused (:class:`InvalidInput`; the other's store is kept). Only SQLite files are
    made this way: a PostgreSQL schema is opened as usual with :func:`open_store`.
    """
    resolved = resolve_location(location)
    backend = backend_for(resolved)
    limits = limits or Limits.from_env()

    def filled(opening: Opening) -> T:
        store = _open(backend, opening, limits=limits, replay=ReplaySettings(DEFAULT_CACHE_BYTES))
        try:
            return fill(store)
        finally:
            store.close()

    return backend.create_filled(resolved, filled, make_directory=not location)


def _open(backend: Backend, opening: Opening, *, limits: Limits, replay: ReplaySettings) -> Store:
    """The store ``opening`` makes ready: its event log opened, its listing index built if
    it has none."""
    try:
        log = EventLog(
            env=opening.env,
            store_format=opening.store_format,
            compress_from=backend.compress_from,
        )
        log.recorder.max_notification_id()  # fail here, not at first use, if it is no store
    except Exception as exc:  # noqa: BLE001 - any backend failure is reported as one line
        msg = f"cannot open the store at {opening.shown}: {failure_detail(exc, opening.secret)}"
        raise StoreError(msg) from None
    store = Store(
        log,
        opening.shown,
        secret=opening.secret,
        identity=opening.identity,
        limits=limits,
        replay_cache_bytes=replay.cache_bytes,
        replay_model=replay.model,
        backend=backend,
    )
    if log.store_recorder.listing_missing:
        try:
            store.rebuild_listing()  # a store made before the listing index, or a new one
        except BaseException:
            store.close()
            raise
    return store
