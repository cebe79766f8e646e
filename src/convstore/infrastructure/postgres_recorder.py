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
from convstore.errors import ConversationErased, ConversationNotFound
from convstore.infrastructure.chain import (
    HEADS_TABLE,
    START_MARKER_ID,
    Head,
    advance,
    chain_key,
)
from convstore.infrastructure.erasure import ERASED_TABLE, Erasure
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
from convstore.infrastructure.listing import (
    forget as forget_listing,
)
from convstore.infrastructure.recorder import RawRecord, StoreRecorder
from convstore.infrastructure.replay_tables import forget_postgres as forget_replays
from convstore.projections.listing import ListedRow, ListingChange, ListingQuery, listing_changes


class ChainedPostgresRecorder(PostgresApplicationRecorder, StoreRecorder):
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
            "erased": Identifier(ERASED_TABLE),
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
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{erased} (seq bigserial PRIMARY KEY, "
                "originator_id uuid NOT NULL UNIQUE, erased_at timestamptz NOT NULL, "
                "reason text NOT NULL, events bigint NOT NULL, high bigint NOT NULL)"
            ).format(**names)
        )
        self._erased_among = SQL(
            "SELECT originator_id FROM {schema}.{erased} WHERE originator_id = ANY(%s) LIMIT 1"
        ).format(**names)
        self._count_events = SQL(
            "SELECT count(*) AS n, (SELECT coalesce(max(notification_id), 0) "
            "FROM {schema}.{events}) AS high FROM {schema}.{events} WHERE originator_id = %s"
        ).format(**names)
        self._delete_events = SQL("DELETE FROM {schema}.{events} WHERE originator_id = %s").format(
            **names
        )
        self._delete_head = SQL("DELETE FROM {schema}.{heads} WHERE originator_id = %s").format(
            **names
        )
        self._insert_tombstone = SQL(
            "INSERT INTO {schema}.{erased} (originator_id, erased_at, reason, events, high) "
            "VALUES (%s, %s, %s, %s, %s) RETURNING seq"
        ).format(**names)
        self._select_erasures = SQL(
            "SELECT seq, originator_id, erased_at, reason, events, high FROM {schema}.{erased} "
            "WHERE seq > %s ORDER BY seq"
        ).format(**names)
        self._select_heads = SQL(
            "SELECT originator_id, version, chain, chained_from, restarted_after "
            "FROM {schema}.{heads}"
        ).format(**names)
        self._select_head = self._select_heads + SQL(" WHERE originator_id = %s FOR UPDATE")
        self._select_states = SQL(
            "SELECT state FROM {schema}.{events} WHERE originator_id = %s "
            "AND originator_version > %s ORDER BY originator_version"
        ).format(**names)
        self._select_topics_and_states = SQL(
            "SELECT topic, state FROM {schema}.{events} WHERE originator_id = %s "
            "AND originator_version > %s ORDER BY originator_version"
        ).format(**names)
        self._select_raw_records = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{events} WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
        ).format(**names)
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
        grouped: dict[UUID, list[tuple[int, str, bytes]]] = {}
        for s in stored_events:
            originator = s.originator_id
            key = originator if isinstance(originator, UUID) else UUID(str(originator))
            grouped.setdefault(key, []).append((s.originator_version, s.topic, s.state))
        # Under the table lock an erasure takes too, and before anything is inserted: the
        # caller commits its transaction even when this raises (eventsourcing re-raises after
        # the pipeline), so the refusal must leave nothing written.
        self._lock_table(curs)
        with curs.connection.cursor() as check:
            check.execute(self._erased_among, (list(grouped),), prepare=False)
            erased = check.fetchone()
        if erased is not None:
            msg = f"conversation {erased['originator_id']} was erased"
            raise ConversationErased(msg)
        # The listing and the heads go first, the events last: a lost version race then
        # fails the insert as the transaction's last statement, and eventsourcing's own sync
        # raises it as the unique violation it is (a retry). A statement of ours after a
        # failed insert would instead surface as "pipeline aborted", a store failure. The
        # failed transaction rolls back whole, heads and listing included.
        listing: list[ListingChange] | None = kwargs.get("listing")
        if listing:
            with curs.connection.cursor() as index:
                apply_changes(
                    lambda text, params: index.execute(text.encode(), params, prepare=False),
                    POSTGRES,
                    listing,
                    self._prefix,
                )
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
        super()._insert_stored_events(curs, stored_events, **kwargs)

    def erase(self, conversation: UUID, reason: str, at: str) -> tuple[int, int]:
        """Delete every event and the head of ``conversation`` and leave its tombstone, in one
        transaction under the events table's lock; returns the tombstone's ``seq`` and how
        many events went. The rows are deleted; their bytes stay in dead tuples until the
        table is vacuumed."""
        with self.datastore.transaction(commit=True) as curs:
            self._lock_table(curs)
            curs.execute(self._erased_among, ([conversation],), prepare=False)
            if curs.fetchone() is not None:
                msg = f"conversation {conversation} was erased"
                raise ConversationErased(msg)
            curs.execute(self._count_events, (conversation,), prepare=False)
            row = curs.fetchone()
            assert row is not None
            if not row["n"]:
                msg = f"conversation {conversation} not found"
                raise ConversationNotFound(msg)
            curs.execute(self._delete_events, (conversation,), prepare=False)
            curs.execute(self._delete_head, (conversation,), prepare=False)
            forget_listing(
                lambda text, params: curs.execute(text.encode(), params, prepare=False),
                POSTGRES,
                conversation,
                self._prefix,
            )
            forget_replays(
                lambda text, params: curs.execute(text.encode(), params, prepare=False),
                conversation,
                self._prefix,
            )
            curs.execute(
                self._insert_tombstone,
                (conversation, at, reason, row["n"], row["high"]),
                prepare=False,
            )
            seq = curs.fetchone()
            assert seq is not None
            return int(seq["seq"]), int(row["n"])

    def select_states(self, conversation_id: UUID, after: int = 0) -> list[bytes]:
        """The ``state`` column of a conversation's events after version ``after``, in order."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_states, (conversation_id, after))
            return [bytes(row["state"]) for row in curs.fetchall()]

    def select_topics_and_states(
        self, conversation_id: UUID, after: int = 0
    ) -> list[tuple[bytes, bytes]]:
        """Each event's topic (as UTF-8 bytes) beside its state."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_topics_and_states, (conversation_id, after))
            return [(row["topic"].encode(), bytes(row["state"])) for row in curs.fetchall()]

    def select_raw_records(self, after: int, limit: int) -> list[RawRecord]:
        """Up to ``limit`` rows after log position ``after``, the id and topic as UTF-8 bytes
        (the server's column types keep them readable; the state may still not decode)."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_raw_records, (after, limit), prepare=False)
            return [
                (
                    row["notification_id"],
                    str(row["originator_id"]).encode(),
                    row["originator_version"],
                    row["topic"].encode(),
                    bytes(row["state"]),
                )
                for row in curs.fetchall()
            ]

    def close_writer(self) -> None:
        """Nothing to close: every connection is the datastore's pool's."""

    def truncate_wal(self) -> bool:
        """Nothing to do on PostgreSQL (the server owns its write-ahead log)."""
        return True

    def select_erasures(self, after: int) -> list[Erasure]:
        """The tombstones after ``seq`` ``after``, in order."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_erasures, (after,), prepare=False)
            return [
                Erasure(
                    int(r["seq"]),
                    r["originator_id"],
                    r["erased_at"],
                    r["reason"],
                    int(r["events"]),
                    int(r["high"]),
                )
                for r in curs.fetchall()
            ]

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
