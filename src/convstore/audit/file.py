"""Which file may hold a store's audit read model, and swapping a rebuilt one in.

The audit file is derived data that convstore creates, rewrites and replaces at will, so the
one thing it must never do is take a file that is not that: the store itself (however the
path is spelled), another store, or any other file the user keeps. :func:`check_audit_path`
is the single gate every command passes before it opens, writes or replaces the file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

from convstore.audit.db import STORE_ID
from convstore.domain.errors import InvalidInput, StoreError
from convstore.infrastructure import backend_for

COMPANION_SUFFIXES = ("-journal", "-wal", "-shm")
"""The files SQLite keeps beside a database, found by name."""

META_TABLE = "_meta"
TRACKING_TABLE = "_tracking"

HINT = "(delete it or give another --audit path)"

AUDIT_ENV_VAR = "CONVSTORE_AUDIT_DB"


def store_file_of(location: str) -> Path | None:
    """The file a store location names (a SQLite store's), or None (a PostgreSQL store)."""
    return backend_for(location).store_file(location)


def default_audit_file(location: str) -> Path:
    """Where a store's audit read model lives unless ``--audit`` / ``$CONVSTORE_AUDIT_DB`` say.

    Two stores never share one: the name is a one-to-one function of the location.

    Beside a SQLite store: ``convstore.db`` → ``convstore.audit.db``, a name not ending in
    ``.db`` → ``NAME-audit.db`` (``x`` and ``x.db`` keep apart). For a PostgreSQL store
    (``location`` is its URL without the password), in the default data directory, named
    after the server, database and schema, so every host keeps its own, and ending in a
    digest of the whole location: the readable part alone would fold ``schema=ten_a`` and
    ``schema=ten__a`` (and any other runs of punctuation) into one name.
    """
    return backend_for(location).default_audit_file(location)


def audit_file(
    location: str, given: str | os.PathLike[str] | None, *, store_id: str, timeout: float
) -> Path:
    """The one place a store's audit file is found: as given, else ``$CONVSTORE_AUDIT_DB``,
    else :func:`default_audit_file`, resolved and passed through :func:`check_audit_path`.

    The default's directory is made if missing (a given path's is not).
    """
    chosen = given or os.environ.get(AUDIT_ENV_VAR)
    path = Path(chosen) if chosen else default_audit_file(location)
    checked = check_audit_path(
        path, location, store_file=store_file_of(location), store_id=store_id, timeout=timeout
    )
    if not chosen:
        checked.parent.mkdir(parents=True, exist_ok=True)
    return checked


def companions(path: Path) -> list[Path]:
    """The rollback journal, write-ahead log and shared-memory files SQLite pairs with ``path``."""
    return [path.with_name(path.name + suffix) for suffix in COMPANION_SUFFIXES]


def read_meta(path: Path, *, timeout: float) -> dict[str, str] | None:
    """The ``_meta`` rows of the audit file at ``path``; None if it has tables but not the
    read model's, ``{}`` if it has no tables at all.

    Reads without changing the file, unless it holds a hot rollback journal (a writer was
    killed mid-transaction): then it opens read-write so SQLite rolls that back first, as any
    opener would. Raises ``sqlite3.DatabaseError`` for a file SQLite cannot read.
    """
    uri = f"{path.as_uri()}?mode=ro"
    try:
        return _meta_rows(sqlite3.connect(uri, uri=True, timeout=timeout))
    except sqlite3.OperationalError as exc:
        if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_READONLY_ROLLBACK:
            raise
    return _meta_rows(sqlite3.connect(path, timeout=timeout))


def _meta_rows(connection: sqlite3.Connection) -> dict[str, str] | None:
    with closing(connection) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if not names:
            return {}  # an empty database: nothing in it, whoever made it
        if not {META_TABLE, TRACKING_TABLE} <= names:
            return None
        rows = conn.execute(f"SELECT key, value FROM {META_TABLE}").fetchall()  # noqa: S608 - a fixed name
    return {str(key): str(value) for key, value in rows}


def check_audit_path(
    path: Path, source: str, *, store_file: Path | None, store_id: str, timeout: float = 10.0
) -> Path:
    """``path`` with symlinks resolved, once it is safe to (re)write as ``source``'s read model.

    Refuses with :class:`InvalidInput`, having touched nothing: the store file itself
    (relative, absolute, through a symlink or a hard link) or one of its ``-wal`` / ``-shm``
    / ``-journal`` files; anything but a regular file; and an existing non-empty file that
    is not the audit read model built from ``source`` whose identity is ``store_id`` (a text
    file, another store, another store's read model, one built from another store that had
    the same location). A read model made before identities, which records none, is taken
    as the store's (its writer records the identity on open). A missing file, an empty one
    another process has just created for the read model, or a database with no tables at all
    (its creator was killed before the first commit) is fine. ``store_file`` is the store's
    SQLite file (None for a PostgreSQL store).
    """
    resolved = path.resolve()
    if store_file is not None:
        _refuse_store(path, resolved, store_file.resolve())
    try:
        info = resolved.stat()
    except FileNotFoundError:
        return resolved
    except OSError as exc:
        msg = f"cannot use {path} as the audit read model: {exc.strerror or exc}"
        raise StoreError(msg) from None
    if not resolved.is_file():
        msg = f"{path} is not a regular file; give --audit a file path"
        raise InvalidInput(msg)
    if info.st_size == 0:
        return resolved
    if not os.access(resolved, os.R_OK):
        msg = f"cannot read {path}: permission denied"
        raise StoreError(msg)
    # Whether it is a database is SQLite's to say: reading its header through a Python file
    # object would drop, on close, every POSIX lock this process's connections hold on it.
    try:
        meta = read_meta(resolved, timeout=timeout)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            msg = f"the audit file {path} stayed locked for {timeout:g} s; try again"
            raise StoreError(msg) from None
        msg = f"cannot tell whether {path} is this store's audit read model ({exc}) {HINT}"
        raise InvalidInput(msg) from None
    except sqlite3.DatabaseError as exc:
        if "file is not a database" in str(exc):
            msg = f"refusing to use {path} as the audit read model: it is not a SQLite file {HINT}"
            raise InvalidInput(msg) from None
        msg = f"cannot tell whether {path} is this store's audit read model ({exc}) {HINT}"
        raise InvalidInput(msg) from None
    if meta == {}:
        return resolved  # no tables at all: a creator killed before its first commit
    if meta is None:
        msg = (
            f"refusing to use {path} as the audit read model: it is a SQLite file but not "
            f"a convstore audit read model {HINT}"
        )
        raise InvalidInput(msg)
    if meta.get("source") != source:
        msg = (
            f"refusing to use {path} as the audit read model: it was built from "
            f"{meta.get('source')}, not {source} {HINT}"
        )
        raise InvalidInput(msg)
    if meta.get(STORE_ID, store_id) != store_id:
        msg = (
            f"refusing to use {path} as the audit read model: it was built from another store "
            f"at {source} (identity {meta[STORE_ID] or 'none'}, not {store_id or 'none'}) {HINT}"
        )
        raise InvalidInput(msg)
    return resolved


def _refuse_store(path: Path, resolved: Path, store: Path) -> None:
    """Raise if ``path`` names the store file or one of its companions."""
    same = resolved == store
    if not same and resolved.exists() and store.exists():
        with contextlib.suppress(OSError):
            same = resolved.samefile(store)  # a hard link, or a bind mount
    if same:
        msg = f"refusing to use {path} as the audit read model: it is the store itself"
        raise InvalidInput(msg)
    for companion in companions(store):
        if resolved == companion:
            msg = f"refusing to use {path} as the audit read model: it is {companion.name}"
            raise InvalidInput(msg)


def swap_in(fresh: Path, path: Path, *, timeout: float) -> None:
    """Rename the finished file ``fresh`` over ``path``, leaving nothing of the old file attached.

    SQLite finds a database's rollback journal and write-ahead log by name, so a hot journal
    left by a writer killed mid-transaction would be played back into the new file after a
    plain rename. Instead, the old file is opened first: that rolls back a hot journal (and a
    switch to ``journal_mode = DELETE`` folds a write-ahead log in), and ``BEGIN IMMEDIATE``
    waits until no other writer is mid-transaction and keeps new ones out until the rename is
    done. Writers that still hold the old file are refused by SQLite from then on
    (``SQLITE_READONLY_DBMOVED``) and reopen the new one. An old file SQLite cannot read at
    all is simply replaced, its companions removed.
    """
    if not path.exists():
        fresh.replace(path)
        return
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        try:
            mode = conn.execute("PRAGMA journal_mode = DELETE").fetchone()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                msg = f"the audit file {path} stayed locked for {timeout:g} s; try again"
                raise StoreError(msg) from None
            mode = None  # damaged beyond reading: nothing in it is worth keeping
        except sqlite3.DatabaseError:
            mode = None
        if mode is not None and str(mode[0]).lower() == "wal":
            msg = f"cannot replace {path}: another process holds it in WAL mode; try again"
            raise StoreError(msg)
        # No writer is mid-transaction now, so any journal here is stale: it must not meet
        # the new file.
        for companion in companions(path):
            companion.unlink(missing_ok=True)
        fresh.replace(path)
    finally:
        conn.close()
