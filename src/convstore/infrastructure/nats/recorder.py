"""The recorder of a ``nats://`` store: the event log is a JetStream stream, and every read
model (the events' local copy, heads, listing, tombstones) is a SQLite *replica*
fed from it exactly once, in stream order.

Writes go to the stream only (see :mod:`convstore.infrastructure.nats.backend` for the design):

- each conversation is one subject, ``NAME.c.<id hex>``; an append's events are one atomic
  batch (one message per event; a single event is a plain publish), so a reader never sees
  part of a message, and the first message for each conversation carries
  ``Nats-Expected-Last-Subject-Sequence``: the stream sequence of the conversation's newest
  event as the writer knew it, so a lost version race is refused (err_code 10071) and becomes
  eventsourcing's ``IntegrityError``;
- every message carries ``Nats-Msg-Id``, a digest of the event (id, version, topic, state),
  so a publish retried after a lost acknowledgement is stored once (the stream's duplicate
  window), while a different event for the same version is still refused; and the writer's
  hash chain after its event (:data:`CHAIN_HEADER`), which becomes the replica's head, so
  ``verify`` on every host checks the stream against what the writer wrote;
- an insert is checked whole against the servers' ``max_payload`` before anything is
  published, and one of several publishes that stops part-way erases the conversations it
  was creating (an import is whole or absent);
- the stream sequence is the notification id: the one global order every read model follows.
  A store partitioned over several streams (``?partitions=P``; each conversation in the one
  its id picks) has no such order: its replica follows every stream, a position for each, and
  numbers the events itself in the order it applies them (``SEQS_TABLE`` keeps each one's
  stream and sequence).

Reads first bring the replica up to the stream's newest sequence (one request to the stream's
leader, then the messages up to it), so every read sees every write acknowledged before it
began, from any host (read-your-writes). An append decided against a conversation's newest
version returns once acknowledged and leaves its applying to the follower (every
:data:`WAIT_EVERY`-th waits for it), and the process's next append to that conversation
takes the newest event from its own acknowledgement, not from the replica. Of the processes
sharing a replica file, one follows the streams: the holder of the file's follow lock
(``flock``) runs the ordered consumers and a thread applying what they deliver; the others
wait for its position to pass the sequence they need, take the lock when it is free, and
follow alongside when the position stands still for ``STALL_SECONDS``. Applying a run of
messages is one SQLite transaction that also moves the replica's position, and skips what is
at or below it, so each message is applied once; a run that fails goes back in front of the
buffer. Only whole publishes are applied, and a transaction ends only where one ends (its
last message is marked): the leader may report a newest sequence inside an atomic batch it is
storing, and no reader of the replica may see part of a message.

Erasure publishes a tombstone on the conversation's own subject, conditional on its newest
event (so an append racing it either lands before it or is refused), then deletes each of its
messages on every replica of the stream (the server overwrites their bytes) and purges the
subject below the tombstone; applying the tombstone deletes the conversation from the replica,
as a SQLite erasure does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import random
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    Notification,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.sqlite import SQLiteDatastore

from convstore.domain.errors import ConversationErased, ConversationNotFound, InvalidInput
from convstore.domain.events import Event, utcnow
from convstore.infrastructure.common.listing import apply_changes, refuse_if_active
from convstore.infrastructure.common.listing import forget as forget_listing
from convstore.infrastructure.common.log_changes import CHANGES_TABLE
from convstore.infrastructure.common.retired_replay import forget_sqlite as forget_retired
from convstore.infrastructure.nats.link import (
    BATCH_COMMIT_HEADER,
    BATCH_ID_HEADER,
    BATCH_LIMIT,
    DUPLICATE_IN_BATCH,
    STALL_SECONDS,
    WRONG_LAST_SEQUENCE,
    Delivered,
    JetStreamLink,
    Outgoing,
    Refused,
    Unavailable,
    wait_whole,
)
from convstore.infrastructure.nats.location import partition_of
from convstore.infrastructure.nats.replica import (
    POSITION_TABLE,
    SKIPPED_TABLE,
    owner_problem,
    skipped_line,
)
from convstore.infrastructure.sqlite.recorder import (
    _SELECT_HEAD,
    SQLITE,
    SQLiteWriterRecorder,
    _advance_heads,
    _translated,
)
from convstore.infrastructure.sqlite.transaction import immediate
from convstore.ports.chain import HEADS_TABLE, Head, advance
from convstore.ports.erasure import ERASED_TABLE, Erasure
from convstore.ports.recorder import Decision, RawRecord
from convstore.projections.listing import ListedRow, ListingQuery, listing_changes

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: every process follows (no shared lock)
    fcntl = None  # type: ignore[assignment]

SEQS_TABLE = "convstore_nats_seqs"
"""A partitioned store's replica only: each event's stream and sequence, by its local id
(with one stream the local id is the stream sequence, and this table is not made)."""

VERSION_HEADER = "Convstore-Version"
TOPIC_HEADER = "Convstore-Topic"
END_HEADER = "Convstore-End"
"""Marks a publish's last message (an append's, or each 1,000-message part of a longer one):
the replica applies whole publishes only, and commits only after one (or a tombstone)."""
CHAIN_HEADER = "Convstore-Chain"
"""The writer's hash chain after the message's event (hex; keyed with its
``CONVSTORE_CHAIN_KEY``): the replica's head takes it, so ``verify`` on every host checks
the stream's events against the writer's chain, not against one computed from whatever the
stream holds (see :mod:`convstore.ports.chain`)."""
ERASED_HEADER = "Convstore-Erased"
"""Marks a tombstone; its payload is the tombstone's JSON (reason, when, events)."""

APPLY_BATCH = 500
"""About how many messages the replica applies per transaction (whole appends only)."""

CONFLICT_ATTEMPTS = 5
"""Publishes an insert tries with a freshly read expectation before calling it a conflict."""

ERASE_RETRY_SECONDS = 30.0
"""How long an erasure keeps publishing its tombstone while appends to the conversation
land first (each refusal is an expected-sequence conflict): as long as a writer retries a
lost version race (``convstore.store.writer.WRITE_RETRY_SECONDS``)."""

FOLLOW_LOCK_SUFFIX = "-follow"
"""The replica's follow lock is the file beside it named with this suffix: the process that
holds it follows the streams and applies them for every process sharing the replica."""

MARK = struct.Struct("<Q")
"""The follow lock file's content: per stream, in the order of the links, the position the
holder of the lock last committed to the replica (its *mark*). A waiting process reads it
with one ``pread`` and asks the replica itself only once the mark says it may be there: the
replica stays the only truth (a mark is a hint, written after the commit it names)."""

