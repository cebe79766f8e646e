"""eventsourcing's PostgreSQL recorder, also keeping each conversation's chained head, and
writing without eventsourcing's table lock.

Imported only for PostgreSQL stores (the driver is an optional extra); wired in through
eventsourcing's ``APPLICATION_RECORDER_TOPIC`` setting. See :mod:`convstore.ports.chain`.

eventsourcing takes ``LOCK TABLE … IN EXCLUSIVE MODE`` for every insert, held until the commit
is durable, so that notification ids are handed out in commit order and a reader tailing the log
never passes an id a slower transaction fills in later. Here writers run in parallel and the
guarantee moves to the readers:

- Each append is its transaction's first write. The function :data:`APPEND_FUNCTION` takes a
  session advisory lock, assigns the transaction its id (``pg_current_xact_id()``), inserts the
  events (a contiguous run of notification ids) and releases the lock: microseconds, before the
  heads, the listing and the commit. So among appends, transaction-id order is notification-id
  order. Each row keeps its transaction's id in the ``tx`` column.
- A reader returns only *settled* rows: written by a transaction older than the oldest one still
  running (``tx < pg_snapshot_xmin(pg_current_snapshot())``, taken in the query's snapshot).
  Every append still running, or yet to commit, has a larger transaction id, hence larger
  notification ids than every settled row: the settled rows are a prefix of the final log, so a
  reader never skips an id committed late, and never returns one twice.
- Appends to one conversation take its transaction advisory lock first (as an erasure does), so
  a lost version race waits outside the short section and fails there, and heads and listing
  rows of one conversation are never written by two transactions at once.

The price: a transaction left open anywhere in the cluster holds the horizon, so readers lag
(never skip) until it ends. Rows from before the column existed (a store made by an older
convstore) have no ``tx`` and are settled. Every process using a store must run this version:
an older reader does not filter, and could pass an id committed late; so opening marks the
store format 2, which an older convstore refuses (``postgres.PostgresSettings._claim``).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    InterfaceError,
    Notification,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import retry
from psycopg import ClientCursor, Connection, Cursor
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, tuple_row
from psycopg.sql import SQL, Composable, Identifier, Literal

from convstore.domain.errors import ConversationErased, ConversationNotFound
from convstore.domain.events import Event
from convstore.infrastructure.common.listing import (
    LISTING_TABLE,
    PARENT_INDEX,
    PREVIEW_COLUMNS,
    Dialect,
    add_preview_statements,
    apply_changes,
    clear_statements,
    create_statements,
    listed_row,
    parent_index_statement,
    refuse_if_active,
    select_labels,
    select_page,
)
from convstore.infrastructure.common.listing import (
    forget as forget_listing,
)
from convstore.infrastructure.common.log_changes import (
    CHANGE_TRIGGERS,
    CHANGES_TABLE,
    TRUNCATE_TRIGGER,
)
from convstore.infrastructure.common.retired_replay import forget_postgres as forget_retired
from convstore.ports.chain import (
    HEADS_TABLE,
    START_MARKER_ID,
    Head,
    advance,
    chain_key,
)
from convstore.ports.erasure import ERASED_TABLE, Erasure
from convstore.ports.recorder import Decision, RawRecord, StoreRecorder
from convstore.projections.listing import ListedRow, ListingChange, ListingQuery, listing_changes

POSTGRES = Dialect("%s", "uuid", "ILIKE", lambda u: u)
"""How PostgreSQL spells the listing index's statements: ``%s``, ids as ``uuid``."""

TX_COLUMN = "tx"
"""The events table's column holding the id (``xid8``) of the transaction that wrote the row."""

APPEND_FUNCTION = "convstore_append"
"""The server-side function that numbers and inserts one transaction's events."""

ERASED_CODE = "CV001"
"""The SQLSTATE the append function raises for an erased conversation."""

HEAD_MOVED_CODE = "CV002"
"""The SQLSTATE it raises when a head is not the one the writer computed from."""

HEAD_ATTEMPTS = 5
"""Writes tried with freshly read heads before a moving head is reported."""

KNOWN_HEADS = 10_000
"""Heads kept per process; past that the memory is cleared (they are read again)."""

SETTLE_WAIT_SECONDS = 1.0
"""How long a reader waits for a running append before returning what is settled."""


