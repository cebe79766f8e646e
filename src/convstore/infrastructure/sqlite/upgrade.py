"""The files of ``convstore upgrade`` on SQLite: the old store held still, the new one built
beside it, and the switch from one to the other that a kill at any moment leaves whole.

- **Held still.** The old store's write lock (``BEGIN IMMEDIATE``) is taken before anything is
  read and kept until the switch: no writer appends while the new store is built and checked
  (a writer waits, then fails its append with the lock timeout: nothing it was told is
  recorded goes missing). Readers carry on.
- **Built beside.** The new store is a file of its own, ``.NAME.upgrading-PID-RANDOM`` in the
  same directory, made as a new store is
  (:func:`~convstore.infrastructure.sqlite.backend.build_store`) and filled by the caller; a
  later upgrade removes the file of one whose process died.
- **The switch** (:meth:`SQLiteUpgrade.switch`). SQLite finds a database's write-ahead log and
  shared memory by the database's *name*, and a connection open on the old file keeps writing
  to it after a rename, into a log the new file would then share. So the switch needs the old
  store to itself: it leaves WAL mode (``journal_mode = DELETE``, which SQLite grants only to
  the one connection open on the file, folding the log into the file first) and takes the
  exclusive lock; if another process has the store open, nothing is switched and the caller
  says so. Under that lock it checks that the log is as it was built from, hard-links the old
  file as the backup (``NAME.format2``), renames the new one over ``NAME`` (one atomic
  ``rename``: the name always holds a whole store), and syncs the directory. The backup is put
  back in WAL mode after: its pages are the old store's, only page 1's change counter moved.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Callable
from contextlib import closing, suppress
from pathlib import Path

from convstore.domain.errors import InvalidInput, StoreError
from convstore.infrastructure.common.application import MARKER_TABLE
from convstore.infrastructure.sqlite.files import (
    UPGRADING,
    remove_leftovers,
    sidecar,
    sync_directory,
    temporary_name,
)
from convstore.infrastructure.sqlite.recorder import (
    create_private_file,
    file_uri,
    lock_timeout_seconds,
)
from convstore.infrastructure.sqlite.tables import EVENTS_TABLE
from convstore.ports.erasure import ERASED_TABLE

SIDECARS = ("-wal", "-shm", "-journal")


class SQLiteUpgrade:
    """One upgrade of the SQLite store at ``path``; :meth:`hold` first, :meth:`close` always."""

    def __init__(self, path: Path, *, backup: bool, build_store: Callable[[Path], None]) -> None:
        self.path = path
        self._keep_backup = backup
        self.backup: Path | None = None
        """Where the old file is kept (``NAME.format<N>``), once :meth:`hold` knows N."""
        self._build_store = build_store
        """Makes an empty store of this version's format in a new file (the backend's own)."""
        self.temporary = temporary_name(path, UPGRADING)
        self._timeout = lock_timeout_seconds()
        self._held: sqlite3.Connection | None = None
        self._state: tuple[int, int, int] | None = None
        self._left_wal = False

    # -- before anything is built ---------------------------------------------------------

    @property
    def backup_location(self) -> str | None:
        return None if self.backup is None else str(self.backup)

    def hold(self, from_format: int) -> None:
        """Remove what killed upgrades left, check the backup's name is free, and take the old
        store's write lock, kept until :meth:`switch` or :meth:`close`."""
        if self._keep_backup:
            self.backup = self.path.with_name(f"{self.path.name}.format{from_format}")
        remove_leftovers(self.path, UPGRADING)
        self._free_backup_name()
        conn = sqlite3.connect(
            file_uri(self.path), uri=True, isolation_level=None, timeout=self._timeout
        )
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            conn.close()
            if "locked" in str(exc) or "busy" in str(exc):
                msg = (
                    f"another process held {self.path}'s write lock for {self._timeout} s "
                    "(CONVSTORE_LOCK_TIMEOUT): stop its writers, then upgrade again; nothing "
                    "was written"
                )
                raise StoreError(msg) from None
            raise
        self._held = conn
        self._state = _log_state(conn)

    def _free_backup_name(self) -> None:
        """A backup name already taken is refused, unless it is a link to the store itself that
        a killed upgrade left (it linked the backup, then died before the rename)."""
        backup = self.backup
        if backup is None or not (backup.exists() or backup.is_symlink()):
            return
        with suppress(OSError):
            if backup.samefile(self.path) and not backup.is_symlink():
                backup.unlink()
                return
        msg = (
            f"{backup} exists: move it away (or give --no-backup) and upgrade again; "
            "nothing was written"
        )
        raise InvalidInput(msg)

    def tombstones(self) -> list[tuple[object, ...]]:
        """The old store's erasure tombstones, as its rows, read under the held lock."""
        conn = self._connection()
        if not _has_table(conn, ERASED_TABLE):
            return []
        return conn.execute(
            f"SELECT seq, originator_id, erased_at, reason, events FROM {ERASED_TABLE} "  # noqa: S608 - a fixed name
            "ORDER BY seq"
        ).fetchall()

    # -- the new store --------------------------------------------------------------------

    def build(self, tombstones: list[tuple[object, ...]], marks: dict[str, str]) -> str:
        """Make the new store's file (empty, format 3), holding the old store's tombstones and
        the ``marks`` given in its marker table; returns its path."""
        create_private_file(self.temporary)
        self._build_store(self.temporary)
        with closing(sqlite3.connect(file_uri(self.temporary), uri=True)) as conn, conn:
            # An erased conversation stays erased: no writer records under its id again. Its
            # ``high`` named a position of the old log, which the new one does not have.
            conn.executemany(
                f"INSERT INTO {ERASED_TABLE} "  # noqa: S608 - a fixed name
                "(seq, originator_id, erased_at, reason, events, high) VALUES (?, ?, ?, ?, ?, 0)",
                tombstones,
            )
            conn.executemany(
                f"INSERT INTO {MARKER_TABLE} (key, value) VALUES (?, ?)",  # noqa: S608 - fixed name
                sorted(marks.items()),
            )
        return str(self.temporary)

    def finish_new(self, mode: int) -> int:
        """Fold the new store's write-ahead log into its file, give it the old file's
        permissions ``mode`` (it was made owner-only) and sync it; returns its size."""
        with closing(sqlite3.connect(file_uri(self.temporary), uri=True)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        for suffix in SIDECARS:
            sidecar(self.temporary, suffix).unlink(missing_ok=True)
        os.chmod(self.temporary, stat.S_IMODE(mode))  # noqa: PTH101 - the mode bits alone
        sync_directory(self.temporary)  # its connections are closed: no lock to drop
        return self.temporary.stat().st_size

    # -- the switch -----------------------------------------------------------------------

    def switch(self, *, linked: Callable[[], None] | None = None) -> None:
        """Put the new store in the old one's place (see the module's docstring); ``linked``
        is called once the backup is linked, before the rename (a kill there leaves the
        store and a second name of it, which the next upgrade removes). Raises
        :class:`StoreError`, nothing switched, when another process has the store open or
        the log changed since :meth:`hold`."""
        conn = self._connection()
        conn.execute("ROLLBACK")  # nothing was written under the lock; the next takes it again
        conn.execute("PRAGMA busy_timeout = 1000")
        try:
            mode = str(conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0]).lower()
        except sqlite3.OperationalError:
            mode = "wal"
        if mode != "delete":
            msg = (
                f"{self.path} is open in another process (a writer, a reader, `serve`…): close "
                "it, then upgrade again; nothing was switched"
            )
            raise StoreError(msg)
        self._left_wal = True
        conn.execute("BEGIN EXCLUSIVE")
        if _log_state(conn) != self._state:
            msg = (
                f"{self.path} changed between the upgrade's build and its switch (a writer got "
                "in): upgrade again; nothing was switched"
            )
            raise StoreError(msg)
        # Out of WAL mode, with every other connection shut out: no log or shared memory of
        # the old file may meet the new one.
        for suffix in SIDECARS:
            sidecar(self.path, suffix).unlink(missing_ok=True)
        if self.backup is not None:
            os.link(self.path, self.backup)
            if linked is not None:
                linked()
        self.temporary.replace(self.path)
        sync_directory(self.path.parent)
        conn.execute("ROLLBACK")
        conn.close()
        self._held = None
        if self.backup is not None:
            with closing(sqlite3.connect(file_uri(self.backup), uri=True)) as backup:
                backup.execute("PRAGMA journal_mode = WAL")
            sync_directory(self.path.parent)

    def close(self) -> None:
        """Release the old store (back in WAL mode if the switch took it out and did not
        happen) and remove the new store's file if it was not switched in."""
        conn = self._held
        self._held = None
        if conn is not None:
            with suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if self._left_wal:
                    conn.execute("PRAGMA journal_mode = WAL")
            conn.close()
        for name in (self.temporary, *(sidecar(self.temporary, s) for s in SIDECARS)):
            name.unlink(missing_ok=True)

    def _connection(self) -> sqlite3.Connection:
        if self._held is None:
            msg = "the upgrade holds no lock on the old store"
            raise RuntimeError(msg)
        return self._held


def _log_state(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """What any write to the log changes: its newest position and its number of events (an
    append), and the newest tombstone (an erasure)."""
    newest, count = conn.execute(
        f"SELECT coalesce(max(rowid), 0), count(*) FROM {EVENTS_TABLE}"  # noqa: S608 - fixed name
    ).fetchone()
    erased = 0
    if _has_table(conn, ERASED_TABLE):
        (erased,) = conn.execute(f"SELECT coalesce(max(seq), 0) FROM {ERASED_TABLE}").fetchone()  # noqa: S608
    return int(newest), int(count), int(erased)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return found is not None
