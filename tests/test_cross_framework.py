"""One conversation carried through four frameworks in turn, each turn in a fresh process
(tests/cross_framework_worker.py): the OpenAI Agents SDK (with a tool call and its result),
Pydantic AI, Google ADK, LangChain, each through its real runner and a scripted model that
writes down every request. Each request carries every earlier turn as the prose replay gives
it, and nothing of an earlier framework's tool round (no tool role, call item or call id); the
store holds the four turns in order and ``convstore verify`` finds nothing. On SQLite and
PostgreSQL. (LangGraph cannot take a conversation over: see docs/integrations/handover.md.)"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.genai import types
from langchain_core.messages import AIMessage, HumanMessage
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter
from pydantic_ai.messages import ModelMessagesTypeAdapter

import convstore
from convstore.cli import cli
from convstore.integrations import agent_framework, langchain, openai_agents
from convstore.integrations.google_adk import ConvstoreSessionService, session_conversation
from tests.sdk import request_problems

ROOT = Path(__file__).resolve().parents[1]

TURNS = [
    ("openai-agents", "Please delete the scratch files.", "Deleted."),
    ("pydantic-ai", "Are they gone?", "Pydantic AI: the scratch files are gone."),
    ("google-adk", "Is the folder empty?", "ADK: the folder is empty now."),
    ("langchain", "Anything left?", "LangChain: nothing is left in /tmp/scratch."),
]
"""Each turn: the framework, the prompt, and what its scripted model answers last."""

TOOL_ROUND = [
    {"role": "assistant", "content": 'Tool use: delete_tmp({"path":"/tmp/scratch"})'},
    {"role": "user", "content": "Result (delete_tmp): deleted /tmp/scratch"},
]
"""The Agents SDK's tool round as every later framework is sent it: prose."""


def recorded_elsewhere(store: convstore.Store) -> UUID:
    """A conversation recorded with no framework: a question, a tool round, an answer."""
    conversation = store.new_conversation(title="elsewhere")
    call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "."}}
    store.append_message(conversation, "user", [{"type": "text", "text": "What is here?"}])
    store.append_message(conversation, "assistant", [call])
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}
    store.append_message(conversation, "user", [result])
    store.append_message(conversation, "assistant", [{"type": "text", "text": "One file."}])
    return conversation


ELSEWHERE = [
    ("user", "What is here?"),
    ("assistant", 'Tool use: ls({"path":"."})'),
    ("user", "Result (ls): a.txt"),
    ("assistant", "One file."),
]


