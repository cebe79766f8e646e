"""The replay read model in a SQLite store's file (see
:mod:`convstore.backends.common.replay_tables`): written through a connection of its own,
which waits only a moment for the write lock."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from convstore.backends.common.replay_tables import Execute
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.backends.sqlite.replay_keeper import (
    SQLITE_CREATE,
    WRITE_HEAD,
    WRITE_ROW,
    SQLiteReplayKeeper,
    drop_earlier_shape,
    row_values,
)
from convstore.backends.sqlite.transaction import delete_securely, immediate
from convstore.engine.state import ReplayState
from convstore.ports.erasure import ERASED_TABLE
from convstore.ports.replay import ReplayKeeper, Stored, rows_to_write, superseded

SQLITE_WRITE_TIMEOUT = 0.1
"""How long a reader waits for SQLite's write lock to store the model; past it, it skips the
write (the model is only behind, and the next reader catches it up)."""


def forget_sqlite(execute: Execute, conversation: UUID) -> None:
    """Delete a conversation's replay model (inside an erasure's transaction), if the store
    has the tables."""
    found = execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (HEADS,)
    ).fetchone()
    if found:
        for table in (HEADS, MESSAGES):
            execute(f"DELETE FROM {table} WHERE originator_id = ?", (conversation.hex,))  # noqa: S608


class SQLiteReplayTables:
    """The model in the store's SQLite file, written through a connection of its own."""

    def __init__(
        self, db_uri: str, read: Callable[[], Any], key: bytes = b"", *, keep: bool = True
    ) -> None:
        self.key = key
        """The chain key (``CONVSTORE_CHAIN_KEY``), which makes each head's digest a MAC."""
        self._keeper = SQLiteReplayKeeper(key) if keep else None
        self.keeper: ReplayKeeper | None = self._keeper
        """Keeps the model current inside each append (``keep``), else readers do."""
        self._uri = db_uri
        self._read_transaction = read
        """A context manager giving a cursor inside a read transaction (the store's pool)."""
        self._writer: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._exists = False
        self._shape_checked = False
        """Whether this writer has checked the tables' shape (see :func:`drop_earlier_shape`)."""

    def read(self, conversation: UUID) -> Stored | None:
        with self._read_transaction() as cursor:
            if not self._exists:
                cursor.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MESSAGES,)
                )
                if cursor.fetchone() is None:
                    return None
                self._exists = True
            key = conversation.hex
            cursor.execute(f"SELECT version, head FROM {HEADS} WHERE originator_id = ?", (key,))  # noqa: S608
            head = cursor.fetchone()
            if head is None:
                return None
            cursor.execute(
                f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ? "  # noqa: S608
                "ORDER BY position",
                (key,),
            )
            return Stored(head[0], head[1], cursor.fetchall())

    def _connection(self) -> sqlite3.Connection:
        if self._writer is None:
            conn = delete_securely(
                sqlite3.connect(
                    self._uri,
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=SQLITE_WRITE_TIMEOUT,
                )
            )
            # Derived data: a commit need not wait for the disk. The write-ahead log keeps
            # commits in order, so a later event's fsync makes these durable too, and losing
            # one only leaves the model behind, which the next reader catches up.
            conn.execute("PRAGMA synchronous = NORMAL")
            self._writer = conn
        return self._writer

    def write(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        key = conversation.hex
        with self._lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # busy: the model stays behind for now
                return False
            try:
                if not self._shape_checked:
                    drop_earlier_shape(conn.execute)
                for statement in SQLITE_CREATE:
                    conn.execute(statement)
                erased = conn.execute(
                    f"SELECT 1 FROM {ERASED_TABLE} WHERE originator_id = ?",  # noqa: S608
                    (key,),
                ).fetchone()
                row = conn.execute(
                    f"SELECT version FROM {HEADS} WHERE originator_id = ?",  # noqa: S608
                    (key,),
                ).fetchone()
                stored = 0 if row is None else int(row[0])
                if erased or superseded(state, stored, since):
                    conn.execute("ROLLBACK")
                    return not erased  # a writer (or reader) stored it, or newer, already
                positions = rows_to_write(state, stored, since)
                if positions is None:
                    conn.execute(f"DELETE FROM {MESSAGES} WHERE originator_id = ?", (key,))  # noqa: S608
                    positions = list(range(len(state.messages)))
                conn.executemany(WRITE_ROW, row_values(key, state.rows(key, self.key, positions)))
                conn.execute(WRITE_HEAD, (key, state.version, state.encode_head(key, self.key)))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._exists = self._shape_checked = True
            return True

    def clear(self) -> None:
        with self._lock:
            conn = self._connection()
            with immediate(conn):
                for table in (HEADS, MESSAGES):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
            self._exists = False
            if self._keeper is not None:
                self._keeper.clear()

    def forget_schema(self) -> None:
        self._exists = False

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
