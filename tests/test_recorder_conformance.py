"""eventsourcing's own recorder test cases, run against convstore's three writer recorders.

``SQLiteWriterRecorder`` (one dedicated writer connection, heads in the same transaction) and
``ChainedPostgresRecorder`` (no table lock: readers keep to settled rows, see its module)
replace eventsourcing's stock recorders, so they must still keep every promise eventsourcing's
suite checks: gapless notification ids, ``select_notifications`` filters, version conflicts
refused, concurrent inserts never interleaved, 10 writer threads beside 2 reader threads. Every
case passes as written, the heads table included: the head rows are written beside the events
and never change what a recorder returns. The throughput and timing cases are skipped here, as
timings belong in ``bench/``, not in a pass/fail suite.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from uuid import uuid4

import pytest
from eventsourcing.persistence import ApplicationRecorder, StoredEvent
from eventsourcing.sqlite import SQLiteDatastore
from eventsourcing.tests.persistence import (
    ApplicationRecorderTestCase,
    NonInterleavingNotificationIDsBaseCase,
)

from convstore.infrastructure.sqlite.recorder import SQLiteWriterRecorder, file_uri
from tests.conftest import POSTGRES_URL, postgres_unreachable
from tests.nats_cluster import Cluster
from tests.nats_cluster import delete_stream as _delete_stream

TIMINGS = "a timing, not a pass/fail property: convstore's timings live in bench/"


class _TimingsInBench:
    """eventsourcing's timing cases, which are not pass/fail properties, skipped."""

    def test_performance(self) -> None:
        pytest.skip(TIMINGS)

    def test_concurrent_throughput(self) -> None:
        pytest.skip(TIMINGS)


class _HeadsToo:
    """That the recorder under test is convstore's: each insert also moves the head row."""

    def create_recorder(self) -> ApplicationRecorder:
        raise NotImplementedError

    def test_each_insert_moves_the_conversations_head(self) -> None:
        """The recorder eventsourcing's cases ran is the chaining one: heads follow inserts."""
        recorder = self.create_recorder()
        originator = uuid4()
        for version in (1, 2):
            recorder.insert_events([StoredEvent(originator, version, "t", b"{}")])
        heads = recorder.select_heads()  # type: ignore[attr-defined]
        assert heads[originator].version == 2


class _SQLiteWriter:
    """Each recorder on a fresh SQLite file of its own, closed and removed after the test."""

    def setUp(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="convstore-recorder-"))
        self._made: list[SQLiteWriterRecorder] = []

    def tearDown(self) -> None:
        for recorder in self._made:
            recorder.close_writer()
            recorder.datastore.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def create_recorder(self) -> SQLiteWriterRecorder:
        path = self._dir / f"{uuid4().hex}.db"
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
        datastore = SQLiteDatastore(file_uri(path), lock_timeout=10)
        recorder = SQLiteWriterRecorder(datastore)
        recorder.create_table()
        self._made.append(recorder)
        return recorder


class TestSQLiteWriterRecorder(
    _SQLiteWriter, _HeadsToo, _TimingsInBench, ApplicationRecorderTestCase[SQLiteWriterRecorder]
):
    """eventsourcing's ApplicationRecorderTestCase on convstore's SQLite writer recorder."""


class TestSQLiteWriterNonInterleaving(_SQLiteWriter, NonInterleavingNotificationIDsBaseCase):
    """Two threads inserting 1,000 events each get two unbroken runs of notification ids."""


class _Postgres:
    """Each recorder on a fresh schema of the test server, dropped after the test."""

    def setUp(self) -> None:
        problem = postgres_unreachable()
        if problem is not None:
            pytest.skip(problem)  # or fails, under CI (see tests/conftest.py)
        self._schemas: list[str] = []
        self._made: list[ApplicationRecorder] = []

    def tearDown(self) -> None:
        import psycopg  # noqa: PLC0415
        from psycopg import sql  # noqa: PLC0415

        for recorder in self._made:
            recorder.datastore.close()  # type: ignore[attr-defined]
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            for schema in self._schemas:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )

    def create_recorder(self) -> ApplicationRecorder:
        import psycopg  # noqa: PLC0415
        from eventsourcing.postgres import PostgresDatastore  # noqa: PLC0415
        from psycopg import sql  # noqa: PLC0415

        from convstore.infrastructure.postgres.factory import PostgresSettings  # noqa: PLC0415
        from convstore.infrastructure.postgres.recorder import (  # noqa: PLC0415
            ChainedPostgresRecorder,
        )

        schema = f"convstore_test_{uuid4().hex[:12]}"
        self._schemas.append(schema)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:  # as open_store does
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        settings = PostgresSettings.from_url(f"{POSTGRES_URL}?schema={schema}")
        datastore = PostgresDatastore(
            settings.dbname,
            settings.host,
            settings.port,
            settings.user,
            settings.password,
            schema=schema,
            pool_size=4,
            max_overflow=4,
        )
        recorder = ChainedPostgresRecorder(datastore, events_table_name="stored_events")
        recorder.create_table()
        self._made.append(recorder)
        return recorder


