"""The composition root: the one place that turns a location into a working store."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Literal, TypeAlias, TypeVar

from convstore.domain.errors import InvalidInput, StoreError
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_count
from convstore.infrastructure import backend_for
from convstore.infrastructure.common.application import EventLog
from convstore.infrastructure.sqlite.recorder import default_path
from convstore.ports.backend import Backend, Opening
from convstore.ports.records import failure_detail
from convstore.store import Store
from convstore.store.replay_cache import DEFAULT_CACHE_BYTES

ENV_VAR = "CONVSTORE_DB"

T = TypeVar("T")


ReplayModel: TypeAlias = bool | Literal["on_read"] | None
"""What ``open_store(replay_model=...)`` took before format 3 removed the stored replay model:
still accepted, for one release, and ignored (:func:`warn_replay_model`)."""

REPLAY_MODEL_GONE = (
    "open_store(replay_model=...) no longer does anything: convstore keeps no replay model "
    "beside the log since store format 3 (replay folds the log, cached in memory); "
    "the argument will be removed in the next release"
)


def warn_replay_model(replay_model: ReplayModel, stacklevel: int) -> None:
    """Warn that ``replay_model`` is ignored, when it was given (``stacklevel`` names the
    caller's line, as :func:`warnings.warn` counts)."""
    if replay_model is not None:
        warnings.warn(REPLAY_MODEL_GONE, DeprecationWarning, stacklevel=stacklevel + 1)


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
    replay_model: ReplayModel = None,
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
    of per-message plans, least recently replayed dropped first; 0 keeps none): a replay
    folds the conversation's log, read once in version order, and a cached conversation only
    the events appended since. ``replay_model`` is accepted and ignored, with a
    :class:`DeprecationWarning`: no replay model is kept beside the log since store format 3,
    and the argument goes in the next release.
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
    warn_replay_model(replay_model, stacklevel=2)
    backend = backend_for(resolved)
    with backend.opening(resolved, create=create, make_directory=not location) as opening:
        return _open(backend, opening, limits=limits, replay_cache_bytes=cache)


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
        store = _open(backend, opening, limits=limits, replay_cache_bytes=DEFAULT_CACHE_BYTES)
        try:
            return fill(store)
        finally:
            store.close()

    return backend.create_filled(resolved, filled, make_directory=not location)


def _open(backend: Backend, opening: Opening, *, limits: Limits, replay_cache_bytes: int) -> Store:
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
        replay_cache_bytes=replay_cache_bytes,
        backend=backend,
    )
    if log.store_recorder.listing_missing:
        try:
            store.rebuild_listing()  # a store made before the listing index, or a new one
        except BaseException:
            store.close()
            raise
    return store
