"""ConvstoreSessionService: ADK events as entries and blocks (and back, exactly), state by
ADK's prefixes, listing and deletion, stale sessions by log version, and ADK's own Runner with
a scripted model in fresh processes (a run killed inside its tool, a resumed run, two runners
on one session), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.adk.sessions.session import Session
from google.genai import types

import convstore
from convstore.domain.errors import InvalidInput
from convstore.integrations.google_adk import (
    ConvstoreSessionService,
    app_state_conversation,
    session_conversation,
)
from convstore.projections.wording import NO_RESULT
from tests.killed_in_tool import kill_in_tool, missing_calls
from tests.strategies import TINY_IMAGES

ROOT = Path(__file__).resolve().parents[1]
PNG = TINY_IMAGES["image/png"][0]
T = TypeVar("T")


def run(awaitable: Awaitable[T]) -> T:
    async def wrapped() -> T:
        return await awaitable

    return asyncio.run(wrapped())


def user_text(text: str, invocation_id: str = "inv-1", **fields: Any) -> Event:
    content = types.Content(role="user", parts=[types.Part(text=text)])
    return Event(author="user", invocation_id=invocation_id, content=content, **fields)


def texts(events: list[Event]) -> list[str]:
    """The text parts of events, in order."""
    return [p.text for e in events if e.content for p in e.content.parts or [] if p.text]


def rich_events() -> list[Event]:
    """Events with every part kind the mapping knows, and envelope fields ADK hands back."""
    pdf = base64.b64encode(b"%PDF-1.4 tiny").decode()
    model = Event(
        author="planner",
        invocation_id="inv-1",
        branch="root.planner",
        timestamp=1_790_000_000.25,
        long_running_tool_ids={"call-2"},
        usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=12),
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="Which city?", thought=True, thought_signature=b"\x01sig"),
                types.Part(text="Looking it up."),
                types.Part(
                    function_call=types.FunctionCall(
                        id="call-1", name="lookup", args={"city": "Oslo", "days": [1, 2.5]}
                    ),
                    thought_signature=b"\x02",
                ),
                types.Part(function_call=types.FunctionCall(id="call-2", name="approve")),
                types.Part(
                    inline_data=types.Blob(mime_type="image/png", data=base64.b64decode(PNG))
                ),
                types.Part(
                    inline_data=types.Blob(
                        mime_type="application/pdf",
                        data=base64.b64decode(pdf),
                        display_name="a.pdf",
                    )
                ),
                types.Part(
                    file_data=types.FileData(
                        file_uri="https://example.com/x.png", mime_type="image/png"
                    )
                ),
                types.Part(
                    file_data=types.FileData(
                        file_uri="gs://bucket/report.txt", mime_type="text/plain", display_name="r"
                    )
                ),
                types.Part(
                    executable_code=types.ExecutableCode(
                        code="print(1)", language=types.Language.PYTHON
                    )
                ),
            ],
        ),
        actions=EventActions(
            state_delta={"plan": ["a", "b"]}, transfer_to_agent="helper", skip_summarization=True
        ),
    )
    answer = Event(
        author="planner",
        invocation_id="inv-1",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id="call-1", name="lookup", response={"result": {"temp": -3}}
                    )
                ),
            ],
        ),
    )
    bare = Event(author="planner", invocation_id="inv-1", actions=EventActions(end_of_agent=True))
    return [user_text("Weather in Oslo?"), model, answer, bare]


def test_parts_become_blocks_and_events_come_back_exactly(location: str) -> None:
    """Each part with a block kind is stored as that block (replay, audit and show see it);
    everything else rides in the event's entry; reading back gives every event equal to the
    one appended (ids, invocation, author, branch, timestamps, actions, usage, signatures)."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store, unanswered_calls_as_prose=False)
        session = run(service.create_session(app_name="app", user_id="u", session_id="s"))
        appended = rich_events()
        for event in appended:
            run(service.append_event(session, event.model_copy(deep=True)))
        conversation = session_conversation("app", "u", "s")
        stored = store.messages(conversation)
        assert [(m.role, [b.block.type for b in m.blocks]) for m in stored] == [
            ("user", ["text"]),
            (
                "assistant",
                [
                    "reasoning",
                    "text",
                    "tool_use",
                    "tool_use",
                    "image",
                    "document",
                    "image",
                    "document",
                ],
            ),
            ("user", ["tool_result"]),
        ]
        result = stored[2].blocks[0].block
        assert result.model_dump(exclude_none=True) == {
            "type": "tool_result",
            "tool_use_id": "call-1",
            "name": "lookup",
            "content": '{"result":{"temp":-3}}',
            "is_error": False,
        }
        back = run(service.get_session(app_name="app", user_id="u", session_id="s"))
        assert back is not None
        assert back.events == appended
        # Answered or long-running, no call is rewritten by default either.
        default = ConvstoreSessionService(store=store)
        shown = run(default.get_session(app_name="app", user_id="u", session_id="s"))
        assert shown is not None
        assert shown.events == appended
        assert back.state == {"plan": ["a", "b"]}
        replayed = store.replay(conversation)["messages"]
        assert 'Tool use: lookup({"city":"Oslo","days":[1,2.5]})' in replayed[1]["content"]
        assert replayed[2]["content"] == 'Result (lookup): {"result":{"temp":-3}}'