POLL_FIRST_SECONDS = 0.0002
POLL_MOST_SECONDS = 0.002
"""A process that does not follow polls the follower's mark for a sequence it needs: first
after most of its usual wait (within these bounds), then after the first, doubling up to the
most. It reads the replica's position when the mark has passed the sequence, and at least
every ``POLL_MOST_SECONDS`` whatever the mark says (a follower of a version that writes no
mark, or one gone without a word: then the lock is free and this process takes it)."""

WAIT_EVERY = 64
"""An append decided against a conversation's newest version returns once the stream has
acknowledged it, leaving its applying to the follower (a read waits for it, as for any
acknowledged write); every this many-th such append of a process waits for the replica to
apply it, so the replica of a host whose processes only append cannot fall far behind them,
and a process whose follower is gone takes over following."""

ACKED_KEPT = 4096
"""How many conversations' newest (version, stream sequence), as this process's own
acknowledged publishes left them, a recorder remembers: its next append to one of them
publishes without reading the replica first (the stream still refuses it when another
writer, or an erasure, came in between)."""

_log = logging.getLogger(__name__)

IDLE_WAIT_SECONDS = 0.25
"""How long the follower's applying thread waits for a whole publish before it checks
whether the store is closing."""


def subject_of(stream: str, conversation: UUID) -> str:
    """The subject a conversation's events are published on."""
    return f"{stream}.c.{conversation.hex}"


