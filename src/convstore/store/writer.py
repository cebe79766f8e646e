"""The writer: decide each command against a cached state, save with the next version, retry.

Writers keep a small per-conversation state in memory (see
:mod:`convstore.domain.conversation`) and save each new event with the next version number. The
recorder refuses a version that another writer took first; the writer then retries taking its
turn: the recorder takes the conversation's write lock first (SQLite's write lock, which a
SQLite writer always takes first; PostgreSQL's advisory lock of the conversation, whose
waiters queue in order), hands over the events this writer missed, and the command is
re-checked and decided inside that transaction. So an append costs one insert however long the
conversation is, concurrent writers never overwrite, duplicate or reorder each other's events,
and a writer that lost the race once cannot lose it again: none starves.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError, StoredEvent

from convstore.domain.conversation import Conversation
from convstore.domain.errors import (
    ConcurrencyError,
    ConversationNotFound,
    ConvstoreError,
    InvalidBlock,
    InvalidInput,
    StoreError,
    VersionConflict,
)
from convstore.domain.events import BlockAppended, BlockRecorded, Event, build_models
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_id
from convstore.infrastructure.common.application import EventLog
from convstore.infrastructure.common.mapper import UnreadableEvent
from convstore.projections.listing import ListingChange, listing_changes
from convstore.store.reading import LogReader

MIN_WRITE_ATTEMPTS = 200
"""A write is re-decided after a lost version race at least this many times…"""


WRITE_RETRY_SECONDS = 30.0
"""…and for at least this long before it gives up: a writer starved of CPU on a busy host
loses many races in a row without anything being wrong."""


STATE_CACHE_SIZE = 256
"""How many conversations' writer states one store keeps in memory."""


class Writer(LogReader):
    """Records events through a cache of writer states, one lock per conversation."""

    def __init__(
        self, log: EventLog, location: str, *, secret: str = "", limits: Limits | None = None
    ) -> None:
        super().__init__(log, location, secret=secret, limits=limits)
        self._states: OrderedDict[UUID, Conversation] = OrderedDict()
        self._locks: dict[UUID, threading.Lock] = {}
        self._guard = threading.Lock()
        self._previews = log.mapper.cipher is None
        """Whether the listing index keeps untitled conversations' first user text: not in
        an encrypted store, whose message text stays out of the clear."""
        self._most_attempts = 0
        """The most attempts one write of this store has taken (1: it never lost a race)."""
        self._contended: set[UUID] = set()
        """Conversations other writers were writing to at this store's last write: the next
        write takes its turn at once rather than first try and lose."""

    def _lock(self, conversation_id: UUID) -> threading.Lock:
        """The lock that serialises this process's writes to one conversation."""
        return self._locks.get(conversation_id) or self._locks.setdefault(
            conversation_id, threading.Lock()
        )

    def _contend(self, conversation_id: UUID) -> None:
        """Remember that other writers are writing to this conversation (a bounded set)."""
        if len(self._contended) >= STATE_CACHE_SIZE:
            self._contended.clear()
        self._contended.add(conversation_id)

    def _forget(self, conversation_id: UUID) -> None:
        """Drop a conversation's cached writer state (it was erased)."""
        with self._guard:
            self._states.pop(conversation_id, None)

    def _record_new(
        self, events: list[Event], taken: Callable[[], ConvstoreError] | None = None
    ) -> None:
        """Save the events of conversations that do not exist yet, in one transaction;
        ``taken`` makes the error for one that exists after all (another writer made it)."""
        try:
            self._save(events)
        except IntegrityError:
            if taken is not None:
                raise taken() from None
            msg = "a conversation being created already exists (the import was not recorded)"
            raise StoreError(msg) from None

    def _save(self, events: list[Event]) -> None:
        """Record events atomically; lets ``IntegrityError`` (a lost version race) through.

        Straight to the recorder: eventsourcing's ``Application.save`` adds processing,
        snapshot and notification hooks convstore does not use, a quarter of an append's CPU.
        """
        to_stored = self._log.mapper.to_stored_event
        stored = []
        for event in events:
            try:
                stored.append(to_stored(event))
            except UnreadableEvent as exc:
                raise _unreadable(event, exc) from None
        try:
            listing = listing_changes(events, previews=self._previews)
            self._log.recorder.insert_events(stored, listing=listing)
        except IntegrityError:
            raise
        except PersistenceError as exc:
            raise self._failure(exc) from exc

    def _remember(self, state: Conversation) -> None:
        with self._guard:
            self._states[state.id] = state
            self._states.move_to_end(state.id)
            while len(self._states) > STATE_CACHE_SIZE:
                self._states.popitem(last=False)

    def _state(self, conversation_id: UUID) -> Conversation:
        with self._guard:
            state = self._states.get(conversation_id)
        if state is None:
            state = Conversation.from_events(
                conversation_id, self._read(conversation_id), block_events=self._log.block_events
            )
            if state.version == 0:
                msg = f"conversation {conversation_id} not found"
                raise ConversationNotFound(msg)
            self._remember(state)
        return state

    def _write(
        self,
        conversation: UUID | str,
        decide: Callable[[Conversation], list[Event]],
        *,
        expected_version: int | None = None,
    ) -> list[Event]:
        """Decide events against the newest state, save them, and fold them in.

        The first try decides against the cached state. If it loses the version race (another
        writer got there first), every later try takes its turn: the recorder takes the
        conversation's write lock, hands over what this writer missed, and the command is
        decided again (it may now be refused) inside that transaction, so it cannot lose again
        to a writer taking turns, and no writer starves. While other writers are known to be
        writing to the conversation, the first try takes its turn too (rather than lose once
        more). With ``expected_version`` the write is
        conditional: once the conversation is past that version it is refused
        (:class:`VersionConflict`) instead of decided again.
        """
        conversation_id = parse_id(conversation, "conversation")
        recorder = self._log.store_recorder
        build_models()  # the models a decision makes, built before the recorder's lock is taken
        with self._lock(conversation_id):
            deadline = time.monotonic() + WRITE_RETRY_SECONDS
            attempt = 0
            contended = conversation_id in self._contended
            while attempt < MIN_WRITE_ATTEMPTS or time.monotonic() < deadline:
                attempt += 1
                state = self._state(conversation_id)
                turn = _Turn(self, state, decide, expected_version)
                try:
                    recorder.insert_decided(
                        conversation_id,
                        state.version,
                        turn,
                        contended=contended,
                    )
                except (_Behind, InvalidInput):
                    # The cached state may be behind another process's writes (a message it
                    # started, say): refuse only once the command is wrong in the newest one.
                    if turn.fresh:
                        raise
                    contended = True
                    continue
                except IntegrityError:
                    self._contend(conversation_id)
                    if contended:
                        # A write that does not take turns (a load, say) took the version
                        # while this one held the lock: back off at random, growing to 50 ms.
                        ceiling = min(0.05, 0.001 * 2 ** min(attempt, 6))
                        time.sleep(random.uniform(0, ceiling))  # noqa: S311 - jitter
                    contended = True
                    continue
                except PersistenceError as exc:
                    raise self._failure(exc) from exc
                for event in turn.events:
                    state.apply(event)
                if turn.missed:
                    self._contend(conversation_id)
                elif turn.fresh:
                    self._contended.discard(conversation_id)
                self._most_attempts = max(self._most_attempts, attempt)
                return turn.events
        msg = (
            f"gave up writing to conversation {conversation_id} after {attempt} attempts "
            f"over {WRITE_RETRY_SECONDS:g} s or more: other writers kept taking the next version"
        )
        raise ConcurrencyError(msg)


