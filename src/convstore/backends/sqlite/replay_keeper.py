"""The writer's side of a SQLite store's replay model: kept current inside the append
transaction, at O(1) per append.

An append's events are folded (the one fold, :func:`convstore.engine.model.fold`) into the
model the writer holds of the conversation, and only what they changed is written: the row of
each message they touched and the head, whose digest is extended rather than recomputed (the
head keeps the sum of its rows' MACs, :func:`convstore.engine.state.row_mac`, so a changed row
costs its old MAC out and its new one in). All of it in the append's own transaction, so the
stored model is never ahead of or behind the log, even when the process is killed mid-append.

What the writer holds is a *tail*: the model's head facts, each message's position and the
plans of the messages still open (a closed one never changes again, so only its MAC's place in
the sum is kept). It is trusted only while the stored head is the very text it wrote last at
the version the append follows; otherwise (another process wrote, a reader stored or replaced
the model) it is read again from the stored rows and their digest checked, once. When the
stored model is not at the version the append follows (it lags: an older store, a model
dropped), the writer leaves it alone and readers catch it up as before; a new conversation's
model starts with its first append.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from uuid import UUID

from convstore.backends.common.log_changes import SELECT_CHANGE_COUNT
from convstore.backends.common.replay_tables import WRITE_LAG
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.domain.events import BlockAppended, BlockRecorded, Event, MessageStarted
from convstore.engine.model import fold
from convstore.engine.state import MessagePlan, ReplayState, packed_plan
from convstore.ports.replay import Execute

DEFER_LIMIT = WRITE_LAG
"""At most this many events of a streaming message wait to be written (:func:`_streaming`):
the lag at which a reader would store the model itself."""

TAILS_KEPT = 256
"""How many conversations' tails one store's writer keeps (as many as its writer states)."""

SQLITE_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {HEADS} (originator_id TEXT PRIMARY KEY, "
    "version INTEGER NOT NULL, head TEXT NOT NULL) WITHOUT ROWID",
    f"CREATE TABLE IF NOT EXISTS {MESSAGES} (originator_id TEXT NOT NULL, "
    "position INTEGER NOT NULL, message_id TEXT NOT NULL, plan TEXT NOT NULL, "
    "PRIMARY KEY (originator_id, position))",
)
"""The model's tables. The message rows are a rowid table: in a ``WITHOUT ROWID`` table (an
index b-tree) a row keeps at most ~1 KB in its page and spills the rest into overflow pages of
its own, so every plan past 1 KB (a tool result, a long answer) took a whole extra 4 KB page
for its tail: 26.6 MB of pages for 15.2 MB of plans on the agent benchmark's 10,000 messages,
17.5 MB (with the key's index) as a rowid table, where rows up to ~4 KB stay in their page."""

_EARLIER_MESSAGES_SHAPE = "WITHOUT ROWID"
"""What the messages table's SQL says when an earlier version made it: it is dropped, with the
heads, once (the model is derived data; the next replays store it again)."""

_CLOSED = MessagePlan("", "user", "ended")
"""What a tail holds in place of a closed message's plan: it never changes again."""

_SELECT_HEAD = f"SELECT version, head FROM {HEADS} WHERE originator_id = ?"  # noqa: S608
_SELECT_ROWS = f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ? ORDER BY position"  # noqa: S608
WRITE_ROW = f"INSERT OR REPLACE INTO {MESSAGES} VALUES (?, ?, ?, ?)"  # noqa: S608
"""Stores one message row: its values as :func:`row_values` gives them."""
WRITE_HEAD = f"INSERT OR REPLACE INTO {HEADS} VALUES (?, ?, ?)"  # noqa: S608
_MOVE_HEAD = (
    f"UPDATE {HEADS} SET version = ?, head = ? "  # noqa: S608
    "WHERE originator_id = ? AND version = ? AND head = ?"
)
_DROP_HEAD = f"DELETE FROM {HEADS} WHERE originator_id = ?"  # noqa: S608


class _Tail:
    __slots__ = ("head", "state", "stored")

    def __init__(self, state: ReplayState, head: str) -> None:
        self.state = state
        self.head = head
        """The head text last written (or read)."""
        self.stored = state.version
        """The version that head is at: ``state`` may be ahead of it by the events of a
        message still streaming (see :func:`_streaming`), folded but not yet written."""


def row_values(
    key: str, rows: Iterable[tuple[int, str, str]]
) -> list[tuple[str, int, str, str | bytes]]:
    """The values :data:`WRITE_ROW` stores for ``rows`` ((position, message id, plan text),
    as :meth:`ReplayState.rows` gives them) of conversation ``key``: each plan as SQLite keeps
    it, packed when long (:func:`~convstore.engine.state.packed_plan`)."""
    return [(key, position, message_id, packed_plan(text)) for position, message_id, text in rows]


class SQLiteReplayKeeper:
    """Keeps each conversation's stored replay model current from inside its appends."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self._tails: OrderedDict[UUID, _Tail] = OrderedDict()
        self._guard = threading.Lock()
        self._created = False

    def __call__(
        self,
        execute: Execute,
        conversation: UUID,
        before: int,
        events: Sequence[Event],
        *,
        empty: bool,
        missed: Callable[[int], Sequence[Event]],
    ) -> None:
        """Fold ``events`` (the append's, following version ``before``) into the stored model,
        inside the append's transaction (``execute``). ``empty``: the conversation at
        ``before`` holds nothing replay shows (no message, no rewind), so a model that does
        not exist yet starts here. ``missed`` reads the events a stored model at most
        :data:`DEFER_LIMIT` behind ``before`` lacks (a writer killed while a message streamed
        left it so), which are folded in first."""
        with self._guard:
            tail = self._tails.pop(conversation, None)
        try:
            tail = self._extend(
                execute, conversation, before, events, tail, empty=empty, missed=missed
            )
        except Exception:  # noqa: BLE001 - derived data: drop it, never fail the append
            # Whatever was written of it no longer matches a head: without one, its readers
            # fold the log and store it again. (A table dropped meanwhile has no head to drop.)
            tail = None
            self._created = False
            with contextlib.suppress(Exception):
                execute(_DROP_HEAD, (conversation.hex,))
        if tail is not None:
            with self._guard:
                self._tails[conversation] = tail
                while len(self._tails) > TAILS_KEPT:
                    self._tails.popitem(last=False)

    def _extend(
        self,
        execute: Execute,
        conversation: UUID,
        before: int,
        events: Sequence[Event],
        tail: _Tail | None,
        *,
        empty: bool,
        missed: Callable[[int], Sequence[Event]],
    ) -> _Tail | None:
        key = conversation.hex
        if not self._created:
            drop_earlier_shape(execute)
            for statement in SQLITE_CREATE:
                execute(statement, ())
            self._created = True
        if tail is not None and tail.state.version == before:
            # The common case: the head is still the one this writer wrote last. One
            # statement moves it on, on that very condition, before any row is written.
            state = tail.state
            fold(state, events)
            if _streaming(events) and state.version - tail.stored < DEFER_LIMIT:
                return tail  # written with the append that closes the message
            dirty = sorted(state.dirty)
            rows = state.rows(key, self.key, dirty)
            head = state.encode_head(key, self.key)
            moved = execute(_MOVE_HEAD, (state.version, head, key, tail.stored, tail.head))
            if moved.rowcount == 1:
                for values in row_values(key, rows):
                    execute(WRITE_ROW, values)
                return self._kept(state, dirty, head)
            tail = None  # another process wrote: read the stored model below
        row = execute(_SELECT_HEAD, (key,)).fetchone()
        if row is None:
            if not empty:
                return None  # never stored, and not new: its readers store it
            state = ReplayState()
            state.version = before
            state.changes = int(execute(SELECT_CHANGE_COUNT, (key,)).fetchone()[0])
        else:
            stored = int(row[0])
            if not 0 <= before - stored <= DEFER_LIMIT:
                return None  # far behind the log (or ahead of this writer): readers catch it up
            rows = execute(_SELECT_ROWS, (key,)).fetchall()
            state = ReplayState.decode(key, stored, row[1], rows, self.key)
            if state.legacy:
                return None  # a head of the old digest: its next reader stores it anew
            _drop_closed(state, range(len(state.messages)))
            if stored < before:
                # A few events behind: a writer held a streaming message's and was killed,
                # or another process's writer holds them now. Fold them from the log.
                behind = missed(stored)
                if [e.originator_version for e in behind] != list(range(stored + 1, before + 1)):
                    return None  # the log is not what the model was folded from
                fold(state, behind)
        fold(state, events)
        dirty = sorted(state.dirty)
        for values in row_values(key, state.rows(key, self.key, dirty)):
            execute(WRITE_ROW, values)
        head = state.encode_head(key, self.key)
        execute(WRITE_HEAD, (key, state.version, head))
        return self._kept(state, dirty, head)

    @staticmethod
    def _kept(state: ReplayState, dirty: list[int], head: str) -> _Tail:
        """What to hold once ``state`` is written: its closed messages' plans let go."""
        state.clean()
        _drop_closed(state, dirty)
        return _Tail(state, head)

    def forget(self, conversation: UUID) -> None:
        """Drop what is held of a conversation (it was erased)."""
        with self._guard:
            self._tails.pop(conversation, None)

    def clear(self) -> None:
        """Drop every tail (the tables were dropped), and make them again at the next append."""
        with self._guard:
            self._tails.clear()
            self._created = False


def _streaming(events: Sequence[Event]) -> bool:
    """Whether an append only opens a message or adds blocks to an open one: what it
    changes is the row of a message still streaming, rewritten by every block until the
    message closes, so the writer holds it and writes it (and the head) with the append that
    closes it, or once :data:`DEFER_LIMIT` events wait. A reader meanwhile folds those few
    events from the log, as it does after any stored version."""
    return all(
        isinstance(event, MessageStarted | BlockAppended)
        or (isinstance(event, BlockRecorded) and not event.closes)
        for event in events
    )


def _drop_closed(state: ReplayState, positions: Sequence[int] | range) -> None:
    """Hold nothing of each closed message among ``positions`` but its place: it never
    changes again, and its MAC is already in the head's sum."""
    messages = state.messages
    for position in positions:
        if messages[position].status != "open":
            messages[position] = _CLOSED


def drop_earlier_shape(execute: Execute) -> None:
    """Inside a transaction writing the model: drop the model's tables if an earlier version
    made the messages table ``WITHOUT ROWID`` (see :data:`SQLITE_CREATE`)."""
    found = execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (MESSAGES,)
    ).fetchone()
    if found and _EARLIER_MESSAGES_SHAPE in str(found[0]).upper():
        for table in (MESSAGES, HEADS):
            execute(f"DROP TABLE IF EXISTS {table}", ())
