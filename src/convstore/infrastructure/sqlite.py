"""The embedded default: eventsourcing's SQLite recorder on one file."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from contextlib import closing
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


def default_path() -> Path:
    """Where the store lives when neither ``--db`` nor ``CONVSTORE_DB`` says.

    ``$XDG_DATA_HOME/convstore/convstore.db``, which is ``~/.local/share/convstore/convstore.db``
    when ``XDG_DATA_HOME`` is unset.
    """
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "convstore" / "convstore.db"


def create_private_file(path: Path) -> None:
    """Create an empty database file readable and writable by its owner only.

    SQLite gives its ``-wal`` and ``-shm`` files the same permissions as the database.
    An existing file is left as it is.
    """
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def lock_timeout_seconds() -> int:
    """The write-lock wait: ``$CONVSTORE_LOCK_TIMEOUT`` or the default, read at each open."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT_SECONDS
    if not (raw.isascii() and raw.isdigit()) or int(raw) <= 0:
        msg = f"{LOCK_TIMEOUT_ENV_VAR} must be a positive whole number of seconds, not {raw!r}"
        raise InvalidInput(msg)
    return int(raw)


def is_sqlite_store(path: Path) -> bool:
    """Whether ``path`` already holds convstore's table; reads without changing the file.

    Raises ``sqlite3.DatabaseError`` for a file that is not SQLite at all.
    """
    if path.stat().st_size == 0:
        return True  # created for a store, not yet written
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stored_events'"
        ).fetchone()
    return found is not None


def sqlite_env(path: Path, lock_timeout: int | None = None) -> dict[str, str]:
    """The eventsourcing settings for a SQLite file."""
    if lock_timeout is None:
        lock_timeout = lock_timeout_seconds()
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
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
