"""Google ADK sessions kept in a convstore store.

:class:`ConvstoreSessionService` is a ``google.adk.sessions.BaseSessionService``. A session is
one conversation (its id a UUID5 of app, user and session id, so every process finds it), and
each ADK ``Event`` appended to it is one write: a runtime entry holding the event without its
parts, and a message whose blocks are the parts (see
:mod:`convstore.integrations.google_adk_parts`). ``get_session`` folds the log back into the
events exactly as they were appended; ``convstore replay``, ``show``, ``audit`` and ``serve``
see the session like any other conversation. Given ``conversation_for``, the service keeps a
session in the conversation it names instead: one another framework recorded is handed over,
and each message recorded there without an ADK event comes back as an event holding its prose
(:func:`~convstore.integrations.google_adk_parts.handed_over_event`).

State, by ADK's prefixes:

- session state (no prefix): the initial state (in the session's first entry) and every
  event's ``state_delta``, folded on read;
- ``app:`` keys: entries of one conversation per app, ``user:`` keys one per app and user
  (labelled ``adk.kind=app-state`` / ``user-state``), each delta recorded after the event
  that carries it (two writes: a process killed between them keeps the event and loses the
  shared delta);
- ``temp:`` keys: applied to the session in memory, never written.

Concurrency: a session carries the version of the log it was read at, and every append is
conditional on it. Turns take the session in turn: an invocation's first event waits while
another runner's turn is under way on the session (its newest event is a user's message, a
call or a response, not an agent's final answer), until that turn ends or has shown no new
event for ``turn_lease`` seconds; a session that missed events takes them in (in place) before
a turn's first event is written, so the turn starts on everything stored. Within a turn, when
another writer got there first, the append reads what it missed: if all of it is already in
the session (its own earlier appends), the append goes ahead at the newer version; if any of it
is an event the session does not hold (a turn that started after this one's lease lapsed),
ADK's ``StaleSessionError`` is raised and nothing is written, so two runners never interleave
their events and none is lost. Timestamps decide nothing but a lapsed lease (skewed clocks
cannot make a current session look stale).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast
from uuid import UUID, uuid4, uuid5

from convstore.ports.extras import missing_extra

try:
    from google.adk.errors._stale_session_error import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    msg = missing_extra(
        "convstore.integrations.google_adk (Google ADK)", "google-adk", "'google-adk>=2.13'"
    )
    raise ImportError(msg) from exc

from pydantic import JsonValue
from pydantic_core import to_jsonable_python

from convstore.domain.blocks import Block
from convstore.domain.conversation import EntryMessage, message_events
from convstore.domain.errors import (
    ConversationErased,
    ConversationNotFound,
    InvalidInput,
    VersionConflict,
)
from convstore.domain.events import (
    BlockAppended,
    BlockRecorded,
    EntriesDeleted,
    EntriesRecorded,
    MessageStarted,
    Rewound,
    Role,
)
from convstore.domain.events import Event as LogEvent
from convstore.domain.metadata import parse_labels
from convstore.infrastructure.common.tables import BLOCK_EVENTS_FORMAT
from convstore.integrations.google_adk_parts import (
    ENTRY_KEY,
    HANDED_OVER_AUTHOR,
    entry_event,
    event_entry,
    handed_over_event,
    unanswered_calls,
)
from convstore.integrations.google_adk_parts import unanswered_calls_as_prose as _as_prose
from convstore.store import Store
from convstore.store.aio import AsyncStore, as_async

__all__ = [
    "ConvstoreSessionService",
    "app_state_conversation",
    "session_conversation",
    "user_state_conversation",
]

NAMESPACE = UUID("0d7f6a4e-2b1c-4e57-9c3a-6a1e5b8f2d90")
"""The UUID5 namespace of ADK keys (fixed forever: it is how a key finds its conversation)."""

SOURCE_PREFIX = "google-adk:"
"""``ConversationStarted.source`` of an ADK conversation: this, then its key as JSON."""

KIND, APP, USER = "adk.kind", "adk.app", "adk.user"
"""The labels the listing index finds ADK conversations by."""

CREATED_KEY = "adk_session"
"""The key of a session's first entry: its initial state and when it was created."""

CREATED_UUID = "adk-session-created"
STATE_KEY = "adk_state"
"""The key of an app- or user-state entry: one state delta."""

APPEND_ATTEMPTS = 50
"""How many times an append catches up with writes the session already holds."""