def message_id(originator: UUID, version: int, topic: str, state: bytes) -> str:
    """The ``Nats-Msg-Id`` of an event: a digest of everything stored, so a retried publish
    of the same event is a duplicate and a different event for the same version is not."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(originator.bytes)
    digest.update(version.to_bytes(8, "big", signed=True))
    digest.update(topic.encode("utf-8", "surrogateescape") + b"\x00")
    digest.update(state)
    return digest.hexdigest()


class NatsRecorder(SQLiteWriterRecorder):
    """Writes to a JetStream stream; reads a SQLite replica brought up to date first."""

    def __init__(
        self,
        datastore: SQLiteDatastore,
        links: Sequence[JetStreamLink],
        decode: Callable[[bytes], Event],
        *,
        previews: bool,
        identity: str,
        follow_lock: str = "",
    ) -> None:
        super().__init__(datastore)
        self.links = list(links)
        """One link per stream: the store's one, or each partition's in order."""
        self.partitioned = len(self.links) > 1
        self._identity = identity
        self._decode = decode
        self._previews = previews
        self._open = False
        self._feeding = {link.stream: threading.Lock() for link in self.links}
        """Per stream: taking its delivered messages and applying them is one step."""
        self._follow_lock = follow_lock
        self._lock_fd: int | None = None
        self._index = {link.stream: k for k, link in enumerate(self.links)}
        """Each stream's place in the follow lock file's marks (see :data:`MARK`)."""
        self._leading = False
        self._claiming = threading.Lock()
        self._peek: sqlite3.Connection | None = None
        self._peeking = threading.Lock()
        self._usual_wait = POLL_FIRST_SECONDS
        self._stopping = threading.Event()
        self._applier: threading.Thread | None = None
        """The follower's thread applying what the consumers deliver (see :meth:`_lead`)."""
        self._acked: dict[UUID, tuple[int, int]] = {}
        """See :data:`ACKED_KEPT`; guarded by ``_acking``."""
        self._acking = threading.Lock()
        self._chains: dict[UUID, Head] = {}
        """Per conversation in ``_acked``: the head (writer's chain) after that publish."""
        self._unwaited = 0
        """Decided appends since one last waited for the replica (see :data:`WAIT_EVERY`)."""
        self._unflushed = False
        """A tombstone was applied and the write-ahead log not yet emptied since (a reader
        held it): the erased rows' old bytes are still in it (see :meth:`_flush_erased`)."""
        self._alongside: dict[str, int] = {}
        """While this process follows alongside a stopped holder of the follow lock: per
        stream, the replica's position as this process last left it (see :meth:`_back`)."""

    def _set_up_writer(self, conn: sqlite3.Connection) -> None:
        """The replica's writer connection takes ``synchronous = NORMAL``: the replica is
        rebuilt from the stream, and its position moves in the same transaction as its
        rows, so a commit lost in a power cut is applied again, never skipped."""
        super()._set_up_writer(conn)
        conn.execute("PRAGMA synchronous = NORMAL")

    # -- the replica -----------------------------------------------------------------------

    def link_of(self, conversation: UUID) -> JetStreamLink:
        """The link to the stream a conversation's events live in (see :func:`partition_of`)."""
        return self.links[partition_of(conversation, len(self.links))]

    def create_table(self) -> None:
        """A position row per stream, then the SQLite store's tables and each stream's
        messages after them. The rows come first, in one transaction that refuses a file
        holding another store's (see :mod:`convstore.infrastructure.nats.replica`), so no other
        table is made in a file that is not this store's replica."""
        with self._writer_lock, self._waiting() as conn, self._polled(conn):
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {POSITION_TABLE} ("
                "stream TEXT PRIMARY KEY, seq INTEGER NOT NULL, identity TEXT NOT NULL)"
            )
            rows = conn.execute(f"SELECT stream, identity FROM {POSITION_TABLE}").fetchall()  # noqa: S608
            streams = [link.stream for link in self.links]
            problem = owner_problem(self.datastore.pool.db_name, rows, streams, self._identity)
            if problem:
                raise OperationalError(problem)
            conn.executemany(
                f"INSERT OR IGNORE INTO {POSITION_TABLE} VALUES (?, 0, ?)",  # noqa: S608
                [(stream, self._identity) for stream in streams],
            )
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {SKIPPED_TABLE} (stream TEXT NOT NULL, "
                "seq INTEGER NOT NULL, subject TEXT NOT NULL, conversation TEXT, "
                "problem TEXT NOT NULL, PRIMARY KEY (stream, seq))"
            )
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {SKIPPED_TABLE}_conversation "
                f"ON {SKIPPED_TABLE} (conversation)"
            )
            if self.partitioned:
                conn.execute(
                    # AUTOINCREMENT: an id is never handed out twice, even once the events
                    # holding the highest were erased (a projection past them misses nothing).
                    f"CREATE TABLE IF NOT EXISTS {SEQS_TABLE} (rowid INTEGER PRIMARY KEY "
                    "AUTOINCREMENT, stream TEXT NOT NULL, seq INTEGER NOT NULL)"
                )
        super().create_table()
        self._open = True
        self._claim()
        self.listing_missing = False

    # -- following: one process per replica ------------------------------------------------

    def _claim(self) -> bool:
        """Become the process that follows the streams for this replica, if no other process
        sharing it is (the follow lock, held until the store closes or the process dies);
        whether this process follows. Without a lock file (or on a system without
        ``flock``) every process follows for itself."""
        with self._claiming:
            return self._leading or self._lead()

    def _lead(self) -> bool:
        if self._follow_lock and fcntl is not None:
            if self._lock_fd is None:
                self._lock_fd = os.open(self._follow_lock, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
        self._follow()
        with self._writer_lock:
            self._leading = True
            self._mark({link.stream: self._position(link.stream) for link in self.links})
        self._applier = threading.Thread(
            target=self._apply_arrivals, name=f"nats-apply-{self.links[0].stream}", daemon=True
        )
        self._applier.start()
        return True

    def _follow(self) -> None:
        """Start each link's ordered consumer just after the replica's position (a link that
        already follows is left as it is); the caller holds ``_claiming``."""
        for link in self.links:
            if not link.following:
                link.follow(self._position(link.stream), f"{link.stream}.c.*")

    def _mark(self, positions: dict[str, int]) -> None:
        """As the holder of the follow lock, write the marks of ``positions`` just committed
        (the caller holds ``_writer_lock``, so marks are written in the order of commits)."""
        if self._lock_fd is None:
            return
        for stream, seq in positions.items():
            with contextlib.suppress(OSError):  # a hint: waiters read the replica anyway
                os.pwrite(self._lock_fd, MARK.pack(seq), MARK.size * self._index[stream])

    def _marked(self, stream: str) -> int | None:
        """The follower's mark for ``stream``; ``None`` when there is none to read (no lock
        file, or a follower that writes no mark), so the caller reads the replica instead."""
        if self._lock_fd is None:
            return None
        try:
            raw = os.pread(self._lock_fd, MARK.size, MARK.size * self._index[stream])
        except OSError:
            return None
        return MARK.unpack(raw)[0] if len(raw) == MARK.size else None

    def _position(self, stream: str) -> int:
        """The sequence of ``stream`` the replica has applied up to, as committed now."""
        (seq,) = self._peeked(
            f"SELECT (SELECT seq FROM {POSITION_TABLE} WHERE stream = ?)",  # noqa: S608
            (stream,),
        )
        return int(seq or 0)

    def _peeked(self, sql: str, parameters: tuple[str, ...]) -> tuple[Any, ...]:
        """The one row of ``sql`` as committed now (see :meth:`_peeking_at`)."""
        with self._peeking_at() as conn:
            row: tuple[Any, ...] = conn.execute(sql, parameters).fetchone()
        return row

    @contextlib.contextmanager
    def _peeking_at(self) -> Iterator[sqlite3.Connection]:
        """A connection of this recorder's own, outside any transaction (each statement reads
        the latest commit), for the reads an append and a wait for the follower make every
        time: the pool's transaction costs six times as much as such a statement."""
        with self._peeking, _translated():
            if self._peek is None:
                self._peek = sqlite3.connect(
                    self.datastore.pool.db_name,
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                )
            yield self._peek

    def _apply_arrivals(self) -> None:
        """The follower's thread: apply whole publishes as they arrive, every stream's in one
        transaction, so the replica is current for the processes that share it without
        following."""
        while not self._stopping.is_set():
            if not wait_whole(self.links, _ends_a_publish, IDLE_WAIT_SECONDS, APPLY_BATCH):
                if self._unflushed and not self._stopping.is_set():
                    self._flush_erased()
                continue
            with contextlib.ExitStack() as held:
                for link in self.links:  # in order, as every thread takes them
                    held.enter_context(self._feeding[link.stream])
                if self._stopping.is_set():
                    return
                try:
                    self._apply_taken(
                        {link: link.take_ready(_ends_a_publish) for link in self.links}
                    )
                except Exception:  # noqa: BLE001 - tried again; a read meets the error itself
                    failed = True
                else:
                    failed = False
            if failed:
                self._stopping.wait(IDLE_WAIT_SECONDS)

    def _await(self, link: JetStreamLink, through: int) -> None:
        """In a process that does not follow: wait until the follower has applied ``link``'s
        stream up to ``through`` (it applies whole publishes only, so the position passes
        ``through`` once the publish holding it is applied). Takes over following when the
        follower is gone (its lock is free), and follows alongside it when the position has
        not moved for :data:`STALL_SECONDS`."""
        started = time.monotonic()
        seen, since, read = -1, started, started
        # The first pause is most of the usual wait, so a wait takes one or two reads.
        pause = min(max(0.7 * self._usual_wait, POLL_FIRST_SECONDS), POLL_MOST_SECONDS)
        polled = False
        while True:
            mark = self._marked(link.stream)
            now = time.monotonic()
            # The mark only says when to look: the replica's own position decides.
            if mark is None or mark >= through or now - read >= POLL_MOST_SECONDS:
                position = self._position(link.stream)
                now = read = time.monotonic()
                if position >= through:
                    self._usual_wait += (now - started - self._usual_wait) / 8
                    return
                if position != seen:
                    seen, since = position, now
                if self._claim():
                    break
                if now - since >= STALL_SECONDS:
                    with self._claiming:
                        self._follow()
                        for each in self.links:
                            self._alongside[each.stream] = self._position(each.stream)
                    break
            time.sleep(pause)
            # After the first: short, then doubling (the usual wait was not enough).
            pause = min(2 * pause, POLL_MOST_SECONDS) if polled else POLL_FIRST_SECONDS
            polled = True
        self._take_and_apply(link, through)

    def catch_up(self) -> None:
        """Apply every stream's messages up to its newest sequence: what a read of more than
        one conversation does first, so it sees every acknowledged write."""
        for link in self.links:
            self._catch_up_stream(link)

    def _catch_up_stream(self, link: JetStreamLink, through: int | None = None) -> None:
        """Apply ``link``'s stream up to sequence ``through`` (its newest when ``None``)."""
        if not self._open:
            return
        try:
            target = link.last_seq() if through is None else through
        except Unavailable as exc:
            raise OperationalError(str(exc)) from None
        if link.following and not self._leading and self._back(link):
            with self._claiming:
                for each in self.links:
                    with self._feeding[each.stream]:
                        each.unfollow()
                self._alongside.clear()
        self._take_and_apply(link, target)

    def _back(self, link: JetStreamLink) -> bool:
        """Whether the holder of the follow lock, which this process follows alongside, is
        applying again: the replica's position moved past where this process left it."""
        return self._position(link.stream) > self._alongside.get(link.stream, 0)

    def _take_and_apply(self, link: JetStreamLink, through: int) -> None:
        """Apply what ``link`` delivered up to ``through``, waiting for it to arrive; in a
        process that does not follow, wait for the follower instead (see :meth:`_await`)."""
        # Taking and applying are one step: a thread that finds the buffer emptied by
        # another waits here until that one has applied what it took.
        with self._feeding[link.stream]:
            if link.following:
                try:
                    delivered = link.take(through, _ends_a_publish)
                except Unavailable as exc:
                    raise OperationalError(str(exc)) from None
                self._apply_taken({link: delivered})
                if delivered and not self._leading:
                    # Where this process left the position: past it, the holder applied.
                    mark = self._alongside.get(link.stream, 0)
                    self._alongside[link.stream] = max(mark, delivered[-1].seq)
                return
        self._await(link, through)

    def _apply_taken(self, taken: dict[JetStreamLink, list[Delivered]]) -> None:
        """Apply messages taken from links' buffers (the caller holds their ``_feeding``
        locks); if that fails they go back in front of the buffers, so the next take
        applies them first: none is skipped."""
        try:
            with _translated():
                self._apply_runs([(link.stream, messages) for link, messages in taken.items()])
        except BaseException:
            for link, messages in taken.items():
                link.put_back(messages)
            raise

    def _apply_runs(self, delivered: list[tuple[str, list[Delivered]]]) -> None:
        """Apply each stream's messages in transactions of whole publishes, about
        :data:`APPLY_BATCH` messages each, several streams' runs sharing one."""
        runs = [
            (stream, run)
            for stream, messages in delivered
            for run in _whole_appends(messages, APPLY_BATCH)
        ]
        while runs:
            group = [runs.pop(0)]
            size = len(group[0][1])
            while runs and size + len(runs[0][1]) <= APPLY_BATCH:
                size += len(runs[0][1])
                group.append(runs.pop(0))
            # The lock is polled for, as an append to a SQLite store polls for it: the
            # connection's busy timeout stays 0 and is not switched (two statements an apply).
            moved: dict[str, int] = {}
            skipped: list[Skipped] = []
            with self._writer_lock:
                with immediate(self._connection(), self._lock_wait, busy_ms=0) as conn:
                    for stream, run in group:
                        (position,) = conn.execute(
                            f"SELECT seq FROM {POSITION_TABLE} WHERE stream = ?",  # noqa: S608
                            (stream,),
                        ).fetchone()
                        fresh = [message for message in run if message.seq > position]
                        if fresh:
                            skipped += self._apply(conn, stream, fresh)
                            moved[stream] = fresh[-1].seq
                            conn.execute(
                                f"UPDATE {POSITION_TABLE} SET seq = ? WHERE stream = ?",  # noqa: S608
                                (moved[stream], stream),
                            )
                if self._leading and moved:
                    self._mark(moved)
            for each in skipped:  # once: the replica recorded it with its position
                _log.warning("%s", each.line())
            if any(ERASED_HEADER in m.headers for _stream, run in group for m in run):
                self._unflushed = True
        if self._unflushed:
            self._flush_erased()

    def _flush_erased(self) -> None:
        """After applying a tombstone, in whichever process applied it: copy the replica's
        write-ahead log into the file and empty it, so the erased rows' old bytes leave this
        host as soon as it learns of the erasure, not when the process ends. A reader keeping
        the log in use makes it wait for the next apply (or the follower's next idle turn)."""
        try:
            self._unflushed = not self.truncate_wal()
        except PersistenceError:
            self._unflushed = True

    def _apply(self, conn: Any, stream: str, messages: list[Delivered]) -> list[Skipped]:
        """Apply one stream's messages to the replica, in order, inside the caller's
        transaction; those it cannot apply are recorded in :data:`SKIPPED_TABLE` instead
        and returned (see :func:`_unreadable`)."""
        run: list[tuple[int, StoredEvent]] = []
        skipped: list[Skipped] = []
        chains: dict[UUID, str] = {}
        for message in messages:
            if message.deleted_from:  # no message: what the stream held there was deleted
                skipped.append(Skipped(stream, message, None, _deleted(message)))
                continue
            conversation, problem = _unreadable(message, stream, self._index, len(self.links))
            if problem is None and message.headers.get(ERASED_HEADER):
                assert conversation is not None
                self._apply_run(conn, stream, run, skipped, chains)
                run, chains = [], {}
                _apply_tombstone(
                    conn,
                    self.events_table_name,
                    conversation,
                    message,
                    seqs=self.partitioned,
                )
                self._heads.pop(conversation, None)
                self._forget_acked(conversation)
                continue
            if problem is not None:
                skipped.append(Skipped(stream, message, conversation, problem))
                continue
            assert conversation is not None
            version = int(message.headers[VERSION_HEADER])
            topic = message.headers[TOPIC_HEADER]
            run.append((message.seq, StoredEvent(conversation, version, topic, message.data)))
            chains[conversation] = message.headers.get(CHAIN_HEADER, "")
        self._apply_run(conn, stream, run, skipped, chains)
        conn.executemany(
            f"INSERT OR IGNORE INTO {SKIPPED_TABLE} VALUES (?, ?, ?, ?, ?)",  # noqa: S608
            [
                (
                    each.stream,
                    each.message.seq,
                    each.message.subject,
                    None if each.conversation is None else each.conversation.hex,
                    each.problem,
                )
                for each in skipped
            ],
        )
        return skipped

    def _insert_applied(self, conn: Any, stream: str, kept: list[tuple[int, StoredEvent]]) -> None:
        """The events' rows: at their stream sequence (one stream), or at the replica's next
        local id with their stream and sequence beside (partitions: no one stream's
        sequence can number every event)."""
        insert = (
            f"INSERT INTO {self.events_table_name} "  # noqa: S608 - fixed name
            "(rowid, originator_id, originator_version, topic, state) VALUES (?, ?, ?, ?, ?)"
        )
        rows = [
            (seq, UUID(str(s.originator_id)).hex, s.originator_version, s.topic, s.state)
            for seq, s in kept
        ]
        if not self.partitioned:
            conn.executemany(insert, rows)
            return
        conn.executemany(
            f"INSERT INTO {SEQS_TABLE} (stream, seq) VALUES (?, ?)",  # noqa: S608
            [(stream, row[0]) for row in rows],
        )
        # The ids just handed out are consecutive: AUTOINCREMENT gives each row one past the
        # highest ever, and this transaction holds the replica's write lock.
        (last,) = conn.execute("SELECT last_insert_rowid()").fetchone()
        first = int(last) - len(rows) + 1
        conn.executemany(insert, [(first + i, *row[1:]) for i, row in enumerate(rows)])

    def _apply_run(
        self,
        conn: Any,
        stream: str,
        run: list[tuple[int, StoredEvent]],
        skipped: list[Skipped],
        chains: dict[UUID, str],
    ) -> None:
        """Apply a run of events (no tombstone among them): those of erased conversations
        are dropped, and one whose version its conversation already holds (in the replica or
        earlier in the run: no convstore writer publishes one) goes to ``skipped``; ``chains``
        holds each conversation's writer's chain after its last event in the run."""
        if not run:
            return
        ids = sorted({UUID(str(s.originator_id)).hex for _, s in run})
        marks = ", ".join("?" * len(ids))
        erased = {
            UUID(row[0])
            for row in conn.execute(
                f"SELECT originator_id FROM {ERASED_TABLE} "  # noqa: S608
                f"WHERE originator_id IN ({marks})",
                ids,
            )
        }
        held = {
            UUID(row[0]): int(row[1])
            for row in conn.execute(
                f"SELECT originator_id, max(originator_version) FROM {self.events_table_name} "  # noqa: S608
                f"WHERE originator_id IN ({marks}) GROUP BY originator_id",
                ids,
            )
        }
        kept = []
        for seq, s in run:
            conversation = UUID(str(s.originator_id))
            if conversation in erased:
                continue
            if conversation in held and s.originator_version <= held[conversation]:
                problem = f"version {s.originator_version} of its conversation is already held"
                message = Delivered(seq, subject_of(stream, conversation), {}, b"")
                skipped.append(Skipped(stream, message, conversation, problem))
                continue
            held[conversation] = s.originator_version
            kept.append((seq, s))
        if not kept:
            return
        self._insert_applied(conn, stream, kept)
        stored = [s for _, s in kept]
        _advance_heads(conn, stored, self._heads, self._chain_key)
        self._take_writers_chains(conn, {UUID(str(s.originator_id)) for s in stored}, chains)
        events = []
        for s in stored:
            try:
                events.append(self._decode(s.state))
            except Exception:  # noqa: BLE001, S112 - an unreadable row is verify's to report
                continue
        apply_changes(conn.execute, SQLITE, listing_changes(events, previews=self._previews))

    def _take_writers_chains(
        self, conn: Any, conversations: set[UUID], chains: dict[UUID, str]
    ) -> None:
        """Make each applied conversation's head hold the chain its writer sent with the
        newest event, not the one this replica computed from the stream's bytes: ``verify``
        then recomputes the chain from the events held here and finds any event changed,
        removed or added on the stream since the writer wrote it (without the key, nobody
        can make a matching keyed chain). A message without one (not written by convstore)
        leaves an empty chain, which matches nothing."""
        for conversation in conversations:
            try:
                chain = bytes.fromhex(chains.get(conversation, ""))
            except ValueError:
                chain = b""
            conn.execute(
                f"UPDATE {HEADS_TABLE} SET chain = ? WHERE originator_id = ?",  # noqa: S608
                (chain, conversation.hex),
            )
            known = self._heads.get(conversation)
            if known is not None:
                self._heads[conversation] = replace(known, chain=chain)

    # -- writing -----------------------------------------------------------------------------

    def _expected(self, conversation: UUID) -> tuple[int | None, int]:
        """The replica's newest (version, stream sequence) of a conversation, ``(None, 0)``
        for none; refuses an erased one."""
        newest = (
            f"FROM {self.events_table_name} e WHERE originator_id = ?1 "
            "ORDER BY originator_version DESC LIMIT 1"
        )
        # A skipped message on the subject may be its newest: the stream expects that one.
        foreign = f"SELECT max(seq) FROM {SKIPPED_TABLE} WHERE conversation = ?1 AND stream = ?2"  # noqa: S608
        erased, version, seq, skipped = self._peeked(
            f"SELECT EXISTS (SELECT 1 FROM {ERASED_TABLE} WHERE originator_id = ?1), "  # noqa: S608
            f"(SELECT originator_version {newest}), (SELECT {self._seq_of('e.rowid')} {newest}), "
            f"({foreign})",
            (conversation.hex, self.link_of(conversation).stream),
        )
        if erased:
            msg = f"conversation {conversation} was erased"
            raise ConversationErased(msg)
        newest_seq = max(int(seq or 0), int(skipped or 0))
        return (None, newest_seq) if version is None else (int(version), newest_seq)

    def _seq_of(self, rowid: str) -> str:
        """SQL for the stream sequence of the event at local id ``rowid`` (an expression)."""
        if not self.partitioned:
            return rowid
        return f"(SELECT s.seq FROM {SEQS_TABLE} s WHERE s.rowid = {rowid})"  # noqa: S608

    def _messages(
        self, stored: Sequence[StoredEvent], known: dict[UUID, tuple[int | None, int]]
    ) -> tuple[list[Outgoing], dict[UUID, Head]]:
        """The messages of an insert, the first of each conversation expecting its newest
        event as the replica has it, each carrying the writer's chain after its event
        (:data:`CHAIN_HEADER`); and each conversation's head after them. Raises
        ``IntegrityError`` when the replica already holds one of the versions."""
        outgoing = []
        seen: set[UUID] = set()
        heads: dict[UUID, Head | None] = {}
        for s in stored:
            conversation = UUID(str(s.originator_id))
            headers = {
                VERSION_HEADER: str(s.originator_version),
                TOPIC_HEADER: s.topic,
                "Nats-Msg-Id": message_id(conversation, s.originator_version, s.topic, s.state),
            }
            if conversation not in seen:
                seen.add(conversation)
                version, seq = known.get(conversation) or self._expected(conversation)
                if version is not None and version >= s.originator_version:
                    msg = f"version {s.originator_version} of {conversation} is taken"
                    raise IntegrityError(msg)
                headers["Nats-Expected-Last-Subject-Sequence"] = str(seq)
                heads[conversation] = self._head_at(conversation, version)
            head = advance(
                conversation,
                heads[conversation],
                [(s.originator_version, s.topic, s.state)],
                self._chain_key,
            )
            heads[conversation] = head
            headers[CHAIN_HEADER] = head.chain.hex()
            subject = subject_of(self.link_of(conversation).stream, conversation)
            outgoing.append(Outgoing(subject, headers, s.state))
        return outgoing, {c: h for c, h in heads.items() if h is not None}

    def _publish(
        self,
        stored: Sequence[StoredEvent],
        *,
        retry: bool,
        known: dict[UUID, tuple[int | None, int]] | None = None,
        ids: bool = True,
    ) -> list[int]:
        """Publish an insert's events and apply them to the replica; their notification
        ids. All or none within a stream: a partitioned store publishes each partition's
        share of an insert (conversations of several partitions: a load, an import) on its
        own, in the order of the partitions. Without ``ids`` the events are left to the
        follower to apply (see :data:`WAIT_EVERY`), and a partitioned store returns no ids
        and skips reading them back: a decided append has no use for them, and its
        publish, conditional on the conversation's newest event, already says its events
        are the ones stored."""
        self._refuse_oversized(stored)
        landed: list[StoredEvent] = []
        try:
            if not self.partitioned:
                return self._publish_to(
                    self.links[0], stored, retry=retry, known=known, wait=ids, landed=landed
                )
            shares: dict[int, list[StoredEvent]] = {}
            for s in stored:
                k = partition_of(UUID(str(s.originator_id)), len(self.links))
                shares.setdefault(k, []).append(s)
            for k in sorted(shares):
                self._publish_to(
                    self.links[k], shares[k], retry=retry, known=known, wait=ids, landed=landed
                )
        except PersistenceError as exc:
            if landed:
                self._undo(landed, exc)
            raise
        return self._read_back(stored) if ids else []

    def _undo(self, landed: list[StoredEvent], cause: PersistenceError) -> None:
        """An insert of several publishes (an import past :data:`BATCH_LIMIT` events, or one
        spanning partitions) stopped after some landed: erase the conversations it was
        creating, so none is left half-recorded for every host to replay (an import is whole
        or absent; its retry takes the source's next id). Raises the error to report."""
        first: dict[UUID, int] = {}
        for s in landed:
            first.setdefault(UUID(str(s.originator_id)), s.originator_version)
        made = [conversation for conversation, version in first.items() if version == 1]
        why = " ".join(str(cause).split())[:300]
        at = utcnow().isoformat()
        left = []
        for conversation in made:
            try:
                self.erase(conversation, f"an insert stopped part-way: {why}", at)
            except ConversationErased:
                pass
            except PersistenceError:
                left.append(conversation)
        msg = f"the write stopped part-way ({why}): "
        if left:
            named = ", ".join(str(c) for c in left)
            msg += (
                f"the part stored of conversation(s) {named} could not be erased; "
                "erase them (convstore erase ID) before importing again"
            )
        else:
            msg += "the part stored was erased, nothing of it is kept"
        raise OperationalError(msg) from cause

    def _refuse_oversized(self, stored: Sequence[StoredEvent]) -> None:
        """Refuse, before anything of it is published, an insert holding an event larger
        than the servers take in one message (``max_payload``): within convstore's own
        limits, it would be refused by the client on every retry until the timeout, and an
        insert of several publishes (an import past :data:`BATCH_LIMIT` events) would be
        left with its first parts stored."""
        link = self.links[0]
        for s in stored:
            if link.oversized(len(s.state), s.topic):
                msg = (
                    f"version {s.originator_version} of conversation {s.originator_id} is "
                    f"{len(s.state):,} bytes as stored: within convstore's block limit "
                    "(CONVSTORE_MAX_BLOCK_BYTES) but over the NATS servers' max_payload of "
                    f"{link.max_payload:,} bytes with its headers; nothing was written "
                    "(raise max_payload in the servers' configuration, or store it smaller)"
                )
                raise InvalidInput(msg)

    def _read_back(self, stored: Sequence[StoredEvent]) -> list[int]:
        """The replica's ids of events it holds (the stream sequences with one stream),
        checked to be these very events: one missing or different is ``IntegrityError``."""
        ids = []
        select = (
            f"SELECT rowid, state FROM {self.events_table_name} "  # noqa: S608
            "WHERE originator_id = ? AND originator_version = ?"
        )
        with self._peeking_at() as conn:
            for s in stored:
                row = conn.execute(
                    select, (UUID(str(s.originator_id)).hex, s.originator_version)
                ).fetchone()
                if row is None or bytes(row[1]) != s.state:
                    msg = f"version {s.originator_version} of {s.originator_id} is taken"
                    raise IntegrityError(msg)
                ids.append(int(row[0]))
        return ids

    def _publish_to(
        self,
        link: JetStreamLink,
        stored: Sequence[StoredEvent],
        *,
        retry: bool,
        known: dict[UUID, tuple[int | None, int]] | None = None,
        wait: bool = True,
        landed: list[StoredEvent] | None = None,
    ) -> list[int]:
        """Publish events of ``link``'s stream, all or none, and apply them to the replica
        (without ``wait``, only every :data:`WAIT_EVERY`-th time); their stream sequences.
        A lost race is ``IntegrityError`` (tried again with the replica brought up to date
        first while ``retry``). ``known``: each conversation's newest (version, sequence)
        as the caller just read it, for the first try. ``landed`` collects the events of
        each publish the stream acknowledged: once one has, a failure of a later one is not
        retried (see :meth:`_undo`)."""
        if not stored:
            return []
        landed = [] if landed is None else landed
        before = len(landed)
        attempts = CONFLICT_ATTEMPTS if retry else 1
        for attempt in range(1, attempts + 1):
            outgoing, heads = self._messages(stored, (known or {}) if attempt == 1 else {})
            try:
                seqs: list[int] = []
                for start in range(0, len(outgoing), BATCH_LIMIT):
                    chunk = outgoing[start : start + BATCH_LIMIT]
                    chunk[-1].headers[END_HEADER] = "1"
                    last = link.publish(chunk)
                    seqs += range(last - len(chunk) + 1, last + 1)
                    landed += stored[len(seqs) - len(chunk) : len(seqs)]
            except Refused as exc:
                if len(landed) > before:
                    raise PersistenceError(str(exc)) from None
                if exc.err_code == DUPLICATE_IN_BATCH:
                    return self._landed_before(stored)
                if exc.err_code not in WRONG_LAST_SEQUENCE:
                    raise PersistenceError(str(exc)) from None
                self._catch_up_stream(link)
                if attempt == attempts:
                    msg = f"another writer took a version first: {exc}"
                    raise IntegrityError(msg) from None
                continue
            except Unavailable as exc:
                raise OperationalError(str(exc)) from None
            self._remember_acked(stored, seqs, heads)
            if wait or self._due_to_wait():
                self._catch_up_stream(link, seqs[-1])
            return seqs
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def _remember_acked(
        self, stored: Sequence[StoredEvent], seqs: list[int], heads: dict[UUID, Head]
    ) -> None:
        """Keep each conversation's newest (version, sequence) of an acknowledged publish,
        and its head (see :data:`ACKED_KEPT`), the least recently written forgotten first."""
        newest = {
            UUID(str(s.originator_id)): (s.originator_version, seq)
            for s, seq in zip(stored, seqs, strict=True)
        }
        with self._acking:
            for conversation, known in newest.items():
                self._acked.pop(conversation, None)
                self._acked[conversation] = known
                self._chains[conversation] = heads[conversation]
            while len(self._acked) > ACKED_KEPT:
                oldest = next(iter(self._acked))
                del self._acked[oldest]
                self._chains.pop(oldest, None)

    def _forget_acked(self, conversation: UUID) -> None:
        with self._acking:
            self._acked.pop(conversation, None)
            self._chains.pop(conversation, None)

    def _head_at(self, conversation: UUID, version: int | None) -> Head | None:
        """The conversation's head as the writer chains on from it: the one this process's
        own last publish left, when it is at ``version``, else the replica's (read after
        ``version`` was: if the follower moved on meanwhile, the publish is refused anyway,
        its expected sequence being stale)."""
        if version is None:
            return None
        with self._acking:
            cached = self._chains.get(conversation)
        if cached is not None and cached.version == version:
            return cached
        with self._peeking_at() as conn:
            row = conn.execute(_SELECT_HEAD, (conversation.hex,)).fetchone()
        return None if row is None else Head(int(row[0]), bytes(row[1]), int(row[2]), row[3])

    def _due_to_wait(self) -> bool:
        """Whether this append, which need not wait for the replica, is one that does
        (see :data:`WAIT_EVERY`; threads racing on the count only shift which one)."""
        self._unwaited += 1
        if self._unwaited < WAIT_EVERY:
            return False
        self._unwaited = 0
        return True

    def _landed_before(self, stored: Sequence[StoredEvent]) -> list[int]:
        """An insert whose batch the stream had already stored (a retry after a lost
        acknowledgement): its events' ids, read back from the replica brought up to date."""
        self.catch_up()
        return self._read_back(stored)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        return self._publish(stored_events, retry=True)

    def insert_decided(
        self,
        conversation_id: UUID,
        after: int,
        decide: Decision,
        *,
        contended: bool,
    ) -> None:
        """Decide against the replica (brought up to date first when ``contended``) and
        publish conditionally on the conversation's newest event: a writer that lost the
        race gets ``IntegrityError`` and decides again (there is no lock to take turns on).
        Uncontended, the newest event this process's own last publish to the conversation
        acknowledged is taken without reading the replica, when it is the version the
        writer decides after; the append returns once acknowledged (see
        :data:`WAIT_EVERY`)."""
        rows: list[tuple[bytes, bytes]] | None = None
        known: dict[UUID, tuple[int | None, int]] = {}
        if contended:
            self._catch_up_stream(self.link_of(conversation_id))
            rows = self._local_rows(conversation_id, after)
        else:
            with self._acking:
                acked = self._acked.get(conversation_id)
            newest: tuple[int | None, int] | None = acked
            if newest is None or newest[0] != after:
                newest = self._expected(conversation_id)
            if (newest[0] or 0) != after:
                self._catch_up_stream(self.link_of(conversation_id))
                newest = self._expected(conversation_id)
                if (newest[0] or 0) != after:
                    msg = f"conversation {conversation_id} is past version {after}"
                    raise IntegrityError(msg)
            known[conversation_id] = newest  # what _messages would read again
        stored, _listing = decide(rows)
        self._publish(stored, retry=False, known=known, ids=False)

    def _local_rows(self, conversation_id: UUID, after: int) -> list[tuple[bytes, bytes]]:
        """The replica's rows of a conversation after ``after``, as it holds them now."""
        return super().select_topics_and_states(conversation_id, after)

    def erase(
        self, conversation: UUID, reason: str, at: str, idle_since: int | None = None
    ) -> tuple[int, int]:
        """Publish the tombstone on the conversation's subject, conditional on its newest
        event; delete each of its events on every replica of the stream (the server
        overwrites a deleted message's bytes), purge the subject below the tombstone (whatever
        is left), and apply the tombstone; returns its ``seq`` among erasures and how many
        events went."""
        link = self.link_of(conversation)
        subject = subject_of(link.stream, conversation)
        deadline = time.monotonic() + ERASE_RETRY_SECONDS
        attempt = 0
        while True:
            attempt += 1
            self._catch_up_stream(link)
            try:
                _version, newest = self._expected(conversation)
            except ConversationErased:
                self._purge_below_tombstone(conversation)  # a purge an erasure left undone
                raise
            count, last_active = self._count(conversation)
            if not count:
                msg = f"conversation {conversation} not found"
                raise ConversationNotFound(msg)
            refuse_if_active(conversation, last_active, idle_since)
            # Its events' sequences now: once the tombstone is published, the follower may
            # apply it (dropping the rows) at any moment; and none can land after these, as
            # the tombstone is conditional on the newest of them.
            seqs = self._seqs(conversation)
            payload = json.dumps({"reason": reason, "at": at, "events": count}).encode()
            headers = {
                ERASED_HEADER: "1",
                "Nats-Expected-Last-Subject-Sequence": str(newest),
                "Nats-Msg-Id": hashlib.blake2b(
                    subject.encode() + b"\x00" + payload, digest_size=16
                ).hexdigest(),
            }
            try:
                tombstone = link.publish([Outgoing(subject, headers, payload)])
            except Refused as exc:
                if exc.err_code not in WRONG_LAST_SEQUENCE:
                    raise OperationalError(str(exc)) from None
                # An append landed since the replica was read: read it, and try again (an
                # append that loses its race does the same), backing off at random.
                if time.monotonic() < deadline:
                    time.sleep(random.uniform(0, min(0.05, 0.001 * 2 ** min(attempt, 6))))  # noqa: S311
                    continue
                msg = (
                    f"other writers kept appending to conversation {conversation} for "
                    f"{ERASE_RETRY_SECONDS:g} s ({attempt} tries): nothing was erased; "
                    "erase it again"
                )
                raise IntegrityError(msg) from None
            except Unavailable as exc:
                raise OperationalError(str(exc)) from None
            try:
                link.erase(seqs)
                link.purge(subject, tombstone)
            except (Refused, Unavailable) as exc:
                raise OperationalError(str(exc)) from None
            self._forget_acked(conversation)
            self._catch_up_stream(link, tombstone)
            with self.datastore.transaction(commit=False) as cursor:
                cursor.execute(
                    f"SELECT seq, events FROM {ERASED_TABLE} WHERE originator_id = ?",  # noqa: S608
                    (conversation.hex,),
                )
                row = cursor.fetchone()
            assert row is not None
            return int(row[0]), int(row[1])

    def _seqs(self, conversation: UUID) -> list[int]:
        """The stream sequences of a conversation's events, as the replica holds them."""
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT {self._seq_of('rowid')} FROM {self.events_table_name} "  # noqa: S608
                "WHERE originator_id = ? ORDER BY rowid",
                (conversation.hex,),
            )
            return [int(row[0]) for row in cursor.fetchall()]

    def _purge_below_tombstone(self, conversation: UUID) -> None:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT high FROM {ERASED_TABLE} WHERE originator_id = ?",  # noqa: S608
                (conversation.hex,),
            )
            row = cursor.fetchone()
        if row is not None:
            try:
                link = self.link_of(conversation)
                link.purge(subject_of(link.stream, conversation), int(row[0]))
            except (Refused, Unavailable) as exc:
                raise OperationalError(str(exc)) from None

    def _count(self, conversation: UUID) -> tuple[int, int | None]:
        with self.datastore.transaction(commit=False) as cursor:
            cursor.execute(
                f"SELECT (SELECT count(*) FROM {self.events_table_name} "  # noqa: S608
                "WHERE originator_id = ?), (SELECT last_active FROM convstore_listing "
                "WHERE id = ?)",
                (conversation.hex, conversation.hex),
            )
            count, last_active = cursor.fetchone()
        return int(count), last_active

    # -- reading: each brings the replica up to date first -----------------------------------

    def _catch_up_for(self, conversation: UUID) -> None:
        """Before a read of one conversation: its partition's stream up to its newest (every
        event of the conversation is there), not every partition's."""
        self._catch_up_stream(self.link_of(conversation))

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        self._catch_up_for(UUID(str(originator_id)))
        return super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        self.catch_up()
        return super().select_notifications(
            start, limit, stop, topics, inclusive_of_start=inclusive_of_start
        )

    def max_notification_id(self) -> int:
        self.catch_up()
        return super().max_notification_id()

    def select_states(self, conversation_id: UUID, after: int = 0) -> list[bytes]:
        self._catch_up_for(conversation_id)
        return super().select_states(conversation_id, after)

    def select_topics_and_states(
        self, conversation_id: UUID, after: int = 0
    ) -> list[tuple[bytes, bytes]]:
        self._catch_up_for(conversation_id)
        return super().select_topics_and_states(conversation_id, after)

    def select_log_tail(
        self, conversation_id: UUID, after: int = 0
    ) -> tuple[int, list[tuple[bytes, bytes]]]:
        self._catch_up_for(conversation_id)
        return super().select_log_tail(conversation_id, after)

    def select_raw_records(self, after: int, limit: int) -> list[RawRecord]:
        self.catch_up()
        return super().select_raw_records(after, limit)

    def select_heads(self) -> dict[UUID, Head]:
        self.catch_up()
        return super().select_heads()

    def select_listing(
        self, query: ListingQuery
    ) -> tuple[list[ListedRow], dict[UUID, dict[str, str]]]:
        self.catch_up()
        return super().select_listing(query)

    def select_erasures(self, after: int) -> list[Erasure]:
        self.catch_up()
        return super().select_erasures(after)

    def rebuild_listing(self, decode: Callable[[bytes], Event], *, previews: bool = True) -> int:
        self.catch_up()
        return super().rebuild_listing(decode, previews=previews)

    def close_writer(self) -> None:
        """Stop applying, close the replica's writer connection and the links, and let
        another process sharing the replica follow."""
        self._open = False
        self._stopping.set()
        for link in self.links:
            link.release()
        if self._applier is not None:
            self._applier.join(timeout=5)
            self._applier = None
        super().close_writer()
        with self._peeking:
            if self._peek is not None:
                self._peek.close()
                self._peek = None
        for link in reversed(self.links):  # the first holds the connection the others use
            link.close()
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)  # the follow lock goes with its descriptor
            self._lock_fd = None
        self._leading = False


