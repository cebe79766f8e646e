"""The writer: decide each command against a cached state, save with the next version, retry.

Writers keep a small per-conversation state in memory (see
:mod:`convstore.domain.conversation`) and save each new event with the next version number. The
recorder refuses a version that another writer took first; the writer then reads just the
events it missed, re-checks the command against them and tries again. So an append costs one
insert however long the conversation is, and concurrent writers never overwrite, duplicate or
reorder each other's events.
"""

from __future__ import annotations

import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from uuid import UUID

from eventsourcing.persistence import IntegrityError, PersistenceError

from convstore.domain.conversation import Conversation
from convstore.domain.events import BlockAppended, Event
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_id
from convstore.errors import (
    ConcurrencyError,
    ConversationNotFound,
    ConvstoreError,
    InvalidBlock,
    InvalidInput,
    StoreError,
    VersionConflict,
)
from convstore.infrastructure.application import EventLog
from convstore.infrastructure.mapper import UnreadableEvent
from convstore.projections.listing import listing_changes
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

    def _lock(self, conversation_id: UUID) -> threading.Lock:
        """The lock that serialises this process's writes to one conversation."""
        return self._locks.get(conversation_id) or self._locks.setdefault(
            conversation_id, threading.Lock()
        )

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
            self._log.recorder.insert_events(stored, listing=listing_changes(events))
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
            state = Conversation.from_events(conversation_id, self._read(conversation_id))
            if state.version == 0:
                msg = f"conversation {conversation_id} not found"
                raise ConversationNotFound(msg)
            self._remember(state)
        return state

    def _catch_up(self, conversation_id: UUID, state: Conversation) -> bool:
        """Fold into ``state`` the events other writers recorded since; whether there were any."""
        missed = self._read(conversation_id, after=state.version)
        for event in missed:
            state.apply(event)
        return bool(missed)

    def _write(
        self,
        conversation: UUID | str,
        decide: Callable[[Conversation], list[Event]],
        *,
        expected_version: int | None = None,
    ) -> list[Event]:
        """Decide events against the newest state, save them, and fold them in.

        A lost version race means another writer got there first: read what it wrote, decide
        again (the command may now be refused), and retry. With ``expected_version`` the write
        is conditional: once the conversation is past that version it is refused
        (:class:`VersionConflict`) instead of decided again.
        """
        conversation_id = parse_id(conversation, "conversation")
        with self._lock(conversation_id):
            deadline = time.monotonic() + WRITE_RETRY_SECONDS
            attempt = 0
            while attempt < MIN_WRITE_ATTEMPTS or time.monotonic() < deadline:
                attempt += 1
                state = self._state(conversation_id)
                if expected_version is not None:
                    _expect(conversation_id, state, expected_version, self._catch_up)
                try:
                    events = decide(state)
                except InvalidInput:
                    # The cached state may be behind another process's writes (a message it
                    # started, say): catch up, and refuse only if the command is still wrong.
                    if not self._catch_up(conversation_id, state):
                        raise
                    events = decide(state)
                if not events:
                    return events
                try:
                    self._save(events)
                except IntegrityError:
                    self._catch_up(conversation_id, state)
                    # Back off at random, growing to 50 ms, so no writer loses every race.
                    ceiling = min(0.05, 0.001 * 2 ** min(attempt, 6))
                    time.sleep(random.uniform(0, ceiling))  # noqa: S311 - jitter, not crypto
                    continue
                for event in events:
                    state.apply(event)
                return events
        msg = (
            f"gave up writing to conversation {conversation_id} after {attempt} attempts "
            f"over {WRITE_RETRY_SECONDS:g} s or more: other writers kept taking the next version"
        )
        raise ConcurrencyError(msg)


def _expect(
    conversation_id: UUID,
    state: Conversation,
    expected: int,
    catch_up: Callable[[UUID, Conversation], bool],
) -> None:
    """Refuse a conditional write once the conversation is past ``expected`` (reading what
    this writer missed first, in case only its cached state is behind)."""
    if state.version < expected:
        catch_up(conversation_id, state)
    if state.version != expected:
        msg = (
            f"conversation {conversation_id} is at version {state.version}, not the expected "
            f"{expected}: it changed since it was read"
        )
        raise VersionConflict(msg)


def _unreadable(event: Event, exc: UnreadableEvent) -> InvalidInput:
    """The caller's error for an event whose JSON would not read back: what, and why."""
    if isinstance(event, BlockAppended):
        return InvalidBlock(f"block {event.index} cannot be stored: {exc}")
    return InvalidInput(f"the {event.type.replace('_', ' ')} event cannot be stored: {exc}")
