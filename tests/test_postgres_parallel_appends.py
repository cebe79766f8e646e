"""PostgreSQL appends without a table lock: readers never pass an append still running.

The recorder lets writers of one store run in parallel (see
:mod:`convstore.infrastructure.postgres.recorder`). Notification ids are then handed out before
the transactions holding them commit, in any order: these tests hold one append open while a
later one commits and check what a reader gets; upgrade a store made before the ``tx`` column;
and race 8 writer processes against ``convstore project --follow``, whose read model must end
equal to a rebuild, with every event counted once.
"""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from convstore import open_store
from convstore.app.projector import rebuild
from tests.test_audit import assert_same_read_model

pytestmark = pytest.mark.postgres

SCRIPT = Path(sys.executable).parent / "convstore"
FOLLOW = ("project", "--follow", "--interval", "0.05")


def _datastore(url: str, schema: str) -> Any:
    from eventsourcing.postgres import PostgresDatastore  # noqa: PLC0415

    from convstore.infrastructure.postgres.factory import PostgresSettings  # noqa: PLC0415

    settings = PostgresSettings.from_url(url)
    return PostgresDatastore(
        settings.dbname,
        settings.host,
        settings.port,
        settings.user,
        settings.password,
        schema=schema,
        pool_size=4,
        max_overflow=4,
    )


