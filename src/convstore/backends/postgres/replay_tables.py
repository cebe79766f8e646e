"""The replay read model in a PostgreSQL store's schema (see
:mod:`convstore.backends.common.replay_tables`), through the store's pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from convstore.backends.common.replay_tables import Execute
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.engine.state import ReplayState
from convstore.ports.erasure import ERASED_TABLE
from convstore.ports.replay import ReplayKeeper, Stored, rows_to_write, superseded

LOCK_CLASS = 0x72706C79
"""The first key of the advisory locks that order a model write against an erasure of the
same conversation (``pg_advisory_xact_lock(int, int)``: a key space of its own)."""


def _lock_key(conversation: UUID) -> int:
    return int.from_bytes(conversation.bytes[:4], "big", signed=True)


def postgres_create(prefix: str) -> list[str]:
    """The tables, in the store's schema (``prefix`` is the quoted schema and a dot)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {prefix}{HEADS} (originator_id uuid PRIMARY KEY, "
        "version bigint NOT NULL, head text NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {prefix}{MESSAGES} (originator_id uuid NOT NULL, "
        "position integer NOT NULL, message_id text NOT NULL, plan text NOT NULL, "
        "PRIMARY KEY (originator_id, position))",
    ]


def forget_postgres(execute: Execute, conversation: UUID, prefix: str) -> None:
    """Delete a conversation's replay model inside an erasure's transaction. Takes the
    conversation's advisory lock first, so a reader storing the model meanwhile either
    committed before (its rows are deleted here) or sees the tombstone after (and writes
    nothing)."""
    execute(
        "SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, _lock_key(conversation))
    ).fetchall()
    found = execute("SELECT to_regclass(%s) AS found", (prefix + MESSAGES,)).fetchone()
    if found is not None and _first(found) is not None:
        for table in (HEADS, MESSAGES):
            execute(f"DELETE FROM {prefix}{table} WHERE originator_id = %s", (conversation,))  # noqa: S608


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


class PostgresReplayTables:
    """The model in the store's PostgreSQL schema."""

    def __init__(self, datastore: Any, schema: str, key: bytes = b"") -> None:
        self.key = key
        """The chain key (``CONVSTORE_CHAIN_KEY``), which makes each head's digest a MAC."""
        self._datastore = datastore
        self._prefix = f'"{schema}".'
        self._exists = False
        self.keeper: ReplayKeeper | None = None
        """Readers keep the model here: an append is one round trip to a server function."""

    def _execute(self, curs: Any) -> Execute:
        def execute(text: str, params: Sequence[Any]) -> Any:
            return curs.execute(text.encode(), params, prepare=False)

        return execute

    def _check_exists(self, curs: Any) -> bool:
        if not self._exists:
            curs.execute(
                b"SELECT to_regclass(%s) AS found", (self._prefix + MESSAGES,), prepare=False
            )
            row = curs.fetchone()
            self._exists = row is not None and row["found"] is not None
        return self._exists

    def read(self, conversation: UUID) -> Stored | None:
        with self._datastore.transaction(commit=False) as curs:
            if not self._check_exists(curs):
                return None
            # One statement, so one snapshot: at READ COMMITTED each statement sees what was
            # committed when it began, so a head read apart from its rows could be older than
            # the rows a store commits in between, and the events after that head would then be
            # folded onto rows already holding them. The head comes first (position -1).
            curs.execute(
                f"SELECT -1 AS position, version, head AS a, NULL AS b FROM {self._prefix}{HEADS} "  # noqa: S608
                "WHERE originator_id = %s UNION ALL "
                f"SELECT position, NULL, message_id, plan FROM {self._prefix}{MESSAGES} "
                "WHERE originator_id = %s ORDER BY position".encode(),
                (conversation, conversation),
            )
            found = curs.fetchall()
            if not found or found[0]["position"] != -1:
                return None
            head = found[0]
            rows = [(row["a"], row["b"]) for row in found[1:]]
            return Stored(int(head["version"]), head["a"], rows)

    def write(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        prefix = self._prefix
        with self._datastore.transaction(commit=True) as curs:
            execute = self._execute(curs)
            if not self._check_exists(curs):
                # Made once per schema; the lock keeps two first writers from racing.
                execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, 0))
                for statement in postgres_create(prefix):
                    execute(statement, ())
                self._exists = True
            execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, _lock_key(conversation)))
            execute(
                f"SELECT 1 FROM {prefix}{ERASED_TABLE} WHERE originator_id = %s",  # noqa: S608
                (conversation,),
            )
            if curs.fetchone() is not None:
                return False
            execute(
                f"SELECT version FROM {prefix}{HEADS} WHERE originator_id = %s",  # noqa: S608
                (conversation,),
            )
            row = curs.fetchone()
            stored = 0 if row is None else int(row["version"])
            if superseded(state, stored, since):
                return True  # another reader stored it, or newer, already
            positions = rows_to_write(state, stored, since)
            if positions is None:
                execute(
                    f"DELETE FROM {prefix}{MESSAGES} WHERE originator_id = %s",  # noqa: S608
                    (conversation,),
                )
                positions = list(range(len(state.messages)))
            curs.executemany(
                f"INSERT INTO {prefix}{MESSAGES} VALUES (%s, %s, %s, %s) "  # noqa: S608
                "ON CONFLICT (originator_id, position) DO UPDATE SET "
                "message_id = excluded.message_id, plan = excluded.plan".encode(),
                [(conversation, *row) for row in state.rows(conversation.hex, self.key, positions)],
            )
            execute(
                f"INSERT INTO {prefix}{HEADS} VALUES (%s, %s, %s) "  # noqa: S608
                "ON CONFLICT (originator_id) DO UPDATE SET version = excluded.version, "
                "head = excluded.head",
                (conversation, state.version, state.encode_head(conversation.hex, self.key)),
            )
            return True

    def clear(self) -> None:
        with self._datastore.transaction(commit=True) as curs:
            execute = self._execute(curs)
            execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, 0))
            for table in (HEADS, MESSAGES):
                execute(f"DROP TABLE IF EXISTS {self._prefix}{table}", ())
        self._exists = False

    def forget_schema(self) -> None:
        self._exists = False

    def close(self) -> None:
        """Nothing of its own: it uses the store's pool."""