def test_state_prefixes_app_user_session_and_temp(location: str) -> None:
    """``app:`` state is shared by the app's sessions, ``user:`` by one user's, the rest is
    the session's own, and ``temp:`` lives in the session object only: written nowhere."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        first = run(
            service.create_session(
                app_name="app",
                user_id="ada",
                session_id="one",
                state={"topic": "x", "app:model": "m1", "user:lang": "no", "temp:draft": 1},
            )
        )
        assert first.state == {"topic": "x", "app:model": "m1", "user:lang": "no"}
        delta = {"step": 2, "app:model": "m2", "user:tz": "CET", "temp:scratch": "gone"}
        event = user_text("hi", actions=EventActions(state_delta=delta))
        run(service.append_event(first, event))
        assert first.state["temp:scratch"] == "gone"  # in memory, for the invocation
        again = run(service.get_session(app_name="app", user_id="ada", session_id="one"))
        assert again is not None
        assert again.state == {
            "topic": "x",
            "step": 2,
            "app:model": "m2",
            "user:lang": "no",
            "user:tz": "CET",
        }
        same_user = run(service.create_session(app_name="app", user_id="ada", session_id="two"))
        assert same_user.state == {"app:model": "m2", "user:lang": "no", "user:tz": "CET"}
        other = run(service.create_session(app_name="app", user_id="bob", session_id="three"))
        assert other.state == {"app:model": "m2"}
        other_app = run(service.create_session(app_name="else", user_id="ada", session_id="1"))
        assert other_app.state == {}
        assert run(service.get_user_state(app_name="app", user_id="ada")) == {
            "lang": "no",
            "tz": "CET",
        }
        dumped = b"".join(store.dump())
        assert b"temp:" not in dumped
        assert b"gone" not in dumped
        assert store.entries(app_state_conversation("app")) is not None


def test_get_session_config_windows_events(location: str) -> None:
    """num_recent_events keeps the newest N (0: none), after_timestamp those at or after it;
    state is folded from every event either way (on an AsyncStore given directly)."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=convstore.as_async(store))
        session = run(service.create_session(app_name="app", user_id="u", session_id="s"))
        for i in range(5):
            event = user_text(
                f"m{i}", timestamp=100.0 + i, actions=EventActions(state_delta={f"k{i}": i})
            )
            run(service.append_event(session, event))

        def window(config: GetSessionConfig) -> list[str]:
            got = run(
                service.get_session(app_name="app", user_id="u", session_id="s", config=config)
            )
            assert got is not None
            assert got.state == {f"k{i}": i for i in range(5)}
            return texts(got.events)

        assert window(GetSessionConfig(num_recent_events=2)) == ["m3", "m4"]
        assert window(GetSessionConfig(num_recent_events=0)) == []
        assert window(GetSessionConfig(after_timestamp=102.0)) == ["m2", "m3", "m4"]
        assert window(GetSessionConfig(num_recent_events=4, after_timestamp=103.0)) == ["m3", "m4"]


