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

The SDK mirrors a turn's transcript only when the turn ends, after its tools ran; the
``PreToolUse`` hook from :meth:`ConvstoreSessionStore.hooks` records each call before its tool
runs, so a process killed inside a tool leaves the call in the store.
"""

from __future__ import annotations

import contextlib
import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import cast
from uuid import UUID, uuid5

from convstore.ports.extras import missing_extra

try:
    import anyio
    from claude_agent_sdk import fold_session_summary
    from claude_agent_sdk.types import (
        HookContext,
        HookEvent,
        HookInput,
        HookJSONOutput,
        HookMatcher,
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

from convstore.convert.claude_code import history_from_entries
from convstore.domain.blocks import ToolUseBlock
from convstore.domain.conversation import EntryMessage
from convstore.domain.errors import ConversationNotFound, InvalidInput
from convstore.domain.events import ConversationStarted, EntriesDeleted, Event
from convstore.projections.prose import tool_use_text
from convstore.projections.wording import BLOCK_SEPARATOR, NO_RESULT
from convstore.store import ConversationInfo, EntryBatch, Store
from convstore.store.aio import AsyncStore, as_async

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


CALL_MARK = "convstoreRecordedBeforeTool"
"""The key marking a transcript entry written by the ``PreToolUse`` hook, not by the CLI; its
value is the call's id. The entry is an assistant message holding that one call."""


