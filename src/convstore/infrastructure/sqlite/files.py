"""convstore's SQLite files: made all at once, marked as convstore's, recognised on open.

A new store is built in a private temporary file and hard-linked into place, so a process
killed during its first open leaves no store or a whole one. The table ``convstore_store``
marks it and names its format: a new store is of format 2 (compact states); an unmarked file
is accepted only if it is a store of an earlier version (nothing but ``stored_events``, every
topic convstore's), then marked format 1, or empty, then marked format 2. Any other
database (another eventsourcing application's, say) is refused and left untouched.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from contextlib import closing, suppress
from pathlib import Path
from uuid import uuid4

from convstore.domain.errors import InvalidInput
from convstore.infrastructure.common.application import (
    FULL_JSON_FORMAT,
    IDENTITY_KEY,
    MARKER_TABLE,
    READS,
    STORE_FORMAT,
    StoreMarker,
    known_format,
    new_identity,
)
from convstore.infrastructure.common.listing import LABELS_TABLE, LISTING_TABLE
from convstore.infrastructure.common.log_changes import CHANGES_TABLE
from convstore.infrastructure.common.mapper import TOPIC_PREFIX
from convstore.infrastructure.sqlite.recorder import create_private_file, file_uri
from convstore.infrastructure.sqlite.tables import EVENTS_TABLE
from convstore.ports.chain import HEADS_TABLE
from convstore.ports.erasure import ERASED_TABLE

PAGE_SIZE = 4096
"""The page size of a store this version creates (SQLite's default; a file keeps the size it
was made with, so a store made in other pages stays in them). Each commit writes every page it
changed whole to the write-ahead log, and an append changes five or six (the events' table and
its index, the conversation's head, its listing row and the listing's activity index): in
8 KB pages, which earlier builds chose to pack the rows of the replay model they kept, a
durable agent append wrote twice the log bytes and took 6-7% longer, paired message by message
on this machine's disk (2026-12-07). With the model gone, the page size moves that workload's
file little: 4 KB pages take 3% less at 1,000 messages and 3% more at 10,000."""

SQLITE_HEADER = b"SQLite format 3\x00"
"""How every SQLite database file starts (a rollback journal may still have to restore it)."""

_CREATING = ".creating-"
UPGRADING = ".upgrading-"
"""The infix of the temporary file ``convstore upgrade`` builds beside a store
(``.NAME.upgrading-PID-RANDOM``), removed with its process's other leftovers."""


def _readonly(path: Path) -> sqlite3.Connection:
    uri = f"{Path(os.path.realpath(path)).as_uri()}?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None)


def _marker_statements(store_format: int) -> list[str]:
    return [
        f"CREATE TABLE IF NOT EXISTS {MARKER_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"INSERT OR IGNORE INTO {MARKER_TABLE} (key, value) "  # noqa: S608 - fixed name and number
        f"VALUES ('format', '{int(store_format)}')",
        _identity_statement(),
    ]


def mark_new_store(path: Path) -> None:
    """Mark a store file this process is building (not yet in place) as a new store of this
    version's format, before anything claims it: a claim of a file holding convstore's
    tables and no marker takes it for an earlier version's (format 1)."""
    with closing(sqlite3.connect(file_uri(path), uri=True, isolation_level=None)) as conn:
        for statement in _marker_statements(STORE_FORMAT):
            conn.execute(statement)


def _identity_statement() -> str:
    """Give the store an identity unless it has one (hex digits only: safe to inline)."""
    return (
        f"INSERT OR IGNORE INTO {MARKER_TABLE} (key, value) "  # noqa: S608 - fixed name, hex
        f"VALUES ('{IDENTITY_KEY}', '{new_identity()}')"
    )


def _identity(conn: sqlite3.Connection) -> str:
    row = conn.execute(
        f"SELECT value FROM {MARKER_TABLE} WHERE key = ?",  # noqa: S608 - fixed name
        (IDENTITY_KEY,),
    ).fetchone()
    return "" if row is None else str(row[0])


def _check_format(conn: sqlite3.Connection, path: Path) -> int:
    """The store's format, as its marker names it; :class:`InvalidInput` for any format this
    version does not read."""
    row = conn.execute(f"SELECT value FROM {MARKER_TABLE} WHERE key = 'format'").fetchone()  # noqa: S608 - fixed name
    store_format = None if row is None else known_format(row[0])
    if store_format is None:
        found = "no format" if row is None else f"format {str(row[0])[:20]!r}"
        msg = f"{path} is a convstore store of {found}; {READS}"
        raise InvalidInput(msg)
    return store_format


def _foreign(conn: sqlite3.Connection) -> str | None:
    """Why an unmarked SQLite file is not a convstore store made before the marker, or None.

    Such a store holds ``stored_events`` (with the hash chains' ``convstore_heads`` and the
    listing index's tables, the erasures' ``convstore_erased`` and the change count's
    ``convstore_log_changes`` when it was opened by a version that keeps them) or nothing (a
    first open killed half-way), and every recorded topic is one of convstore's.
    """
    tables = {
        name
        for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_")
    }
    made = {EVENTS_TABLE, HEADS_TABLE, LISTING_TABLE, LABELS_TABLE, ERASED_TABLE, CHANGES_TABLE}
    others = sorted(tables - made)
    if others:
        return f"it has tables convstore does not make ({', '.join(others[:5])})"
    if EVENTS_TABLE in tables:
        row = conn.execute(
            f"SELECT topic FROM {EVENTS_TABLE} "  # noqa: S608 - fixed name
            f"WHERE substr(topic, 1, {len(TOPIC_PREFIX)}) != ? LIMIT 1",
            (TOPIC_PREFIX,),
        ).fetchone()
        if row is not None:
            return f"its events are another application's (topic {str(row[0])[:60]!r})"
    return None