def test_list_sessions_from_the_listing_and_delete_erases(location: str) -> None:
    """list_sessions reads the listing index by app and user, oldest update first, without
    events; delete_session erases the conversation (a tombstone stays) and does nothing for
    a session that is not there; a taken id (or a deleted one) is refused on create."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        for user, session_id in [("ada", "a1"), ("bob", "b1"), ("ada", "a2")]:
            run(service.create_session(app_name="app", user_id=user, session_id=session_id))
            time.sleep(0.002)
        run(service.create_session(app_name="other", user_id="ada", session_id="o1"))
        a1 = run(service.get_session(app_name="app", user_id="ada", session_id="a1"))
        assert a1 is not None
        run(service.append_event(a1, user_text("latest")))

        listed = run(service.list_sessions(app_name="app"))
        assert [(s.user_id, s.id) for s in listed.sessions] == [
            ("bob", "b1"),
            ("ada", "a2"),
            ("ada", "a1"),
        ]
        assert all(s.events == [] for s in listed.sessions)
        mine = run(service.list_sessions(app_name="app", user_id="ada"))
        assert [s.id for s in mine.sessions] == ["a2", "a1"]
        with pytest.raises(AlreadyExistsError):
            run(service.create_session(app_name="app", user_id="ada", session_id="a2"))

        run(service.delete_session(app_name="app", user_id="ada", session_id="a1"))
        run(service.delete_session(app_name="app", user_id="ada", session_id="a1"))
        run(service.delete_session(app_name="app", user_id="ada", session_id="never"))
        assert run(service.get_session(app_name="app", user_id="ada", session_id="a1")) is None
        assert [
            s.id for s in run(service.list_sessions(app_name="app", user_id="ada")).sessions
        ] == ["a2"]
        [tombstone] = store.erasures()
        assert (tombstone.id, tombstone.reason) == (
            session_conversation("app", "ada", "a1"),
            "google-adk delete_session",
        )
        with pytest.raises(AlreadyExistsError, match="was deleted"):
            run(service.create_session(app_name="app", user_id="ada", session_id="a1"))
        with pytest.raises(SessionNotFoundError):
            run(service.append_event(a1, user_text("after the delete")))
        with pytest.raises(InvalidInput, match="NUL"):
            run(service.create_session(app_name="app", user_id="nul\x00", session_id="n"))
        conversation = session_conversation("app", "nul\x00", "n")
        assert conversation not in [c.id for c in store.conversations()]


def test_two_stores_creating_one_session_at_once_one_wins_the_other_is_told(
    location: str,
) -> None:
    """Two runners (two Store objects on one store, two threads) create the same session id
    at the same moment, forty times: each time exactly one succeeds and its initial state is
    the session's, and the other gets ``AlreadyExistsError`` as ADK's own services raise.
    Before, both succeeded in about one round of three, and one lost its state silently."""
    rounds = 40
    with convstore.open_store(location) as first, convstore.open_store(location) as second:
        services = [ConvstoreSessionService(store=s) for s in (first, second)]
        barrier = threading.Barrier(2)

        def create(which: int, session_id: str) -> str:
            barrier.wait()
            try:
                run(
                    services[which].create_session(
                        app_name="app",
                        user_id="ada",
                        session_id=session_id,
                        state={"runner": which},
                    )
                )
            except AlreadyExistsError:
                return "refused"
            return "created"

        with ThreadPoolExecutor(2) as pool:
            for n in range(rounds):
                session_id = f"race-{n}"
                outcomes = list(pool.map(create, [0, 1], [session_id] * 2))
                assert sorted(outcomes) == ["created", "refused"], (n, outcomes)
                winner = outcomes.index("created")
                for service in services:
                    got = run(
                        service.get_session(app_name="app", user_id="ada", session_id=session_id)
                    )
                    assert got is not None
                    assert got.state == {"runner": winner}, (n, got.state)
        listed = run(services[0].list_sessions(app_name="app", user_id="ada"))
        assert len(listed.sessions) == rounds


def agent_text(text: str, invocation: str, **fields: Any) -> Event:
    """An agent's final answer (it ends its invocation's turn)."""
    content = types.Content(role="model", parts=[types.Part(text=text)])
    return Event(author="planner", invocation_id=invocation, content=content, **fields)


def agent_call(name: str, invocation: str) -> Event:
    """An agent's function call (its invocation's turn stays under way)."""
    call = types.FunctionCall(id=f"call-{name}", name=name, args={})
    content = types.Content(role="model", parts=[types.Part(function_call=call)])
    return Event(author="planner", invocation_id=invocation, content=content)


def test_stale_sessions_by_version_not_by_clock(location: str) -> None:
    """A session that holds every stored event appends (after its own appends, after a
    reload, with an event timestamped before the last one, through a compaction, after a
    label set by someone else); within a turn it started, one that misses another writer's
    event gets ADK's StaleSessionError and nothing is written. A new turn's first event never
    does: the session takes in what it missed (in place) and the turn starts on it."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        mine = run(service.create_session(app_name="app", user_id="u", session_id="s"))
        # The stale copy is another store's on the same location, as another process's.
        other_store = convstore.open_store(location)
        other = ConvstoreSessionService(store=other_store)
        stale = run(other.get_session(app_name="app", user_id="u", session_id="s"))
        assert stale is not None
        run(other.append_event(stale, user_text("theirs", invocation_id="theirs")))
        run(other.append_event(stale, agent_text("their answer", "theirs")))
        for text in ["one", "two"]:  # mine takes in their turn before its own starts
            run(service.append_event(mine, user_text(text)))
        skewed = user_text(
            "from a host whose clock is behind", timestamp=mine.events[-1].timestamp - 60
        )
        run(service.append_event(mine, skewed))
        summary = types.Content(role="model", parts=[types.Part(text="They said one and two.")])
        compaction = EventCompaction(
            start_timestamp=0, end_timestamp=time.time(), compacted_content=summary
        )
        run(
            service.append_event(
                mine,
                Event(
                    author="user",
                    invocation_id="inv-1",
                    actions=EventActions(compaction=compaction),
                ),
            )
        )
        conversation = session_conversation("app", "u", "s")
        store.set_labels(conversation, {"team": "search"})  # a person's label: no ADK event
        run(service.append_event(mine, user_text("after the compaction")))
        run(service.append_event(mine, agent_text("an answer", "inv-1")))
        before = store.last_event(conversation)
        assert before is not None
        with pytest.raises(StaleSessionError):  # their turn goes on: it missed mine
            run(other.append_event(stale, agent_text("more of theirs", "theirs")))
        assert store.last_event(conversation) == before
        run(other.append_event(stale, user_text("a new turn of theirs", invocation_id="later")))
        other_store.close()
        assert texts(stale.events) == [*texts(mine.events), "a new turn of theirs"]
        reloaded = run(service.get_session(app_name="app", user_id="u", session_id="s"))
        assert reloaded is not None
        run(service.append_event(reloaded, user_text("fresh", invocation_id="inv-2")))
        assert texts(reloaded.events) == [
            "theirs",
            "their answer",
            "one",
            "two",
            "from a host whose clock is behind",
            "after the compaction",
            "an answer",
            "a new turn of theirs",
            "fresh",
        ]
        replayed = store.replay(conversation)["messages"]
        assert replayed[0]["content"].endswith("They said one and two.")
        assert [m["content"] for m in replayed[1:]] == [
            "after the compaction",
            "an answer",
            "a new turn of theirs",
            "fresh",
        ]

        # A listed session holds no events: its first append takes in the stored ones first.
        run(service.create_session(app_name="app", user_id="u", session_id="empty"))
        listed = {s.id: s for s in run(service.list_sessions(app_name="app")).sessions}
        run(service.append_event(listed["s"], user_text("blind", invocation_id="inv-3")))
        assert texts(listed["s"].events)[-2:] == ["fresh", "blind"]
        run(service.append_event(listed["empty"], user_text("first")))
        empty = run(service.get_session(app_name="app", user_id="u", session_id="empty"))
        assert empty is not None
        assert texts(empty.events) == ["first"]


