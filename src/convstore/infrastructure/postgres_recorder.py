"""eventsourcing's PostgreSQL recorder, also keeping each conversation's chained head.

Imported only for PostgreSQL stores (the driver is an optional extra); wired in through
eventsourcing's ``APPLICATION_RECORDER_TOPIC`` setting. See :mod:`convstore.infrastructure.chain`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from convstore.domain.events import Event
from convstore.infrastructure.chain import (
    HEADS_TABLE,
    START_MARKER_ID,
    Head,
    advance,
    chain_key,
)
from convstore.infrastructure.listing import (
    LISTING_TABLE,
    POSTGRES,
    apply_changes,
    clear_statements,
    create_statements,
    listed_row,
    select_labels,
    select_page,
)
from convstore.projections.listing import ListedRow, ListingChange, ListingQuery, listing_changes


class ChainedPostgresRecorder(PostgresApplicationRecorder):
    """Writes the heads in the same transaction as the events, under the same table lock."""

    def __init__(
        self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"
    ) -> None:
        super().__init__(datastore, events_table_name=events_table_name)
        self._chain_key = chain_key()
        self._prefix = f'"{datastore.schema}".'
        self.listing_missing = False
        """Whether opening found no listing index (a store made before it): rebuild it."""
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
        curs.execute(
            "SELECT to_regclass(%s) AS found", (self._prefix + LISTING_TABLE,), prepare=False
        )
        row = curs.fetchone()
        if row is None or row["found"] is None:
            self.listing_missing = True
            for text in create_statements(POSTGRES, self._prefix):
                curs.execute(text.encode(), prepare=False)
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
        listing: list[ListingChange] | None = kwargs.get("listing")
        if listing:
            with curs.connection.cursor() as index:
                apply_changes(
                    lambda text, params: index.execute(text.encode(), params, prepare=False),
                    POSTGRES,
                    listing,
                    self._prefix,
                )
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

    def select_listing(
        self, query: ListingQuery
    ) -> tuple[list[ListedRow], dict[UUID, dict[str, str]]]:
        """One page of the listing index, and the labels of its conversations."""
        text, params = select_page(POSTGRES, query, self._prefix)
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(text.encode(), params, prepare=False)
            rows = [listed_row(list(row.values())) for row in curs.fetchall()]
            labels: dict[UUID, dict[str, str]] = {row.id: {} for row in rows}
            ids = [row.id for row in rows]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                curs.execute(
                    select_labels(POSTGRES, len(chunk), self._prefix).encode(),
                    chunk,
                    prepare=False,
                )
                for found in curs.fetchall():
                    labels[found["conversation_id"]][found["key"]] = found["value"]
        return rows, labels

    def rebuild_listing(self, decode: Callable[[bytes], Event]) -> int:
        """Refill the listing index from every event in one transaction, holding the events
        table's lock so no insert lands meanwhile; returns how many conversations it lists."""
        events = f'{self._prefix}"{self.events_table_name}"'
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(f"LOCK TABLE {events} IN EXCLUSIVE MODE".encode(), prepare=False)
            for text in clear_statements(self._prefix):
                curs.execute(text.encode(), prepare=False)
            after = 0
            while True:
                curs.execute(
                    f"SELECT notification_id, state FROM {events} WHERE notification_id > %s "  # noqa: S608
                    "ORDER BY notification_id LIMIT 5000".encode(),
                    (after,),
                    prepare=False,
                )
                rows = curs.fetchall()
                if not rows:
                    break
                changes = listing_changes(decode(bytes(row["state"])) for row in rows)
                with curs.connection.cursor() as index:
                    apply_changes(
                        lambda text, params: index.execute(text.encode(), params, prepare=False),
                        POSTGRES,
                        changes,
                        self._prefix,
                    )
                after = rows[-1]["notification_id"]
            curs.execute(f"SELECT count(*) AS n FROM {self._prefix}{LISTING_TABLE}".encode())  # noqa: S608
            found = curs.fetchone()
        self.listing_missing = False
        return 0 if found is None else int(found["n"])


def _head(row: DictRow) -> Head:
    return Head(row["version"], bytes(row["chain"]), row["chained_from"], row["restarted_after"])
