"""The composition root: the one place that turns a location into a working store."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_count
from convstore.errors import ConvstoreError, InvalidInput, NoStore, StoreError
from convstore.extras import missing_extra
from convstore.infrastructure.application import EventLog, StoreMarker
from convstore.infrastructure.postgres import (
    PostgresSettings,
    is_postgres_url,
    redact,
    refuse_mangled_url,
    url_scheme,
)
from convstore.infrastructure.records import failure_detail
from convstore.infrastructure.replay_tables import DEFAULT_CACHE_BYTES
from convstore.infrastructure.sqlite import (
    default_path,
    lock_timeout_seconds,
    refuse_sqlite_uri,
    sqlite_env,
)
from convstore.infrastructure.sqlite_files import (
    claim_store_file,
    create_store_file,
    remove_leftovers,
)
from convstore.store import Store

ENV_VAR = "CONVSTORE_DB"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ReplaySettings:
    """How a store keeps replay's read model: the in-process cache's budget, and whether the
    model is kept beside the log at all."""

    cache_bytes: int
    model: bool = True


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
    replay_model: bool = True,
) -> Store:
    """Open the store at ``location``: a SQLite file path or a ``postgresql://`` URL.

    Without a location, ``$CONVSTORE_DB`` or the default path is used (its directory is made
    if missing). With ``create=False`` a missing SQLite file raises :class:`NoStore` instead of
    being created, so reading never leaves a file behind. Any other ``scheme://`` location,
    and SQLite's own ``file:`` URIs, are refused: a store is one file, named by its path.

    ``replay_cache_bytes`` bounds the memory replay keeps between calls (about that many bytes
    of per-message plans, least recently replayed dropped first; 0 keeps none). With
    ``replay_model=False`` this store neither reads nor writes the replay read model beside the
    log (it costs disk: about one more copy of the text); replay then folds the log, cached in
    memory all the same.
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
    if not isinstance(replay_model, bool):
        msg = f"replay_model must be True or False, not {replay_model!r}"
        raise InvalidInput(msg)
    replay = ReplaySettings(cache, model=replay_model)
    scheme = url_scheme(resolved)
    if scheme is not None:
        if is_postgres_url(resolved):
            return _open_postgres(resolved, limits, replay)
        msg = (
            f"unknown store URL scheme {scheme!r} in {redact(resolved)}: use a SQLite file path"
            " or a postgresql:// URL"
        )
        raise InvalidInput(msg)
    refuse_mangled_url(resolved)
    refuse_sqlite_uri(resolved)
    return _open_sqlite(Path(resolved), limits, replay, create=create, make_directory=not location)


def _open_sqlite(
    given: Path, limits: Limits, replay: ReplaySettings, *, create: bool, make_directory: bool
) -> Store:
    # The file itself: a symbolic link (even a dangling one) is followed to where it points,
    # and that one file is what is checked, created, opened and shown.
    path = Path(os.path.realpath(given))
    lock_timeout = lock_timeout_seconds()
    if not path.exists():
        if not create:
            msg = f"no store at {given} (nothing has been recorded there yet)"
            raise NoStore(msg)
        if make_directory:
            path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.is_dir():
            msg = f"cannot create a store at {given}: directory {path.parent} does not exist"
            raise StoreError(msg)
        remove_leftovers(path)
        try:
            create_store_file(path, _build)
        except ConvstoreError:
            raise
        except (OSError, sqlite3.Error) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            msg = f"cannot create a store at {given}: {detail}"
            raise StoreError(" ".join(msg.split())) from None
    remove_leftovers(path)
    try:  # made just now (by this process or another), or an existing store
        marker = claim_store_file(path, lock_timeout)
    except (OSError, sqlite3.Error) as exc:
        msg = f"cannot open the store at {given}: {exc}"
        raise StoreError(" ".join(msg.split())) from None
    return _open(
        sqlite_env(path), str(path), secret="", limits=limits, replay=replay, marker=marker
    )


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
    if url_scheme(resolved) is not None:
        msg = f"only a SQLite file is made whole from the start, not {redact(resolved)}"
        raise InvalidInput(msg)
    refuse_mangled_url(resolved)
    refuse_sqlite_uri(resolved)
    limits = limits or Limits.from_env()
    given = Path(resolved)
    path = Path(os.path.realpath(given))
    if not location:
        path.parent.mkdir(parents=True, exist_ok=True)
    if not path.parent.is_dir():
        msg = f"cannot create a store at {given}: directory {path.parent} does not exist"
        raise StoreError(msg)
    if path.exists():
        msg = f"a store already exists at {given}"
        raise InvalidInput(msg)
    filled: list[T] = []

    def build(temporary: Path) -> None:
        _build(temporary)
        store = _open(
            sqlite_env(temporary),
            str(temporary),
            secret="",
            limits=limits,
            replay=ReplaySettings(DEFAULT_CACHE_BYTES),
            marker=claim_store_file(temporary, lock_timeout_seconds()),
        )
        try:
            filled.append(fill(store))
        finally:
            store.close()

    remove_leftovers(path)
    try:
        made = create_store_file(path, build)
    except ConvstoreError:
        raise
    except (OSError, sqlite3.Error) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        msg = f"cannot create a store at {given}: {detail}"
        raise StoreError(" ".join(msg.split())) from None
    if not made:
        msg = f"another process made a store at {given} meanwhile: it is kept, nothing was added"
        raise InvalidInput(msg)
    return filled[0], str(path)


def _build(temporary: Path) -> None:
    """Make convstore's tables in a new file, exactly as opening a store makes them."""
    try:
        log = EventLog(env=sqlite_env(temporary))
    except Exception as exc:  # noqa: BLE001 - any backend failure is reported as one line
        msg = f"cannot create a store: {failure_detail(exc)}"
        raise StoreError(msg) from None
    log.close()


def _open_postgres(url: str, limits: Limits, replay: ReplaySettings) -> Store:
    settings = PostgresSettings.from_url(url)
    shown = redact(url)
    if importlib.util.find_spec("psycopg") is None:
        msg = missing_extra("a PostgreSQL store", "postgres", "'psycopg[binary]' psycopg-pool")
        raise InvalidInput(msg)
    try:
        with settings.setup_lock() as marker:
            return _open(
                settings.env(),
                shown,
                secret=settings.password,
                limits=limits,
                replay=replay,
                marker=marker,
            )
    except ConvstoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - any driver failure is reported as one line
        msg = f"cannot reach the store at {shown}: {failure_detail(exc, settings.password)}"
        raise StoreError(msg) from None


def _open(
    env: dict[str, str],
    shown: str,
    *,
    secret: str,
    limits: Limits,
    replay: ReplaySettings,
    marker: StoreMarker,
) -> Store:
    try:
        log = EventLog(env=env, store_format=marker.format)
        log.recorder.max_notification_id()  # fail here, not at first use, if it is no store
    except Exception as exc:  # noqa: BLE001 - any backend failure is reported as one line
        msg = f"cannot open the store at {shown}: {failure_detail(exc, secret)}"
        raise StoreError(msg) from None
    store = Store(
        log,
        shown,
        secret=secret,
        identity=marker.identity,
        limits=limits,
        replay_cache_bytes=replay.cache_bytes,
        replay_model=replay.model,
    )
    if log.store_recorder.listing_missing:
        try:
            store.rebuild_listing()  # a store made before the listing index, or a new one
        except BaseException:
            store.close()
            raise
    return store