def test_a_call_repeating_the_id_of_an_unanswered_one_is_kept_whole(location: str) -> None:
    """A model that numbers its calls per response repeats ids; when the earlier call was
    never answered (a killed run), a fresh process's session shows it as prose, and the new
    call of the same id must still be kept whole (the store keeps one ``tool_use`` block per
    id): the session then loads, holding the new call as it was made."""
    for turn in ("killed", "next"):
        with convstore.open_store(location) as store:  # each turn in a fresh process
            service = ConvstoreSessionService(store=store, turn_lease=0)
            session = run(service.get_session(app_name="app", user_id="u", session_id="s"))
            if session is None:
                session = run(service.create_session(app_name="app", user_id="u", session_id="s"))
            run(service.append_event(session, user_text(turn, invocation_id=turn)))
            run(service.append_event(session, agent_call("lookup", turn)))
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store, unanswered_calls_as_prose=False)
        loaded = run(service.get_session(app_name="app", user_id="u", session_id="s"))
    assert loaded is not None
    calls = [(e.invocation_id, c.id, c.name) for e in loaded.events for c in e.get_function_calls()]
    assert calls == [("killed", "call-lookup", "lookup"), ("next", "call-lookup", "lookup")]


def test_last_update_time_is_the_last_events_even_from_before_the_creation(
    location: str,
) -> None:
    """After ``append_event`` a session's ``last_update_time`` is its event's timestamp, even
    one from before the session was created (a host whose clock is behind), and
    ``get_session`` (windowed or not) says the same, as ADK's InMemorySessionService does on
    the same calls. Before, ``get_session`` gave the newest of the creation time and the
    events' timestamps, so it disagreed with the session ``append_event`` had just updated."""
    offsets = [-3600.0, -7200.0, -60.0]  # from the creation time: each event's timestamp

    async def scenario(service: BaseSessionService) -> list[tuple[float, float, float]]:
        """For each event: the appending session's, a reloaded and a windowed reload's
        ``last_update_time``, as offsets from the creation time."""
        session = await service.create_session(app_name="app", user_id="u", session_id="s")
        created = session.last_update_time
        seen = []
        for offset in offsets:
            await service.append_event(session, user_text(f"{offset}", timestamp=created + offset))
            got = await service.get_session(app_name="app", user_id="u", session_id="s")
            none = GetSessionConfig(num_recent_events=0)
            windowed = await service.get_session(
                app_name="app", user_id="u", session_id="s", config=none
            )
            assert got is not None
            assert windowed is not None
            seen.append(
                (
                    session.last_update_time - created,
                    got.last_update_time - created,
                    windowed.last_update_time - created,
                )
            )
        return seen

    with convstore.open_store(location) as store:
        ours = asyncio.run(scenario(ConvstoreSessionService(store=store)))
    theirs = asyncio.run(scenario(InMemorySessionService()))
    assert ours == theirs == [(offset,) * 3 for offset in offsets]


