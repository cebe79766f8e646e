"""The composition root: the one place that turns a location into a working store."""

from __future__ import annotations

import os
from pathlib import Path

from eventsourcing.persistence import PersistenceError

from convstore.errors import NoStore, StoreError
from convstore.infrastructure.application import EventLog
from convstore.infrastructure.sqlite import create_private_file, default_path, sqlite_env
from convstore.store import Store

ENV_VAR = "CONVSTORE_DB"


def resolve_location(location: str | os.PathLike[str] | None) -> Path:
    """The location given, else ``$CONVSTORE_DB``, else the default path."""
    if location is None or str(location) == "":
        location = os.environ.get(ENV_VAR) or default_path()
    return Path(location)


def open_store(location: str | os.PathLike[str] | None = None, *, create: bool = True) -> Store:
    """Open the store at ``location`` (a SQLite file path).

    Without a location, ``$CONVSTORE_DB`` or the default path is used, and its directory is
    made if missing. With ``create=False`` a missing store raises :class:`NoStore` instead of
    being created, so reading never leaves a file behind.
    """
    path = resolve_location(location)
    if not path.exists():
        if not create:
            msg = f"no store at {path} (nothing has been recorded there yet)"
            raise NoStore(msg)
        if location is None:
            path.parent.mkdir(parents=True, exist_ok=True)
        if not path.parent.is_dir():
            msg = f"cannot create a store at {path}: directory {path.parent} does not exist"
            raise StoreError(msg)
        try:
            create_private_file(path)
        except OSError as exc:
            msg = f"cannot create a store at {path}: {exc.strerror or exc}"
            raise StoreError(msg) from exc
    try:
        log = EventLog(env=sqlite_env(path))
    except (PersistenceError, OSError) as exc:
        msg = f"cannot open the store at {path}: {exc}"
        raise StoreError(msg) from exc
    return Store(log, str(path))
