"""The embedded default: eventsourcing's SQLite recorder on one file."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from convstore.errors import InvalidInput

DEFAULT_LOCK_TIMEOUT_SECONDS = 10
"""How long a writer waits for another process's write lock before failing, unless
``CONVSTORE_LOCK_TIMEOUT`` (whole seconds) says otherwise."""

LOCK_TIMEOUT_ENV_VAR = "CONVSTORE_LOCK_TIMEOUT"

MAX_LOCK_TIMEOUT_SECONDS = 24 * 60 * 60
"""The longest lock wait accepted (a day). SQLite takes the wait in milliseconds as a C int, so
from 2,147,484 s on it would silently become no wait at all."""


def default_path() -> Path:
    """Where the store lives when neither ``--db`` nor ``CONVSTORE_DB`` says.

    ``$XDG_DATA_HOME/convstore/convstore.db``, which is ``~/.local/share/convstore/convstore.db``
    when ``XDG_DATA_HOME`` is unset.
    """
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "convstore" / "convstore.db"


def create_private_file(path: Path) -> None:
    """Create an empty database file readable and writable by its owner only.

    A symbolic link is followed to the file it names, even when that file does not exist yet
    (a dangling link): the file is created there, owner-only, as SQLite would open it. SQLite
    gives its ``-wal`` and ``-shm`` files the same permissions as the database. An existing
    file is left as it is. Raises ``OSError`` when the file cannot be made (its directory is
    missing, say).
    """
    target = os.path.realpath(path)
    try:
        # O_EXCL never follows a link: if one appears at ``target`` meanwhile, this fails
        # rather than creating a file wherever it points.
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def lock_timeout_seconds() -> int:
    """The write-lock wait: ``$CONVSTORE_LOCK_TIMEOUT`` or the default, read at each open."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT_SECONDS
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= MAX_LOCK_TIMEOUT_SECONDS:
        msg = (
            f"{LOCK_TIMEOUT_ENV_VAR} must be a whole number of seconds from 1 to "
            f"{MAX_LOCK_TIMEOUT_SECONDS}, not {raw[:40]!r}"
        )
        raise InvalidInput(msg)
    return int(raw)


def refuse_sqlite_uri(location: str) -> None:
    """Refuse a location SQLite would read as a URI or an in-memory database.

    A store is one file named by its path: ``file:x.db?mode=memory`` would otherwise be saved
    nowhere, and ``file:x.db`` written to ``x.db``.
    """
    if location[:5].lower() == "file:" or location == ":memory:":
        msg = (
            f"{location[:80]!r} is a SQLite URI or in-memory name; convstore stores are files:"
            " give the file's path (e.g. ./store.db)"
        )
        raise InvalidInput(msg)
    if "\x00" in location:
        msg = "a store path cannot hold a NUL character"
        raise InvalidInput(msg)
    try:
        os.fsencode(location)
    except UnicodeEncodeError:
        msg = f"the store path {location[:80]!r} is not valid Unicode (a lone surrogate)"
        raise InvalidInput(msg) from None


def file_uri(path: Path) -> str:
    """The URI SQLite is given for the file at ``path``: its resolved absolute path with every
    reserved character percent-encoded, so nothing in the name (``?``, ``#``, ``mode=memory``)
    is read as a URI parameter, and ``mode=rw``, so SQLite never creates a file of its own."""
    return f"{Path(os.path.realpath(path)).as_uri()}?mode=rw"


def sqlite_env(path: Path, lock_timeout: int | None = None) -> dict[str, str]:
    """The eventsourcing settings for a SQLite file, named by the URI of :func:`file_uri`."""
    if lock_timeout is None:
        lock_timeout = lock_timeout_seconds()
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": file_uri(path),
        "SQLITE_LOCK_TIMEOUT": str(lock_timeout),
        "APPLICATION_RECORDER_TOPIC": f"{__name__}:SQLiteWriterRecorder",
    }


class SQLiteWriterRecorder(SQLiteApplicationRecorder):
    """eventsourcing's SQLite recorder with one dedicated writer connection.

    The stock recorder takes a pooled connection and enters three nested context managers for
    every insert: about a fifth of a streamed append's CPU. Writes here reuse one connection
    under a lock (SQLite admits one writer at a time anyway); reads still use the pool. Each
    insert is still its own ``BEGIN … COMMIT``, so durability is unchanged.
    """

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name)
        self._writer: sqlite3.Connection | None = None
        self._writer_lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection:
        if self._writer is None:
            pool = self.datastore.pool
            self._writer = sqlite3.connect(
                pool.db_name,
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=pool.lock_timeout or DEFAULT_LOCK_TIMEOUT_SECONDS,
            )
        return self._writer

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        with self._writer_lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rowids = []
                    for s in stored_events:
                        originator = s.originator_id
                        key = originator.hex if isinstance(originator, UUID) else originator
                        cursor = conn.execute(
                            self.insert_events_statement,
                            (key, s.originator_version, s.topic, s.state),
                        )
                        rowids.append(cursor.lastrowid or 0)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.IntegrityError as exc:
                raise IntegrityError(exc) from exc
            except sqlite3.OperationalError as exc:
                raise OperationalError(exc) from exc
            except sqlite3.Error as exc:
                raise PersistenceError(exc) from exc
            return rowids

    def close_writer(self) -> None:
        """Close the writer connection (the pool's are closed by the datastore)."""
        with self._writer_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
