"""One SQLite write transaction, taken up front and rolled back on any error; and the one
setting every writing connection takes so that nothing it deletes stays in the file.

Kept apart from :mod:`convstore.infrastructure.sqlite.recorder` (which imports
eventsourcing) so that light readers can use it without loading eventsourcing.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

POLL_SECONDS = 0.001
"""How often, at most, a writer waiting in :func:`immediate` asks for the write lock again."""


@contextmanager
def immediate(
    conn: sqlite3.Connection, wait: float | None = None, *, busy_ms: int | None = None
) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` on a connection in autocommit mode: the write lock is
    waited for before anything is read, and any error (Ctrl-C included) rolls back whole.

    With ``wait`` (seconds) the lock is asked for again every millisecond or so until then,
    instead of by the connection's busy handler, whose sleeps grow to 100 ms: a waiter that
    asks that rarely almost never finds the lock free between a busy writer's transactions,
    and waited seconds while it took hundreds in a row. ``busy_ms`` is the connection's busy
    timeout when the caller knows it (0 for a connection kept at 0 between its transactions:
    then it is neither read nor switched off and back, three statements a transaction)."""
    if wait is None:
        conn.execute("BEGIN IMMEDIATE")
    else:
        _begin_polling(conn, wait, busy_ms)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def delete_securely(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Turn ``secure_delete`` on for ``conn`` and return it.

    Every connection that writes a row :meth:`~convstore.Store.erase` may later delete must
    take it, not only the erasing one: an update or ``INSERT OR REPLACE`` frees the old
    row's cells, and on a SQLite built without ``SQLITE_SECURE_DELETE`` (SQLite's default;
    Debian's build has it on) the freed bytes would stay in free pages, where the erasure's
    own secure delete never reaches them.
    """
    conn.execute("PRAGMA secure_delete = ON")
    return conn


def _begin_polling(conn: sqlite3.Connection, wait: float, busy_ms: int | None) -> None:
    """``BEGIN IMMEDIATE``, asked for every millisecond or so for up to ``wait`` seconds, with
    the busy timeout at 0 meanwhile (``busy_ms``: what it is outside, read if not given)."""
    deadline = time.monotonic() + wait
    if busy_ms is None:
        (busy_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
    if busy_ms:
        conn.execute("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(random.uniform(POLL_SECONDS / 2, POLL_SECONDS))  # noqa: S311 - jitter
            else:
                return
    finally:
        if busy_ms:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