def _apply_tombstone(
    conn: Any, events_table: str, conversation: UUID, message: Delivered, *, seqs: bool
) -> None:
    """Delete a conversation from the replica and record its tombstone (its ``high`` is
    the tombstone's stream sequence), as a SQLite erasure does; with ``seqs``, its events'
    rows of :data:`SEQS_TABLE` too."""
    key = conversation.hex
    if conn.execute(
        f"SELECT 1 FROM {ERASED_TABLE} WHERE originator_id = ?",  # noqa: S608
        (key,),
    ).fetchone():
        return
    found = json.loads(message.data)
    # The tombstone first: the change-count trigger skips an erased conversation's rows.
    conn.execute(
        f"INSERT INTO {ERASED_TABLE} (originator_id, erased_at, reason, events, high) "  # noqa: S608
        "VALUES (?, ?, ?, ?, ?)",
        (key, str(found["at"]), str(found["reason"]), int(found["events"]), message.seq),
    )
    if seqs:
        conn.execute(
            f"DELETE FROM {SEQS_TABLE} WHERE rowid IN "  # noqa: S608
            f"(SELECT rowid FROM {events_table} WHERE originator_id = ?)",
            (key,),
        )
    conn.execute(f"DELETE FROM {events_table} WHERE originator_id = ?", (key,))  # noqa: S608
    conn.execute(f"DELETE FROM {HEADS_TABLE} WHERE originator_id = ?", (key,))  # noqa: S608
    conn.execute(f"DELETE FROM {CHANGES_TABLE} WHERE originator_id = ?", (key,))  # noqa: S608
    forget_listing(conn.execute, SQLITE, conversation)
    forget_retired(conn.execute, conversation)


