"""Microsoft Agent Framework: a history provider kept in a convstore store.

    pip install -e '.[agent-framework]'   # in the convstore checkout

:class:`ConvstoreHistoryProvider` is an ``agent_framework.HistoryProvider``, passed to an agent
as ``Agent(client, ..., context_providers=[provider])``. Each session id is one conversation
(a UUID5 of the id, the same in every process). The agent calls ``get_messages`` in the
provider's ``before_run``, once per run before the first model call, and ``save_messages`` in
its ``after_run``, once the run is done: the run's input messages and the response's messages
(model replies, tool results, the answer) in one call. Each saved message is recorded in one
write with the others of its batch, twice: verbatim (``Message.to_dict()``, a runtime entry,
so nothing it carried is lost) and as blocks (:mod:`convstore.convert.agent_framework`), so
``replay``, ``audit``, ``show`` and compaction see the session.

``get_messages`` gives back the conversation's replay, one ``Message`` per stored message,
every block as prose: no ``function_call`` or ``function_result`` content ever comes back, so
a run killed between a call and its result cannot make the next run's request fail.

A process killed inside a tool would lose the whole run, the tool's call included, since
``after_run`` never comes. So ``before_run`` also hands the run a chat middleware (through the
framework's ``SessionContext.extend_middleware``) that runs around every model call of the
run's function loop: when a model reply holds a call the agent's code runs, it records that
reply at once, with the run's input ahead of it, before the loop starts the tool
(:meth:`ConvstoreHistoryProvider.record_early`), and ``save_messages`` then skips them.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast
from uuid import UUID, uuid5

from convstore.ports.extras import missing_extra

try:
    from agent_framework import (
        AgentSession,
        ChatContext,
        ChatMiddleware,
        ChatResponse,
        Content,
        HistoryProvider,
        Message,
        ResponseStream,
        SessionContext,
        SupportsAgentRun,
    )
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    _HINT = missing_extra(
        "convstore.integrations.agent_framework (Microsoft Agent Framework)",
        "agent-framework",
        "'agent-framework-core>=1.26'",
    )
    raise ImportError(_HINT) from None

from pydantic import JsonValue

from convstore.convert.agent_framework import message_blocks, message_dict
from convstore.domain.errors import InvalidInput
from convstore.engine.plan import JSONDict
from convstore.store import EntryBatch, Store
from convstore.store.aio import AsyncStore, as_async

__all__ = [
    "ConvstoreHistoryProvider",
    "conversation_for",
    "message_from_blocks",
    "messages_from_replay",
]

NAMESPACE = UUID("b95b4349-67e4-432b-a7e7-cb56214abf98")
"""The UUID5 namespace an Agent Framework session id is hashed in (fixed forever)."""

ENTRY_KEY = "agent_framework"
"""The key under which a runtime entry keeps a message's ``to_dict()``."""

EARLY_KEY = "recorded_early"
"""The key of the provider's session state that counts the replies recorded before their
tools ran and not yet saved by ``after_run`` (by :func:`_echo_key`)."""


def conversation_for(session_id: str) -> UUID:
    """The conversation that holds the Agent Framework session ``session_id``, in any process."""
    return uuid5(NAMESPACE, session_id)


def message_from_blocks(role: str, blocks: Sequence[Any]) -> Message:
    """A stored message (its role and blocks) as a native ``Message``: calls as
    ``function_call`` contents, results as ``function_result`` contents of a ``tool`` message
    (the reverse of what ``save_messages`` records)."""
    return Message.from_dict(message_dict(cast(Any, role), blocks))


