"""What convstore asks of a backend's recorder beyond eventsourcing's ``ApplicationRecorder``.

Each backend's recorder (:class:`~convstore.infrastructure.sqlite.recorder.SQLiteWriterRecorder`,
:class:`~convstore.infrastructure.postgres.recorder.ChainedPostgresRecorder`) derives from
:class:`StoreRecorder`, so ``mypy --strict`` checks it keeps every method with these
signatures, and the store calls them without asking which backend it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from convstore.domain.events import Event
from convstore.ports.chain import Head
from convstore.ports.erasure import Erasure
from convstore.projections.listing import ListedRow, ListingChange, ListingQuery

RawRecord: TypeAlias = tuple[Any, ...]
"""One stored row as read, unchecked: (position, id, version, topic, state), the id and topic
as bytes. A damaged row may hold anything in any column; the scanner reports it."""

Decision: TypeAlias = Callable[
    [list[tuple[bytes, bytes]] | None], tuple[Sequence[StoredEvent], list[ListingChange]]
]
"""What a writer decides, given the (topic, state) rows it had missed (``None``: not read),
as the events to record and the listing changes they make."""

ListingPage: TypeAlias = tuple[list[ListedRow], dict[UUID, dict[str, str]]]
"""One page of the listing index, and the labels of its conversations."""


@runtime_checkable
class StoreRecorder(Protocol):
    """A recorder convstore can run a store on."""

    listing_missing: bool
    """Whether opening found no listing index (a store made before it): rebuild it."""

    def insert_decided(
        self,
        conversation_id: UUID,
        after: int,
        decide: Decision,
        *,
        contended: bool,
    ) -> None:
        """Record what ``decide`` returns, in one transaction.

        Taking turns: the transaction first takes the conversation's write lock (waiting in
        line behind the writers before it), then reads the conversation's rows after version
        ``after`` and gives them to ``decide``, so the decision is made against the newest
        state and cannot lose the version race to another writer taking turns. A backend whose
        lock costs a round trip may skip it when not ``contended``: ``decide`` is then given
        ``None`` (the caller's state is taken as the newest) and a lost race is an
        ``IntegrityError``, after which the caller retries ``contended``.
        """
        ...

    def select_states(self, conversation_id: UUID, after: int = 0) -> list[bytes]:
        """The stored state of each of a conversation's events after version ``after``, in
        version order: only that column (replay needs no ``StoredEvent``)."""
        ...

    def select_topics_and_states(
        self, conversation_id: UUID, after: int = 0
    ) -> list[tuple[bytes, bytes]]:
        """Like :meth:`select_states`, with each event's stored topic as bytes beside its
        state, so a reader can refuse a row whose topic disagrees with its event."""
        ...

    def select_log_tail(
        self, conversation_id: UUID, after: int = 0
    ) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The conversation's change count (how many of its stored rows were changed or
        deleted in place, see
        :data:`convstore.infrastructure.common.log_changes.CHANGES_TABLE`) and its topics and
        states after version ``after``, as of one moment."""
        ...

    def select_raw_records(self, after: int, limit: int) -> list[RawRecord]:
        """Up to ``limit`` stored rows after log position ``after``, in log order, as stored
        (see :data:`RawRecord`), so a damaged row can be reported rather than stop a scan."""
        ...

    def select_heads(self) -> dict[UUID, Head]:
        """Every conversation's chained head, and the start marker under the nil id."""
        ...

    def select_listing(self, query: ListingQuery) -> ListingPage:
        """One page of the listing index, and the labels of its conversations."""
        ...

    def rebuild_listing(self, decode: Callable[[bytes], Event], *, previews: bool = True) -> int:
        """Refill the listing index from every event in one transaction; how many it lists."""
        ...

    def erase(
        self, conversation: UUID, reason: str, at: str, idle_since: int | None = None
    ) -> tuple[int, int]:
        """Delete a conversation's events and head and leave its tombstone, in one
        transaction; returns the tombstone's ``seq`` and how many events went. With
        ``idle_since`` (microseconds), first refuse in that transaction, with
        ``ConversationActive``, if the conversation has an event at or after it."""
        ...

    def truncate_wal(self) -> bool:
        """Empty the write-ahead log the store keeps, if any, blocking other writers only
        briefly; ``False``: a reader or a writer kept it in use (try again later)."""
        ...

    def select_erasures(self, after: int) -> list[Erasure]:
        """The tombstones after ``seq`` ``after``, in order."""
        ...

    def vacuum(self, progress: Callable[[str], None]) -> bool:
        """Rewrite the store's files so no deleted row's bytes stay in them, calling
        ``progress`` with what is rewritten next; ``False``: a reader kept a write-ahead log
        in use (its old frames go at the next checkpoint)."""
        ...

    def close_writer(self) -> None:
        """Close any connection the recorder keeps of its own (the datastore closes its pool)."""
        ...
