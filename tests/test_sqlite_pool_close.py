"""Closing a SQLite store never closes a connection another thread is still using.

eventsourcing's connection pool closes every connection on ``close()``, including those other
threads are in the middle of using; CPython's sqlite3 then runs the other thread's statement on
a freed database handle, which crashed eventsourcing's own 10-writer, 2-reader test case about
one run in four (its reader threads outlive the test, whose teardown closes the store). The
writer recorder's pool leaves a connection in use to its thread and closes it when given back.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError
from eventsourcing.sqlite import SQLiteDatastore

from convstore.infrastructure.sqlite.recorder import SQLiteWriterRecorder, file_uri

COUNT = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 300000) "
COUNT += "SELECT count(*) FROM n"


def _recorder(tmp_path: Path) -> SQLiteWriterRecorder:
    path = tmp_path / "store.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    recorder = SQLiteWriterRecorder(SQLiteDatastore(file_uri(path), lock_timeout=10))
    recorder.create_table()
    return recorder


def test_a_query_running_while_the_store_closes_finishes(tmp_path: Path) -> None:
    """The store closes while a reader thread is inside a statement: the statement finishes
    and its connection is closed when the thread gives it back; new reads are refused."""
    recorder = _recorder(tmp_path)
    datastore = recorder.datastore
    inside, outcome = threading.Event(), []
    used: list[sqlite3.Connection] = []

    def read() -> None:
        try:
            with datastore.transaction(commit=False) as cursor:
                raw = cursor.sqlite_cursor.connection
                used.append(raw)
                raw.set_progress_handler(inside.set, 1000)  # set from inside sqlite3_step
                cursor.execute(COUNT)
                outcome.append(cursor.fetchone()[0])
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcome.append(repr(exc))

    reader = threading.Thread(target=read)
    reader.start()
    inside.wait()
    recorder.close_writer()
    datastore.close()
    reader.join()
    assert outcome == [300000]
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        used[0].execute("SELECT 1")
    with pytest.raises(ConnectionPoolClosedError):
        recorder.select_notifications(None, 1)
    datastore.close()  # twice is harmless