class _Behind(Exception):
    """The cached state is older than the version a conditional write expects."""


class _Turn:
    """One try of a write, called by the recorder inside its transaction: fold in what the
    writer missed (when the recorder read it), check the expected version, decide, and map
    the events for the recorder."""

    def __init__(
        self,
        writer: Writer,
        state: Conversation,
        decide: Callable[[Conversation], list[Event]],
        expected: int | None,
    ) -> None:
        self._writer = writer
        self._state = state
        self._decide = decide
        self._expected = expected
        self.fresh = False
        """Whether the decision was made against the newest state (read under the lock)."""
        self.missed = 0
        """How many events other writers had recorded since this writer's cached state."""
        self.events: list[Event] = []

    def __call__(
        self, missed: list[tuple[bytes, bytes]] | None
    ) -> tuple[list[StoredEvent], list[ListingChange]]:
        state = self._state
        if missed is not None:
            self.fresh = True
            self.missed = len(missed)
            for event in self._writer._decoded(state.id, missed):
                if event.originator_version > state.version:  # a retried read repeats rows
                    state.apply(event)
        if self._expected is not None:
            if state.version < self._expected and not self.fresh:
                raise _Behind
            if state.version != self._expected:
                msg = (
                    f"conversation {state.id} is at version {state.version}, not the "
                    f"expected {self._expected}: it changed since it was read"
                )
                raise VersionConflict(msg)
        self.events = self._decide(state)
        to_stored = self._writer._log.mapper.to_stored_event
        stored = []
        for event in self.events:
            try:
                stored.append(to_stored(event))
            except UnreadableEvent as exc:
                raise _unreadable(event, exc) from None
        first_users = {state.id: state.first_user}
        return stored, listing_changes(self.events, first_users, previews=self._writer._previews)


def _unreadable(event: Event, exc: UnreadableEvent) -> InvalidInput:
    """The caller's error for an event whose JSON would not read back: what, and why."""
    if isinstance(event, BlockAppended | BlockRecorded):
        return InvalidBlock(f"block {event.index} cannot be stored: {exc}")
    return InvalidInput(f"the {event.type.replace('_', ' ')} event cannot be stored: {exc}")