@pytest.fixture
def schema(make_postgres_url: Callable[[], str]) -> tuple[str, str]:
    """A fresh, empty schema of the test server: (its store URL, its name)."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    url = make_postgres_url()
    name = url.rsplit("schema=", 1)[1]
    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    return url, name


def _event(originator: UUID, version: int) -> Any:
    from eventsourcing.persistence import StoredEvent  # noqa: PLC0415

    return StoredEvent(originator, version, "topic", b"{}")


def test_a_reader_never_passes_an_append_still_running(schema: tuple[str, str]) -> None:
    """An append holds id 1 uncommitted while a later one commits id 2: readers return
    neither until the first commits, then both in order, although the table shows id 2."""
    from convstore.infrastructure.postgres.recorder import (  # noqa: PLC0415
        ChainedPostgresRecorder,
    )
    from convstore.ports.chain import advance  # noqa: PLC0415

    url, name = schema
    datastore = _datastore(url, name)
    try:
        recorder = ChainedPostgresRecorder(datastore, events_table_name="stored_events")
        recorder.create_table()
        early, late = uuid4(), uuid4()
        with datastore.get_connection() as held, held.transaction():
            # What insert_events sends, in a transaction this test keeps open.
            head = advance(early, None, [(1, "topic", b"{}")], recorder._chain_key)
            arguments: tuple[object, ...] = (
                *([early], [1], ["topic"], [b"{}"]),
                recorder._append_lock_key,
                [recorder._stream_key(early)],
                *([early], [head.version], [head.chain], [head.chained_from], [None]),
                *([None], [None]),
                *([], [], []),  # no listing rows to move on
            )
            [first] = held.execute(recorder._write, arguments).fetchall()
            assert first["notification_id"] == 1
            assert recorder.insert_events([_event(late, 1)]) == [2]
            # The hazard is real: the table already shows id 2 without id 1 ...
            with datastore.get_connection() as other:
                visible = other.execute(
                    f'SELECT notification_id FROM "{name}".stored_events'  # noqa: S608
                ).fetchall()
            assert [r["notification_id"] for r in visible] == [2]
            # ... and no reader passes id 1 while it may still commit.
            assert recorder.select_notifications(None, 10) == []
            assert recorder.select_notifications(1, 10, topics=["topic"]) == []
            assert recorder.max_notification_id() is None
            assert recorder.select_raw_records(0, 10) == []  # what Store.scan reads
        # Once both committed they are settled, unless a transaction of another test (the
        # suite runs on several workers against one server) still holds the horizon: readers
        # then lag, never skip, so wait for it to end.
        deadline = time.monotonic() + 60
        found = recorder.select_notifications(None, 10)
        while not found and time.monotonic() < deadline:
            time.sleep(0.1)
            found = recorder.select_notifications(None, 10)
        assert [(n.id, n.originator_id) for n in found] == [(1, early), (2, late)]
        assert recorder.max_notification_id() == 2
        assert [row[0] for row in recorder.select_raw_records(0, 10)] == [1, 2]
        after = recorder.select_notifications(1, 10, inclusive_of_start=False)
        assert [n.id for n in after] == [2]
    finally:
        datastore.close()


def test_a_store_made_before_the_transaction_column_is_upgraded(
    schema: tuple[str, str],
) -> None:
    """A table written by eventsourcing's own recorder (no ``tx`` column, as an older
    convstore left it) gains the column on open; its rows read as before, new ones follow."""
    import psycopg  # noqa: PLC0415
    from eventsourcing.postgres import PostgresApplicationRecorder  # noqa: PLC0415

    from convstore.infrastructure.postgres.recorder import (  # noqa: PLC0415
        ChainedPostgresRecorder,
    )

    url, name = schema
    old_store = _datastore(url, name)
    try:
        old = PostgresApplicationRecorder(old_store, events_table_name="stored_events")
        old.create_table()
        conversation = uuid4()
        assert old.insert_events([_event(conversation, v) for v in (1, 2, 3)]) == [1, 2, 3]
    finally:
        old_store.close()

    def columns() -> list[str]:
        with psycopg.connect(url.split("?", 1)[0]) as conn:
            rows = conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'stored_events'",
                (name,),
            ).fetchall()
        return sorted(r[0] for r in rows)

    assert "tx" not in columns()
    datastore = _datastore(url, name)
    try:
        recorder = ChainedPostgresRecorder(datastore, events_table_name="stored_events")
        recorder.create_table()
        assert "tx" in columns()
        recorder.create_table()  # a second open changes nothing
        assert [n.id for n in recorder.select_notifications(None, 10)] == [1, 2, 3]
        assert recorder.max_notification_id() == 3
        assert recorder.insert_events([_event(conversation, 4)]) == [4]
        assert [n.originator_version for n in recorder.select_notifications(2, 10)] == [2, 3, 4]
        with datastore.get_connection() as conn:
            rows = conn.execute(
                f'SELECT notification_id, tx IS NULL AS old FROM "{name}".stored_events '  # noqa: S608
                "ORDER BY notification_id"
            ).fetchall()
        assert [(r["notification_id"], r["old"]) for r in rows] == [
            (1, True),
            (2, True),
            (3, True),
            (4, False),
        ]
    finally:
        datastore.close()


WRITERS = 8
CONVERSATIONS_PER_WRITER = 5
MESSAGES_PER_CONVERSATION = 8
BLOCKS_PER_MESSAGE = 3


def _write(url: str, name: str) -> None:
    """One writer process: several conversations, their messages streamed block by block in
    turn (every block its own transaction, so many commits race the follower)."""
    with open_store(url) as store:
        conversations = [
            store.new_conversation(title=f"{name}-{c}") for c in range(CONVERSATIONS_PER_WRITER)
        ]
        for m in range(MESSAGES_PER_CONVERSATION):
            for c, conversation in enumerate(conversations):
                message = store.start_message(conversation, "user")
                for b in range(BLOCKS_PER_MESSAGE):
                    store.append_block(
                        conversation, message, {"type": "text", "text": f"{name} {c} {m} {b}"}
                    )
                store.end_message(conversation, message)


@pytest.mark.slow
def test_eight_writer_processes_and_a_follower_agree_with_a_rebuild(
    schema: tuple[str, str], tmp_path: Path
) -> None:
    """8 processes append to 40 conversations while `project --follow` runs: the read model
    ends equal to a rebuild, and counts every event of every conversation exactly once."""
    url, _ = schema
    with open_store(url):
        pass  # made once, before the writers and the follower race to open it
    audit = tmp_path / "followed.db"
    follower = subprocess.Popen(
        [str(SCRIPT), "--db", url, "--audit", str(audit), *FOLLOW],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        spawn = multiprocessing.get_context("spawn")
        writers = [spawn.Process(target=_write, args=(url, f"w{i}")) for i in range(WRITERS)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(timeout=600)
        assert [writer.exitcode for writer in writers] == [0] * WRITERS
        with open_store(url) as store:
            end = store.log_position()
            positions = [r.position for r in store.scan()]
            expected = Counter(str(r.originator_id) for r in store.scan())
        assert positions == sorted(set(positions))
        assert len(expected) == WRITERS * CONVERSATIONS_PER_WRITER
        assert len(set(expected.values())) == 1  # every conversation got the same appends
        deadline = time.monotonic() + 300
        while _position(audit) != end:
            assert follower.poll() is None, follower.communicate()
            assert time.monotonic() < deadline, "the follower never caught up"
            time.sleep(0.1)
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
        assert follower.returncode == 0, err
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    counted = _counts(audit)
    assert counted == dict(expected)
    with open_store(url) as store:
        rebuild(store, tmp_path / "rebuilt.db")
    assert_same_read_model(audit, tmp_path / "rebuilt.db")


def _position(audit: Path) -> int:
    import sqlite3  # noqa: PLC0415

    if not audit.exists():
        return -1
    conn = sqlite3.connect(f"{audit.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute("SELECT position FROM _tracking").fetchone()
    except sqlite3.OperationalError:
        return -1
    finally:
        conn.close()
    return int(row[0]) if row else -1


def _counts(audit: Path) -> dict[str, int]:
    import sqlite3  # noqa: PLC0415

    conn = sqlite3.connect(f"{audit.as_uri()}?mode=ro", uri=True)
    try:
        return {row[0]: row[1] for row in conn.execute("SELECT id, events FROM conversations")}
    finally:
        conn.close()


def test_a_writer_whose_remembered_head_moved_reads_it_and_retries(
    schema: tuple[str, str],
) -> None:
    """Two writers (as two hosts) take turns on one conversation: each starts from the head it
    wrote last, finds it moved, reads it and writes again; the chain is the log's."""
    from convstore.infrastructure.postgres.recorder import (  # noqa: PLC0415
        ChainedPostgresRecorder,
    )
    from convstore.ports.chain import advance  # noqa: PLC0415

    url, name = schema
    stores = [_datastore(url, name), _datastore(url, name)]
    try:
        first, second = (
            ChainedPostgresRecorder(d, events_table_name="stored_events") for d in stores
        )
        first.create_table()
        second.create_table()
        conversation = uuid4()
        for version, writer in enumerate((first, first, second, first, second, second), 1):
            assert len(writer.insert_events([_event(conversation, version)])) == 1
        stored = [
            (e.originator_version, e.topic, e.state) for e in first.select_events(conversation)
        ]
        assert [v for v, _, _ in stored] == [1, 2, 3, 4, 5, 6]
        expected = advance(conversation, None, stored, first._chain_key)
        assert first.select_heads()[conversation] == expected
    finally:
        for datastore in stores:
            datastore.close()


