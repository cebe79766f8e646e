"""A durable session for the OpenAI Agents SDK, kept in a convstore store.

:class:`ConvstoreSession` implements the SDK's ``Session`` protocol
(``agents.memory.session.Session``): ``add_items`` records the Responses items the runner saves
as convstore blocks (see :mod:`convstore.convert.responses`: hosted tool items such as
``web_search_call`` or ``mcp_call`` are hosted calls and results keeping the provider's item,
``computer_call`` / ``local_shell_call`` and the like tool rounds), and ``get_items`` gives back the
replay of that history as plain message items, ``{"role": ..., "content": prose}``, one per
stored message. No ``function_call`` or ``function_call_output`` item ever comes back, so a run
killed between a tool call and its output cannot make the next run's request fail.
``pop_item`` and ``clear_session`` are recorded as rewinds: the log keeps everything, replay
leaves out what was popped or cleared.

The runner hands a turn's items to ``add_items`` only once the turn's tools have run, so a
process killed inside a tool would leave the model's call unrecorded. Passed as the run's
hooks (``Runner.run(..., session=session, hooks=session.hooks)``), :attr:`ConvstoreSession.hooks`
records a response that holds a call the caller's code runs as soon as the model returns it,
before any tool starts (:meth:`ConvstoreSession.record_response`), and ``add_items`` then skips
those items when the runner saves the turn, so nothing is recorded twice.

The session id maps to the same conversation in every process and after a restart (a UUID5 of
the id), or ``conversation_id=`` names one (a conversation another framework recorded, handed
over); :attr:`ConvstoreSession.conversation_id` names it for ``convstore replay``, ``audit``
and ``show``. Runs in several processes on one session take turns: the runner's ``get_items``
(given the run's context) waits while another run's turn is under way, then takes the
conversation for its own (:meth:`ConvstoreSession.take_turn`, ``turn_lease``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, cast
from uuid import UUID, uuid4, uuid5

from convstore.ports.extras import missing_extra

try:
    from agents.agent import Agent
    from agents.items import ModelResponse, TResponseInputItem
    from agents.lifecycle import RunHooks
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    msg = missing_extra(
        "convstore.integrations.openai_agents (the OpenAI Agents SDK)",
        "openai-agents",
        "'openai-agents>=0.24'",
    )
    raise ImportError(msg) from exc

from convstore.convert.responses_tools import CALLER_RUN
from convstore.domain.blocks import ToolUseBlock
from convstore.domain.errors import ConcurrencyError, InvalidInput, VersionConflict
from convstore.domain.events import EntriesRecorded, Event
from convstore.domain.parsing import parse_id
from convstore.projections.messages import RecordedMessage, collect_history, collect_messages
from convstore.recording.openai import arecord_responses_items
from convstore.store import Store
from convstore.store.aio import AsyncStore, as_async

SESSION_NAMESPACE = UUID("5b0f3c52-8a4e-4f1e-9a77-0c6f2d1e9b43")
"""The UUID5 namespace that turns an Agents SDK session id into a conversation id."""

POP_ATTEMPTS = 200
"""How many times a pop reads and tries its conditional rewind before it gives up."""

TURN_KEY = "openai_agents_turn"
"""The runtime entry a run records when it takes the session for its turn (its value: the
taking session object's token); replay never shows entries."""

TURN_LEASE = 30.0
"""Seconds a turn under way holds the session without a new event before another may take
it (``turn_lease``)."""

log = logging.getLogger(__name__)

RUN_HERE = ("function_call", *(kind for kind in CALLER_RUN if not kind.endswith("_output")))
"""The call item types the caller's code runs: a response holding one is recorded before its
tools start."""


def conversation_for(session_id: str) -> UUID:
    """The conversation that holds the session ``session_id``, in any process."""
    return uuid5(SESSION_NAMESPACE, session_id)


def _input_item(message: dict[str, Any]) -> TResponseInputItem:
    """One replayed Chat-shaped message as a Responses input message item."""
    content = message["content"]
    if not isinstance(content, str):
        parts: list[dict[str, Any]] = []
        for part in content:
            if part["type"] == "text":
                parts.append({"type": "input_text", "text": part["text"]})
            elif part["type"] == "file":  # a PDF replay sends natively
                parts.append({"type": "input_file", **part["file"]})
            else:
                url = part["image_url"]["url"]
                parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        content = parts
    return cast(TResponseInputItem, {"role": message["role"], "content": content})


def _echo_key(item: Mapping[str, Any]) -> str:
    """What identifies an item recorded early when the runner hands it to ``add_items``: a
    call by its type and call id; anything else by its content without ``status`` (which the
    runner drops when it is unset), and a reasoning item without its ``id`` too (the runner's
    reasoning id policy may strip it)."""
    kind = str(item.get("type", "message"))
    if kind in RUN_HERE and item.get("call_id") is not None:
        return f"{kind} {item['call_id']}"
    dropped = {"status", "id"} if kind == "reasoning" else {"status"}
    kept = {key: value for key, value in item.items() if key not in dropped}
    return json.dumps(kept, sort_keys=True, default=str)


class _RecordCallsEarly(RunHooks[Any]):
    """Run hooks that record a model response holding a tool call before its tools run."""

    def __init__(self, session: ConvstoreSession) -> None:
        self.session = session

    async def on_llm_end(self, context: object, agent: Agent[Any], response: ModelResponse) -> None:
        await self.session.record_response(response)


class ConvstoreSession:
    """An Agents SDK ``Session`` whose history lives in a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore`; a ``Store``
    is taken through :func:`convstore.store.aio.as_async`, so no store call runs on the event loop.
    ``vision`` says whether the agent's model can see images (replay shows them natively,
    else as markers). ``session_settings`` is a ``SessionSettings`` or a dict of its fields
    (``{"limit": 20}``), normalised as the SDK's own sessions normalise it (a key it does not
    know is a ``TypeError``; none given is ``SessionSettings()``). ``turn_lease`` (seconds;
    0 turns it off) makes runs in several processes on one session take turns: see
    :meth:`get_items`. ``conversation_id`` keeps the session in that convstore conversation
    instead of :func:`conversation_for` of ``session_id``: how a conversation recorded through
    another framework is handed over (made if it does not exist yet).
    """

    def __init__(
        self,
        session_id: str,
        *,
        store: Store | AsyncStore,
        vision: bool = False,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        turn_lease: float = TURN_LEASE,
        conversation_id: UUID | str | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings | None = (  # the protocol's type
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.store = as_async(store)
        self.vision = vision
        self.conversation_id = (
            conversation_for(session_id)
            if conversation_id is None
            else parse_id(conversation_id, "conversation")
        )
        """The convstore conversation that holds this session: ``conversation_id`` when given
        (an existing conversation to continue, whatever recorded it), else
        :func:`conversation_for` of the session id."""
        self.hooks: RunHooks[Any] = _RecordCallsEarly(self)
        """Run hooks to pass to ``Runner.run(..., hooks=session.hooks)``: they record each
        response that holds a tool call before its tools run (see :meth:`record_response`)."""
        self.turn_lease = turn_lease
        self._token = uuid4().hex
        self._turn: int | None = None
        """The version of this session object's latest turn entry."""
        self._created = False
        self._early: Counter[str] = Counter()
        """Items recorded by :meth:`record_response` that the runner has not saved yet."""

    async def _conversation(self) -> UUID:
        """The session's conversation, created on first use (another process may win the
        race to create it; either way it exists afterwards)."""
        if not self._created:
            title = f"openai-agents session {self.session_id}"
            # InvalidInput: it already exists (an earlier run, or another process, made it).
            with contextlib.suppress(InvalidInput):
                await self.store.new_conversation(title, conversation_id=self.conversation_id)
            self._created = True
        return self.conversation_id

    async def _replayed(self) -> list[TResponseInputItem]:
        conversation = await self._conversation()
        request = await self.store.replay(conversation, vision=self.vision)
        return [_input_item(m) for m in request["messages"]]

    async def get_items(
        self, limit: int | None = None, *, wrapper: object = None
    ) -> list[TResponseInputItem]:
        """The history as plain message items (prose), the latest ``limit`` of them when
        given (or set in ``session_settings``), in chronological order.

        Called by the runner (which passes its ``wrapper``, the run's context, to a session
        whose history methods all take one) as a run prepares its input, it first takes the
        session for the run's turn (:meth:`take_turn`), so runs in two processes on one
        session never interleave their turns. Called by anyone else, it only reads. The
        other methods take ``wrapper`` and ignore it."""
        if wrapper is not None and self.turn_lease > 0:
            await self.take_turn()
        items = await self._replayed()
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is None:
            return items
        return items[-limit:] if limit > 0 else []

    async def take_turn(self) -> None:
        """Take the session for a turn: wait while another run's turn is under way on it (its
        newest message is not an assistant's answer holding no call the caller runs, or
        another run took the session since), until that turn ends or shows no new event for
        ``turn_lease`` seconds; then record that this session object has the turn (a runtime
        entry written only if nothing was written since it looked, so two runs never both take
        it). A turn of this session object's own still under way is simply continued."""
        conversation = await self._conversation()
        if self._turn is not None:
            _, since = await self.store.events_after(conversation, self._turn)
            if not _turn_taken(since) and not _answered(since):
                return
        pause, waited = 0.02, 0.0
        while True:
            tail = await self.store.tail(conversation, messages=2)
            newest = tail[-1]
            idle = time.time() - newest.timestamp.timestamp()
            if _under_way(tail) and idle < self.turn_lease:
                if not waited:
                    log.info("session %s: waiting for another run's turn", self.session_id)
                await asyncio.sleep(pause)
                waited += pause
                pause = min(pause * 2, 0.5)
                continue
            try:
                await self.store.record_entries(
                    conversation,
                    [{TURN_KEY: self._token}],
                    expected_version=newest.originator_version,
                )
            except VersionConflict:
                continue  # written meanwhile: look again
            self._turn = newest.originator_version + 1
            return

    async def record_response(self, response: ModelResponse) -> None:
        """Record a model response now, as one assistant message, when it holds a call the
        caller's code runs (a ``function_call``, ``computer_call``, ``shell_call``, ...), so a
        process killed inside the tool leaves the call recorded; a response without one is
        left to ``add_items``. When the runner later saves the turn, ``add_items`` skips the
        items recorded here. :attr:`hooks` calls this from ``on_llm_end``; hooks of your own
        can call it from theirs instead."""
        items = response.to_input_items()
        if not any(item.get("type") in RUN_HERE for item in items):
            return
        await arecord_responses_items(self.store, await self._conversation(), items)
        self._early.update(_echo_key(item) for item in items)

    async def add_items(self, items: list[TResponseInputItem], *, wrapper: object = None) -> None:
        """Record Responses items as blocks: consecutive assistant-side items form one
        assistant message, consecutive tool outputs one user message. Items
        :meth:`record_response` already recorded are skipped. An item type the converter does
        not know is refused (``InvalidInput``) and nothing is recorded."""
        fresh: list[TResponseInputItem] = []
        echoed: Counter[str] = Counter()
        for item in items:
            key = _echo_key(cast(Mapping[str, Any], item))
            if echoed[key] < self._early[key]:
                echoed[key] += 1
            else:
                fresh.append(item)
        if fresh:
            await arecord_responses_items(self.store, await self._conversation(), fresh)
        self._early -= echoed

    async def pop_item(self, *, wrapper: object = None) -> TResponseInputItem | None:
        """Withdraw the latest message (a rewind; the log keeps it) and return it as
        ``get_items`` showed it; ``None`` when the session is empty.

        The rewind is conditional on the version the pop read: if anything was recorded
        meanwhile (another pop, another session's ``add_items``), it is refused, and the pop
        reads again and retries, so it withdraws exactly the item it returns."""
        conversation = await self._conversation()
        for attempt in range(1, POP_ATTEMPTS + 1):
            events = await self.store.events(conversation)
            visible = [m for m in collect_messages(events) if not m.withdrawn]
            if not visible:
                return None
            items = await self._replayed()  # read after the version: a newer one conflicts
            previous = visible[-2].message_id if len(visible) > 1 else None
            try:
                # On the sync store, from a thread: AsyncStore.rewind takes expected_version
                # once its twin of Store is regenerated.
                await asyncio.to_thread(
                    self.store.store.rewind,
                    conversation,
                    to=previous,
                    expected_version=events[-1].originator_version,
                )
            except VersionConflict:
                ceiling = min(0.05, 0.001 * 2 ** min(attempt, 6))
                await asyncio.sleep(random.uniform(0, ceiling))  # noqa: S311 - jitter
                continue
            return items[-1] if items else None
        msg = f"gave up popping from session {self.session_id!r} after {POP_ATTEMPTS} attempts"
        raise ConcurrencyError(msg)

    async def clear_session(self, *, wrapper: object = None) -> None:
        """Withdraw every message (a rewind; the log keeps them)."""
        await self.store.rewind(await self._conversation(), to=None)


def _turn_taken(events: list[Event]) -> bool:
    """Whether a run took the session in ``events``."""
    return any(
        isinstance(event, EntriesRecorded) and any(TURN_KEY in entry for entry in event.entries)
        for event in events
    )


def _answered(events: list[Event]) -> bool:
    """Whether ``events`` hold an answer that ends a turn (:func:`_is_answer`)."""
    return any(_is_answer(message) for message in collect_history(events, tail=True).messages)


def _is_answer(message: RecordedMessage) -> bool:
    """Whether ``message`` ends a turn: an assistant message holding no call the caller's code
    runs (calls the provider ran, hosted ones, leave nothing to run)."""
    return message.role == "assistant" and not any(
        isinstance(recorded.block, ToolUseBlock) for recorded in message.blocks
    )


def _under_way(tail: list[Event]) -> bool:
    """Whether the end of a session's log (its last two messages on) shows a turn under way:
    a run took the session after the newest message's last event, or the newest message is
    not an answer (a question, a call, a tool's output)."""
    for event in reversed(tail):
        if _turn_taken([event]):
            return True
        if getattr(event, "message_id", None) is not None:
            break  # the newest message's last event: no run took the session after it
    messages = collect_history(tail, tail=True).messages
    return bool(messages) and not _is_answer(messages[-1])
