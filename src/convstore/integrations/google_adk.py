"""Google ADK sessions kept in a convstore store.

:class:`ConvstoreSessionService` is a ``google.adk.sessions.BaseSessionService``. A session is
one conversation (its id a UUID5 of app, user and session id, so every process finds it), and
each ADK ``Event`` appended to it is one write: a runtime entry holding the event without its
parts, and a message whose blocks are the parts (see
:mod:`convstore.integrations.google_adk_parts`). ``get_session`` folds the log back into the
events exactly as they were appended; ``convstore replay``, ``show``, ``audit`` and ``serve``
see the session like any other conversation.

State, by ADK's prefixes:

- session state (no prefix): the initial state (in the session's first entry) and every
  event's ``state_delta``, folded on read;
- ``app:`` keys: entries of one conversation per app, ``user:`` keys one per app and user
  (labelled ``adk.kind=app-state`` / ``user-state``), each delta recorded after the event
  that carries it (two writes: a process killed between them keeps the event and loses the
  shared delta);
- ``temp:`` keys: applied to the session in memory, never written.

Concurrency: a session carries the version of the log it was read at, and every append is
conditional on it. When another writer got there first, the append reads what it missed: if
all of it is already in the session (its own earlier appends), the append goes ahead at the
newer version; if any of it is an event the session does not hold, ADK's
``StaleSessionError`` is raised and nothing is written, so two runners never interleave their
events and none is lost. Timestamps play no part (skewed clocks cannot make a current session
look stale).
"""

from __future__ import annotations

import json
import time
from typing import Any, cast
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
)
from convstore.domain.events import Event as LogEvent
from convstore.domain.metadata import parse_labels
from convstore.infrastructure.common.tables import BLOCK_EVENTS_FORMAT
from convstore.integrations.google_adk_parts import ENTRY_KEY, entry_event, event_entry
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
    """A session's log folded: its creation entry, its events' entries with their blocks."""

    def __init__(self, events: list[LogEvent]) -> None:
        self.created: dict[str, Any] | None = None
        self.items: list[tuple[dict[str, JsonValue], list[Block]]] = []
        self.messages: dict[int, UUID] = {}
        """The message each item's blocks are in, by the item's index (none: no blocks)."""
        self.version = events[-1].originator_version if events else 0
        owners: dict[UUID, list[Block]] = {}
        current: list[Block] | None = None
        for event in events:
            if isinstance(event, EntriesRecorded):
                current = None
                for entry in event.entries:
                    if CREATED_KEY in entry:
                        self.created = cast("dict[str, Any]", entry[CREATED_KEY])
                    elif ENTRY_KEY in entry:
                        current = []
                        self.items.append((entry, current))
            elif isinstance(event, MessageStarted):
                self._own(owners, current, event.message_id)
                current = None
            elif isinstance(event, BlockAppended | BlockRecorded):
                if isinstance(event, BlockRecorded) and event.index == 0:
                    self._own(owners, current, event.message_id)
                    current = None
                if event.message_id in owners:
                    owners[event.message_id].append(event.block)

    def _own(
        self, owners: dict[UUID, list[Block]], current: list[Block] | None, message: UUID
    ) -> None:
        """A message opened right after an item's entry holds that item's blocks; nothing is
        current after it (a first block after its message's start opens nothing more)."""
        if current is not None:
            owners[message] = current
            self.messages[len(self.items) - 1] = message


def _marker(session: Session) -> int | None:
    marker = session._storage_update_marker  # ADK's own revision slot
    return int(marker) if marker and marker.isdigit() else None


def _set_marker(session: Session, version: int) -> None:
    session._storage_update_marker = str(version)  # ADK's own revision slot