TURN_LEASE = 30.0
"""Seconds a turn under way in another runner keeps a new turn waiting without a new event."""

TURN_POLL = (0.02, 0.5)
"""While a turn waits: the first and the longest pause between two reads of the log's head."""

STARTED_KEPT = 1024
"""How many invocations a service remembers starting (its own turns never make it wait), and
how many sessions' calls shown as prose."""

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

STALE = (
    "the session was changed in storage since it was loaded (another runner appended events "
    "it does not hold): reload it with get_session before appending"
)


def _source(*key: str) -> str:
    return SOURCE_PREFIX + json.dumps(list(key), ensure_ascii=False)


def session_conversation(app_name: str, user_id: str, session_id: str) -> UUID:
    """The conversation that holds an ADK session (for ``convstore replay``, ``show``, …)."""
    return uuid5(NAMESPACE, _source("session", app_name, user_id, session_id))


def app_state_conversation(app_name: str) -> UUID:
    """The conversation that holds an app's ``app:`` state."""
    return uuid5(NAMESPACE, _source("app", app_name))


def user_state_conversation(app_name: str, user_id: str) -> UUID:
    """The conversation that holds a user's ``user:`` state within an app."""
    return uuid5(NAMESPACE, _source("user", app_name, user_id))


def split_state(delta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A state delta as its app, user and session parts (prefixes removed; ``temp:`` dropped)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in delta.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            session[key] = value
    return app, user, session


def _json_state(state: dict[str, Any]) -> dict[str, Any]:
    """State as JSON data, as ADK's services write it (a value with no JSON form as its
    ``repr``)."""
    return cast("dict[str, Any]", to_jsonable_python(state, serialize_unknown=True))


def _folded(entries: list[dict[str, JsonValue]] | None) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for entry in entries or []:
        delta = entry.get(STATE_KEY)
        if isinstance(delta, dict):
            state.update(delta)
    return state


class _Log:
    """A session's log folded: its creation entry, its events' entries with their blocks, and
    the messages recorded without an ADK event (another framework's, in a conversation handed
    over to ADK), each after the events recorded before it."""

    def __init__(self, events: list[LogEvent]) -> None:
        self.created: dict[str, Any] | None = None
        self.items: list[tuple[dict[str, JsonValue], list[Block]]] = []
        self.messages: dict[int, UUID] = {}
        """The message each item's blocks are in, by the item's index (none: no blocks)."""
        self.handed_over: list[tuple[int, UUID, Role, float, list[tuple[Block, str | None]]]] = []
        """Messages recorded without an ADK event: how many items come before each, its id,
        role and time, and its blocks with their tool names."""
        self.version = events[-1].originator_version if events else 0
        owners: dict[UUID, list[Block]] = {}
        others: dict[UUID, list[tuple[Block, str | None]]] = {}
        current: list[Block] | None = None
        entry_version = 0
        for event in events:
            if isinstance(event, EntriesRecorded):
                current, entry_version = None, event.originator_version
                for entry in event.entries:
                    if CREATED_KEY in entry:
                        self.created = cast("dict[str, Any]", entry[CREATED_KEY])
                    elif ENTRY_KEY in entry:
                        current = []
                        self.items.append((entry, current))
            opens = isinstance(event, MessageStarted) or (
                isinstance(event, BlockRecorded) and event.index == 0
            )
            if isinstance(event, MessageStarted | BlockRecorded) and opens:
                message = event.message_id
                if current is not None and event.originator_version == entry_version + 1:
                    self._own(owners, current, message)  # an event's message: its next write
                elif message not in owners and message not in others:
                    others[message] = []
                    when = event.timestamp.timestamp()
                    self.handed_over.append(
                        (len(self.items), message, event.role, when, others[message])
                    )
                current = None
            if isinstance(event, BlockAppended | BlockRecorded):
                if event.message_id in owners:
                    owners[event.message_id].append(event.block)
                elif event.message_id in others:
                    others[event.message_id].append((event.block, event.tool_name))

    def _own(self, owners: dict[UUID, list[Block]], current: list[Block], message: UUID) -> None:
        """A message opened right after an item's entry, in the same write, holds that item's
        blocks."""
        owners[message] = current
        self.messages[len(self.items) - 1] = message

    def events(self, assistant: str) -> list[Event]:
        """The session's events in the order they were recorded: each item's event, and each
        message recorded without one (and holding a block) as the event
        :func:`handed_over_event` makes of it (an assistant's authored by ``assistant``)."""
        events: list[Event] = []
        others = self.handed_over
        taken = 0
        for index in range(len(self.items) + 1):
            while taken < len(others) and others[taken][0] == index:
                _, message, role, when, blocks = others[taken]
                if blocks:
                    events.append(handed_over_event(str(message), role, when, blocks, assistant))
                taken += 1
            if index < len(self.items):
                events.append(entry_event(*self.items[index]))
        return events


def _marker(session: Session) -> int | None:
    """The log's version the session was read or written at (ADK's own revision slot holds
    it, then the invocation whose turn it leaves under way, if any)."""
    version = (session._storage_update_marker or "").split(" ", 1)[0]
    return int(version) if version.isdigit() else None


def _open_turn(session: Session) -> str | None:
    """The invocation whose turn was under way when the session was read or last written."""
    return (session._storage_update_marker or "").partition(" ")[2] or None


def _set_marker(session: Session, version: int, turn: str | None) -> None:
    session._storage_update_marker = f"{version} {turn}" if turn else str(version)


def _remember(memory: dict[K, V], key: K, value: V) -> None:
    """Keep ``key`` as the newest of ``memory``, forgetting the oldest beyond STARTED_KEPT."""
    memory.pop(key, None)
    memory[key] = value
    while len(memory) > STARTED_KEPT:
        del memory[next(iter(memory))]


def _turn_after(turn: str | None, event: Event) -> str | None:
    """The turn under way once ``event`` is stored after a log whose turn was ``turn``: an
    event with content decides (an agent's final response ends its turn; a user's message, a
    call or a response leaves its invocation's turn under way); one without content (a state
    change, a compaction, an agent's end) changes nothing."""
    if not (event.content and event.content.parts):
        return turn
    if event.author != "user" and event.is_final_response():
        return None
    return event.invocation_id or None


class ConvstoreSessionService(BaseSessionService):
    """ADK's session service on a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore` (a ``Store``
    is taken through :func:`convstore.store.aio.as_async`, so no store call runs on the event
    loop). With ``unanswered_calls_as_prose`` (the default) ``get_session`` hands back a
    function call that no response answers and no event marks long-running (a run killed
    inside its tool) as the text convstore's replay gives it, ``Tool use: name({...})``: the
    next request holds no dangling call, and the model still sees what it asked for. Set it
    to ``False`` to get such calls back as they were (ADK then leaves them out of requests).

    ``turn_lease`` (seconds, default 30): how long a new turn waits for another runner's turn
    under way on the session to show a new event before it goes ahead anyway (a runner
    killed mid-turn never ends its turn; a live one whose model or tool takes longer than
    this between two events loses its turn to the waiting one, and gets ``StaleSessionError``
    at its next append). ``0`` never waits: turns then race as ADK's own services let them.

    ``conversation_for(app_name, user_id, session_id)`` names the convstore conversation that
    holds a session (default :func:`session_conversation`). Mapping a session to an existing
    conversation is how a conversation recorded through another framework is handed over:
    ``create_session`` starts the session in it, and ``get_session`` shows each message
    recorded without an ADK event as an event holding its prose: the user's as the user's,
    an assistant's authored by ``handed_over_author`` (by default ``convstore``, which ADK
    sends its agent as another agent's quoted turn; the agent's own name makes it the agent's
    own earlier turn, sent in the model's role).
    """

    def __init__(
        self,
        *,
        store: Store | AsyncStore,
        unanswered_calls_as_prose: bool = True,
        turn_lease: float = TURN_LEASE,
        conversation_for: Callable[[str, str, str], UUID] = session_conversation,
        handed_over_author: str = HANDED_OVER_AUTHOR,
    ) -> None:
        if not turn_lease >= 0:
            msg = f"turn_lease must be a number of seconds, 0 or more, not {turn_lease!r}"
            raise ValueError(msg)
        self.store = as_async(store)
        self.unanswered_calls_as_prose = unanswered_calls_as_prose
        self.turn_lease = turn_lease
        self.conversation_for = conversation_for
        self.handed_over_author = handed_over_author
        self._started: dict[str, None] = {}
        """The invocations this service started a turn for, newest last (a few only)."""
        self._hidden: dict[UUID, frozenset[str]] = {}
        """By conversation, the ids of the calls its last ``get_session`` showed as prose: they
        are recorded, though the session's events no longer show them as calls."""

    # -- sessions ---------------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Start a session (a generated id unless given) with its initial state; ``app:`` and
        ``user:`` keys go to the app's and user's state. ``AlreadyExistsError`` if the id is
        taken (or was deleted: an erased conversation takes no more events)."""
        session_id = (session_id.strip() if session_id else None) or str(uuid4())
        conversation = self.conversation_for(app_name, user_id, session_id)
        labels = {KIND: "session", APP: app_name, USER: user_id}
        parse_labels(labels, self.store.limits)  # a name no label can hold: nothing written
        app, user, own = split_state(_json_state(state or {}))
        start = 1  # the version the session's first entry follows
        try:
            await self.store.new_conversation(
                f"ADK session {session_id}",
                conversation_id=conversation,
                source=_source("session", app_name, user_id, session_id),
            )
        except ConversationErased:
            msg = f"session {session_id} was deleted; its id cannot be used again"
            raise AlreadyExistsError(msg) from None
        except InvalidInput:
            # It exists: made by another creation (finished, under way or killed), or handed
            # over (another framework's: no creation entry, more than its start).
            start = await self._handed_over_at(conversation)
        # The creation whose initial state lands right after the start is the session's (the
        # write is conditional on the start being the only event); any other is told so,
        # even one racing it from another process. A creation killed before that write is
        # finished by the next, not refused.
        created = {"state": own, "created": time.time()}
        try:
            await self.store.record_entries(
                conversation,
                [{"uuid": CREATED_UUID, CREATED_KEY: created}],
                expected_version=start,
            )
        except VersionConflict:
            # The session is another creation's. Its labels are set here if it has none yet
            # (the same ones), so one killed before it set them is still listed.
            if KIND not in (await self.store.conversation_info(conversation)).labels:
                await self.store.set_labels(conversation, labels)
            msg = f"Session with id {session_id} already exists."
            raise AlreadyExistsError(msg) from None
        await self._share(app_name, user_id, app, user, CREATED_UUID + ":" + session_id)
        await self.store.set_labels(conversation, labels)
        session = await self.get_session(app_name=app_name, user_id=user_id, session_id=session_id)
        assert session is not None
        return session

    async def _handed_over_at(self, conversation: UUID) -> int:
        """The log's version when ``conversation`` holds no session's creation yet (a
        conversation handed over, or one whose creation was killed), else 1 (its creation
        then finds it taken)."""
        head = await self.store.last_event(conversation)
        if head is None or head.originator_version == 1:
            return 1
        log = _Log(await self.store.events(conversation))
        return 1 if log.created is not None else log.version

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with every event (or those ``config`` asks for), its state merged with
        the app's and user's; ``None`` if there is no such session (or it was deleted)."""
        session_id = session_id.strip() if session_id else session_id
        conversation = self.conversation_for(app_name, user_id, session_id)
        try:
            log = _Log(await self.store.events(conversation))
        except ConversationNotFound:
            return None
        if log.created is None:
            return None
        events = log.events(self.handed_over_author)
        state = dict(log.created.get("state") or {})
        for event in events:
            state.update(split_state(event.actions.state_delta)[2])
        state.update(await self._shared(app_name, user_id))
        # As ADK's services: the last event's timestamp (what append_event set), even one from
        # before the creation (a clock behind); the creation time while there is none.
        updated = events[-1].timestamp if events else float(log.created.get("created") or 0)
        turn: str | None = None
        for event in events:  # as stored: a call shown as prose is still a turn under way
            turn = _turn_after(turn, event)
        if self.unanswered_calls_as_prose:
            hidden = unanswered_calls(events)
            events = _as_prose(events, hidden)
            _remember(self._hidden, conversation, frozenset(hidden))
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=_window(events, config),
            last_update_time=updated,
        )
        _set_marker(session, log.version, turn)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, when given), oldest update first, from convstore's
        listing index by labels (a thousand rows a read), never the log: its cost follows the
        sessions listed, not the events or the other conversations the store holds.
        As ``BaseSessionService`` says, events and state are not set (``get_session`` has
        them): ADK's own services fill state, but here that would read every listed session's
        log, which is where its state is. ``last_update_time`` is the session's last write to
        the store."""
        # A user's label is rare, so the listing reads its matches first (the labels' index);
        # the kind is read from the source instead (the app's and a user's state
        # conversations carry these labels too, and a third label only adds a check a row).
        labels = {APP: app_name} if user_id is None else {USER: user_id, APP: app_name}
        sessions: list[Session] = []
        for info in await self.store.conversations(labels=labels):
            source = info.source or ""
            if not source.startswith(SOURCE_PREFIX + '["session",'):
                continue
            _, app, user, session_id = json.loads(source.removeprefix(SOURCE_PREFIX))
            active = info.last_active or info.created_at
            # No revision marker: a listed session holds no events, so an append through it
            # goes ahead only while the session has none either (see append_event).
            sessions.append(
                Session(
                    id=session_id, app_name=app, user_id=user, last_update_time=active.timestamp()
                )
            )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Erase the session's conversation for good (convstore's erase: a tombstone stays,
        see ``convstore erasures``). Deleting a session that does not exist does nothing."""
        conversation = self.conversation_for(app_name, user_id, session_id.strip())
        try:
            await self.store.erase(conversation, reason="google-adk delete_session")
        except ConversationNotFound:
            return

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's ``user:`` state within the app (keys without the prefix)."""
        return _folded(await self.store.entries(user_state_conversation(app_name, user_id)))

    # -- events -----------------------------------------------------------------------------

    async def append_event(self, session: Session, event: Event) -> Event:
        """Record a (non-partial) event, conditional on the session being current; see the
        module's docstring for when a turn waits, what is written where and what raises
        ``StaleSessionError``. An event whose id the session has stored already is ignored
        when it is that event (delivered again), and refused with ``ValueError`` when it is
        another (nothing of it is written, and the session is left as it was)."""
        if event.partial:
            return event
        if event.id and any(e.id == event.id and e == event for e in session.events):
            return event  # delivered again: recorded already
        conversation = self.conversation_for(session.app_name, session.user_id, session.id)
        starts_turn = all(e.invocation_id != event.invocation_id for e in session.events)
        if starts_turn:
            if _marker(session) is None:  # a listed session: it holds no events yet
                await self._refresh(session)
            await self._take_turn(conversation, session, event.invocation_id)
        delta = event.actions.state_delta if event.actions else {}
        temp = {k: v for k, v in delta.items() if k.startswith(State.TEMP_PREFIX)}
        event = self._trim_temp_delta_state(event)
        for _ in range(APPEND_ATTEMPTS):
            version = _marker(session)
            if version is None:
                version = await self._caught_up(conversation, session, 0)
            hidden = self._hidden.get(conversation, frozenset())
            entry, message, summary, covered = _written(session, event, hidden)

            def carried(
                _fresh: list[dict[str, JsonValue]],
                messages: list[EntryMessage] = [] if message is None else [message],
                compactions: list[tuple[str, int]] = (
                    [(summary[0], -1)] if summary is not None and covered else []
                ),
            ) -> tuple[Any, Any]:
                return messages, compactions

            try:
                new = await self.store.record_entries(
                    conversation, [entry], carried, expected_version=version
                )
            except VersionConflict:
                if starts_turn:  # nothing of this turn is written: start it on what is stored
                    await self._refresh(session)
                    await self._take_turn(conversation, session, event.invocation_id)
                else:
                    _set_marker(
                        session,
                        await self._caught_up(conversation, session, version),
                        _open_turn(session),
                    )
                continue
            except ConversationNotFound:
                msg = f"Session {session.id} not found."
                raise SessionNotFoundError(msg) from None
            break
        else:
            raise StaleSessionError(STALE)
        if not new:  # the store keeps one entry per id, and this id has one already
            if await self._stored_as(conversation, event):
                return event  # delivered again, to a session that does not show it as it came
            msg = (
                f"Event with id {event.id} already exists in session {session.id} and differs "
                "from this one: a new event needs a new id"
            )
            raise ValueError(msg)
        # The versions this write took: its entry, and its message's events (its blocks, and
        # in a store of format 1 or 2 its start and end). A compaction's event is left out of
        # the count: a marker behind the log only costs the next append one read, one ahead
        # of it would hide another writer's events.
        if new:
            block_events = self.store.store_format >= BLOCK_EVENTS_FORMAT
            version += 1 + (
                message_events(len(message[1]), message[2], block_events=block_events)
                if message
                else 0
            )
        if starts_turn and event.invocation_id:
            _remember(self._started, event.invocation_id, None)
        _set_marker(session, version, _turn_after(_open_turn(session), event))
        if summary is not None and not covered and new:
            await self._compact(conversation, *summary)
        app, user, _ = split_state(
            cast("dict[str, Any]", entry[ENTRY_KEY]).get("actions", {}).get("state_delta", {})
        )
        # Keyed by session and event: an event id is unique within its session only, and two
        # sessions' events sharing one must both reach the app's and the user's state.
        shared_key = f"{session.id}:{event.id}" if event.id else ""
        await self._share(session.app_name, session.user_id, app, user, shared_key)
        session.state.update(temp)  # ADK's _apply_temp_state, once the event is stored
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def _stored_as(self, conversation: UUID, event: Event) -> bool:
        """Whether the event stored under ``event``'s id is ``event`` (delivered again), not a
        different one reusing the id: a read of the log, only when an append finds its id
        taken (ADK's database services refuse any second event of an id; its in-memory one
        ignores an equal one, as this does)."""
        log = _Log(await self.store.events(conversation))
        return any(
            entry.get("uuid") == event.id and entry_event(entry, blocks) == event
            for entry, blocks in log.items
        )

    async def _take_turn(self, conversation: UUID, session: Session, invocation: str) -> None:
        """Wait, before ``invocation``'s first event, while the session shows another runner's
        turn under way: until that turn ends, or the log shows no new event for
        ``turn_lease`` seconds (its newest event's own time counts, so a turn left by a run
        killed long ago keeps no one waiting). The session takes in (in place) whatever the
        log gained meanwhile. A turn this service started never makes it wait (its run is this
        process's: ended by an error, or a concurrent run the caller made)."""
        if self.turn_lease == 0:
            return
        quiet_since: float | None = None
        pause = TURN_POLL[0]
        while True:
            turn = _open_turn(session)
            if turn is None or turn == invocation or turn in self._started:
                return
            now = time.monotonic()
            newest = max((e.timestamp for e in session.events), default=0.0)
            if time.time() - newest >= self.turn_lease:
                return  # its newest event is older than the lease: no one is running it
            if quiet_since is None:
                quiet_since = now
                log.info(
                    "session %s: turn %s of another runner is under way; this turn waits for "
                    "it to end (at most %.0f s without a new event)",
                    session.id,
                    turn,
                    self.turn_lease,
                )
            elif now - quiet_since >= self.turn_lease:
                return  # the log has not moved for the lease
            await asyncio.sleep(pause)
            pause = min(pause * 2, TURN_POLL[1])
            head = await self.store.last_event(conversation)
            if head is None:
                msg = f"Session {session.id} not found."
                raise SessionNotFoundError(msg)
            if head.originator_version != _marker(session):
                await self._refresh(session)
                quiet_since, pause = time.monotonic(), TURN_POLL[0]

    async def _refresh(self, session: Session) -> None:
        """``session`` (in place) as the log holds it now: every event, the state, the
        version and the turn under way (what a turn that has written nothing yet starts on)."""
        fresh = await self.get_session(
            app_name=session.app_name, user_id=session.user_id, session_id=session.id
        )
        if fresh is None:
            msg = f"Session {session.id} not found."
            raise SessionNotFoundError(msg)
        session.events[:] = fresh.events
        session.state.clear()
        session.state.update(fresh.state)
        session.last_update_time = fresh.last_update_time
        session._storage_update_marker = fresh._storage_update_marker

    async def _compact(self, conversation: UUID, summary: str, end: float) -> None:
        """Record a compaction through the newest message of an event at or before ``end``:
        a second write, unconditional (it changes what replay shows, not the events), and
        left out of the session's version (its next append catches up)."""
        log = _Log(await self.store.events(conversation))
        for index in range(len(log.items) - 1, -1, -1):
            envelope = cast("dict[str, Any]", log.items[index][0][ENTRY_KEY])
            if index in log.messages and float(envelope.get("timestamp", 0)) <= end:
                await self.store.compact(conversation, summary, through=log.messages[index])
                return

    async def _caught_up(self, conversation: UUID, session: Session, since: int) -> int:
        """The log's newest version, when everything recorded after ``since`` is already in
        the session (its own appends), else ``StaleSessionError``."""
        _, newer = await self.store.events_after(conversation, since)
        if since == 0 and not newer:
            msg = f"Session {session.id} not found."
            raise SessionNotFoundError(msg)
        held = {e.id for e in session.events}
        for event in newer:
            if isinstance(event, EntriesDeleted | Rewound):
                raise StaleSessionError(STALE)
            if isinstance(event, EntriesRecorded) and any(
                ENTRY_KEY in entry and entry.get("uuid") not in held for entry in event.entries
            ):
                raise StaleSessionError(STALE)
        return newer[-1].originator_version if newer else since

    # -- app and user state -----------------------------------------------------------------

    async def _shared(self, app_name: str, user_id: str) -> dict[str, Any]:
        """The app's and user's state, with their prefixes, as a session shows it."""
        app = _folded(await self.store.entries(app_state_conversation(app_name)))
        user = _folded(await self.store.entries(user_state_conversation(app_name, user_id)))
        return {
            **{State.APP_PREFIX + key: value for key, value in app.items()},
            **{State.USER_PREFIX + key: value for key, value in user.items()},
        }

    async def _share(
        self, app_name: str, user_id: str, app: dict[str, Any], user: dict[str, Any], uuid: str
    ) -> None:
        """Record app and user state deltas in their conversations (made on first use)."""
        targets = [
            (app, app_state_conversation(app_name), ("app", app_name), {APP: app_name}),
            (
                user,
                user_state_conversation(app_name, user_id),
                ("user", app_name, user_id),
                {APP: app_name, USER: user_id},
            ),
        ]
        for delta, conversation, key, labels in targets:
            if not delta:
                continue
            entry: dict[str, Any] = {STATE_KEY: delta}
            if uuid:
                entry["uuid"] = uuid
            try:
                await self.store.record_entries(conversation, [entry])
            except ConversationNotFound:
                try:
                    await self.store.new_conversation(
                        f"ADK {key[0]} state {' / '.join(key[1:])}",
                        conversation_id=conversation,
                        source=_source(*key),
                    )
                    await self.store.set_labels(conversation, {KIND: f"{key[0]}-state", **labels})
                except InvalidInput:
                    pass  # another process made it first
                await self.store.record_entries(conversation, [entry])


