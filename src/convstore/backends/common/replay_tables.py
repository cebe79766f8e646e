"""The replay read model's tables, and the reader that keeps it caught up on read.

Two tables beside the events (in the same SQLite file, or the same PostgreSQL schema, so every
host of a store shares them): ``convstore_replay_heads`` holds, per conversation, the version
the model has folded and its head (compactions, rewinds in force, the log's change count when
it was folded, and a digest binding all of it to every message row);
``convstore_replay_messages`` one row per stored message: its id and its plan's JSON text (see
:mod:`convstore.engine.model`). A stored model is used only when its digest holds
and its change count is the log's count now (``log_changes.CHANGES_TABLE``, read with the events in
one snapshot); otherwise the log is folded alone, as a replay without a model does, and the
model stored again. Nothing else writes them: readers do, after they
fold events the model had not seen, in one transaction that moves the head's version forward
only (a compare on the version stored), so each event is folded into the stored copy once. A
writer that finds the conversation erased writes nothing, and an erasure deletes the rows in
its own transaction (:func:`forget_sqlite`, :func:`forget_postgres`), so the model never
brings erased text back. The tables can be emptied at any time (:meth:`ReplayTables.clear`):
the next replays fold the log again and write the same text.

:class:`ReplayReader` answers a replay from the newest of: its in-process cache (a bounded
number of bytes), the stored model, or nothing; then it reads only the events after that
version from the log and folds them. The log is always read, so an append made by any process
on any host is in the next replay.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from convstore.backends.common.gc_pause import paused_gc
from convstore.backends.sqlite.transaction import delete_securely, immediate
from convstore.engine.render import render
from convstore.engine.state import ImageLoader, ReplayState
from convstore.ports.erasure import ERASED_TABLE

if TYPE_CHECKING:  # the command line's quick replay imports this module without the models
    from convstore.domain.events import Event
    from convstore.engine.plan import JSONDict, ReplayOptions, Shape

HEADS = "convstore_replay_heads"
MESSAGES = "convstore_replay_messages"

WRITE_LAG = 32
"""A reader stores what it folded once the stored model is this many events behind: a replay
after each append then writes one small transaction every few turns, and a new process never
folds more than this many events on top of the stored model."""

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
"""The in-process cache's default budget (``replay_cache_bytes``)."""

SQLITE_WRITE_TIMEOUT = 0.1
"""How long a reader waits for SQLite's write lock to store the model; past it, it skips the
write (the model is only behind, and the next reader catches it up)."""

Execute = Callable[[str, Sequence[Any]], Any]


@dataclass(frozen=True, slots=True)
class Stored:
    """A conversation's stored model, as read."""

    version: int
    head: str
    rows: list[tuple[str, str]]


class ReplayTables(Protocol):
    """Where the replay model is kept."""

    key: bytes
    """The chain key (``CONVSTORE_CHAIN_KEY``, or ``b""``): each stored head's digest is a MAC
    under it (see :func:`convstore.engine.state.model_digest`)."""

    def read(self, conversation: UUID) -> Stored | None:
        """The stored model of a conversation, or ``None`` when there is none."""

    def write(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        """Store ``state``, whose messages changed since version ``since`` are marked dirty
        (``None``: replace whatever is stored, which did not match the log); whether it was
        written (``False``: a newer one was there, the conversation was erased, or the store
        was busy)."""

    def clear(self) -> None:
        """Throw the whole model away."""

    def forget_schema(self) -> None:
        """Check again, next time, whether the tables exist (after a failure)."""

    def close(self) -> None:
        """Release connections."""


def _rows_to_write(state: ReplayState, stored: int, since: int | None) -> list[int] | None:
    """Which messages to write over a stored model at version ``stored``: the dirty ones when
    it is the version ``since`` they are dirty against (or newer, but not ours yet), all of
    them (``None``) when the stored one is older (it was cleared) or is to be replaced."""
    if since is not None and stored >= since:
        return sorted(state.dirty)
    return None


def _superseded(state: ReplayState, stored: int, since: int | None) -> bool:
    """Whether a stored model at version ``stored`` is to be left as it is: it is as new as
    ``state``, or newer (one that did not match the log is replaced at the same version)."""
    return stored > state.version or (since is not None and stored == state.version)


# -- SQLite ----------------------------------------------------------------------------------


SQLITE_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {HEADS} (originator_id TEXT PRIMARY KEY, "
    "version INTEGER NOT NULL, head TEXT NOT NULL) WITHOUT ROWID",
    f"CREATE TABLE IF NOT EXISTS {MESSAGES} (originator_id TEXT NOT NULL, "
    "position INTEGER NOT NULL, message_id TEXT NOT NULL, plan TEXT NOT NULL, "
    "PRIMARY KEY (originator_id, position)) WITHOUT ROWID",
)


def forget_sqlite(execute: Execute, conversation: UUID) -> None:
    """Delete a conversation's replay model (inside an erasure's transaction), if the store
    has the tables."""
    found = execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (HEADS,)
    ).fetchone()
    if found:
        for table in (HEADS, MESSAGES):
            execute(f"DELETE FROM {table} WHERE originator_id = ?", (conversation.hex,))  # noqa: S608


