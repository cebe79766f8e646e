"""The eventsourcing application that owns convstore's event log."""

from __future__ import annotations

import os
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.sqlite import SQLiteApplicationRecorder
from eventsourcing.utils import Environment, EnvType

from convstore.infrastructure.mapper import PydanticMapper

APPLICATION_NAME = "convstore"
"""Pinned: PostgreSQL table names (``convstore_events``) and setting prefixes follow it."""

ENV_PREFIX = APPLICATION_NAME.upper() + "_"

MARKER_TABLE = "convstore_store"
"""The table that marks a SQLite file or a PostgreSQL schema as a convstore store; it holds
``('format', '1')``."""

STORE_FORMAT = 1
"""The store format this version writes and reads."""


class EventLog(Application[UUID]):
    """All conversations' events, one stream per conversation, one notification log."""

    name = APPLICATION_NAME

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        """Settings from the caller, plus only ``CONVSTORE_``-prefixed process variables.

        eventsourcing would otherwise read unprefixed variables (``CIPHER_KEY``,
        ``PERSISTENCE_MODULE`` …) that may belong to another application in the same process.
        The caller's settings win over the environment's.
        """
        settings = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
        settings.update({ENV_PREFIX + key: value for key, value in (env or {}).items()})
        return Environment(name, settings)

    def close(self) -> None:
        """Close every connection, the SQLite writer's included.

        A connection left open on a file keeps SQLite's per-file state in this process alive:
        a store created by building a temporary file and linking it into place would then share
        the unlinked temporary's ``-shm`` with every later connection, and two processes would
        keep two write-ahead indexes of one database.
        """
        close_writer = getattr(self.recorder, "close_writer", None)
        if close_writer is not None:
            close_writer()
        super().close()

    def construct_mapper(self) -> PydanticMapper:
        return PydanticMapper(
            transcoder=self.factory.transcoder(),
            compressor=self.factory.compressor(),
            cipher=self.factory.cipher(),
        )

    def select_states(self, conversation_id: UUID, after: int = 0) -> list[bytes]:
        """The stored state of each of a conversation's events after version ``after``, in
        version order.

        Reads only the ``state`` column: eventsourcing's ``select_events`` also builds a
        ``StoredEvent`` and parses the id back into a ``UUID`` for every row, which replay
        does not need.
        """
        recorder = self.recorder
        if isinstance(recorder, SQLiteApplicationRecorder):
            statement = (
                f"SELECT state FROM {recorder.events_table_name} "  # noqa: S608 - fixed name
                "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
            )
            with recorder.datastore.transaction(commit=False) as cursor:
                cursor.execute(statement, (conversation_id.hex, after))
                return [row[0] for row in cursor.fetchall()]
        if _is_postgres(recorder):
            # Imported here: the driver is an optional extra, and slow to import.
            from eventsourcing.postgres import PostgresApplicationRecorder  # noqa: PLC0415
            from psycopg.sql import SQL, Identifier  # noqa: PLC0415

            assert isinstance(recorder, PostgresApplicationRecorder)
            query = SQL(
                "SELECT state FROM {}.{} WHERE originator_id = %s AND originator_version > %s "
                "ORDER BY originator_version"
            ).format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
            with recorder.datastore.transaction(commit=False) as curs:
                curs.execute(query, (conversation_id, after))
                return [bytes(row["state"]) for row in curs.fetchall()]
        return [s.state for s in recorder.select_events(conversation_id, gt=after)]

    def select_topics_and_states(
        self, conversation_id: UUID, after: int = 0
    ) -> list[tuple[bytes, bytes]]:
        """Like :meth:`select_states`, with each event's stored topic as bytes beside its state,
        so a reader can refuse a row whose topic disagrees with its event (as ``project``,
        which selects by topic, never sees it). SQLite hands the topic over as the bytes
        stored, so a topic that is not UTF-8 is a mismatch rather than a driver error."""
        recorder = self.recorder
        if isinstance(recorder, SQLiteApplicationRecorder):
            statement = (
                f"SELECT CAST(topic AS BLOB), state FROM {recorder.events_table_name} "  # noqa: S608
                "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
            )
            with recorder.datastore.transaction(commit=False) as cursor:
                cursor.execute(statement, (conversation_id.hex, after))
                return [(bytes(row[0] or b""), row[1]) for row in cursor.fetchall()]
        if _is_postgres(recorder):
            from eventsourcing.postgres import PostgresApplicationRecorder  # noqa: PLC0415
            from psycopg.sql import SQL, Identifier  # noqa: PLC0415

            assert isinstance(recorder, PostgresApplicationRecorder)
            query = SQL(
                "SELECT topic, state FROM {}.{} WHERE originator_id = %s "
                "AND originator_version > %s ORDER BY originator_version"
            ).format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
            with recorder.datastore.transaction(commit=False) as curs:
                curs.execute(query, (conversation_id, after))
                return [(row["topic"].encode(), bytes(row["state"])) for row in curs.fetchall()]
        return [
            (s.topic.encode(), s.state) for s in recorder.select_events(conversation_id, gt=after)
        ]

    @property
    def pydantic_mapper(self) -> PydanticMapper:
        """The mapper, typed as the one this application constructs."""
        assert isinstance(self.mapper, PydanticMapper)
        return self.mapper


def _is_postgres(recorder: object) -> bool:
    """Whether ``recorder`` is eventsourcing's PostgreSQL recorder or a subclass (checked by
    module name: the driver is an optional extra, and slow to import)."""
    return any(cls.__module__ == "eventsourcing.postgres" for cls in type(recorder).__mro__)