def test_events_of_two_sessions_sharing_an_id_both_reach_the_users_state(
    location: str,
) -> None:
    """An event id is unique within its session only: two sessions of one user whose events
    share an id each record their ``user:`` and ``app:`` deltas, and the later one wins, as in
    ADK's own services (keyed by the bare event id, the second was dropped silently)."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        for session_id, value in (("s1", "first"), ("s2", "second")):
            session = run(
                service.create_session(app_name="app", user_id="u", session_id=session_id)
            )
            delta = {"user:v": value, "app:v": value}
            event = user_text(value, id="e-1", actions=EventActions(state_delta=delta))
            run(service.append_event(session, event))
        assert run(service.get_user_state(app_name="app", user_id="u")) == {"v": "second"}
        fresh = run(service.get_session(app_name="app", user_id="u", session_id="s1"))
        assert fresh is not None
        assert fresh.state["user:v"] == fresh.state["app:v"] == "second"


def test_a_different_event_reusing_a_stored_id_is_refused(location: str) -> None:
    """A different event whose id the session already stored raises ValueError naming the
    id, and nothing is written, neither its event nor its state (ADK's database services
    refuse it too), from the session that holds the first and from one that does not (a
    window of no events). The same event delivered again is still ignored: by a session that
    holds it, by one that does not, and by one that shows it as prose (a call no response
    answers). Before, the store kept its one entry per id and dropped the second event
    silently, while the session object took it in."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        session = run(
            service.create_session(app_name="app", user_id="u", session_id="s", state={"k": 1})
        )
        first = user_text("first")
        call = agent_call("lookup", "inv-1")
        for event in (first, call):
            run(service.append_event(session, event.model_copy(deep=True)))
        conversation = session_conversation("app", "u", "s")
        before = store.last_event(conversation)
        delta = {"k": 2, "user:lang": "no", "temp:scratch": 1}
        clash = user_text("not the first", id=first.id, actions=EventActions(state_delta=delta))
        none = GetSessionConfig(num_recent_events=0)
        blind = run(service.get_session(app_name="app", user_id="u", session_id="s", config=none))
        assert blind is not None
        for holder in (session, blind):
            with pytest.raises(ValueError, match=rf"^Event with id {re.escape(first.id)} "):
                run(service.append_event(holder, clash.model_copy(deep=True)))
            assert holder.state == {"k": 1}
        assert store.last_event(conversation) == before
        assert [e.id for e in session.events] == [first.id, call.id]
        assert blind.events == []
        assert run(service.get_user_state(app_name="app", user_id="u")) == {}

        prose = run(service.get_session(app_name="app", user_id="u", session_id="s"))
        assert prose is not None
        assert prose.events[-1].get_function_calls() == []  # unanswered: shown as prose
        for holder in (session, blind, prose):
            for again in (first, call):
                run(service.append_event(holder, again.model_copy(deep=True)))
        assert store.last_event(conversation) == before
        assert len(session.events) == 2
        assert blind.events == []
        assert len(prose.events) == 2
        exact = ConvstoreSessionService(store=store, unanswered_calls_as_prose=False)
        back = run(exact.get_session(app_name="app", user_id="u", session_id="s"))
        assert back is not None
        assert back.events == [first, call]