class ConvstoreSessionService(BaseSessionService):
    """ADK's session service on a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore` (a ``Store``
    is taken through :func:`convstore.store.aio.as_async`, so no store call runs on the event
    loop). With ``unanswered_calls_as_prose`` (the default) ``get_session`` hands back a
    function call that no response answers and no event marks long-running (a run killed
    inside its tool) as the text convstore's replay gives it, ``Tool use: name({...})``: the
    next request holds no dangling call, and the model still sees what it asked for. Set it
    to ``False`` to get such calls back as they were (ADK then leaves them out of requests).
    """

    def __init__(
        self, *, store: Store | AsyncStore, unanswered_calls_as_prose: bool = True
    ) -> None:
        self.store = as_async(store)
        self.unanswered_calls_as_prose = unanswered_calls_as_prose

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
        conversation = session_conversation(app_name, user_id, session_id)
        labels = {KIND: "session", APP: app_name, USER: user_id}
        parse_labels(labels, self.store.limits)  # a name no label can hold: nothing written
        app, user, own = split_state(_json_state(state or {}))
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
            pass  # it exists: made by another creation (finished, under way or killed)
        # The creation whose initial state lands right after the start is the session's (the
        # write is conditional on the start being the only event); any other is told so,
        # even one racing it from another process. A creation killed before that write is
        # finished by the next, not refused.
        created = {"state": own, "created": time.time()}
        try:
            await self.store.record_entries(
                conversation, [{"uuid": CREATED_UUID, CREATED_KEY: created}], expected_version=1
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
        conversation = session_conversation(app_name, user_id, session_id)
        try:
            log = _Log(await self.store.events(conversation))
        except ConversationNotFound:
            return None
        if log.created is None:
            return None
        events = [entry_event(entry, blocks) for entry, blocks in log.items]
        state = dict(log.created.get("state") or {})
        for event in events:
            state.update(split_state(event.actions.state_delta)[2])
        state.update(await self._shared(app_name, user_id))
        updated = max([float(log.created.get("created") or 0), *(e.timestamp for e in events)])
        if self.unanswered_calls_as_prose:
            events = _as_prose(events)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=_window(events, config),
            last_update_time=updated,
        )
        _set_marker(session, log.version)
        return session

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions (of one user, when given), oldest update first, from convstore's
        listing index by labels (a thousand rows a read), never the log: its cost follows the
        sessions listed, not the events or the other conversations the store holds.
        As ``BaseSessionService`` says, events and state are not set (``get_session`` has
        them); ``last_update_time`` is the session's last write to the store."""
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
        conversation = session_conversation(app_name, user_id, session_id.strip())
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
        module's docstring for what is written where and what raises ``StaleSessionError``."""
        if event.partial:
            return event
        if event.id and any(e.id == event.id and e == event for e in session.events):
            return event  # delivered again: recorded already
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        conversation = session_conversation(session.app_name, session.user_id, session.id)
        seen_calls = {c.id for e in session.events for c in e.get_function_calls() if c.id}
        entry, message = event_entry(event, seen_calls)
        messages: list[EntryMessage] = [] if message is None else [message]
        summary = _summary(session, event)
        covered = summary is not None and summary[1] >= max(
            (e.timestamp for e in session.events if _has_content(e)), default=summary[1]
        )
        compactions = [(summary[0], -1)] if summary is not None and covered else []

        def carried(_fresh: list[dict[str, JsonValue]]) -> tuple[Any, Any]:
            return messages, compactions

        version = _marker(session)
        for _ in range(APPEND_ATTEMPTS):
            if version is None:
                version = await self._caught_up(conversation, session, 0)
            try:
                new = await self.store.record_entries(
                    conversation, [entry], carried, expected_version=version
                )
            except VersionConflict:
                version = await self._caught_up(conversation, session, version)
                continue
            except ConversationNotFound:
                msg = f"Session {session.id} not found."
                raise SessionNotFoundError(msg) from None
            break
        else:
            raise StaleSessionError(STALE)
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
        _set_marker(session, version)
        if summary is not None and not covered and new:
            await self._compact(conversation, *summary)
        app, user, _ = split_state(
            cast("dict[str, Any]", entry[ENTRY_KEY]).get("actions", {}).get("state_delta", {})
        )
        await self._share(session.app_name, session.user_id, app, user, event.id)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

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