def _written(
    session: Session, event: Event, hidden: frozenset[str]
) -> tuple[dict[str, JsonValue], EntryMessage | None, tuple[str, float] | None, bool]:
    """What appending ``event`` to ``session`` writes: its entry, its message (if it has
    blocks), its compaction's summary and end (if it is one), and whether that compaction
    covers every event with content the session holds (then it is a convstore compaction).
    A call whose id is recorded already (one the session holds, or one ``hidden`` as prose)
    is kept in the entry as it came: the store keeps one ``tool_use`` block per id."""
    seen_calls = {c.id for e in session.events for c in e.get_function_calls() if c.id}
    seen_calls |= hidden
    entry, message = event_entry(event, seen_calls)
    summary = _summary(session, event)
    covered = summary is not None and summary[1] >= max(
        (e.timestamp for e in session.events if _has_content(e)), default=summary[1]
    )
    return entry, message, summary, covered


def _window(events: list[Event], config: GetSessionConfig | None) -> list[Event]:
    """The events ``config`` asks for: the newest ``num_recent_events``, then those at or
    after ``after_timestamp`` (counted back from the newest, as ADK's services do)."""
    if config is None:
        return events
    if config.num_recent_events is not None:
        events = events[-config.num_recent_events :] if config.num_recent_events else []
    if config.after_timestamp is not None:
        start = len(events)
        while start > 0 and events[start - 1].timestamp >= config.after_timestamp:
            start -= 1
        events = events[start:]
    return events


def _has_content(event: Event) -> bool:
    return bool(event.content and event.content.parts and event.actions.compaction is None)


def _summary(session: Session, event: Event) -> tuple[str, float] | None:
    """An ADK compaction event's summary and the end of its range, when convstore can record
    it as a compaction: its range starts at or before the session's first event with content
    (a prefix, as a convstore compaction replaces: ADK's token-threshold compaction seeds each
    summary with the last, so each starts where the first did). A sliding-window summary of
    later invocations is kept as an event only (the event is kept either way)."""
    compaction = event.actions.compaction
    if compaction is None:
        return None
    parts = compaction.compacted_content.parts or []
    summary = "\n\n".join(p.text for p in parts if p.text and not p.thought)
    first = min((e.timestamp for e in session.events if _has_content(e)), default=None)
    if not summary.strip() or first is None or compaction.start_timestamp > first:
        return None
    return summary, compaction.end_timestamp
