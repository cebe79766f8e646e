"""Claude Agent SDK: a durable ``SessionStore`` for its session transcripts.

    pip install -e '.[claude-agent]'   # in the convstore checkout

:class:`ConvstoreSessionStore` implements the SDK's ``SessionStore`` protocol (``append``,
``load`` and the optional ``list_sessions``, ``list_session_summaries``, ``delete``,
``list_subkeys``). Each key (``project_key``, ``session_id``, optional ``subpath``) is one
conversation whose id is derived from the key (a UUID5), so every process, before and after a
restart, finds the same one; a subagent's (``subpath``) conversation names the session's as
its parent. Entries are kept verbatim (``load`` returns them deep-equal, ``uuid`` is the
idempotency key), and the entries that carry a user or assistant message are also recorded
as blocks, so ``replay``, ``audit``, ``pressure`` and compaction work on the session.
"""

from __future__ import annotations

import contextlib
import json
from typing import cast
from uuid import UUID, uuid5

from convstore.extras import missing_extra

try:
    from claude_agent_sdk import fold_session_summary
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )
except ImportError:  # pragma: no cover - exercised without the extra installed
    msg = missing_extra(
        "convstore.integrations.claude_agent (the Claude Agent SDK)",
        "claude-agent",
        "'claude-agent-sdk>=0.2.189'",
    )
    raise ImportError(msg) from None

from pydantic import JsonValue

from convstore.aio import AsyncStore, as_async
from convstore.convert.claude_code import history_from_entries
from convstore.domain.conversation import EntryMessage
from convstore.domain.events import ConversationStarted, EntriesDeleted, Event
from convstore.errors import ConversationNotFound, InvalidInput
from convstore.store import ConversationInfo, EntryBatch, Store

NAMESPACE = UUID("5d0c7a52-3f0e-4f4b-9a57-1c2f2d1b7e10")
"""The UUID5 namespace session keys are hashed in (fixed forever: it is how keys find their
conversations)."""

SOURCE_PREFIX = "claude-agent:"
"""``ConversationStarted.source`` of a session's conversation: this, then the key as JSON."""


def _parts(key: SessionKey | SessionListSubkeysKey) -> tuple[str, str, str | None]:
    project, session = key.get("project_key"), key.get("session_id")
    subpath = key.get("subpath")
    if not isinstance(project, str) or not isinstance(session, str):
        msg = "a session key needs string project_key and session_id"
        raise InvalidInput(msg)
    if subpath is not None and (not isinstance(subpath, str) or not subpath):
        msg = "a session key's subpath must be a non-empty string (omit it for the main one)"
        raise InvalidInput(msg)
    return project, session, subpath


def source_of(key: SessionKey) -> str:
    """The ``source`` recorded on the conversation holding ``key``."""
    return SOURCE_PREFIX + json.dumps(list(_parts(key)), ensure_ascii=False)


def conversation_for(key: SessionKey) -> UUID:
    """The id of the conversation that holds ``key``: the same in every process, forever."""
    return uuid5(NAMESPACE, source_of(key))


def _key_of(info: ConversationInfo) -> tuple[str, str, str | None] | None:
    if info.source is None or not info.source.startswith(SOURCE_PREFIX):
        return None
    try:
        project, session, subpath = json.loads(info.source.removeprefix(SOURCE_PREFIX))
    except (ValueError, TypeError):
        return None
    return project, session, subpath


def _carried(entries: list[dict[str, JsonValue]]) -> EntryBatch:
    """The messages and compactions a batch of transcript lines carries."""
    history = history_from_entries(entries)
    messages: list[EntryMessage] = [
        (m.role, m.blocks, m.status, m.reason) for m in history.messages
    ]
    return messages, [(c.summary, c.through) for c in history.compactions]


def _epoch_ms(event: Event) -> int:
    return int(event.timestamp.timestamp() * 1000)


class ConvstoreSessionStore:
    """The Claude Agent SDK's ``SessionStore`` on a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore`; either way
    every call runs on the store's worker threads (:func:`convstore.aio.as_async`), never on
    the event loop. Pass it to the SDK as
    ``ClaudeAgentOptions(session_store=ConvstoreSessionStore(store))``.
    """

    def __init__(self, store: Store | AsyncStore) -> None:
        self.store = store
        self._twin = as_async(store)

    def conversation_for(self, key: SessionKey) -> UUID:
        """The conversation that holds ``key`` (for ``replay``, ``audit``, ``show``)."""
        return conversation_for(key)

    # -- required ---------------------------------------------------------------------------

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Record a batch of transcript entries (one write; repeated ``uuid`` s are skipped)."""
        if not entries:
            return
        conversation = conversation_for(key)
        try:
            await self._twin.record_entries(conversation, entries, _carried)
        except ConversationNotFound:
            await self._start(key)
            await self._twin.record_entries(conversation, entries, _carried)

    async def _start(self, key: SessionKey) -> None:
        project, session, subpath = _parts(key)
        parent = (
            None
            if subpath is None
            else conversation_for({"project_key": project, "session_id": session})
        )
        conversation, source = conversation_for(key), source_of(key)
        # Another process may start it first: the same conversation, by its key.
        with contextlib.suppress(InvalidInput):
            await self._twin.new_conversation(
                conversation_id=conversation, parent_id=parent, source=source
            )

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry appended since the last delete, deep-equal; ``None`` if there are none."""
        found = await self._twin.entries(conversation_for(key))
        return cast("list[SessionStoreEntry] | None", found)

    # -- optional ---------------------------------------------------------------------------

    async def _live(self) -> list[tuple[tuple[str, str, str | None], int]]:
        """Every session key with entries (not deleted), and its last write in epoch ms."""
        infos = await self._twin.conversations()
        found = []
        for info in infos:
            parts = _key_of(info)
            if parts is None:
                continue
            last = await self._twin.last_event(info.id)
            if last is None or isinstance(last, ConversationStarted | EntriesDeleted):
                continue
            found.append((parts, _epoch_ms(last)))
        return found

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The main sessions of ``project_key`` with their last write time (epoch ms)."""
        return [
            {"session_id": session, "mtime": mtime}
            for (project, session, subpath), mtime in await self._live()
            if project == project_key and subpath is None
        ]

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summary of each main session of ``project_key``, folded from its entries.

        Folded when asked rather than kept beside each append: one read of each listed session.
        """
        summaries: list[SessionSummaryEntry] = []
        for (project, session, subpath), mtime in await self._live():
            if project != project_key or subpath is not None:
                continue
            key: SessionKey = {"project_key": project, "session_id": session}
            entries = await self.load(key)
            summary = fold_session_summary(None, key, entries or [])
            summary["mtime"] = mtime
            summaries.append(summary)
        return summaries

    async def delete(self, key: SessionKey) -> None:
        """Delete a session (and, for a main key, every subkey under it): ``load`` returns
        ``None`` and listings leave it out; the log keeps the bytes."""
        project, session, subpath = _parts(key)
        targets = [key]
        if subpath is None:
            targets += [
                {"project_key": project, "session_id": session, "subpath": sub}
                for sub in await self.list_subkeys({"project_key": project, "session_id": session})
            ]
        for target in targets:
            conversation = conversation_for(target)
            last = await self._twin.last_event(conversation)
            if last is None or isinstance(last, EntriesDeleted):
                continue
            await self._twin.delete_entries(conversation)

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """The subpaths (subagent transcripts) recorded under a session, not deleted."""
        project, session, _ = _parts(key)
        return [
            subpath
            for (p, s, subpath), _ in await self._live()
            if p == project and s == session and subpath is not None
        ]