def test_a_new_turn_waits_for_the_turn_under_way_in_another_runner(location: str) -> None:
    """Another runner's turn under way (its call made, its tool running) keeps a new turn
    waiting, though the waiting session holds every stored event: the new turn's first event
    lands after that turn's answer, and the waiting session holds the whole turn. A turn
    that shows no new event for the lease loses it: the waiting turn goes ahead, and the
    silent one gets StaleSessionError at its next append, with nothing written."""

    async def scenario(lease: float, answer_after: float) -> tuple[list[Event], Session, str]:
        with convstore.open_store(location) as first, convstore.open_store(location) as second:
            mine = ConvstoreSessionService(store=first)
            theirs = ConvstoreSessionService(store=second, turn_lease=lease)
            session = await mine.get_session(app_name="app", user_id="u", session_id="s")
            if session is None:
                session = await mine.create_session(app_name="app", user_id="u", session_id="s")
            invocation = f"running-{lease}"
            await mine.append_event(session, user_text("question", invocation_id=invocation))
            await mine.append_event(session, agent_call("lookup", invocation))
            waiting = await theirs.get_session(app_name="app", user_id="u", session_id="s")
            assert waiting is not None
            assert [e.id for e in waiting.events] == [e.id for e in session.events]
            starting = asyncio.ensure_future(
                theirs.append_event(waiting, user_text("next", invocation_id=f"next-{lease}"))
            )
            await asyncio.sleep(answer_after)
            outcome = "answered"
            try:
                await mine.append_event(session, agent_text("the answer", invocation))
            except StaleSessionError:
                outcome = "stale"
            await starting
            stored = await mine.get_session(app_name="app", user_id="u", session_id="s")
            assert stored is not None
            return stored.events, waiting, outcome

    stored, waiting, outcome = asyncio.run(scenario(lease=30, answer_after=0.5))
    assert outcome == "answered"
    assert [(e.invocation_id, e.author) for e in stored] == [
        ("running-30", "user"),
        ("running-30", "planner"),  # the call
        ("running-30", "planner"),  # the answer
        ("next-30", "user"),
    ]
    assert texts(stored)[-2:] == ["the answer", "next"]
    assert [e.id for e in waiting.events] == [e.id for e in stored]

    stored, waiting, outcome = asyncio.run(scenario(lease=0.3, answer_after=1.5))
    assert outcome == "stale"  # and nothing written: the call stays its turn's last event
    assert [(e.invocation_id, e.author) for e in stored][4:] == [
        ("running-0.3", "user"),
        ("running-0.3", "planner"),
        ("next-0.3", "user"),
    ]
    assert [e.id for e in waiting.events] == [e.id for e in stored]


