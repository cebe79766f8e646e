"""The embedded default: eventsourcing's SQLite recorder on one file."""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteDatastore,
)

from convstore.domain.errors import ConversationErased, ConversationNotFound, InvalidInput
from convstore.domain.events import Event
from convstore.infrastructure.common.listing import (
    LISTING_TABLE,
    PARENT_INDEX,
    PREVIEW_COLUMNS,
    Dialect,
    add_preview_statements,
    apply_changes,
    clear_statements,
    count_label,
    create_statements,
    driving_label,
    listed_row,
    parent_index_statement,
    refuse_if_active,
    select_labels,
    select_page,
)
from convstore.infrastructure.common.listing import (
    forget as forget_listing,
)
from convstore.infrastructure.common.locations import data_directory
from convstore.infrastructure.common.log_changes import (
    CHANGE_TRIGGERS,
    CHANGES_TABLE,
    SELECT_CHANGE_COUNT,
)
from convstore.infrastructure.common.retired_replay import forget_sqlite as forget_retired
from convstore.infrastructure.sqlite.transaction import POLL_SECONDS, delete_securely, immediate
from convstore.ports.chain import (
    HEADS_TABLE,
    START_MARKER_ID,
    Head,
    advance,
    chain_key,
)
from convstore.ports.erasure import (
    ERASED_TABLE,
    SQLITE_ERASED_TABLE,
    Erasure,
)
from convstore.ports.recorder import Decision, RawRecord, StoreRecorder
from convstore.projections.listing import ListedRow, ListingChange, ListingQuery, listing_changes

SQLITE = Dialect("?", "TEXT", "LIKE", lambda u: u.hex)
"""How SQLite spells the listing index's statements: ``?``, ids as hex text."""

DEFAULT_LOCK_TIMEOUT_SECONDS = 10
"""How long a writer waits for another process's write lock before failing, unless
``CONVSTORE_LOCK_TIMEOUT`` (whole seconds) says otherwise."""

LOCK_TIMEOUT_ENV_VAR = "CONVSTORE_LOCK_TIMEOUT"

CHECKPOINT_TRY_MS = 50
"""How long one try at emptying the write-ahead log (after an erasure) waits for readers and
writers; other writers wait for it at most that long."""

MAX_LOCK_TIMEOUT_SECONDS = 24 * 60 * 60
"""The longest lock wait accepted (a day). SQLite takes the wait in milliseconds as a C int, so
from 2,147,484 s on it would silently become no wait at all."""


def default_path() -> Path:
    """Where the store lives when neither ``--db`` nor ``CONVSTORE_DB`` says.

    ``$XDG_DATA_HOME/convstore/convstore.db``, which is ``~/.local/share/convstore/convstore.db``
    when ``XDG_DATA_HOME`` is unset.
    """
    return data_directory() / "convstore.db"