class ChainedPostgresRecorder(PostgresApplicationRecorder, StoreRecorder):
    """Writes the heads in the same transaction as the events, without a table lock."""

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
            "tx": Identifier(TX_COLUMN),
            "append": Identifier(APPEND_FUNCTION),
            "event_type": Identifier(self.stored_event_type_name),
            "listing": Identifier(LISTING_TABLE),
            "changes": Identifier(CHANGES_TABLE),
            "updated": Identifier(CHANGE_TRIGGERS[0]),
            "deleted": Identifier(CHANGE_TRIGGERS[1]),
            "count_updated": Identifier(CHANGE_TRIGGERS[0] + "_count"),
            "count_deleted": Identifier(CHANGE_TRIGGERS[1] + "_count"),
            "truncated": Identifier(TRUNCATE_TRIGGER),
            "count_truncated": Identifier(TRUNCATE_TRIGGER + "_count"),
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
        # The change count (see log_changes.CHANGES_TABLE): statement-level triggers, each adding
        # up the rows of one statement per conversation.
        self.sql_create_statements.append(
            SQL(
                "CREATE TABLE IF NOT EXISTS {schema}.{changes} (originator_id uuid PRIMARY KEY, "
                "changes bigint NOT NULL)"
            ).format(**names)
        )
        upsert = (
            "INSERT INTO {schema}.{changes} AS c SELECT originator_id, count(*) FROM ({rows}) "
            "AS r GROUP BY originator_id ON CONFLICT (originator_id) DO UPDATE "
            "SET changes = c.changes + excluded.changes"
        )
        both = "SELECT originator_id FROM old_rows UNION ALL SELECT originator_id FROM new_rows"
        for function, rows in (
            ("count_updated", both),
            ("count_deleted", "SELECT originator_id FROM old_rows"),
        ):
            self.sql_create_statements.append(
                SQL(
                    "CREATE OR REPLACE FUNCTION {schema}.{function}() RETURNS trigger "
                    "LANGUAGE plpgsql AS $body$ BEGIN "
                    + upsert.replace("{rows}", rows)
                    + "; RETURN NULL; END $body$"
                ).format(function=names[function], **names)
            )
        self.sql_create_statements.append(
            SQL(
                "CREATE OR REPLACE FUNCTION {schema}.{count_truncated}() RETURNS trigger "
                "LANGUAGE plpgsql AS $body$ BEGIN "
                "INSERT INTO {schema}.{changes} AS c VALUES ({nil}, 1) "
                "ON CONFLICT (originator_id) DO UPDATE SET changes = c.changes + 1; "
                "RETURN NULL; END $body$"
            ).format(nil=Literal(str(START_MARKER_ID)), **names)
        )
        self._create_change_triggers = [
            SQL(
                "CREATE TRIGGER {updated} AFTER UPDATE ON {schema}.{events} "
                "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
                "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.{count_updated}()"
            ).format(**names),
            SQL(
                "CREATE TRIGGER {deleted} AFTER DELETE ON {schema}.{events} "
                "REFERENCING OLD TABLE AS old_rows "
                "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.{count_deleted}()"
            ).format(**names),
            SQL(
                "CREATE TRIGGER {truncated} AFTER TRUNCATE ON {schema}.{events} "
                "FOR EACH STATEMENT EXECUTE FUNCTION {schema}.{count_truncated}()"
            ).format(**names),
        ]
        self._select_changes = SQL(
            "SELECT changes FROM {schema}.{changes} WHERE originator_id = %s"
        ).format(**names)
        self._delete_changes = SQL(
            "DELETE FROM {schema}.{changes} WHERE originator_id = %s"
        ).format(**names)
        self._erased_among = SQL(
            "SELECT originator_id FROM {schema}.{erased} WHERE originator_id = ANY(%s) LIMIT 1"
        ).format(**names)
        self._count_events = SQL(
            "SELECT count(*) AS n, (SELECT coalesce(max(notification_id), 0) "
            "FROM {schema}.{events}) AS high, (SELECT last_active FROM {schema}.{listing} "
            "WHERE id = %s) AS last_active FROM {schema}.{events} WHERE originator_id = %s"
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
        self._select_heads_of = self._select_heads + SQL(" WHERE originator_id = ANY(%s)")
        # The write path without the table lock (see the module's docstring).
        salt = f"convstore append {datastore.schema}.{events_table_name}".encode()
        self._store_salt = hashlib.blake2b(salt, digest_size=32).digest()
        self._append_lock_key = int.from_bytes(
            hashlib.blake2b(salt, digest_size=8).digest(), "big", signed=True
        )
        self._events_regclass = f'"{datastore.schema}"."{events_table_name}"'
        self._set_lock_timeout = SQL("SET LOCAL lock_timeout = '{}s'").format(
            Literal(datastore.lock_timeout)
        )
        self._set_lock_timeout_text = (
            f"SET LOCAL lock_timeout = '{int(datastore.lock_timeout)}s'".encode()
        )
        self._lock_stream = SQL("SELECT pg_advisory_xact_lock(%s)")
        self._select_states = SQL(
            "SELECT state FROM {schema}.{events} WHERE originator_id = %s "
            "AND originator_version > %s ORDER BY originator_version"
        ).format(**names)
        self._select_log_tail = SQL(
            "SELECT c.changes, e.topic, e.state FROM (SELECT (SELECT sum(changes) FROM "
            "{schema}.{changes} WHERE originator_id IN (%s, {nil})) AS changes) AS c "
            "LEFT JOIN LATERAL "
            "(SELECT topic, state, originator_version FROM {schema}.{events} "
            "WHERE originator_id = %s AND originator_version > %s) AS e ON true "
            "ORDER BY e.originator_version"
        ).format(nil=Literal(str(START_MARKER_ID)), **names)
        self._select_topics_and_states = SQL(
            "SELECT topic, state FROM {schema}.{events} WHERE originator_id = %s "
            "AND originator_version > %s ORDER BY originator_version"
        ).format(**names)
        # Settled rows only, like select_notifications (the filter is added in the method).
        self._select_raw_records_from = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{events} WHERE notification_id > %s AND "
        ).format(**names)
        self._select_written = SQL(
            "SELECT originator_id, originator_version, topic, state, notification_id "
            "FROM {schema}.{events} WHERE (originator_id, originator_version) IN "
            "(SELECT * FROM unnest(%s::uuid[], %s::bigint[]))"
        ).format(**names)
        self._write_prefix = SQL("SELECT * FROM {schema}.{append}").format(**names).as_string()
        self._write = SQL(
            "SELECT * FROM {schema}.{append}(%s::uuid[], %s::bigint[], %s::text[], "
            "%s::bytea[], %s, %s::bigint[], %s::uuid[], %s::bigint[], %s::bytea[], "
            "%s::bigint[], %s::bigint[], %s::bigint[], %s::bytea[], %s::uuid[], %s::bigint[], "
            "%s::bigint[]) AS notification_id"
        ).format(**names)
        self._add_tx_column = [
            SQL("ALTER TABLE {schema}.{events} ADD COLUMN IF NOT EXISTS {tx} xid8").format(**names),
            SQL(
                "ALTER TABLE {schema}.{events} ALTER COLUMN {tx} SET DEFAULT pg_current_xact_id()"
            ).format(**names),
        ]
        self._create_append = SQL(
            "CREATE OR REPLACE FUNCTION {schema}.{append}("
            "ids uuid[], versions bigint[], topics text[], states bytea[], lock_key bigint, "
            "stream_keys bigint[], head_ids uuid[], new_versions bigint[], new_chains bytea[], "
            "new_from bigint[], new_restarted bigint[], old_versions bigint[], "
            "old_chains bytea[], listed_ids uuid[], listed_events bigint[], "
            "listed_active bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql AS $body$ "
            "DECLARE k bigint; i int; gone uuid; "
            "BEGIN "
            "  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN "
            "    RAISE EXCEPTION 'convstore: the append must be its transaction''s first write'; "
            "  END IF; "
            # Each conversation's lock, in one order: appends to one conversation (and its
            # erasure) take turns here, outside the numbering section.
            # One conversation (the common case) needs no query to order its keys.
            "  IF array_length(stream_keys, 1) = 1 THEN "
            "    PERFORM pg_advisory_xact_lock(stream_keys[1]); "
            "  ELSE "
            "    FOR k IN SELECT s FROM unnest(stream_keys) AS s ORDER BY s LOOP "
            "      PERFORM pg_advisory_xact_lock(k); "
            "    END LOOP; "
            "  END IF; "
            "  SELECT originator_id INTO gone FROM {schema}.{erased} "
            "    WHERE originator_id = ANY(head_ids) LIMIT 1; "
            "  IF FOUND THEN "
            "    RAISE EXCEPTION 'conversation % was erased', gone "
            "      USING ERRCODE = '{erased_code}'; "
            "  END IF; "
            # The numbering section: the transaction's id, then its notification ids.
            "  PERFORM pg_advisory_lock(lock_key); "
            "  BEGIN "
            "    PERFORM pg_current_xact_id(); "
            "    RETURN QUERY INSERT INTO {schema}.{events} "
            "      (originator_id, originator_version, topic, state) "
            "      SELECT * FROM unnest(ids, versions, topics, states) "
            "      RETURNING {events}.notification_id; "
            "  EXCEPTION WHEN OTHERS OR query_canceled THEN "
            "    PERFORM pg_advisory_unlock(lock_key); "
            "    RAISE; "
            "  END; "
            "  PERFORM pg_advisory_unlock(lock_key); "
            # Each head moves on only from the one the writer computed from.
            "  FOR i IN 1 .. coalesce(array_length(head_ids, 1), 0) LOOP "
            "    IF old_versions[i] IS NULL THEN "
            "      INSERT INTO {schema}.{heads} VALUES (head_ids[i], new_versions[i], "
            "        new_chains[i], new_from[i], new_restarted[i]) ON CONFLICT DO NOTHING; "
            "    ELSE "
            "      UPDATE {schema}.{heads} SET version = new_versions[i], chain = new_chains[i], "
            "        chained_from = new_from[i], restarted_after = new_restarted[i] "
            "        WHERE originator_id = head_ids[i] AND version = old_versions[i] "
            "        AND chain = old_chains[i]; "
            "    END IF; "
            "    IF NOT FOUND THEN "
            "      RAISE EXCEPTION 'the head of % moved', head_ids[i] "
            "        USING ERRCODE = '{moved_code}'; "
            "    END IF; "
            "  END LOOP; "
            # The listing rows of conversations that only grew (the other changes are
            # statements of their own after the call): one planned statement, no text to parse.
            "  FOR i IN 1 .. coalesce(array_length(listed_ids, 1), 0) LOOP "
            "    UPDATE {schema}.{listing} SET events = listed_events[i], "
            "      last_active = greatest(last_active, listed_active[i]) "
            "      WHERE id = listed_ids[i]; "
            "  END LOOP; "
            "END $body$"
        ).format(erased_code=SQL(ERASED_CODE), moved_code=SQL(HEAD_MOVED_CODE), **names)
        # A NOTIFY gets a transaction id, hence a commit record: committed asynchronously
        # it costs no second fsync (it is only a wake-up; a lost one delays a subscriber).
        self._notify_after = [
            b"BEGIN",
            b"SET LOCAL synchronous_commit TO off",
            f'NOTIFY "{self.channel_name}"'.encode(),
            b"COMMIT",
        ]
        self._known: dict[UUID, Head] = {}
        """The heads this process last wrote: the next write starts from them unread."""
        self._settled = SQL(
            "({tx} IS NULL OR {tx} < (SELECT pg_snapshot_xmin(pg_current_snapshot())))"
        ).format(**names)
        self._select_raw_records = (
            self._select_raw_records_from
            + self._settled
            + SQL(" ORDER BY notification_id LIMIT %s")
        )
        self._select_notifications_from = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state "
            "FROM {schema}.{events}"
        ).format(**names)
        self._max_settled = (
            SQL("SELECT notification_id FROM {schema}.{events} WHERE ").format(**names)
            + self._settled
            + SQL(" ORDER BY notification_id DESC LIMIT 1")
        )
        self._newest_unsettled = SQL(
            "SELECT {tx}::text AS tx FROM (SELECT {tx} FROM {schema}.{events} "
            "ORDER BY notification_id DESC LIMIT 1) AS newest "
            "WHERE {tx} >= pg_snapshot_xmin(pg_current_snapshot())"
        ).format(**names)
        self._has_settled = SQL(
            "SELECT pg_snapshot_xmin(pg_current_snapshot()) > %s::xid8 AS settled"
        )

    def _create_table(self, curs: Cursor[DictRow]) -> None:
        self._create_tables(curs)
        # A store made by an older convstore has no transaction column: add it (nullable, so
        # no rewrite; its old rows are all settled). Only when missing: ALTER TABLE takes the
        # table's strongest lock even when it changes nothing.
        curs.execute(
            "SELECT 1 AS found FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attname = %s AND NOT attisdropped",
            (self._events_regclass, TX_COLUMN),
            prepare=False,
        )
        if curs.fetchone() is None:
            for statement in self._add_tx_column:
                curs.execute(statement, prepare=False)
        curs.execute(self._create_append, prepare=False)
        # The change-count triggers, only when missing: CREATE TRIGGER locks the table against
        # writers even when it changes nothing.
        curs.execute(
            "SELECT count(*) AS found FROM pg_trigger WHERE tgrelid = to_regclass(%s) "
            "AND tgname = ANY(%s)",
            (self._events_regclass, [*CHANGE_TRIGGERS, TRUNCATE_TRIGGER]),
            prepare=False,
        )
        row = curs.fetchone()
        if row is None or row["found"] != len(CHANGE_TRIGGERS) + 1:
            curs.execute(
                SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(SQL(self._events_regclass)),
                prepare=False,
            )
            triggers = [*CHANGE_TRIGGERS, TRUNCATE_TRIGGER]
            for name, statement in zip(triggers, self._create_change_triggers, strict=True):
                curs.execute(
                    "SELECT 1 AS found FROM pg_trigger WHERE tgrelid = to_regclass(%s) "
                    "AND tgname = %s",
                    (self._events_regclass, name),
                    prepare=False,
                )
                if curs.fetchone() is None:
                    curs.execute(statement, prepare=False)

    def _create_tables(self, curs: Cursor[DictRow]) -> None:
        curs.execute(
            "SELECT to_regclass(%s) AS found", (self._prefix + LISTING_TABLE,), prepare=False
        )
        row = curs.fetchone()
        if row is None or row["found"] is None:
            self.listing_missing = True
            for text in create_statements(POSTGRES, self._prefix):
                curs.execute(text.encode(), prepare=False)
        else:
            curs.execute(
                "SELECT count(*) AS n FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                "AND attname = ANY(%s) AND NOT attisdropped",
                (self._prefix + LISTING_TABLE, list(PREVIEW_COLUMNS)),
                prepare=False,
            )
            found = curs.fetchone()
            if found is not None and found["n"] < len(PREVIEW_COLUMNS):
                self.listing_missing = True  # made before the previews: add, then refill
                added = add_preview_statements(POSTGRES, self._prefix, if_missing="IF NOT EXISTS")
                for text in added:
                    curs.execute(text.encode(), prepare=False)
            curs.execute(
                "SELECT to_regclass(%s) AS found", (self._prefix + PARENT_INDEX,), prepare=False
            )
            index = curs.fetchone()
            if index is None or index["found"] is None:  # made before it: an index, no refill
                curs.execute(parent_index_statement(self._prefix).encode(), prepare=False)
        for statement in self.sql_create_statements:
            text = statement.as_string()
            if "CREATE TYPE" in text:
                continue
            params = (START_MARKER_ID,) if "%s::uuid" in text else None
            curs.execute(statement, params, prepare=False)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """Record the events, their conversations' heads and listing rows in one transaction
        and one round trip, without eventsourcing's table lock (see the module's docstring);
        returns their notification ids."""
        if not stored_events:
            return None
        grouped: dict[UUID, list[tuple[int, str, bytes]]] = {}
        for s in stored_events:
            originator = s.originator_id
            key = originator if isinstance(originator, UUID) else UUID(str(originator))
            grouped.setdefault(key, []).append((s.originator_version, s.topic, s.state))
        columns = (
            [s.originator_id for s in stored_events],
            [s.originator_version for s in stored_events],
            [s.topic for s in stored_events],
            [s.state for s in stored_events],
        )
        listing: list[ListingChange] | None = kwargs.get("listing")
        if len(self._known) > KNOWN_HEADS:
            self._known.clear()
        # The head each write starts from: the one this process last wrote, none for a new
        # conversation, else read. A guess that proves wrong is refused by the function
        # (HEAD_MOVED_CODE, nothing written); the heads are then read and the write retried.
        found: dict[UUID, Head | None] = {}
        unknown = []
        for originator, events in grouped.items():
            if originator in self._known:
                found[originator] = self._known[originator]
            elif events[0][0] == 1:
                found[originator] = None
            else:
                unknown.append(originator)
        with self.datastore.get_connection() as conn:
            for attempt in range(HEAD_ATTEMPTS):
                if unknown:
                    found.update(self._read_heads(conn, unknown))
                heads = {
                    o: advance(o, found[o], events, self._chain_key)
                    for o, events in grouped.items()
                }
                try:
                    ids = self._write_once(conn, columns, found, heads, listing)
                except psycopg.Error as exc:
                    if conn.info.transaction_status != TransactionStatus.IDLE:
                        with contextlib.suppress(psycopg.Error):  # a broken connection
                            conn.rollback()
                    for originator in grouped:
                        self._known.pop(originator, None)
                    if exc.sqlstate == ERASED_CODE:
                        gone = str(exc.diag.message_primary or "").split()[1:2]
                        msg = f"conversation {gone[0] if gone else '?'} was erased"
                        raise ConversationErased(msg) from None
                    if exc.sqlstate != HEAD_MOVED_CODE:
                        # Landed after all? The error came after the COMMIT (in the NOTIFY's
                        # own transaction), or the connection broke once it had committed. A
                        # version taken (IntegrityError) is a conflict, even by the same event.
                        if not isinstance(exc, psycopg.IntegrityError):
                            landed = self._landed(columns)
                            if landed is not None:
                                self._known.update(heads)
                                return landed
                        raise
                    if attempt == HEAD_ATTEMPTS - 1:
                        raise
                    unknown = list(grouped)
                    continue
                self._known.update(heads)
                return ids
        msg = "unreachable: the last attempt returns or raises"
        raise AssertionError(msg)

    def insert_decided(
        self,
        conversation_id: UUID,
        after: int,
        decide: Decision,
        *,
        contended: bool,
    ) -> None:
        """Uncontended, one round trip as :meth:`insert_events` (``decide`` is given
        ``None``; a lost race is an ``IntegrityError``). Contended, the writer takes its turn:
        it waits for the conversation's advisory lock (PostgreSQL queues its waiters in order),
        reads what it missed and the head, decides, and records, in one transaction, so a
        writer that lost once cannot lose again to another taking turns."""
        if not contended:
            stored, listing = decide(None)
            if stored:
                self.insert_events(stored, listing=listing)
            return
        self._insert_in_turn(conversation_id, after, decide)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _insert_in_turn(self, conversation_id: UUID, after: int, decide: Decision) -> None:
        with self.datastore.get_connection() as conn:
            try:
                conn.execute(b"BEGIN", prepare=False)
                conn.execute(self._set_lock_timeout_text, prepare=False)
                conn.execute(self._lock_stream, (self._stream_key(conversation_id),))
                missed = conn.execute(self._select_topics_and_states, (conversation_id, after))
                rows = [(row["topic"].encode(), bytes(row["state"])) for row in missed]
                found = self._read_heads(conn, [conversation_id])
                stored, listing = decide(rows)
                if not stored:
                    conn.rollback()
                    return
                columns = (
                    [s.originator_id for s in stored],
                    [s.originator_version for s in stored],
                    [s.topic for s in stored],
                    [s.state for s in stored],
                )
                events = [(s.originator_version, s.topic, s.state) for s in stored]
                heads = {
                    conversation_id: advance(
                        conversation_id, found[conversation_id], events, self._chain_key
                    )
                }
                self._write_once(conn, columns, found, heads, listing, begun=True)
            except BaseException as exc:
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(psycopg.Error):  # a broken connection
                        conn.rollback()
                self._known.pop(conversation_id, None)
                if isinstance(exc, psycopg.Error) and exc.sqlstate == ERASED_CODE:
                    msg = f"conversation {conversation_id} was erased"
                    raise ConversationErased(msg) from None
                raise
            self._known.update(heads)

    def _landed(
        self, columns: tuple[list[Any], list[int], list[str], list[bytes]]
    ) -> list[int] | None:
        """The notification ids of these exact events if they are all stored (same ids,
        versions, topics and states), else ``None`` (also when the check itself fails)."""
        ids, versions, topics, states = columns
        try:
            with self.datastore.get_connection() as conn:
                rows = conn.execute(self._select_written, (ids, versions), prepare=False).fetchall()
        except Exception:  # noqa: BLE001 - the caller raises the error it had
            return None
        stored = {
            (r["originator_id"], r["originator_version"]): (
                r["topic"],
                bytes(r["state"]),
                int(r["notification_id"]),
            )
            for r in rows
        }
        landed = []
        for key, topic, state in zip(zip(ids, versions, strict=True), topics, states, strict=True):
            found = stored.get(key)
            if found is None or found[:2] != (topic, state):
                return None
            landed.append(found[2])
        return landed

    def _read_heads(
        self, conn: Connection[DictRow], originators: list[UUID]
    ) -> dict[UUID, Head | None]:
        rows = conn.execute(self._select_heads_of, (originators,), prepare=False).fetchall()
        heads: dict[UUID, Head | None] = dict.fromkeys(originators)
        heads.update({row["originator_id"]: _head(row) for row in rows})
        return heads

    def _write_once(
        self,
        conn: Connection[DictRow],
        columns: tuple[list[Any], list[int], list[str], list[bytes]],
        found: dict[UUID, Head | None],
        heads: dict[UUID, Head],
        listing: list[ListingChange] | None,
        *,
        begun: bool = False,
    ) -> list[int]:
        """One transaction in one round trip: client-side bound statements sent as one text
        (a pipeline costs a round trip per sync). The NOTIFY runs after the commit, in a
        transaction of its own: inside the write it would take PostgreSQL's notify-queue lock
        until the commit is durable, serialising every writer's commit again. ``begun``: the
        caller's transaction is open already (and has set its lock timeout)."""
        order = list(heads)
        old = [found[o] for o in order]
        new = [heads[o] for o in order]
        with ClientCursor(conn, row_factory=tuple_row) as curs:
            if conn.info.parameter_status("standard_conforming_strings") != "on":
                msg = "convstore needs standard_conforming_strings = on (PostgreSQL's default)"
                raise psycopg.NotSupportedError(msg)
            grown = [c for c in listing or () if _only_grown(c)]
            rest = [c for c in listing or () if not _only_grown(c)]
            call = _call(
                self._write_prefix,
                columns=columns,
                lock_key=self._append_lock_key,
                stream_keys=sorted({self._stream_key(o) for o in order}),
                order=order,
                new=new,
                old=old,
                grown=grown,
            )
            parts = [call] if begun else [b"BEGIN", self._set_lock_timeout_text, call]
            if rest:
                apply_changes(
                    lambda text, params: parts.append(
                        _bound(text, params) or curs.mogrify(text, params).encode()
                    ),
                    POSTGRES,
                    rest,
                    self._prefix,
                )
            parts += [b"COMMIT", *self._notify_after]
            # Never prepared: each text is used once.
            curs.execute(b";\n".join(parts), prepare=False)
            # The results in order: BEGIN, SET, the function's ids, then the rest.
            if not begun:
                curs.nextset()
                curs.nextset()
            return [int(row[0]) for row in curs.fetchall()]

    def _stream_key(self, originator: UUID) -> int:
        """The transaction-scoped advisory lock key of one conversation in this store."""
        digest = hashlib.blake2b(originator.bytes, digest_size=8, key=self._store_salt).digest()
        return int.from_bytes(digest, "big", signed=True)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """The settled notifications from ``start``: those no transaction still running can
        come before (see the module's docstring). Waits briefly for a running append when
        the page is short, so a reader right after a commit sees it."""
        conditions: list[Composable] = [self._settled]
        params: list[Any] = []
        if start is not None:
            conditions.append(
                SQL("notification_id >= %s" if inclusive_of_start else "notification_id > %s")
            )
            params.append(start)
        if stop is not None:
            conditions.append(SQL("notification_id <= %s"))
            params.append(stop)
        if topics:
            conditions.append(SQL("topic = ANY(%s)"))
            params.append(list(topics))
        params.append(limit)
        statement = (
            self._select_notifications_from
            + SQL(" WHERE ")
            + SQL(" AND ").join(conditions)
            + SQL(" ORDER BY notification_id LIMIT %s")
        )
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, params, prepare=True)
            found = curs.fetchall()
            short = len(found) < limit
            if (
                short
                and (stop is None or not found or found[-1]["notification_id"] < stop)
                and self._await_settled(curs)
            ):
                curs.execute(statement, params, prepare=True)
                found = curs.fetchall()
            return [
                Notification(
                    id=row["notification_id"],
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                )
                for row in found
            ]

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def max_notification_id(self) -> int | None:
        """The newest settled notification id (``None`` for an empty log), after waiting
        briefly for a running append."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            self._await_settled(curs)
            curs.execute(self._max_settled, prepare=True)
            row = curs.fetchone()
            return None if row is None else int(row["notification_id"])

    def _await_settled(self, curs: Cursor[DictRow]) -> bool:
        """If the newest committed event is not settled yet, wait (at most
        :data:`SETTLE_WAIT_SECONDS`) until it is; whether there was one to wait for.

        Only a wait: what a reader returns is right whether or not it ends in time (a
        transaction left open elsewhere in the cluster holds the horizon back; the reader
        then returns the settled part and the rest next time)."""
        curs.execute(self._newest_unsettled, prepare=True)
        row = curs.fetchone()
        if row is None:
            return False
        pending = row["tx"]
        deadline = time.monotonic() + SETTLE_WAIT_SECONDS
        pause = 0.0005
        while True:
            curs.execute(self._has_settled, (pending,), prepare=True)
            done = curs.fetchone()
            if done is not None and done["settled"]:
                return True
            if time.monotonic() >= deadline:
                return True
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def erase(
        self, conversation: UUID, reason: str, at: str, idle_since: int | None = None
    ) -> tuple[int, int]:
        """Delete every event and the head of ``conversation`` and leave its tombstone, in one
        transaction under the events table's lock; returns the tombstone's ``seq`` and how
        many events went. With ``idle_since``, refuse first (under the conversation's lock,
        which every append to it holds until it commits) if it had an event since. The rows
        are deleted; their bytes stay in dead tuples until the table is vacuumed."""
        with self.datastore.transaction(commit=True) as curs:
            # The conversation's lock first, as an append takes it: an append either
            # commits before the erasure counts, or waits and then finds the tombstone.
            curs.execute(self._lock_stream, (self._stream_key(conversation),), prepare=False)
            self._lock_table(curs)
            curs.execute(self._erased_among, ([conversation],), prepare=False)
            if curs.fetchone() is not None:
                msg = f"conversation {conversation} was erased"
                raise ConversationErased(msg)
            curs.execute(self._count_events, (conversation, conversation), prepare=False)
            row = curs.fetchone()
            assert row is not None
            if not row["n"]:
                msg = f"conversation {conversation} not found"
                raise ConversationNotFound(msg)
            last_active = row["last_active"]
            refuse_if_active(
                conversation, None if last_active is None else int(last_active), idle_since
            )
            curs.execute(self._delete_events, (conversation,), prepare=False)
            curs.execute(self._delete_head, (conversation,), prepare=False)
            curs.execute(self._delete_changes, (conversation,), prepare=False)
            forget_listing(
                lambda text, params: curs.execute(text.encode(), params, prepare=False),
                POSTGRES,
                conversation,
                self._prefix,
            )
            forget_retired(
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

    def select_log_tail(
        self, conversation_id: UUID, after: int = 0
    ) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The conversation's change count (see :data:`CHANGES_TABLE`) and what
        :meth:`select_topics_and_states` gives, in one statement (one snapshot, one round
        trip): the count on every row, and on one row of nulls when no event follows."""
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(self._select_log_tail, (conversation_id, conversation_id, after))
            found = curs.fetchall()
        changes = int(found[0]["changes"] or 0) if found else 0
        rows = [
            (row["topic"].encode(), bytes(row["state"]))
            for row in found
            if row["topic"] is not None
        ]
        return changes, rows

    def select_raw_records(self, after: int, limit: int) -> list[RawRecord]:
        """Up to ``limit`` settled rows after log position ``after`` (as
        :meth:`select_notifications`), the id and topic as UTF-8 bytes (the server's column
        types keep them readable; the state may still not decode)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._select_raw_records, (after, limit), prepare=False)
            found = curs.fetchall()
            if len(found) < limit and self._await_settled(curs):
                curs.execute(self._select_raw_records, (after, limit), prepare=False)
                found = curs.fetchall()
            return [
                (
                    row["notification_id"],
                    str(row["originator_id"]).encode(),
                    row["originator_version"],
                    row["topic"].encode(),
                    bytes(row["state"]),
                )
                for row in found
            ]

    def close_writer(self) -> None:
        """Nothing to close: every connection is the datastore's pool's."""

    def truncate_wal(self) -> bool:
        """Nothing to do on PostgreSQL (the server owns its write-ahead log)."""
        return True

    def vacuum(self, progress: Callable[[str], None]) -> bool:
        """``VACUUM (FULL, ANALYZE)`` each of convstore's tables in the store's schema, one
        at a time: each is rewritten into new files (its TOAST table and indexes too) and the
        old files are unlinked. Each takes the table's ACCESS EXCLUSIVE lock while it runs
        (no reads or writes of that table meanwhile), waiting for it at most the store's
        ``lock_timeout``. The old files are emptied as each rewrite commits (and unlinked at
        the server's next checkpoint).

        A rewrite keeps every row some open transaction may still see, so it first waits
        (as long as the lock timeout) for the transactions of this database that began before
        it to end; one that outlives that wait is named and nothing is rewritten."""
        schema = self.datastore.schema
        with self.datastore.get_connection() as conn:
            names = [
                str(row["relname"])
                for row in conn.execute(_STORE_TABLES, (schema, f"{TABLE_PREFIX}%")).fetchall()
            ]
            timeout = int(self.datastore.lock_timeout or 0)
            _await_older_snapshots(conn, timeout)
            conn.execute(SQL("SET lock_timeout = {}").format(Literal(f"{timeout}s")))
            try:
                for name in names:
                    progress(name)
                    try:
                        conn.execute(
                            SQL("VACUUM (FULL, ANALYZE) {}.{}").format(
                                Identifier(schema), Identifier(name)
                            )
                        )
                    except psycopg.errors.LockNotAvailable:
                        msg = (
                            f"vacuum: {name} stayed locked by another session past the lock "
                            f"timeout ({timeout} s); the tables before it were rewritten, run "
                            "vacuum again"
                        )
                        raise OperationalError(msg) from None
            finally:
                conn.execute("RESET lock_timeout")
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

    def rebuild_listing(self, decode: Callable[[bytes], Event], *, previews: bool = True) -> int:
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
                changes = listing_changes(
                    (decode(bytes(row["state"])) for row in rows), previews=previews
                )
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


TABLE_PREFIX = "convstore\\_"
"""How the names of the tables convstore makes in a schema start (a LIKE pattern)."""

_STORE_TABLES = (
    "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE %s ORDER BY c.relname"
)


def _call(
    function: str,
    *,
    columns: tuple[list[Any], list[int], list[str], list[bytes]],
    lock_key: int,
    stream_keys: list[int],
    order: list[UUID],
    new: list[Head],
    old: list[Head | None],
    grown: list[ListingChange],
) -> bytes:
    """The append function's call as SQL text, its arguments written as literals here.

    psycopg's client-side binding spent more than half an append's CPU quoting these arrays.
    Every value is a UUID, an int or bytes (written in hex, or NULL), all of which only ever
    yield hex digits, digits and ``-``; the one text array (topics) doubles its quotes, which
    is all a string needs with ``standard_conforming_strings`` on (checked by the caller)."""
    ids, versions, topics, states = columns
    pieces = [
        _uuids(UUID(str(i)) if not isinstance(i, UUID) else i for i in ids),
        _ints(versions),
        "ARRAY[" + ",".join(_text(t) for t in topics) + "]::text[]",
        _blobs(states),
        str(int(lock_key)),
        _ints(stream_keys),
        _uuids(order),
        _ints(h.version for h in new),
        _blobs(h.chain for h in new),
        _ints(h.chained_from for h in new),
        _ints(h.restarted_after for h in new),
        _ints(None if h is None else h.version for h in old),
        _blobs(None if h is None else h.chain for h in old),
        _uuids(c.conversation_id for c in grown),
        _ints(c.version for c in grown),
        _ints(c.last_active for c in grown),
    ]
    return f"{function}({', '.join(pieces)}) AS notification_id".encode()


def _bound(text: str, params: Sequence[Any]) -> bytes | None:
    """``text`` with its ``%s`` placeholders replaced by ``params`` written as literals, when
    every one is ``None``, a UUID, an int or a string (the listing's statements); else
    ``None`` (the caller then lets psycopg quote them). psycopg's ``mogrify`` costs several
    times this per statement; the caller checks ``standard_conforming_strings``."""
    pieces = text.split("%s")
    if len(pieces) != len(params) + 1 or "%" in text.replace("%s", ""):
        return None
    out = [pieces[0]]
    for value, piece in zip(params, pieces[1:], strict=True):
        if value is None:
            out.append("NULL")
        elif isinstance(value, UUID):
            out.append(f"'{value.hex}'::uuid")
        elif isinstance(value, str):
            if "\x00" in value:
                return None
            out.append("'" + value.replace("'", "''") + "'")
        elif type(value) is int:
            out.append(str(value) if value >= 0 else f"({value})")
        else:
            return None
        out.append(piece)
    return "".join(out).encode()


def _uuids(values: Iterable[UUID]) -> str:
    return "'{" + ",".join([v.hex for v in values]) + "}'::uuid[]"


def _ints(values: Iterable[int | None]) -> str:
    items = ["NULL" if v is None else str(int(v)) for v in values]
    return "'{" + ",".join(items) + "}'::bigint[]"


def _blobs(values: Iterable[bytes | None]) -> str:
    items = ["NULL" if v is None else "'\\x" + bytes(v).hex() + "'" for v in values]
    return "ARRAY[" + ",".join(items) + "]::bytea[]"


def _text(value: str) -> str:
    if "\x00" in value:
        msg = "a topic holds a NUL character"
        raise ValueError(msg)
    return "'" + value.replace("'", "''") + "'"


def _only_grown(change: ListingChange) -> bool:
    """Whether a change only moves a listed row's event count and last activity on (the
    append function applies those)."""
    return (
        change.started is None
        and not change.renamed
        and not change.set_labels
        and not change.removed_labels
        and change.first_user is None
        and not change.texts
    )


def _refuse_erased(row: DictRow | None) -> None:
    if row is not None:
        msg = f"conversation {row['originator_id']} was erased"
        raise ConversationErased(msg)


def _head(row: DictRow) -> Head:
    return Head(row["version"], bytes(row["chain"]), row["chained_from"], row["restarted_after"])


_OLDER_SNAPSHOTS = SQL(
    "SELECT pid, (clock_timestamp() - xact_start)::text AS open_for FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    " AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND xact_start < %s"
    " UNION ALL SELECT NULL, 'prepared ' || gid FROM pg_prepared_xacts"
    " WHERE database = current_database() AND prepared < %s"
)
"""Transactions of this database begun before a moment that may still see erased rows: the
sessions holding a snapshot or a transaction id, and prepared transactions."""


def _await_older_snapshots(conn: Connection[DictRow], timeout: int) -> None:
    """Wait up to ``timeout`` seconds for every transaction of the database that began before
    now to end, so a rewrite may drop the erased rows they could see; raise
    :class:`OperationalError` naming one that does not."""
    start = conn.execute("SELECT clock_timestamp() AS now").fetchone()
    assert start is not None
    deadline = time.monotonic() + timeout
    while True:
        older = conn.execute(_OLDER_SNAPSHOTS, (start["now"], start["now"])).fetchall()
        if not older:
            return
        if time.monotonic() >= deadline:
            named = [
                f"session {row['pid']} (open {row['open_for']})" if row["pid"] else row["open_for"]
                for row in older[:5]
            ]
            more = f" and {len(older) - 5} more" if len(older) > 5 else ""
            which = "a transaction" if len(older) == 1 else "transactions"
            msg = (
                f"vacuum: {which} begun before it, {', '.join(named)}{more}, can still see"
                f" erased rows and did not end within the lock timeout ({timeout} s); nothing"
                " was rewritten: end them and run vacuum again"
            )
            raise OperationalError(msg)
        time.sleep(0.05)