class SQLiteReplayTables:
    """The model in the store's SQLite file, written through a connection of its own."""

    def __init__(self, db_uri: str, read: Callable[[], Any], key: bytes = b"") -> None:
        self.key = key
        """The chain key (``CONVSTORE_CHAIN_KEY``), which makes each head's digest a MAC."""
        self._uri = db_uri
        self._read_transaction = read
        """A context manager giving a cursor inside a read transaction (the store's pool)."""
        self._writer: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._exists = False

    def read(self, conversation: UUID) -> Stored | None:
        with self._read_transaction() as cursor:
            if not self._exists:
                cursor.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MESSAGES,)
                )
                if cursor.fetchone() is None:
                    return None
                self._exists = True
            key = conversation.hex
            cursor.execute(f"SELECT version, head FROM {HEADS} WHERE originator_id = ?", (key,))  # noqa: S608
            head = cursor.fetchone()
            if head is None:
                return None
            cursor.execute(
                f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ? "  # noqa: S608
                "ORDER BY position",
                (key,),
            )
            return Stored(head[0], head[1], cursor.fetchall())

    def _connection(self) -> sqlite3.Connection:
        if self._writer is None:
            conn = delete_securely(
                sqlite3.connect(
                    self._uri,
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=SQLITE_WRITE_TIMEOUT,
                )
            )
            # Derived data: a commit need not wait for the disk. The write-ahead log keeps
            # commits in order, so a later event's fsync makes these durable too, and losing
            # one only leaves the model behind, which the next reader catches up.
            conn.execute("PRAGMA synchronous = NORMAL")
            self._writer = conn
        return self._writer

    def write(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        key = conversation.hex
        with self._lock:
            try:
                conn = self._connection()
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:  # busy: the model stays behind for now
                return False
            try:
                for statement in SQLITE_CREATE:
                    conn.execute(statement)
                erased = conn.execute(
                    f"SELECT 1 FROM {ERASED_TABLE} WHERE originator_id = ?",  # noqa: S608
                    (key,),
                ).fetchone()
                row = conn.execute(
                    f"SELECT version FROM {HEADS} WHERE originator_id = ?",  # noqa: S608
                    (key,),
                ).fetchone()
                stored = 0 if row is None else int(row[0])
                if erased or _superseded(state, stored, since):
                    conn.execute("ROLLBACK")
                    return False
                positions = _rows_to_write(state, stored, since)
                if positions is None:
                    conn.execute(f"DELETE FROM {MESSAGES} WHERE originator_id = ?", (key,))  # noqa: S608
                    positions = list(range(len(state.messages)))
                conn.executemany(
                    f"INSERT OR REPLACE INTO {MESSAGES} VALUES (?, ?, ?, ?)",  # noqa: S608
                    [
                        (key, p, state.messages[p].message_id, state.messages[p].encode())
                        for p in positions
                    ],
                )
                conn.execute(
                    f"INSERT OR REPLACE INTO {HEADS} VALUES (?, ?, ?)",  # noqa: S608
                    (key, state.version, state.encode_head(key, self.key)),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._exists = True
            return True

    def clear(self) -> None:
        with self._lock:
            conn = self._connection()
            with immediate(conn):
                for table in (HEADS, MESSAGES):
                    conn.execute(f"DROP TABLE IF EXISTS {table}")
            self._exists = False

    def forget_schema(self) -> None:
        self._exists = False

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


# -- PostgreSQL ------------------------------------------------------------------------------

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
            if _superseded(state, stored, since):
                return False
            positions = _rows_to_write(state, stored, since)
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
                [
                    (conversation, p, state.messages[p].message_id, state.messages[p].encode())
                    for p in positions
                ],
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


# -- the reader ------------------------------------------------------------------------------


EventsAfter = Callable[[UUID, int], "tuple[int, Iterator[Event]]"]
"""A conversation's change count (:data:`convstore.backends.common.log_changes.CHANGES_TABLE`) and
its events after a version, decoded as consumed, read as of one moment (the store's reader)."""


class _Entry:
    __slots__ = ("lock", "size", "state", "stored")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: ReplayState | None = None
        self.stored = 0
        """The version the stored model is known to hold."""
        self.size = 0


class ReplayReader:
    """Replays from the model: cached in process, stored beside the log, caught up on read."""

    def __init__(
        self,
        tables: ReplayTables | None,
        events_after: EventsAfter,
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        write_lag: int = WRITE_LAG,
    ) -> None:
        self.tables = tables
        self.key = b"" if tables is None else tables.key
        """The chain key the stored model's digests are made with."""
        self._events_after = events_after
        self.cache_bytes = cache_bytes
        self.write_lag = write_lag
        """Store the model once it is this many events behind what a reader folded."""
        self._entries: OrderedDict[UUID, _Entry] = OrderedDict()
        self._guard = threading.Lock()
        self._cached = 0

    def replay(
        self,
        conversation: UUID,
        options: ReplayOptions,
        shape: Shape,
        load: ImageLoader,
    ) -> JSONDict | None:
        """The replay, or ``None`` when the log holds no event of the conversation."""
        with self._guard:
            entry = self._entries.get(conversation)
            if entry is None:
                entry = self._entries[conversation] = _Entry()
            self._entries.move_to_end(conversation)
        with entry.lock, paused_gc():
            state = self._caught_up(conversation, entry)
            if state is None:
                self.forget(conversation)
                return None
            result = render(state, options, shape, load)
            self._account(conversation, entry, state)
            return result

    def _caught_up(self, conversation: UUID, entry: _Entry) -> ReplayState | None:
        state = entry.state
        mismatched = False  # the stored model did not match the log: replace it now
        if state is None:
            stored = self._read_stored(conversation)
            state, entry.stored = ReplayState(), 0
            if stored is not None:
                try:
                    state = ReplayState.decode(
                        conversation.hex, stored.version, stored.head, stored.rows, self.key
                    )
                    entry.stored = stored.version
                except (ValueError, KeyError, TypeError, IndexError):
                    mismatched = True  # damaged or edited: fold the log alone, store it again
        since = state.version
        changes, events = self._events_after(conversation, max(since - 1, 0))
        if since:
            # Read from the model's own version: if that event is gone, the conversation was
            # erased (or the log replaced) since; if a row was changed or deleted in place
            # since the model was folded, it is no longer the fold of this log. Either way,
            # start again from the log alone, exactly as a replay without a model does.
            first = next(events, None)
            if first is None or first.originator_version != since or changes != state.changes:
                mismatched = mismatched or entry.stored > 0
                entry.state, entry.stored = None, 0
                state, since = ReplayState(), 0
                changes, events = self._events_after(conversation, 0)
        state.changes = changes
        try:
            # The fold builds the domain's models; the quick path, which only reads stored
            # plans, imports this module without them.
            from convstore.engine.model import fold  # noqa: PLC0415

            fold(state, events)
        except BaseException:
            entry.state = None  # half folded: never reuse it
            raise
        if state.version == 0:
            return None
        entry.state = state
        lag = state.version - entry.stored
        due = self.tables is not None and (lag >= self.write_lag or mismatched)
        base = None if mismatched or not entry.stored else entry.stored
        if due and self._write_stored(conversation, state, base):
            state.clean()
            entry.stored = state.version
        return state

    def _read_stored(self, conversation: UUID) -> Stored | None:
        """The stored model, or ``None`` when there is none or it cannot be read: it is derived
        data, so a failure to read it (tables dropped meanwhile, a damaged row, a busy
        connection) only means folding the log, whose own failures still surface."""
        if self.tables is None:
            return None
        try:
            return self.tables.read(conversation)
        except Exception:  # noqa: BLE001 - see above
            self.tables.forget_schema()
            return None

    def _write_stored(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        """Store the model; whether it was written (a failure leaves it behind, no more)."""
        assert self.tables is not None
        try:
            return self.tables.write(conversation, state, since)
        except Exception:  # noqa: BLE001 - derived data: the next reader catches it up
            self.tables.forget_schema()
            return False

    def _account(self, conversation: UUID, entry: _Entry, state: ReplayState) -> None:
        """Keep the cache within its budget, dropping the least recently replayed first."""
        with self._guard:
            if self._entries.get(conversation) is not entry:  # evicted meanwhile
                entry.state = None
                return
            self._cached += state.size - entry.size
            entry.size = state.size
            while self._cached > self.cache_bytes and self._entries:
                oldest, dropped = next(iter(self._entries.items()))
                del self._entries[oldest]
                self._cached -= dropped.size
                dropped.state = None
                dropped.size = 0

    def forget(self, conversation: UUID) -> None:
        """Drop a conversation from the cache (it was erased)."""
        with self._guard:
            entry = self._entries.pop(conversation, None)
            if entry is not None:
                self._cached -= entry.size
                entry.state = None
                entry.size = 0

    def clear(self) -> None:
        """Throw the whole model away, stored and cached."""
        with self._guard:
            self._entries.clear()
            self._cached = 0
        if self.tables is not None:
            self.tables.clear()

    @property
    def cached_bytes(self) -> int:
        """About how many bytes the cache holds."""
        return self._cached

    def close(self) -> None:
        if self.tables is not None:
            self.tables.close()


def replay_tables_for(recorder: object, key: bytes = b"") -> ReplayTables | None:
    """The replay model's tables beside the events ``recorder`` keeps (``None`` for a
    recorder with nowhere to keep them, such as eventsourcing's in-memory one); ``key`` is the
    chain key (``CONVSTORE_CHAIN_KEY``) the stored heads' digests are made with."""
    from eventsourcing.sqlite import SQLiteApplicationRecorder  # noqa: PLC0415

    if isinstance(recorder, SQLiteApplicationRecorder):
        datastore = recorder.datastore
        return SQLiteReplayTables(
            datastore.pool.db_name, lambda: datastore.transaction(commit=False), key
        )
    if any(cls.__module__ == "eventsourcing.postgres" for cls in type(recorder).__mro__):
        datastore = getattr(recorder, "datastore")  # noqa: B009 - typed loosely on purpose
        return PostgresReplayTables(datastore, datastore.schema, key)
    return None