def claim_store_file(path: Path, lock_timeout: int) -> StoreMarker:
    """Check that the existing file at ``path`` is a convstore store, marking it if it was
    made before stores were marked (format 1) or left empty by a killed first open (format 2),
    and giving it an identity if it has none; return its marker.

    Raises :class:`InvalidInput` for anything else (another application's database), which
    is left untouched; ``sqlite3.DatabaseError`` for a file that is not SQLite at all.
    """
    found: int | None = None
    if path.stat().st_size > 0:
        # SQLite itself says whether the file is a database: a file opened and closed here
        # outside SQLite would drop every POSIX lock this process's connections hold on it
        # (closing any descriptor of a file does), and a writer of another process could then
        # corrupt it.
        try:
            with closing(_readonly(path)) as conn:
                conn.execute("BEGIN")  # one snapshot for every check
                if _table_exists(conn, MARKER_TABLE):
                    found = _check_format(conn, path)
                    identity = _identity(conn)
                    if identity:
                        return StoreMarker(found, identity)
                    problem = None
                else:
                    problem = _foreign(conn)
        except sqlite3.DatabaseError as exc:
            if "file is not a database" not in str(exc):
                raise
            msg = f"{path} is not a convstore store: it is not a SQLite file"
            raise InvalidInput(msg) from None
        if problem:
            msg = f"{path} is a SQLite file but not a convstore store: {problem}"
            raise InvalidInput(msg)
    # An unmarked store of an earlier version, an empty one, or one with no identity yet:
    # mark it, re-checking under the write lock in case another process changed it since.
    with closing(
        sqlite3.connect(file_uri(path), uri=True, isolation_level=None, timeout=lock_timeout)
    ) as conn:
        # A file left empty is made here: in this version's pages, as a new store is (SQLite
        # takes the size only before the file's first write, and ignores it after).
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc):
                # Checked above; a read-only store opens as it is, unmarked or anonymous.
                return StoreMarker(found or FULL_JSON_FORMAT, "")
            raise
        try:
            if not _table_exists(conn, MARKER_TABLE):
                problem = _foreign(conn)
                if problem:
                    msg = f"{path} is a SQLite file but not a convstore store: {problem}"
                    raise InvalidInput(msg)
                # An earlier version's log stays in its form, which that version reads.
                written = _table_exists(conn, EVENTS_TABLE)
                for statement in _marker_statements(FULL_JSON_FORMAT if written else STORE_FORMAT):
                    conn.execute(statement)
            store_format = _check_format(conn, path)
            conn.execute(_identity_statement())
            marker = StoreMarker(store_format, _identity(conn))
            conn.execute("COMMIT")
            return marker
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None


def create_store_file(path: Path, build: Callable[[Path], None]) -> bool:
    """Create a new store at ``path`` all at once, or not at all.

    The schema is built by ``build`` in a private temporary file beside ``path``, marked as a
    convstore store, synced, and then hard-linked into place: a process killed at any moment
    leaves either no store or a whole one, never a half-made file. The link never replaces
    an existing file; if another process created the store first, its store is kept.
    Temporary files left by killed processes are removed by :func:`remove_leftovers`.

    Returns whether this call made the store (of format :data:`STORE_FORMAT`): when another
    process made it first, its format is whatever that process gave it (see
    :func:`claim_store_file`).
    """
    temporary = temporary_name(path)
    create_private_file(temporary)
    try:
        build(temporary)
        with closing(sqlite3.connect(file_uri(temporary), uri=True, isolation_level=None)) as conn:
            for statement in _marker_statements(STORE_FORMAT):
                conn.execute(statement)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if sidecar(temporary, "-wal").exists() and sidecar(temporary, "-wal").stat().st_size:
            msg = f"SQLite left a write-ahead log beside {temporary}"
            raise OSError(msg)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        made = True
        try:
            os.link(temporary, path)
        except FileExistsError:  # another process made the store first: keep it
            made = False
        sync_directory(path.parent)
    finally:
        for name in (temporary, sidecar(temporary, "-wal"), sidecar(temporary, "-shm")):
            name.unlink(missing_ok=True)
    return made


def remove_leftovers(path: Path, infix: str = _CREATING) -> None:
    """Remove the temporary files of store creations at ``path`` (or of upgrades, with
    ``infix`` :data:`UPGRADING`), and their ``-wal``/``-shm``/``-journal``, whose process
    has died."""
    prefix = _temporary_prefix(path, infix)
    try:
        found = [entry for entry in path.parent.iterdir() if entry.name.startswith(prefix)]
    except OSError:
        return
    for entry in found:
        pid_text = entry.name[len(prefix) :].split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)):
            continue
        with suppress(OSError):
            entry.unlink()


def temporary_name(path: Path, infix: str = _CREATING) -> Path:
    """A new temporary file name beside ``path``: ``.NAME<infix>PID-RANDOM``, which
    :func:`remove_leftovers` removes once the process ``PID`` has died."""
    return path.with_name(f"{_temporary_prefix(path, infix)}{os.getpid()}-{uuid4().hex[:8]}")


def _temporary_prefix(path: Path, infix: str = _CREATING) -> str:
    """How the temporary files of creations at ``path`` start (the name is cut short so a
    long store name still leaves room within the filesystem's name limit)."""
    return f".{path.name[:100]}{infix}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, but is someone else's
    return True


def sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def sync_directory(directory: Path) -> None:
    """Flush a directory's entries (or a file no connection of this process has open: closing
    the descriptor drops the process's locks on it) to disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
