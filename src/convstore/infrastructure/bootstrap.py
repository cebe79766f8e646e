"""The composition root: the one place that turns a location into a working store."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
from pathlib import Path

from convstore.domain.limits import Limits
from convstore.errors import InvalidInput, NoStore, StoreError
from convstore.infrastructure.application import EventLog
from convstore.infrastructure.postgres import PostgresSettings, is_postgres_url, redact
from convstore.infrastructure.sqlite import (
    create_private_file,
    default_path,
    is_sqlite_store,
    sqlite_env,
)
from convstore.store import Store, failure_detail

ENV_VAR = "CONVSTORE_DB"


def resolve_location(location: str | os.PathLike[str] | None) -> str:
    """The location given, else ``$CONVSTORE_DB``, else the default SQLite path."""
    if location is None or str(location) == "":
        return os.environ.get(ENV_VAR) or str(default_path())
    return str(location)


def open_store(
    location: str | os.PathLike[str] | None = None,
    *,
    create: bool = True,
    limits: Limits | None = None,
) -> Store:
    """Open the store at ``location``: a SQLite file path or a ``postgresql://`` URL.

    Without a location, ``$CONVSTORE_DB`` or the default path is used (its directory is made
    if missing). With ``create=False`` a missing SQLite file raises :class:`NoStore` instead of
    being created, so reading never leaves a file behind.
    """
    resolved = resolve_location(location)
    limits = limits or Limits.from_env()
    if is_postgres_url(resolved):
        return _open_postgres(resolved, limits)
    return _open_sqlite(Path(resolved), limits, create=create, make_directory=not location)


def _open_sqlite(path: Path, limits: Limits, *, create: bool, make_directory: bool) -> Store:
    if not path.exists():
        if not create:
            msg = f"no store at {path} (nothing has been recorded there yet)"
            raise NoStore(msg)
        if make_directory:
            path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.is_dir():
            msg = f"cannot create a store at {path}: directory {path.parent} does not exist"
            raise StoreError(msg)
        try:
            create_private_file(path)
        except OSError as exc:
            msg = f"cannot create a store at {path}: {exc.strerror or exc}"
            raise StoreError(msg) from exc
    else:
        try:
            found = is_sqlite_store(path)
        except sqlite3.DatabaseError as exc:
            msg = f"cannot open the store at {path}: {exc}"
            raise StoreError(msg) from None
        if not found:
            msg = f"{path} is a SQLite file but not a convstore store (it has no stored_events)"
            raise InvalidInput(msg)
    return _open(sqlite_env(path), str(path.resolve()), secret="", limits=limits)


def _open_postgres(url: str, limits: Limits) -> Store:
    settings = PostgresSettings.from_url(url)
    shown = redact(url)
    if importlib.util.find_spec("psycopg") is None:
        msg = "PostgreSQL stores need the driver: pip install 'convstore[postgres]'"
        raise InvalidInput(msg)
    try:
        with settings.setup_lock():
            return _open(settings.env(), shown, secret=settings.password, limits=limits)
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - any driver failure is reported as one line
        msg = f"cannot reach the store at {shown}: {failure_detail(exc, settings.password)}"
        raise StoreError(msg) from None


def _open(env: dict[str, str], shown: str, *, secret: str, limits: Limits) -> Store:
    try:
        log = EventLog(env=env)
        log.recorder.max_notification_id()  # fail here, not at first use, if it is no store
    except Exception as exc:  # noqa: BLE001 - any backend failure is reported as one line
        msg = f"cannot open the store at {shown}: {failure_detail(exc, secret)}"
        raise StoreError(msg) from None
    return Store(log, shown, secret=secret, limits=limits)