def create_private_file(path: Path) -> None:
    """Create an empty database file readable and writable by its owner only.

    A symbolic link is followed to the file it names, even when that file does not exist yet
    (a dangling link): the file is created there, owner-only, as SQLite would open it. SQLite
    gives its ``-wal`` and ``-shm`` files the same permissions as the database. An existing
    file is left as it is. Raises ``OSError`` when the file cannot be made (its directory is
    missing, say).
    """
    target = os.path.realpath(path)
    try:
        # O_EXCL never follows a link: if one appears at ``target`` meanwhile, this fails
        # rather than creating a file wherever it points.
        fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def lock_timeout_seconds() -> int:
    """The write-lock wait: ``$CONVSTORE_LOCK_TIMEOUT`` or the default, read at each open."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT_SECONDS
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= MAX_LOCK_TIMEOUT_SECONDS:
        msg = (
            f"{LOCK_TIMEOUT_ENV_VAR} must be a whole number of seconds from 1 to "
            f"{MAX_LOCK_TIMEOUT_SECONDS}, not {raw[:40]!r}"
        )
        raise InvalidInput(msg)
    return int(raw)


def refuse_sqlite_uri(location: str) -> None:
    """Refuse a location SQLite would read as a URI or an in-memory database.

    A store is one file named by its path: ``file:x.db?mode=memory`` would otherwise be saved
    nowhere, and ``file:x.db`` written to ``x.db``.
    """
    if location[:5].lower() == "file:" or location == ":memory:":
        msg = (
            f"{location[:80]!r} is a SQLite URI or in-memory name; convstore stores are files:"
            " give the file's path (e.g. ./store.db)"
        )
        raise InvalidInput(msg)
    if "\x00" in location:
        msg = "a store path cannot hold a NUL character"
        raise InvalidInput(msg)
    try:
        os.fsencode(location)
    except UnicodeEncodeError:
        msg = f"the store path {location[:80]!r} is not valid Unicode (a lone surrogate)"
        raise InvalidInput(msg) from None


def file_uri(path: Path) -> str:
    """The URI SQLite is given for the file at ``path``: its resolved absolute path with every
    reserved character percent-encoded, so nothing in the name (``?``, ``#``, ``mode=memory``)
    is read as a URI parameter, and ``mode=rw``, so SQLite never creates a file of its own."""
    return f"{Path(os.path.realpath(path)).as_uri()}?mode=rw"


def sqlite_env(path: Path, lock_timeout: int | None = None) -> dict[str, str]:
    """The eventsourcing settings for a SQLite file, named by the URI of :func:`file_uri`."""
    if lock_timeout is None:
        lock_timeout = lock_timeout_seconds()
    return {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": file_uri(path),
        "SQLITE_LOCK_TIMEOUT": str(lock_timeout),
        "APPLICATION_RECORDER_TOPIC": f"{__name__}:SQLiteWriterRecorder",
    }


class SQLiteWriterRecorder(SQLiteApplicationRecorder, StoreRecorder):
    """eventsourcing's SQLite recorder with one dedicated writer connection.

    The stock recorder takes a pooled connection and enters three nested context managers for
    every insert: about a fifth of a streamed append's CPU. Writes here reuse one connection
    under a lock (SQLite admits one writer at a time anyway); reads still use the pool. Each
    insert is still its own ``BEGIN … COMMIT``, so durability is unchanged.
    """

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "stored_events"):
        _close_only_when_returned(datastore)
        super().__init__(datastore, events_table_name)
        self._writer: sqlite3.Connection | None = None
        self._writer_lock = threading.Lock()
        self._chain_key = chain_key()
        self._heads: dict[UUID, Head] = {}
        """The heads this writer last wrote: the next insert updates the row only if it still
        holds exactly that (one statement instead of a read and a write)."""
        self.listing_missing = False
        """Whether opening found no listing index (a store made before it): rebuild it."""

    def create_table(self) -> None:
        """eventsourcing's table, then the heads table and start marker if either is missing.

        Checked first, by reading, because the marker is an ``INSERT``: run on every open it
        would take the write lock each time, and fail against a busy writer in WAL mode.
        """
        super().create_table()
        self._create_listing()
        with self._writer_lock, self._waiting() as conn:
            marker = (START_MARKER_ID.hex,)
            try:
                found = conn.execute(_MARKER_EXISTS, marker).fetchone()
            except sqlite3.OperationalError:  # no such table: an older store, or a new one
                found = None
            erased = conn.execute(_TABLE_EXISTS, (ERASED_TABLE,)).fetchone()
            counted = _counts_changes(conn)
            if found and erased and counted:
                return
            with self._polled(conn):
                if not found:
                    for statement in heads_table_statements(self.events_table_name):
                        conn.execute(statement)
                conn.execute(SQLITE_ERASED_TABLE)
                for statement in change_count_statements(self.events_table_name):
                    conn.execute(statement)

    def _create_listing(self) -> None:
        """The listing index's tables, if missing (then :attr:`listing_missing` is set)."""
        with self._writer_lock, self._waiting() as conn:
            if (
                conn.execute(_TABLE_EXISTS, (LISTING_TABLE,)).fetchone()
                and _has_preview(conn)
                and conn.execute(_INDEX_EXISTS, (PARENT_INDEX,)).fetchone()
            ):
                return
            with self._polled(conn):
                if not conn.execute(_TABLE_EXISTS, (LISTING_TABLE,)).fetchone():
                    for statement in create_statements(SQLITE):
                        conn.execute(statement)
                    self.listing_missing = True
                elif not _has_preview(conn):  # made before the previews: add, then refill
                    for statement in add_preview_statements(SQLITE):
                        conn.execute(statement)
                    self.listing_missing = True
                conn.execute(parent_index_statement())  # made before it: an index, no refill

    def select_listing(
        self, query: ListingQuery
    ) -> tuple[list[ListedRow], dict[UUID, dict[str, str]]]:
        """One page of the listing index, and the labels of its conversations."""
        with self.datastore.transaction(commit=False) as cursor:
            drive = None
            if query.labels:
                # SQLite keeps no statistics here: count each label's matches (its index) and
                # let driving_label choose between walking the index and reading the rarest.
                counts = []
                counting = count_label(SQLITE)
                for label in query.labels:
                    cursor.execute(counting, label)
                    counts.append((int(cursor.fetchone()[0]), label))
                # The rowid's high mark: the index's size, or a little over after erasures.
                cursor.execute(f"SELECT max(rowid) FROM {LISTING_TABLE}")  # noqa: S608
                drive = driving_label(counts, int(cursor.fetchone()[0] or 0), query.limit)
            text, params = select_page(SQLITE, query, drive=drive)
            cursor.execute(text, params)
            rows = [listed_row(row) for row in cursor.fetchall()]
            labels: dict[UUID, dict[str, str]] = {row.id: {} for row in rows}
            ids = [row.id.hex for row in rows]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                cursor.execute(select_labels(SQLITE, len(chunk)), chunk)
                for raw_id, key, value in cursor.fetchall():
                    labels[UUID(raw_id)][key] = value
        return rows, labels

    def rebuild_listing(self, decode: Callable[[bytes], Event], *, previews: bool = True) -> int:
        """Refill the listing index from every event, in one write transaction (writers wait);
        returns how many conversations it lists."""
        with self._writer_lock, self._waiting() as conn:
            with self._polled(conn):
                for statement in clear_statements():
                    conn.execute(statement)
                for changes in _changes_in_batches(
                    conn, self.events_table_name, decode, previews=previews
                ):
                    apply_changes(conn.execute, SQLITE, changes)
                (count,) = conn.execute(f"SELECT count(*) FROM {LISTING_TABLE}").fetchone()  # noqa: S608
            self.listing_missing = False
            return int(count)

    def _connection(self) -> sqlite3.Connection:
        """The writer connection. Its busy timeout rests at 0: appends poll for the write lock
        (see :func:`immediate`) and, once they hold it, no statement of theirs can be busy
        in WAL mode, so they never switch SQLite's busy handler off and on again (three
        statements an append); what must wait in that handler takes :meth:`_waiting`.
        Its setup (:meth:`_set_up_writer`) waits too: a pragma that reads the schema is
        busy while another process still makes the file's tables or switches it to WAL."""
        if self._writer is None:
            pool = self.datastore.pool
            conn = sqlite3.connect(
                pool.db_name,
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=self._lock_wait,
            )
            try:
                self._set_up_writer(conn)
                conn.execute("PRAGMA busy_timeout = 0")
            except BaseException:
                conn.close()
                raise
            self._writer = conn
        return self._writer

    def _set_up_writer(self, conn: sqlite3.Connection) -> None:
        """What the writer connection is given once, before its first statement."""
        delete_securely(conn)

    @contextmanager
    def _waiting(self) -> Iterator[sqlite3.Connection]:
        """The writer connection with SQLite's busy handler waiting up to the lock timeout,
        for the rare writes that take the lock without polling (opening's checks, an
        erasure, a rebuild, ``VACUUM``); back to 0 after."""
        conn = self._connection()
        conn.execute(f"PRAGMA busy_timeout = {self._lock_timeout_ms}")
        try:
            yield conn
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    def _polled(self, conn: sqlite3.Connection) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction on ``conn`` (inside :meth:`_waiting`) whose lock is asked for
        every millisecond, as appends ask for it, for up to the lock timeout: SQLite's busy
        handler asks ever more rarely (up to every 100 ms), and against appending processes
        that take the lock back within a millisecond it can wait out the whole timeout (an
        erasure racing three appending processes did, on a clean CI run)."""
        return immediate(conn, self._lock_wait, busy_ms=self._lock_timeout_ms)

    @property
    def _lock_wait(self) -> float:
        """How long a write waits for another's write lock (seconds)."""
        return float(self.datastore.pool.lock_timeout or DEFAULT_LOCK_TIMEOUT_SECONDS)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        listing: list[ListingChange] | None = kwargs.get("listing")
        with self._writer_lock, _translated():
            conn = self._connection()
            with immediate(conn, self._lock_wait, busy_ms=0):
                return self._insert(conn, stored_events, listing)

    def insert_decided(
        self,
        conversation_id: UUID,
        after: int,
        decide: Decision,
        *,
        contended: bool,
    ) -> None:
        """Take SQLite's write lock, then decide and insert in one transaction.

        A writer that was not ``contended`` and wrote this conversation's head itself, at
        ``after``, reads nothing (the happy path: one writer per conversation): ``decide`` is
        given ``None``, and if another process wrote since, the insert's first version is
        taken (the events' key refuses it: an ``IntegrityError``, after which the caller
        retries ``contended``). Otherwise it reads the rows after ``after`` under the lock
        and decides against the newest state, so a writer waiting for the lock never loses
        the version race once it has the lock.

        SQLite's lock has no queue: waiters poll for it (see :func:`immediate`). So a writer
        that finds others wrote since its last write (they are waiting their turn) pauses a
        poll's length after it commits, leaving the lock to one of them."""
        rows: list[tuple[bytes, bytes]] = []
        with self._writer_lock, _translated():
            conn = self._connection()
            head = self._heads.get(conversation_id)
            read = contended or head is None or head.version != after
            with immediate(conn, self._lock_wait, busy_ms=0):
                if read:
                    found = conn.execute(self._select_missed, (conversation_id.hex, after))
                    rows = [(bytes(row[0] or b""), row[1]) for row in found.fetchall()]
                stored, listing = decide(rows if read else None)
                if stored:
                    self._insert(conn, stored, listing)
        if rows:
            time.sleep(random.uniform(POLL_SECONDS, 2 * POLL_SECONDS))  # noqa: S311 - jitter

    def _insert(
        self,
        conn: sqlite3.Connection,
        stored_events: Sequence[StoredEvent],
        listing: list[ListingChange] | None,
    ) -> list[int]:
        """Insert events, advance their heads and apply the listing changes, inside the
        caller's write transaction; returns their log positions."""
        first = self._next_position(conn, stored_events)
        rows: list[object] = []
        for position, s in enumerate(stored_events, start=first):
            originator = s.originator_id
            key = originator.hex if isinstance(originator, UUID) else originator
            rows += (position, key, s.originator_version, s.topic, s.state)
        # One statement for up to _ROWS_PER_INSERT events (a message's are a few): each
        # statement costs more than the rows it inserts.
        width = _ROWS_PER_INSERT * 5
        for start in range(0, len(rows), width):
            chunk = rows[start : start + width]
            conn.execute(self._insert_rows(len(chunk) // 5), chunk)
        _advance_heads(conn, stored_events, self._heads, self._chain_key)
        if listing:
            apply_changes(conn.execute, SQLITE, listing)
        return list(range(first, first + len(stored_events)))

    @property
    def _select_missed(self) -> str:
        return (
            f"SELECT CAST(topic AS BLOB), state FROM {self.events_table_name} "  # noqa: S608
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
        )

    def _insert_rows(self, count: int) -> str:
        """The ``INSERT`` of ``count`` events at given log positions."""
        return (
            f"INSERT INTO {self.events_table_name} "  # noqa: S608 - fixed name
            "(rowid, originator_id, originator_version, topic, state) VALUES "
            + ", ".join(("(?, ?, ?, ?, ?)",) * count)
        )

    def _next_position(self, conn: sqlite3.Connection, stored: Sequence[StoredEvent]) -> int:
        """The log position of the first event of an insert, refusing an erased conversation.

        SQLite would number a row one past the largest rowid left in the table; after an
        erasure of the newest events that would hand out positions a projection has already
        passed. So the next position is also past the newest erasure's ``high`` mark.
        """
        ids = sorted({_hex(s.originator_id) for s in stored})
        marks = ", ".join("?" * len(ids))
        row = conn.execute(
            f"SELECT (SELECT max(rowid) FROM {self.events_table_name}), "  # noqa: S608
            f"(SELECT high FROM {ERASED_TABLE} ORDER BY seq DESC LIMIT 1), "
            f"(SELECT originator_id FROM {ERASED_TABLE} WHERE originator_id IN ({marks}) "
            "LIMIT 1)",
            ids,
        ).fetchone()
        if row[2] is not None:
            msg = f"conversation {UUID(row[2])} was erased"
            raise ConversationErased(msg)
        return max(row[0] or 0, row[1] or 0) + 1

    def erase(
        self, conversation: UUID, reason: str, at: str, idle_since: int | None = None
    ) -> tuple[int, int]:
        """Delete every event and the head of ``conversation`` and leave its tombstone, in one
        transaction, with the deleted bytes overwritten (``secure_delete``); returns the
        tombstone's ``seq`` and how many events went. With ``idle_since``, refuse first (in
        that transaction, under the write lock) if it had an event since. Call
        :meth:`truncate_wal` after."""
        key = conversation.hex
        with self._writer_lock:
            try:
                with self._waiting() as conn, self._polled(conn):
                    seq, count = _erase_rows(
                        conn, self.events_table_name, key, (reason, at), idle_since
                    )
            except sqlite3.OperationalError as exc:
                raise OperationalError(exc) from exc
            except sqlite3.Error as exc:
                raise PersistenceError(exc) from exc
            self._heads.pop(conversation, None)
            return seq, count

    def truncate_wal(self) -> bool:
        """Copy the write-ahead log into the database and empty it; ``False`` when a reader
        kept part of it in use, or another writer held the lock (try again later).

        One try waits at most :data:`CHECKPOINT_TRY_MS` for them, not the lock timeout: while
        a checkpoint of this kind waits, no other writer may start."""
        with self._writer_lock:
            conn = self._connection()
            try:
                conn.execute(f"PRAGMA busy_timeout = {CHECKPOINT_TRY_MS}")
                try:
                    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                finally:
                    conn.execute("PRAGMA busy_timeout = 0")
            except sqlite3.Error as exc:
                raise PersistenceError(exc) from exc
        return not busy

    @property
    def _lock_timeout_ms(self) -> int:
        return int((self.datastore.pool.lock_timeout or DEFAULT_LOCK_TIMEOUT_SECONDS) * 1000)

    def vacuum(self, progress: Callable[[str], None]) -> bool:
        """``VACUUM`` the file (rebuilt without free pages, in one write transaction: writers
        wait, readers carry on), then copy the write-ahead log in and empty it."""
        with self._writer_lock:
            try:
                with self._waiting() as conn:
                    progress(Path(self.datastore.pool.db_name.split("?", 1)[0]).name)
                    conn.execute("VACUUM")
            except sqlite3.OperationalError as exc:
                raise OperationalError(exc) from exc
            except sqlite3.Error as exc:
                raise PersistenceError(exc) from exc
        return self.truncate_wal()

    def select_erasures(self, after: int) -> list[Erasure]:
        """The tombstones after ``seq`` ``after``, in order (none in a store never erased)."""
        try:
            with self.datastore.transaction(commit=False) as cursor:
                cursor.execute(
                    "SELECT seq, originator_id, erased_at, reason, events, high "  # noqa: S608
                    f"FROM {ERASED_TABLE} WHERE seq > ? ORDER BY seq",
                    (after,),
                )
                rows = cursor.fetchall()
        except PersistenceError as exc:
            if "no such table" in str(exc):
                return []
            raise
        return [
            Erasure(row[0], UUID(row[1]), datetime.fromisoformat(row[2]), row[3], row[4], row[5])
            for row in rows
        ]

    def close_writer(self) -> None:
        """Close the writer connection (the pool's are closed by the datastore)."""
        with self._writer_lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    def select_heads(self) -> dict[UUID, Head]:
        """Every conversation's head, and the start marker under its nil id."""
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(_SELECT_HEADS)
            return {UUID(row[0]): Head(*row[1:]) for row in cursor.fetchall()}

    def select_states(self, conversation_id: UUID, after: int = 0) -> list[bytes]:
        """The ``state`` column of a conversation's events after version ``after``, in order
        (eventsourcing's ``select_events`` would build a ``StoredEvent`` per row, and parse
        the id back into a ``UUID``, which replay does not need)."""
        statement = (
            f"SELECT state FROM {self.events_table_name} "  # noqa: S608 - fixed name
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
        )
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, (conversation_id.hex, after))
            return [row[0] for row in cursor.fetchall()]

    def select_topics_and_states(
        self, conversation_id: UUID, after: int = 0
    ) -> list[tuple[bytes, bytes]]:
        """Each event's topic beside its state. SQLite hands the topic over as the bytes
        stored, so a topic that is not UTF-8 is a mismatch rather than a driver error."""
        statement = (
            f"SELECT CAST(topic AS BLOB), state FROM {self.events_table_name} "  # noqa: S608
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
        )
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(statement, (conversation_id.hex, after))
            return [(bytes(row[0] or b""), row[1]) for row in cursor.fetchall()]

    def select_log_tail(
        self, conversation_id: UUID, after: int = 0
    ) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The conversation's change count (see :data:`CHANGES_TABLE`) and what
        :meth:`select_topics_and_states` gives, read in one transaction."""
        statement = (
            f"SELECT CAST(topic AS BLOB), state FROM {self.events_table_name} "  # noqa: S608 - fixed name
            "WHERE originator_id = ? AND originator_version > ? ORDER BY originator_version"
        )
        key = conversation_id.hex
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(SELECT_CHANGE_COUNT, (key,))
            counted = cursor.fetchone()
            cursor.execute(statement, (key, after))
            rows = [(bytes(row[0] or b""), row[1]) for row in cursor.fetchall()]
        return (int(counted[0]) if counted else 0), rows

    def select_raw_records(self, after: int, limit: int) -> list[RawRecord]:
        """Up to ``limit`` stored rows after log position ``after``: (position, id, version,
        topic, state), with TEXT columns as the bytes stored, so a row that is not valid UTF-8
        can be reported rather than stop the read."""
        pool = self.datastore.pool
        try:
            with closing(sqlite3.connect(pool.db_name, uri=True)) as conn:
                conn.text_factory = bytes
                return conn.execute(
                    "SELECT rowid, originator_id, originator_version, topic, state "  # noqa: S608
                    f"FROM {self.events_table_name} WHERE rowid > ? ORDER BY rowid LIMIT ?",
                    (after, limit),
                ).fetchall()
        except sqlite3.Error as exc:
            raise PersistenceError(exc) from exc


class _ReturnedThenClosedPool(SQLiteConnectionPool):
    """eventsourcing's pool, except that closing it never closes a connection in use.

    eventsourcing's ``close()`` closes every connection, those other threads are using too. A
    thread inside a statement (CPython's sqlite3 releases the GIL around ``sqlite3_step``) then
    runs on a freed connection: a segfault, seen when a reader thread outlived its store. Here
    ``close()`` closes the idle connections and refuses new requests; each connection in use is
    closed by its own thread when it gives it back.
    """

    def _create_connection(self) -> SQLiteConnection:
        """eventsourcing's connection, deleting securely (see :func:`delete_securely`)."""
        conn = super()._create_connection()
        delete_securely(conn._sqlite_conn)  # the wrapper exposes it no other way
        return conn

    def close(self) -> None:
        with self._put_condition:
            if self._closed:
                return
            self._closed = True
            while self._pool:
                self._pool.popleft().close()

    def put_connection(self, conn: SQLiteConnection) -> None:
        with self._put_condition:  # reentrant: the base method takes it again
            if not self._closed:
                super().put_connection(conn)
                return
            is_writer, conn.is_writer = conn.is_writer, None
            self._in_use.pop(id(conn), None)
            conn.close()
            conn.in_use.release()
            if is_writer is True:
                self._num_writers -= 1
                self._writer_lock.release()
            elif is_writer is False:
                with self._no_readers:
                    self._num_readers -= 1
                    if self._num_readers == 0:
                        self._no_readers.notify()
            self._put_condition.notify()


@contextmanager
def _translated() -> Iterator[None]:
    """sqlite3's errors as eventsourcing's (a taken version is its ``IntegrityError``)."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise IntegrityError(exc) from exc
    except sqlite3.OperationalError as exc:
        raise OperationalError(exc) from exc
    except sqlite3.Error as exc:
        raise PersistenceError(exc) from exc


def _close_only_when_returned(datastore: SQLiteDatastore) -> None:
    """Give ``datastore`` a pool whose ``close()`` leaves connections in use to their
    threads (see :class:`_ReturnedThenClosedPool`), with the same settings."""
    old = datastore.pool
    if isinstance(old, _ReturnedThenClosedPool):
        return
    pool = _ReturnedThenClosedPool(
        db_name=old.db_name,
        lock_timeout=old.lock_timeout,
        pool_size=old.pool_size,
        max_overflow=old.max_overflow,
        pool_timeout=old.pool_timeout,
        max_age=old.max_age,
        pre_ping=old.pre_ping,
    )
    old.close()
    datastore.pool = pool


_TABLE_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
_INDEX_EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"


def _has_preview(conn: sqlite3.Connection) -> bool:
    """Whether the listing table has its preview columns (added in 0.3.0)."""
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({LISTING_TABLE})")}
    return set(PREVIEW_COLUMNS) <= columns


def _changes_in_batches(
    conn: sqlite3.Connection, table: str, decode: Callable[[bytes], Event], *, previews: bool
) -> Iterator[list[ListingChange]]:
    """The listing changes of every stored event, a few thousand events at a time."""
    after = 0
    while True:
        rows = conn.execute(
            f"SELECT rowid, state FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT 5000",  # noqa: S608
            (after,),
        ).fetchall()
        if not rows:
            return
        yield listing_changes((decode(state) for _, state in rows), previews=previews)
        after = rows[-1][0]


_MARKER_EXISTS = f"SELECT 1 FROM {HEADS_TABLE} WHERE originator_id = ?"  # noqa: S608


def change_count_statements(events_table: str) -> list[str]:
    """The change-count table and the triggers that keep it (see :data:`CHANGES_TABLE`). A
    row-level trigger counts each row changed, under its old id and, if that was changed
    too, its new one; the rows an erasure deletes (its tombstone is written first) are not
    counted."""
    count = (
        f"INSERT INTO {CHANGES_TABLE} VALUES ({{}}, 1) "  # noqa: S608 - fixed names
        "ON CONFLICT (originator_id) DO UPDATE SET changes = changes + 1;"
    )
    updated, deleted = CHANGE_TRIGGERS
    return [
        f"CREATE TABLE IF NOT EXISTS {CHANGES_TABLE} (originator_id TEXT PRIMARY KEY, "
        "changes INTEGER NOT NULL) WITHOUT ROWID",
        f"CREATE TRIGGER IF NOT EXISTS {updated} AFTER UPDATE ON {events_table} BEGIN "
        f"{count.format('OLD.originator_id')} {count.format('NEW.originator_id')} END",
        f"CREATE TRIGGER IF NOT EXISTS {deleted} AFTER DELETE ON {events_table} "  # noqa: S608 - fixed names
        f"WHEN NOT EXISTS (SELECT 1 FROM {ERASED_TABLE} WHERE originator_id = OLD.originator_id) "
        f"BEGIN {count.format('OLD.originator_id')} END",
    ]


def _counts_changes(conn: sqlite3.Connection) -> bool:
    """Whether the file has the change-count table and both its triggers."""
    names = (CHANGES_TABLE, *CHANGE_TRIGGERS)
    found = conn.execute(
        "SELECT count(*) FROM sqlite_master WHERE name IN (?, ?, ?)", names
    ).fetchone()
    return bool(found and found[0] == len(names))


_SELECT_HEADS = (
    f"SELECT originator_id, version, chain, chained_from, restarted_after FROM {HEADS_TABLE}"  # noqa: S608
)


def heads_table_statements(events_table: str) -> list[str]:
    """The heads table, and its start marker: the log position when the table was made (0 for
    a new store; the newest event of an older store being upgraded)."""
    return [
        f"CREATE TABLE IF NOT EXISTS {HEADS_TABLE} ("
        "originator_id TEXT PRIMARY KEY, version INTEGER NOT NULL, chain BLOB NOT NULL, "
        "chained_from INTEGER NOT NULL, restarted_after INTEGER) WITHOUT ROWID",
        f"INSERT OR IGNORE INTO {HEADS_TABLE} "  # noqa: S608 - fixed names
        f"SELECT '{START_MARKER_ID.hex}', coalesce(max(rowid), 0), x'', 0, NULL "
        f"FROM {events_table}",
    ]


def _advance_heads(
    conn: sqlite3.Connection,
    stored_events: Sequence[StoredEvent],
    known: dict[UUID, Head],
    key: bytes,
) -> None:
    """Move each written conversation's head on past its new events (inside the insert's
    transaction). ``known`` holds the heads this writer wrote last; a head found changed since
    (another process wrote) is read afresh."""
    grouped: dict[UUID, list[tuple[int, str, bytes]]] = {}
    for s in stored_events:
        originator = s.originator_id
        conversation = originator if isinstance(originator, UUID) else UUID(str(originator))
        grouped.setdefault(conversation, []).append((s.originator_version, s.topic, s.state))
    if len(known) > _KNOWN_HEADS:
        known.clear()
    for originator, events in grouped.items():
        cached = known.get(originator)
        if cached is not None and cached.version == events[0][0] - 1:
            head = advance(originator, cached, events, key)
            updated = conn.execute(
                _UPDATE_HEAD_IF_UNCHANGED,
                (head.version, head.chain, originator.hex, cached.version, cached.chain),
            )
            if updated.rowcount == 1:
                known[originator] = head
                continue
        row = conn.execute(_SELECT_HEAD, (originator.hex,)).fetchone()
        head = advance(originator, Head(*row) if row else None, events, key)
        conn.execute(
            _UPSERT_HEAD,
            (originator.hex, head.version, head.chain, head.chained_from, head.restarted_after),
        )
        known[originator] = head


def _erase_rows(
    conn: sqlite3.Connection,
    events_table: str,
    key: str,
    tombstone: tuple[str, str],
    idle_since: int | None,
) -> tuple[int, int]:
    """Inside an erasure's transaction: check the conversation may go, delete the rows, leave
    the tombstone (``reason``, ``at``)."""
    conversation = UUID(key)
    erased = conn.execute(
        f"SELECT 1 FROM {ERASED_TABLE} WHERE originator_id = ?",  # noqa: S608
        (key,),
    ).fetchone()
    if erased:
        msg = f"conversation {conversation} was erased"
        raise ConversationErased(msg)
    count, high, last_active = conn.execute(
        f"SELECT (SELECT count(*) FROM {events_table} WHERE originator_id = ?), "  # noqa: S608
        f"max(coalesce((SELECT max(rowid) FROM {events_table}), 0), "
        f"coalesce((SELECT high FROM {ERASED_TABLE} ORDER BY seq DESC LIMIT 1), 0)), "
        f"(SELECT last_active FROM {LISTING_TABLE} WHERE id = ?)",
        (key, key),
    ).fetchone()
    if not count:
        msg = f"conversation {conversation} not found"
        raise ConversationNotFound(msg)
    refuse_if_active(conversation, last_active, idle_since)
    reason, at = tombstone
    # The tombstone first: the change-count trigger skips the rows of an erased
    # conversation, so the deletes below cost it one lookup a row.
    cursor = conn.execute(
        f"INSERT INTO {ERASED_TABLE} (originator_id, erased_at, reason, events, high) "  # noqa: S608
        "VALUES (?, ?, ?, ?, ?)",
        (key, at, reason, count, high),
    )
    conn.execute(f"DELETE FROM {events_table} WHERE originator_id = ?", (key,))  # noqa: S608
    conn.execute(f"DELETE FROM {HEADS_TABLE} WHERE originator_id = ?", (key,))  # noqa: S608
    conn.execute(f"DELETE FROM {CHANGES_TABLE} WHERE originator_id = ?", (key,))  # noqa: S608
    forget_listing(conn.execute, SQLITE, conversation)
    forget_retired(conn.execute, conversation)
    return cursor.lastrowid or 0, count


def _hex(originator: UUID | str) -> str:
    return originator.hex if isinstance(originator, UUID) else UUID(str(originator)).hex


_KNOWN_HEADS = 10_000
_ROWS_PER_INSERT = 200
"""Most events one ``INSERT`` statement carries (5 values each, far below SQLite's 32,766)."""
_UPDATE_HEAD_IF_UNCHANGED = (
    f"UPDATE {HEADS_TABLE} SET version = ?, chain = ? "  # noqa: S608 - fixed names
    "WHERE originator_id = ? AND version = ? AND chain = ?"
)
_SELECT_HEAD = (
    f"SELECT version, chain, chained_from, restarted_after FROM {HEADS_TABLE} "  # noqa: S608
    "WHERE originator_id = ?"
)
_UPSERT_HEAD = (
    f"INSERT INTO {HEADS_TABLE} VALUES (?, ?, ?, ?, ?) ON CONFLICT (originator_id) DO UPDATE "  # noqa: S608
    "SET version = excluded.version, chain = excluded.chain, "
    "chained_from = excluded.chained_from, restarted_after = excluded.restarted_after"
)