def compaction_event(start: float, end: float, summary: str) -> Event:
    content = types.Content(role="model", parts=[types.Part(text=summary)])
    compaction = EventCompaction(
        start_timestamp=start, end_timestamp=end, compacted_content=content
    )
    return Event(author="user", invocation_id="c", actions=EventActions(compaction=compaction))


def test_compactions_of_a_prefix_are_convstore_compactions(location: str) -> None:
    """An ADK compaction whose range starts with the session (token-threshold's rolling
    summary, recent events retained after it) replays in convstore as its summary, then what
    follows its range; one of later events only (a sliding window) is kept as an event and
    replay shows every message. ADK gets every event back either way."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        session = run(service.create_session(app_name="app", user_id="u", session_id="s"))
        for i in range(4):
            run(service.append_event(session, user_text(f"m{i}", timestamp=100.0 + i)))
        window = compaction_event(101.0, 102.0, "Later: m1 and m2.")
        run(service.append_event(session, window.model_copy(deep=True)))
        conversation = session_conversation("app", "u", "s")
        replayed = [m["content"] for m in store.replay(conversation)["messages"]]
        assert replayed == ["m0", "m1", "m2", "m3"]
        rolling = compaction_event(100.0, 101.5, "So far: m0 and m1.")
        run(service.append_event(session, rolling.model_copy(deep=True)))
        run(service.append_event(session, user_text("m4", timestamp=110.0)))
        replayed = [m["content"] for m in store.replay(conversation)["messages"]]
        assert replayed[0].endswith("So far: m0 and m1.")
        assert replayed[1:] == ["m2", "m3", "m4"]
        back = run(service.get_session(app_name="app", user_id="u", session_id="s"))
        assert back is not None
        assert back.events == session.events
        assert [e.actions.compaction for e in back.events if e.actions.compaction] == [
            window.actions.compaction,
            rolling.actions.compaction,
        ]


def worker(
    location: str, seen: Path, turns: int, hang: Path | None = None, lease: float = 30
) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "tests.adk_worker", location, "s", str(seen), str(turns)]
    return subprocess.Popen(
        [*args, *([str(hang)] if hang else [])],
        cwd=ROOT,
        env={**os.environ, "ADK_TURN_LEASE": str(lease)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def requests(seen: Path) -> list[list[dict[str, Any]]]:
    return [json.loads(line) for line in seen.read_text(encoding="utf-8").splitlines()]


def assert_calls_answered(contents: list[dict[str, Any]]) -> None:
    """Every function call in a request is answered by a response in the next content (what
    Gemini and every provider ADK adapts to require), and every response follows its call."""
    for index, content in enumerate(contents):
        calls = [p["function_call"]["name"] for p in content["parts"] if "function_call" in p]
        if calls:
            following = contents[index + 1]["parts"] if index + 1 < len(contents) else []
            answers = [
                p["function_response"]["name"] for p in following if "function_response" in p
            ]
            assert answers == calls, contents
        responses = [p for p in content["parts"] if "function_response" in p]
        if responses:
            assert index > 0
            assert any("function_call" in p for p in contents[index - 1]["parts"]), contents


def test_run_killed_in_its_tool_resumes_with_a_valid_request(location: str, tmp_path: Path) -> None:
    """ADK's Runner, killed (SIGKILL) inside its tool, leaves a call no response answers (ADK
    appends the call's event before the tool runs), which ``audit tools --status missing``
    lists; a fresh process's next run sends the model a request in which that call is prose (with
    the note that no result was recorded) and every call it holds is answered."""
    with convstore.open_store(location) as store:
        run(
            ConvstoreSessionService(store=store).create_session(
                app_name="weather", user_id="ada", session_id="s"
            )
        )
    hang = tmp_path / "in-tool"
    args = [sys.executable, "-m", "tests.adk_worker", location, "s"]
    kill_in_tool([*args, str(tmp_path / "seen-killed"), "1", str(hang)], hang)

    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store, unanswered_calls_as_prose=False)
        left = run(service.get_session(app_name="weather", user_id="ada", session_id="s"))
        assert left is not None
        assert left.events[-1].get_function_calls()[0].name == "lookup"  # no response: killed
    # ADK appends the function-call event before it runs the tool: the call is recorded.
    assert missing_calls(location, tmp_path / "audit.db") == [("lookup", '{"city":"city0"}')]

    # The killed run's turn is still under way as far as the log shows: the resumed run's turn
    # waits out its lease (1 s here, 30 by default) before it starts.
    resumed = worker(location, tmp_path / "seen-resumed", 1, lease=1)
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    first, second = requests(tmp_path / "seen-resumed")
    assert first == [
        {"parts": [{"text": "city0"}], "role": "user"},
        {
            "parts": [{"text": f'Tool use: lookup({{"city":"city0"}})\n\n{NO_RESULT}'}],
            "role": "model",
        },
        {"parts": [{"text": "city0"}], "role": "user"},
    ]
    for contents in (first, second):
        assert_calls_answered(contents)
    assert second[-1]["parts"] == [
        {"function_response": {"name": "lookup", "response": {"result": "sunny in city0"}}}
    ]
    with convstore.open_store(location) as store:
        replayed = store.replay(session_conversation("weather", "ada", "s"))["messages"]
        assert replayed[-1] == {"role": "assistant", "content": "done: sunny in city0"}


def test_two_runners_in_two_processes_take_turns_and_strand_nothing(
    location: str, tmp_path: Path
) -> None:
    """Two Runner processes, five turns each on one session: every turn completes the first
    time (no StaleSessionError reaches either runner: a turn waits for the other's), each
    invocation's events are contiguous in the log and whole (the user's message, the call,
    its response, the answer: no attempt left half-written), and every event a runner was
    handed back is stored."""
    turns = 5
    with convstore.open_store(location) as store:
        run(
            ConvstoreSessionService(store=store).create_session(
                app_name="weather", user_id="ada", session_id="s"
            )
        )
    workers = [worker(location, tmp_path / f"seen-{i}", turns) for i in range(2)]
    outputs = []
    for process in workers:
        out, err = process.communicate(timeout=240)
        assert process.returncode == 0, err
        outputs.append(out.splitlines())
    assert not [line for out in outputs for line in out if line == "stale"]
    yielded = [line.split()[2] for out in outputs for line in out if line.startswith("event ")]

    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        session = run(service.get_session(app_name="weather", user_id="ada", session_id="s"))
        assert session is not None
        stored_ids = [e.id for e in session.events]
        assert len(set(stored_ids)) == len(stored_ids)
        assert set(yielded) <= set(stored_ids)
        order = [e.invocation_id for e in session.events]
        assert [length for _, length in _runs(order)] == [4] * (2 * turns), order
        assert len({i for i, _ in _runs(order)}) == 2 * turns  # none comes back later
        answers = [text for text in texts(session.events) if text.startswith("done:")]
        assert len(answers) == 2 * turns
        for seen in (tmp_path / "seen-0", tmp_path / "seen-1"):
            for contents in requests(seen):
                assert_calls_answered(contents)  # no request carried the other's live call


def _runs(items: list[str]) -> list[tuple[str, int]]:
    """Consecutive runs of equal items, as (item, length)."""
    found: list[tuple[str, int]] = []
    for item in items:
        if found and found[-1][0] == item:
            found[-1] = (item, found[-1][1] + 1)
        else:
            found.append((item, 1))
    return found