@pytest.mark.postgres
class TestChainedPostgresRecorder(
    _Postgres, _HeadsToo, _TimingsInBench, ApplicationRecorderTestCase[ApplicationRecorder]
):
    """eventsourcing's ApplicationRecorderTestCase on convstore's PostgreSQL recorder."""


@pytest.mark.postgres
class TestChainedPostgresNonInterleaving(_Postgres, NonInterleavingNotificationIDsBaseCase):
    """Two threads inserting 1,000 events each get two unbroken runs of notification ids."""


class _Nats:
    """Each recorder on a fresh stream of the test cluster (and a replica of its own),
    the stream deleted after the test."""

    @pytest.fixture(autouse=True)
    def _cluster(self, nats_cluster: Cluster) -> None:
        self._nats = nats_cluster

    def setUp(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="convstore-nats-recorder-"))
        self._streams: list[str] = []
        self._made: list[ApplicationRecorder] = []

    def tearDown(self) -> None:
        from convstore.infrastructure.nats.recorder import NatsRecorder  # noqa: PLC0415

        for recorder in self._made:
            assert isinstance(recorder, NatsRecorder)
            recorder.close_writer()
            recorder.datastore.close()
        for name in self._streams:
            asyncio.run(_delete_stream(self._nats, name))
        shutil.rmtree(self._dir, ignore_errors=True)

    def create_recorder(self) -> ApplicationRecorder:
        from convstore.infrastructure.nats.backend import NatsBackend  # noqa: PLC0415
        from convstore.infrastructure.nats.factory import NatsFactory  # noqa: PLC0415

        name = f"r{uuid4().hex[:12]}"
        self._streams.append(name)
        url = f"nats://{self._nats.url}/{name}?replica={self._dir / name}.db"
        with NatsBackend().opening(url, create=True, make_directory=False) as opening:
            env = opening.env
        recorder = NatsFactory(env).application_recorder()
        self._made.append(recorder)
        return recorder


class _NatsPartitioned(_Nats):
    """The same on a store of three streams (``?partitions=3``)."""

    def create_recorder(self) -> ApplicationRecorder:
        from convstore.infrastructure.nats.backend import NatsBackend  # noqa: PLC0415
        from convstore.infrastructure.nats.factory import NatsFactory  # noqa: PLC0415

        name = f"r{uuid4().hex[:12]}"
        self._streams += [f"{name}-p{k}" for k in range(3)]
        url = f"nats://{self._nats.url}/{name}?partitions=3&replica={self._dir / name}.db"
        with NatsBackend().opening(url, create=True, make_directory=False) as opening:
            env = opening.env
        recorder = NatsFactory(env).application_recorder()
        self._made.append(recorder)
        return recorder


class TestPartitionedNatsRecorder(
    _NatsPartitioned, _HeadsToo, _TimingsInBench, ApplicationRecorderTestCase[ApplicationRecorder]
):
    """eventsourcing's ApplicationRecorderTestCase on a partitioned JetStream recorder."""


class TestNatsRecorder(
    _Nats, _HeadsToo, _TimingsInBench, ApplicationRecorderTestCase[ApplicationRecorder]
):
    """eventsourcing's ApplicationRecorderTestCase on convstore's JetStream recorder."""


class TestNatsNonInterleaving(_Nats, NonInterleavingNotificationIDsBaseCase):
    """Two threads inserting 1,000 events each (one atomic batch each) get two unbroken runs
    of notification ids (stream sequences)."""


class TestPartitionedNatsNonInterleaving(_NatsPartitioned, NonInterleavingNotificationIDsBaseCase):
    """The same on three streams: each insert is one conversation's, so one partition's, one
    atomic batch, applied by the replica in one piece."""
