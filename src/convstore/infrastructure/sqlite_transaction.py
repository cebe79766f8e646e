"""One SQLite write transaction, taken up front and rolled back on any error.

Kept apart from :mod:`convstore.infrastructure.sqlite` (which imports eventsourcing) so that
light readers, such as the replay model's tables on the command line's quick path, can use it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT`` on a connection in autocommit mode: the write lock is
    waited for before anything is read, and any error (Ctrl-C included) rolls back whole."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
