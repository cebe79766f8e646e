"""eventsourcing's PostgreSQL recorder, also keeping each conversation's chained head.

Imported only for PostgreSQL stores (the driver is an optional extra); wired in through
eventsourcing's ``APPLICATION_RECORDER_TOPIC`` setting. See :mod:`convstore.infrastructure.chain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from convstore.infrastructure.chain import (
    HEADS_TABLE,
    START_MARKER_ID,
    Head,
    advance,
    chain_key,
)


class ChainedPostgresRecorder(PostgresApplicationRecorder):
    """Writes the heads in the same transaction as the events, under the same table lock."""

    def __init__(
        self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"
    ) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self._chain_key = chain_key()
        names = {
            "schema": Identifier(datastore.schema),
            "heads": Identifier(HEADS_TABLE),
            "events": Identifier(events_table_name),
        }
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{heads} (originator_id uuid PRIMARY KEY, "
                "version bigint NOT NULL, chain bytea NOT NULL, chained_from bigint NOT NULL, "
                "restarted_after bigint)"
            ).format(**names)
        )
        # The start marker: where chaining began (0 for a new store).
        self.sql_create_statements.append(
            SQL(
                "INSERT INTO {schema}.{heads} SELECT %s::uuid, "
                "coalesce(max(notification_id), 0), ''::bytea, 0, NULL FROM {schema}.{events} "
                "ON CONFLICT DO NOTHING"
            ).format(**names)
        )
        self._select_heads = SQL(
            "SELECT originator_id, version, chain, chained_from, restarted_after "
            "FROM {schema}.{heads}"
        ).format(**names)
        self._select_head = self._select_heads + SQL(" WHERE originator_id = %s FOR UPDATE")
        self._upsert_head = SQL(
            "INSERT INTO {schema}.{heads} VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (originator_id) DO UPDATE SET version = excluded.version, "
            "chain = excluded.chain, chained_from = excluded.chained_from, "
            "restarted_after = excluded.restarted_after"
        ).format(**names)

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        for statement in self.sql_create_statements:
            text = statement.as_string()
            if "CREATE TYPE" in text:
                continue
            params = (START_MARKER_ID,) if "%s::uuid" in text else None
            curs.execute(statement, params, prepare=False)

    def _insert_stored_events(
        self, curs: Cursor[DictRow], stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> None:
        super()._insert_stored_events(curs, stored_events, **kwargs)
        grouped: dict[UUID, list[tuple[int, str, bytes]]] = {}
        for s in stored_events:
            originator = s.originator_id
            key = originator if isinstance(originator, UUID) else UUID(str(originator))
            grouped.setdefault(key, []).append((s.originator_version, s.topic, s.state))
        # Never prepared: in a pipeline that the insert aborts (a lost version race), psycopg
        # would remember a statement the server never prepared ("does not exist" next time).
        with curs.connection.cursor() as heads:
            for originator, events in grouped.items():
                heads.execute(self._select_head, (originator,), prepare=False)
                row = heads.fetchone()
                found = None if row is None else _head(row)
                head = advance(originator, found, events, self._chain_key)
                heads.execute(
                    self._upsert_head,
                    (
                        originator,
                        head.version,
                        head.chain,
                        head.chained_from,
                        head.restarted_after,
                    ),
                    prepare=False,
                )

    def select_heads(self) -> dict[UUID, Head]:
        """Every conversation's head, and the start marker under its nil id."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_heads)
            return {row["originator_id"]: _head(row) for row in curs.fetchall()}


def _head(row: DictRow) -> Head:
    return Head(row["version"], bytes(row["chain"]), row["chained_from"], row["restarted_after"])
