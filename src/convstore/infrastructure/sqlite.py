"""The embedded default: eventsourcing's SQLite recorder on one file."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_LOCK_TIMEOUT_SECONDS = 10
"""How long a writer waits for another process's write lock before failing."""


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


def sqlite_env(path: Path, lock_timeout: int = DEFAULT_LOCK_TIMEOUT_SECONDS) -> dict[str, str]:
    """The eventsourcing settings for a SQLite file."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(path),
        "SQLITE_LOCK_TIMEOUT": str(lock_timeout),
    }
