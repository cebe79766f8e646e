"""One SQLite write transaction, taken up front and rolled back on any error; and the one
setting every writing connection takes so that nothing it deletes stays in the file.

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