def test_values_written_as_sql_literals_read_back_exactly(schema: tuple[str, str]) -> None:
    """The append's arguments are written into its SQL text: quotes, backslashes and every
    byte value come back exactly as given."""
    from eventsourcing.persistence import StoredEvent  # noqa: PLC0415

    from convstore.infrastructure.postgres.recorder import (  # noqa: PLC0415
        ChainedPostgresRecorder,
    )

    url, name = schema
    datastore = _datastore(url, name)
    try:
        recorder = ChainedPostgresRecorder(datastore, events_table_name="stored_events")
        recorder.create_table()
        conversation = uuid4()
        topics = ["it's", "back\\slash \\x41 '' $$ $body$ ;--", "ünïcødé ✓"]
        states = [bytes(range(256)), b"'\\x00", b""]
        written = [
            StoredEvent(conversation, v, topic, state)
            for v, (topic, state) in enumerate(zip(topics, states, strict=True), 1)
        ]
        assert recorder.insert_events(written) == [1, 2, 3]
        read = recorder.select_events(conversation)
        assert [(e.topic, e.state) for e in read] == list(zip(topics, states, strict=True))
        notified = recorder.select_notifications(None, 10)
        assert [(n.topic, n.state) for n in notified] == list(zip(topics, states, strict=True))
    finally:
        datastore.close()


def test_an_error_after_the_commit_is_not_a_failed_write(schema: tuple[str, str]) -> None:
    """A statement failing after the COMMIT (where the NOTIFY runs) leaves the write done and
    reported done; one failing before it leaves nothing and is raised."""
    from eventsourcing.persistence import PersistenceError  # noqa: PLC0415

    from convstore.infrastructure.postgres.recorder import (  # noqa: PLC0415
        ChainedPostgresRecorder,
    )

    url, name = schema
    datastore = _datastore(url, name)
    try:
        recorder = ChainedPostgresRecorder(datastore, events_table_name="stored_events")
        recorder.create_table()
        conversation = uuid4()
        notify_after = recorder._notify_after
        recorder._notify_after = [b"SELECT 1 / 0"]  # fails once the write has committed
        assert recorder.insert_events([_event(conversation, 1)]) == [1]
        recorder._notify_after = notify_after
        lock_timeout = recorder._set_lock_timeout_text
        recorder._set_lock_timeout_text = b"SELECT 1 / 0"  # fails before the append
        with pytest.raises(PersistenceError, match="division by zero"):
            recorder.insert_events([_event(conversation, 2)])
        recorder._set_lock_timeout_text = lock_timeout
        assert [e.originator_version for e in recorder.select_events(conversation)] == [1]
        assert recorder.insert_events([_event(conversation, 2)]) == [2]
    finally:
        datastore.close()