def _chain_lines(path: Path) -> list[dict[str, JsonValue]]:
    """The transcript file's lines that have a ``uuid`` (so a later mirror of the same lines is
    recognised and skipped); lines without one are left to the mirror, which would repeat
    them otherwise. No file yet: none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines: list[dict[str, JsonValue]] = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue  # a line the CLI is still writing
        if isinstance(line, dict) and isinstance(line.get("uuid"), str):
            lines.append(line)
    return lines


PROMPT_WAIT = 5.0
"""Seconds the hook waits for the CLI to write the turn's prompt line before it records the
call without it (the CLI writes its transcript a moment after it acts on it)."""


async def _lines_through_prompt(path: Path, prompt_id: str | None) -> list[dict[str, JsonValue]]:
    """The transcript's lines with a uuid, once they include the line of the prompt that
    started this turn (its ``promptId``), or after :data:`PROMPT_WAIT` seconds."""
    with anyio.move_on_after(PROMPT_WAIT):
        while True:
            lines = await anyio.to_thread.run_sync(_chain_lines, path)
            if prompt_id is None or any(line.get("promptId") == prompt_id for line in lines):
                return lines
            await anyio.sleep(0.02)
    return await anyio.to_thread.run_sync(_chain_lines, path)


def _call_entry(
    session_id: str, cwd: str, call: ToolUseBlock, lines: list[dict[str, JsonValue]]
) -> dict[str, JsonValue]:
    """The assistant entry the hook records for ``call``: chained after the transcript's last
    line (as the CLI's own line for the call will be), its uuid derived from the call's id."""
    parent = next((line["uuid"] for line in reversed(lines) if "parentUuid" in line), None)
    block: dict[str, JsonValue] = {
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": call.input,
    }
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "assistant",
        "uuid": str(uuid5(NAMESPACE, "tool_use:" + call.id)),
        "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "sessionId": session_id,
        "cwd": cwd,
        "message": {
            "id": "convstore_" + call.id,
            "type": "message",
            "role": "assistant",
            "content": [block],
            "stop_reason": "tool_use",
        },
        CALL_MARK: call.id,
    }


def _blocks(entry: dict[str, JsonValue], kind: str) -> list[dict[str, JsonValue]]:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _calls_settled(entries: list[dict[str, JsonValue]]) -> list[dict[str, JsonValue]]:
    """``entries`` as the SDK is given them back: an entry the hook wrote is left out once the
    CLI's own line for its call was mirrored; a call no result answers (its process died
    inside the tool) becomes convstore's prose for a call without a result, so a resumed run
    sees what was asked and holds no call left hanging: the hook's entry when it is the only
    record of the call, else the CLI's own line (which the hook can find already written when
    it runs late), in its place in the chain."""
    native = {
        block.get("id")
        for entry in entries
        if CALL_MARK not in entry
        for block in _blocks(entry, "tool_use")
    }
    hooked = {entry[CALL_MARK] for entry in entries if isinstance(entry.get(CALL_MARK), str)}
    answered = {
        block.get("tool_use_id") for entry in entries for block in _blocks(entry, "tool_result")
    }
    settled: list[dict[str, JsonValue]] = []
    for entry in entries:
        marked = entry.get(CALL_MARK)
        if not isinstance(marked, str):
            calls = [block.get("id") for block in _blocks(entry, "tool_use")]
            killed = calls and all(c in hooked and c not in answered for c in calls)
            settled.append(_as_prose(entry) if killed else entry)
        elif marked in native:
            continue
        elif marked in answered:
            settled.append(entry)
        else:
            settled.append(_as_prose(entry))
    return settled


def _as_prose(entry: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """An assistant entry whose calls got no result, as text: its own text, then each call's
    prose and the note that no result was recorded."""
    shown = copy.deepcopy(entry)
    message = shown["message"]
    assert isinstance(message, dict)
    texts = [str(block.get("text")) for block in _blocks(entry, "text")]
    for block in _blocks(entry, "tool_use"):
        call_input = block.get("input")
        call = ToolUseBlock(
            id=str(block.get("id")),
            name=str(block.get("name")),
            input=call_input if isinstance(call_input, dict | str) else {},
        )
        texts.append(tool_use_text(call) + BLOCK_SEPARATOR + NO_RESULT)
    message["content"] = [{"type": "text", "text": BLOCK_SEPARATOR.join(texts)}]
    message["stop_reason"] = "end_turn"
    return shown


class ConvstoreSessionStore:
    """The Claude Agent SDK's ``SessionStore`` on a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore`; either way
    every call runs on the store's worker threads (:func:`convstore.store.aio.as_async`), never on
    the event loop. Pass it to the SDK with its hooks, as
    ``ClaudeAgentOptions(session_store=sessions, hooks=sessions.hooks())``.
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
        """Every entry appended since the last delete, deep-equal; ``None`` if there are none.

        The one exception is an entry :meth:`record_call` wrote: left out once the CLI's own
        line for the call arrived, shown as prose when it never did (see ``_calls_settled``).
        """
        found = await self._twin.entries(conversation_for(key))
        if found is None:
            return None
        return cast("list[SessionStoreEntry]", _calls_settled(found))

    # -- before a tool runs -----------------------------------------------------------------

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        """The hooks to give the SDK beside the store, as
        ``ClaudeAgentOptions(session_store=sessions, hooks=sessions.hooks())``: every tool
        call is recorded before its tool runs."""
        return {"PreToolUse": [HookMatcher(hooks=[self.record_call])]}

    async def record_call(
        self, hook_input: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """The ``PreToolUse`` hook: record the call, and the transcript lines before it, before
        the tool runs.

        The SDK mirrors a turn's lines only when the turn ends, and the CLI has not yet written
        the call's own line when the hook runs; so this appends the lines of the local
        transcript (``transcript_path``, written by the CLI on this host) that have a uuid,
        once they hold the turn's prompt, then an assistant entry holding the call (marked
        with ``CALL_MARK``). When the turn's
        lines are mirrored later, the ones appended here are skipped by uuid, the call's block
        by its id, and :meth:`load` leaves the hook's entry out. A subagent's call (its
        ``agent_id`` set) is not recorded here: its transcript is another file.
        """
        if hook_input["hook_event_name"] != "PreToolUse" or hook_input.get("agent_id"):
            return {}
        path = Path(hook_input["transcript_path"])
        key: SessionKey = {"project_key": path.parent.name, "session_id": path.stem}
        lines = await _lines_through_prompt(path, hook_input.get("prompt_id"))
        call = ToolUseBlock(
            id=hook_input["tool_use_id"],
            name=hook_input["tool_name"],
            input=hook_input["tool_input"],
        )
        entry = _call_entry(hook_input["session_id"], hook_input["cwd"], call, lines)
        await self.append(key, cast("list[SessionStoreEntry]", [*lines, entry]))
        return {}

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