def _ends_a_publish(message: Delivered) -> bool:
    """Whether ``message`` is the last of its publish: an append's (or its part's), a
    tombstone, and any message not of an atomic batch or committing one (a message another
    client published: it is reported and skipped at once, not left waiting for a next)."""
    headers = message.headers
    return (
        END_HEADER in headers
        or ERASED_HEADER in headers
        or BATCH_ID_HEADER not in headers
        or BATCH_COMMIT_HEADER in headers
    )


@dataclass(frozen=True, slots=True)
class Skipped:
    """A message of a stream the replica could not apply, and why."""

    stream: str
    message: Delivered
    conversation: UUID | None
    """The conversation its subject names (``None``: none)."""
    problem: str

    def line(self) -> str:
        return skipped_line(self.stream, self.message.seq, self.message.subject, self.problem)


def _deleted(message: Delivered) -> str:
    """What a replica reports of the sequences the stream no longer held when it read them
    (``message`` stands in for them): never an erasure's (those are all below its tombstone,
    which the stream keeps)."""
    first, last = message.deleted_from, message.seq
    which = (
        f"message {last} was deleted from the stream before this replica read it"
        if first == last
        else f"messages {first} to {last} were deleted from the stream before this replica "
        "read them"
    )
    return (
        f"{which}, not by an erasure (an event lost, or a message removed by hand): the "
        "replica cannot say whose"
    )