def messages_from_replay(request: JSONDict) -> list[Message]:
    """An OpenAI-shaped replay (``{"messages": [...]}``) as ``Message`` objects: text, and with
    vision images (and PDFs sent natively) as ``uri`` / ``data`` contents."""
    out: list[Message] = []
    for message in request["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(Message(message["role"], [content]))
            continue
        contents: list[Content] = []
        for part in content:
            if part["type"] == "text":
                contents.append(Content.from_text(part["text"]))
            elif part["type"] == "file":
                file = part["file"]
                media = file["file_data"].split(";", 1)[0].removeprefix("data:")
                contents.append(
                    Content.from_uri(file["file_data"], media_type=media, name=file["filename"])
                )
            else:
                url = part["image_url"]["url"]
                media = (
                    url.split(";", 1)[0].removeprefix("data:")
                    if url.startswith("data:")
                    else mimetypes.guess_type(url)[0]
                )
                contents.append(Content.from_uri(url, media_type=media))
        out.append(Message(message["role"], contents))
    return out


def _verbatim(message: Message) -> dict[str, JsonValue]:
    """The message's dict as JSON (a value JSON cannot hold, such as a tool's object result,
    is kept as its ``repr``)."""
    return cast(dict[str, JsonValue], json.loads(json.dumps(message.to_dict(), default=repr)))


def _entry(message: Message) -> dict[str, JsonValue]:
    """The runtime entry that keeps ``message`` verbatim; its ``uuid`` (the store's
    idempotency key) is the message's id when it has one."""
    entry: dict[str, JsonValue] = {ENTRY_KEY: _verbatim(message)}
    if message.message_id:
        entry["uuid"] = f"agent-framework:{message.message_id}"
    return entry


def _key(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry, sort_keys=True)


def _echo_key(message: Message) -> str:
    """What identifies a reply recorded early when ``after_run`` saves it again: its role,
    text and calls (the framework adds an author name and call-content ids in between)."""
    calls = [(c.type, c.call_id, c.name) for c in message.contents if c.type == "function_call"]
    return json.dumps([message.role, message.text, calls])


def _runs_here(message: Message) -> bool:
    """Whether ``message`` holds a call the agent's own code runs (not a hosted one)."""
    return any(c.type == "function_call" and not c.hosted for c in message.contents)


class _RecordCallsEarly(ChatMiddleware):
    """Chat middleware around each model call of one run: records a reply holding a call
    before the function loop runs the tool, with the run's input ahead of the first one."""

    def __init__(
        self,
        provider: ConvstoreHistoryProvider,
        session_id: str,
        state: dict[str, Any],
        pending: list[Message],
    ) -> None:
        self.provider = provider
        self.session_id = session_id
        self.state = state
        self.pending = pending
        """The run's input (what ``after_run`` will save first), until it is recorded."""

    async def record(self, reply: Sequence[Message]) -> None:
        if not any(_runs_here(message) for message in reply):
            return
        batch = [*self.pending, *reply]
        await self.provider.record_early(self.session_id, batch, state=self.state)
        self.pending = []

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        await call_next()
        result = context.result
        if isinstance(result, ResponseStream):

            async def recorded(response: ChatResponse) -> ChatResponse:
                await self.record(response.messages)
                return response

            context.result = result.with_result_hook(recorded)
        elif isinstance(result, ChatResponse):
            await self.record(result.messages)


class ConvstoreHistoryProvider(HistoryProvider):
    """An Agent Framework history provider whose messages live in a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore` (a ``Store``
    is taken through :func:`convstore.store.aio.as_async`, so no store call runs on the event
    loop). ``vision`` says whether the agent's model can see images (replay shows them
    natively, else as markers). ``record_calls_early`` (on by default) records a model reply
    holding a tool call before the tool runs. ``conversation_for`` names the convstore
    conversation that holds a session id (default :func:`conversation_for`): mapping one to an
    existing conversation is how a conversation recorded through another framework is handed
    over. The other keywords are ``HistoryProvider``'s.
    """

    DEFAULT_SOURCE_ID = "convstore"

    def __init__(
        self,
        store: Store | AsyncStore,
        *,
        source_id: str = DEFAULT_SOURCE_ID,
        vision: bool = False,
        record_calls_early: bool = True,
        load_messages: bool = True,
        store_inputs: bool = True,
        store_context_messages: bool = False,
        store_context_from: set[str] | None = None,
        store_outputs: bool = True,
        conversation_for: Callable[[str], UUID] = conversation_for,
    ) -> None:
        if not isinstance(store, Store | AsyncStore):
            msg = f"store must be a convstore Store or AsyncStore, not {type(store).__name__}"
            raise InvalidInput(msg)
        super().__init__(
            source_id,
            load_messages=load_messages,
            store_inputs=store_inputs,
            store_context_messages=store_context_messages,
            store_context_from=store_context_from,
            store_outputs=store_outputs,
        )
        self.store = as_async(store)
        self.vision = vision
        self.record_calls_early = record_calls_early
        self.conversation_for = conversation_for
        self._created: set[UUID] = set()

    def conversation_id(self, session_id: str) -> UUID:
        """The convstore conversation that holds ``session_id`` (``conversation_for``)."""
        return self.conversation_for(session_id)

    async def _conversation(self, session_id: str | None) -> UUID:
        """The session's conversation, created on first use (another process may win the race
        to create it; either way it exists afterwards)."""
        if not isinstance(session_id, str) or not session_id:
            msg = f"a convstore history needs a session id (a non-empty string), not {session_id!r}"
            raise InvalidInput(msg)
        conversation = self.conversation_for(session_id)
        if conversation not in self._created:
            title = f"agent-framework session {session_id}"
            with contextlib.suppress(InvalidInput):  # it exists already
                await self.store.new_conversation(title, conversation_id=conversation)
            self._created.add(conversation)
        return conversation

    async def get_messages(
        self, session_id: str | None, *, state: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Message]:
        """The session's history as the next model call is sent it: the replay, one
        ``Message`` per stored message, every block as prose."""
        conversation = await self._conversation(session_id)
        return messages_from_replay(await self.store.replay(conversation, vision=self.vision))

    async def save_messages(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Record ``messages`` in one write, each verbatim and as blocks. A reply
        :meth:`record_early` recorded before its tools ran is skipped, and so is a message
        whose id was recorded before. A content the converter refuses is an ``InvalidInput``
        naming it, and nothing of the batch is written."""
        early: Counter[str] = Counter((state or {}).get(EARLY_KEY, {}))
        fresh: list[Message] = []
        for message in messages:
            key = _echo_key(message)
            if early[key] > 0:
                early[key] -= 1
            else:
                fresh.append(message)
        await self._record(session_id, fresh)
        if state is not None:
            state[EARLY_KEY] = {key: count for key, count in early.items() if count > 0}

    async def record_early(
        self,
        session_id: str | None,
        messages: Sequence[Message],
        *,
        state: dict[str, Any] | None = None,
    ) -> None:
        """Record ``messages`` now, in one write (the run's middleware calls this with a
        model reply that holds a tool call, before the tool runs, preceded by the run's input
        the first time), and count them in ``state`` so that ``save_messages`` skips them
        when ``after_run`` saves the run."""
        await self._record(session_id, list(messages))
        if state is not None:
            counts = Counter(state.get(EARLY_KEY, {}))
            counts.update(_echo_key(message) for message in messages)
            state[EARLY_KEY] = dict(counts)

    async def _record(self, session_id: str | None, messages: Sequence[Message]) -> None:
        conversation = await self._conversation(session_id)
        if not messages:
            return
        entries = [_entry(m) for m in messages]
        # Every message converted first, so a bad one leaves the session untouched.
        converted = [
            message_blocks(cast(Mapping[str, Any], entry[ENTRY_KEY]), f"message {position}")
            for position, entry in enumerate(entries)
        ]
        # record_entries hands back the entries not recorded yet, as copies: found by content
        # (two equal entries carry equal messages).
        by_key = {_key(e): c for e, c in zip(entries, converted, strict=True)}

        def carry(new: list[dict[str, JsonValue]]) -> EntryBatch:
            found = [by_key[_key(e)] for e in new]
            return [(role, blocks, "ended", None) for role, blocks in found if blocks], []

        await self.store.record_entries(conversation, entries, carry)

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """Load the history (``HistoryProvider.before_run``) and give the run the middleware
        that records a call before its tool runs."""
        if getattr(agent, "require_per_service_call_history_persistence", False):
            msg = (
                "ConvstoreHistoryProvider does not take"
                " require_per_service_call_history_persistence (it already records each tool"
                " call before the tool runs); leave it off"
            )
            raise InvalidInput(msg)
        await super().before_run(agent=agent, session=session, context=context, state=state)
        # Counts a run left behind (it failed before after_run) are moot in a new run: kept,
        # they could make this run's save skip a message equal to one recorded back then.
        state.pop(EARLY_KEY, None)
        if self.record_calls_early and self.store_outputs:
            pending = self._get_context_messages_to_store(context)
            if self.store_inputs:
                pending.extend(context.input_messages)
            early = _RecordCallsEarly(self, session.session_id, state, pending)
            context.extend_middleware(self.source_id, [early])