def run_turn(framework: str, location: str, conversation: str, prompt: str, seen: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.cross_framework_worker",
            framework,
            location,
            conversation,
            prompt,
            str(seen),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def history(turns: int) -> list[dict[str, str]]:
    """The chat the first ``turns`` turns leave, as replay gives it."""
    messages: list[dict[str, str]] = []
    for index, (_, prompt, answer) in enumerate(TURNS[:turns]):
        messages.append({"role": "user", "content": prompt})
        if index == 0:
            messages.extend(TOOL_ROUND)
        messages.append({"role": "assistant", "content": answer})
    return messages


def native_problems(framework: str, native: Any) -> list[str]:
    """What is wrong with a request in the framework's own terms: not valid for it, or
    holding a tool round (a tool role, a call, a call id) where only prose may be."""
    text = json.dumps(native)
    problems = [f"holds {word}" for word in ("call_id", "tool_call", "function_") if word in text]
    if framework == "pydantic-ai":
        ModelMessagesTypeAdapter.validate_python(native)
        parts = ("tool-call", "tool-return")
        problems += [f"holds a {kind} part" for kind in parts if kind in text]
    elif framework == "langchain":
        problems += [p for m in native for p in request_problems(m, ChatCompletionMessageParam)]
        problems += ["holds a tool message" for m in native if m["role"] == "tool"]
    elif framework == "google-adk":
        problems += ["holds a function part" for c in native for p in c["parts"] if len(p) > 1]
    return problems


@pytest.mark.slow
def test_one_conversation_through_four_frameworks(location: str, tmp_path: Path) -> None:
    """Agents SDK -> Pydantic AI -> Google ADK -> LangChain on one convstore conversation,
    one fresh process a turn: every model is sent everything before it, as prose."""
    conversation = str(uuid4())
    seen = tmp_path / "seen.jsonl"
    for framework, prompt, answer in TURNS:
        assert run_turn(framework, location, conversation, prompt, seen) == answer
    requests = [json.loads(line) for line in seen.read_text().splitlines()]
    assert [r["framework"] for r in requests] == [
        "openai-agents",  # the prompt
        "openai-agents",  # the tool's output, in the SDK's own items (its own turn)
        "pydantic-ai",
        "google-adk",
        "langchain",
    ]
    first, with_output = requests[0], requests[1]
    assert first["chat"] == [{"role": "user", "content": TURNS[0][1]}]
    TypeAdapter(ResponseInputParam).validate_python(with_output["native"])
    assert [i.get("type") for i in with_output["native"][1:]] == [
        "function_call",
        "function_call_output",
    ]
    for turn, request in enumerate(requests[2:], start=1):
        framework, prompt, _ = TURNS[turn]
        assert request["framework"] == framework
        assert request["chat"] == [*history(turn), {"role": "user", "content": prompt}]
        assert native_problems(framework, request["native"]) == []
    with convstore.open_store(location) as store:
        assert store.replay(conversation)["messages"] == history(len(TURNS))
        # Each turn was recorded by its own framework, the tool round as a call and a result.
        kinds = [[b.block.type for b in m.blocks] for m in store.messages(conversation)]
        assert kinds == [["text"], ["tool_use"], ["tool_result"]] + [["text"]] * 7
    verified = CliRunner().invoke(cli, ["--db", location, "verify", "--json"])
    assert verified.exit_code == 0, verified.output


def test_agents_sdk_and_langchain_sessions_continue_a_given_conversation(tmp_path: Path) -> None:
    """``conversation_id=`` keeps a session in that conversation (a UUID or its text); without
    it the session id's own conversation is used, as before."""
    with convstore.open_store(tmp_path / "store.db") as store:
        conversation = recorded_elsewhere(store)
        session = openai_agents.ConvstoreSession(
            "s", store=store, conversation_id=str(conversation)
        )
        assert session.conversation_id == conversation
        items = asyncio.run(session.get_items())
        assert [(i["role"], i["content"]) for i in items] == ELSEWHERE  # type: ignore[typeddict-item]
        default = openai_agents.ConvstoreSession("s", store=store)
        assert default.conversation_id == openai_agents.conversation_for("s")

        history = langchain.ConvstoreChatMessageHistory(
            "s", store=store, conversation_id=conversation
        )
        assert [(m.type, m.content) for m in history.messages] == [
            ("human" if role == "user" else "ai", text) for role, text in ELSEWHERE
        ]
        history.add_messages([HumanMessage("And now?"), AIMessage("Still one.")])
        assert store.replay(conversation)["messages"][-2:] == [
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": "Still one."},
        ]
        default_history = langchain.ConvstoreChatMessageHistory("s", store=store)
        assert default_history.conversation_id == langchain.conversation_for("s")

        # A conversation id that is not one is refused in one line, as every id of the API is.
        bad = re.escape("'chat-7' is not a conversation id (ids look like")
        with pytest.raises(convstore.InvalidInput, match=bad):
            openai_agents.ConvstoreSession("s", store=store, conversation_id="chat-7")
        with pytest.raises(convstore.InvalidInput, match=bad):
            langchain.ConvstoreChatMessageHistory("s", store=store, conversation_id="chat-7")


def test_agent_framework_provider_maps_a_session_to_a_given_conversation(tmp_path: Path) -> None:
    """``conversation_for=`` maps a session id to an existing conversation, whose replay the
    provider then gives; the default is the session id's own conversation."""
    with convstore.open_store(tmp_path / "store.db") as store:
        conversation = recorded_elsewhere(store)
        provider = agent_framework.ConvstoreHistoryProvider(
            store, conversation_for=lambda session_id: conversation
        )
        assert provider.conversation_id("s") == conversation
        messages = asyncio.run(provider.get_messages("s"))
        assert [(m.role, m.text) for m in messages] == ELSEWHERE
        default = agent_framework.ConvstoreHistoryProvider(store)
        assert default.conversation_id("s") == agent_framework.conversation_for("s")


def test_adk_session_started_in_a_conversation_shows_what_was_recorded_there(
    tmp_path: Path,
) -> None:
    """An ADK session mapped to an existing conversation starts in it once, and every message
    recorded there without an ADK event (before the session or after its events) comes back
    as an event holding its prose, in the order it was recorded."""

    async def main() -> None:
        async with await convstore.open_async_store(tmp_path / "store.db") as store:
            conversation = recorded_elsewhere(store.store)
            sessions = ConvstoreSessionService(
                store=store, conversation_for=lambda app, user, session: conversation
            )
            session = await sessions.create_session(app_name="a", user_id="u", session_id="s")
            assert [(e.author, e.content.role) for e in session.events] == [  # type: ignore[union-attr]
                ("user", "user"),
                ("convstore", "model"),
                ("user", "user"),
                ("convstore", "model"),
            ]
            assert [e.content.parts[0].text for e in session.events] == [  # type: ignore[union-attr,index]
                text for _, text in ELSEWHERE
            ]
            with pytest.raises(AlreadyExistsError):
                await sessions.create_session(app_name="a", user_id="u", session_id="s")
            question = types.Content(role="user", parts=[types.Part(text="Any more?")])
            event = Event(author="user", invocation_id="i1", content=question)
            await sessions.append_event(session, event)
            await store.append_message(conversation, "assistant", [{"type": "text", "text": "No."}])
            own = ConvstoreSessionService(
                store=store,
                conversation_for=lambda app, user, session: conversation,
                handed_over_author="keeper",
            )
            again = await own.get_session(app_name="a", user_id="u", session_id="s")
            assert again is not None
            assert [(e.author, e.content.parts[0].text) for e in again.events[-3:]] == [  # type: ignore[union-attr,index]
                ("keeper", "One file."),
                ("user", "Any more?"),
                ("keeper", "No."),
            ]
            assert again.events[-2].id == event.id
            # The default mapping is the session id's own conversation, untouched here.
            plain = ConvstoreSessionService(store=store)
            assert await plain.get_session(app_name="a", user_id="u", session_id="s") is None
            assert session_conversation("a", "u", "s") != conversation

    asyncio.run(main())