def _unreadable(
    message: Delivered, stream: str, index: dict[str, int], partitions: int
) -> tuple[UUID | None, str | None]:
    """The conversation ``message`` (of ``stream``) is on, and why it cannot be applied
    (``None``: it can): a subject naming no conversation (or one of another partition), a
    tombstone whose payload is not one, an event without a whole-number version or a
    topic."""
    token = message.subject.rsplit(".", 1)[-1]
    if len(token) != 32 or not all(c in "0123456789abcdef" for c in token):
        return None, "its subject names no conversation"
    conversation = UUID(token)
    if partitions > 1 and partition_of(conversation, partitions) != index[stream]:
        return conversation, "its conversation lives in another partition"
    headers = message.headers
    if headers.get(ERASED_HEADER):
        try:
            found = json.loads(message.data)
            str(found["at"]), str(found["reason"]), int(found["events"])
        except (ValueError, TypeError, KeyError):
            return conversation, "a tombstone whose payload is not one"
        return conversation, None
    version = headers.get(VERSION_HEADER, "")
    if not (version.isascii() and version.isdigit() and 0 <= int(version) < 2**63):
        return conversation, f"no whole-number {VERSION_HEADER} header"
    if not headers.get(TOPIC_HEADER):
        return conversation, f"no {TOPIC_HEADER} header"
    return conversation, None


def _whole_appends(messages: list[Delivered], size: int) -> list[list[Delivered]]:
    """``messages`` in runs of about ``size``, each ending where an append (or a tombstone)
    ends, so no transaction of the replica holds part of a message."""
    runs: list[list[Delivered]] = []
    run: list[Delivered] = []
    for message in messages:
        run.append(message)
        if len(run) >= size and _ends_a_publish(message):
            runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs
