"""ConvstoreSession under the OpenAI Agents SDK's own Runner (tests/agents_worker.py, a scripted
model, no network), and the Session protocol's semantics, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents.items import ModelResponse
from agents.memory.session import Session
from agents.memory.session_settings import SessionSettings
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseInputParam,
    ResponseReasoningItem,
)
from pydantic import TypeAdapter

import convstore
from convstore.domain.events import Rewound
from convstore.integrations.openai_agents import ConvstoreSession, conversation_for
from convstore.projections.wording import NO_RESULT
from tests.killed_in_tool import kill_in_tool, missing_calls
from tests.sdk import request_problems
from tests.strategies import TINY_IMAGES

ROOT = Path(__file__).resolve().parents[1]
INPUT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseInputParam)
PNG = TINY_IMAGES["image/png"][0]


def run_agent(location: str, session: str, prompt: str, seen: Path, *flags: str) -> Any:
    """One Runner.run in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "tests.agents_worker", location, session, prompt, str(seen), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_valid_input(items: list[dict[str, Any]]) -> None:
    """The openai SDK's Responses input type accepts ``items`` (no unknown key, no bad value)."""
    assert request_problems(items, ResponseInputParam) == []
    INPUT_ADAPTER.validate_python(items)


@pytest.mark.slow
def test_runs_killed_mid_tool_or_left_waiting_do_not_poison_the_next_run(
    location: str, tmp_path: Path
) -> None:
    """A run killed (SIGKILL) inside its tool, then a run left with a call waiting for
    approval and no output; the next run on the session, in a new process, succeeds, and its
    input is plain prose items the SDK's request type accepts."""
    seen = tmp_path / "seen.jsonl"
    killed = run_agent(location, "ops-1", "Please delete tmp", seen, "--die-in-tool")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # The killed turn, and the one left waiting, hold the session for the turn lease: the next
    # runs take it after 1 s rather than the default 30.
    waiting = run_agent(location, "ops-1", "Now wipe the disk", seen, "--lease=1")
    assert waiting.returncode == 0, waiting.stderr
    assert waiting.stdout.strip() == "waiting for approval: ['wipe_disk']"

    resumed = run_agent(location, "ops-1", "Are you there?", seen, "--lease=1")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "I am here."
    last_input = json.loads(seen.read_text().splitlines()[-1])
    assert_valid_input(last_input)
    assert {item.get("type", "message") for item in last_input} == {"message"}
    assert [item["content"] for item in last_input] == [
        "Please delete tmp",
        f'Tool use: delete_tmp({{"path":"/tmp/scratch"}})\n\n{NO_RESULT}',  # recorded early
        "Now wipe the disk",
        'Tool use: wipe_disk({"path":"/tmp/scratch"})',
        "Are you there?",
    ]
    with convstore.open_store(location) as store:
        replayed = store.replay(conversation_for("ops-1"))["messages"]
    assert replayed[-1] == {"role": "assistant", "content": "I am here."}


@pytest.mark.slow
def test_a_call_killed_inside_its_tool_is_recorded_and_resumes_as_prose(
    location: str, tmp_path: Path
) -> None:
    """The run is SIGKILLed inside ``delete_branch`` (the tool has started, the runner has not
    saved the turn): the session's hooks recorded the call before the tool ran, so the call
    is in the store, ``audit tools --status missing`` lists it, and the next run's first
    request shows it as prose with no call id left dangling."""
    seen, ready = tmp_path / "seen.jsonl", tmp_path / "in-tool"
    argv = ["-m", "tests.agents_worker", location, "ops-2", "Delete release-7.", str(seen)]
    kill_in_tool([sys.executable, *argv, f"--ready={ready}"], ready)

    conversation = conversation_for("ops-2")
    with convstore.open_store(location) as store:
        stored = [(m.role, [b.block for b in m.blocks]) for m in store.messages(conversation)]
    assert [(role, [b.type for b in blocks]) for role, blocks in stored] == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
    ]
    call = stored[1][1][0]
    assert (call.name, call.input) == ("delete_branch", {"branch": "release-7"})  # type: ignore[union-attr]
    assert missing_calls(location, tmp_path / "audit.db") == [
        ("delete_branch", '{"branch":"release-7"}')
    ]

    resumed = run_agent(location, "ops-2", "Did that go through?", seen, "--lease=1")
    assert resumed.returncode == 0, resumed.stderr
    first_request = json.loads(seen.read_text().splitlines()[-1])
    assert first_request == [
        {"role": "user", "content": "Delete release-7."},
        # The runner reads the history before it saves the new question, so the call is the
        # history's last message and replay adds no note of a missing result yet.
        {"role": "assistant", "content": 'Tool use: delete_branch({"branch":"release-7"})'},
        {"role": "user", "content": "Did that go through?"},
    ]
    assert_valid_input(first_request)  # plain messages: no function_call without its output


def test_the_runner_saving_a_turn_recorded_early_writes_each_item_once(tmp_path: Path) -> None:
    """A response recorded by the hooks before its tools ran, then handed to ``add_items``
    with the tool's output (as the runner saves a turn; the reasoning item without its id and
    the call without its status, as the runner may send them): every item is stored once."""

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            session = ConvstoreSession("early", store=store)
            await session.add_items([{"role": "user", "content": "Delete release-7."}])
            reasoning = {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Delete it."}],
            }
            call = {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "delete_branch",
                "arguments": '{"branch":"release-7"}',
                "status": "completed",
            }
            response = ModelResponse(
                output=[
                    ResponseReasoningItem.model_validate(reasoning),
                    ResponseFunctionToolCall.model_validate(call),
                ],
                usage=Usage(),
                response_id=None,
            )
            await session.record_response(response)
            assert len(await store.messages(session.conversation_id)) == 2  # before the tool
            without_id = {k: v for k, v in reasoning.items() if k != "id"}
            without_status = {k: v for k, v in call.items() if k != "status"}
            output = {"type": "function_call_output", "call_id": "call_1", "output": "done"}
            await session.add_items([without_id, without_status, output])  # type: ignore[list-item]
            items: list[Any] = await session.get_items()
            assert [item["content"] for item in items] == [
                "Delete release-7.",
                '[Reasoning]: Delete it.\n\nTool use: delete_branch({"branch":"release-7"})',
                "Result (delete_branch): done",
            ]
            # A response with no call the caller runs is left to add_items.
            await session.record_response(ModelResponse(output=[], usage=Usage(), response_id=None))
            assert len(await store.messages(session.conversation_id)) == 3

    asyncio.run(go())


async def _semantics(location: str) -> None:
    async with await convstore.open_async_store(location) as store:
        session = ConvstoreSession("chat-7", store=store)
        assert isinstance(session, Session)
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items(
            [
                {"role": "user", "content": "List files."},
                {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
                {"role": "assistant", "content": "One file: a.txt"},
            ]
        )
        items = await session.get_items()
        assert items == [
            {"role": "user", "content": "List files."},
            {"role": "assistant", "content": "Tool use: ls({})"},
            {"role": "user", "content": "Result (ls): a.txt"},
            {"role": "assistant", "content": "One file: a.txt"},
        ]
        assert_valid_input(items)  # type: ignore[arg-type]
        assert await session.get_items(limit=2) == items[-2:]
        assert await session.get_items(limit=0) == []
        limited = ConvstoreSession("chat-7", store=store, session_settings=SessionSettings(1))
        assert await limited.get_items() == items[-1:]

        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([{"role": "user", "content": "Again."}])
        assert await session.get_items() == [{"role": "user", "content": "Again."}]

        # The log keeps everything: the four first messages withdrawn, the new one visible.
        messages = await store.messages(session.conversation_id)
        assert [m.withdrawn for m in messages] == [True] * 4 + [False]
        events = await store.events(session.conversation_id)
        assert sum(isinstance(e, Rewound) for e in events) == 2


def test_session_settings_given_as_a_dict_limit_what_the_runner_sends(tmp_path: Path) -> None:
    """``session_settings={"limit": 2}`` works as the SDK's own sessions take it: the
    Runner's request holds the latest two items of the history and the new input (kept as a
    dict, it crashed the run: ``'dict' object has no attribute 'limit'``); an unknown key is
    refused at once."""
    from agents import Agent, Runner, set_tracing_disabled  # noqa: PLC0415

    from tests.agents_worker import ScriptedModel  # noqa: PLC0415

    set_tracing_disabled(True)
    seen = tmp_path / "seen.jsonl"

    async def scenario() -> None:
        store = await convstore.open_async_store(tmp_path / "store.db")
        try:
            agent = Agent(name="limited", model=ScriptedModel(seen))
            full = ConvstoreSession("limited", store=store)
            for n in range(3):
                await Runner.run(agent, f"hello {n}", session=full)
            limited = ConvstoreSession("limited", store=store, session_settings={"limit": 2})
            assert limited.session_settings == SessionSettings(limit=2)
            result = await Runner.run(agent, "hello 3", session=limited)
            assert result.final_output == "I am here."
        finally:
            await store.close()

    asyncio.run(scenario())
    last = json.loads(seen.read_text().splitlines()[-1])
    texts = [
        item["content"] if isinstance(item["content"], str) else item["content"][0]["text"]
        for item in last
    ]
    assert texts == ["hello 2", "I am here.", "hello 3"]
    with convstore.open_store(tmp_path / "store.db") as store, pytest.raises(TypeError):
        ConvstoreSession("limited", store=store, session_settings={"lmit": 2})


def _turns(location: str, session: str, tmp_path: Path, *flags: str) -> list[Any]:
    """Two runner processes, five turns each (a tool round a turn) on one session, at once;
    the session's messages afterwards."""
    runs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "tests.agents_worker", location, session),
                *(f"look up {name}", str(tmp_path / f"seen-{name}.jsonl"), "--turns=5", *flags),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in "ab"
    ]
    for run in runs:
        _, err = run.communicate(timeout=180)
        assert run.returncode == 0, err
    with convstore.open_store(location) as store:
        return [m for m in store.messages(conversation_for(session)) if not m.withdrawn]


def _text_of(message: Any) -> str:
    block = message.blocks[0].block
    return str(getattr(block, "text", None) or getattr(block, "content", None) or block.input)


@pytest.mark.slow
def test_two_runners_in_two_processes_take_turns(location: str, tmp_path: Path) -> None:
    """Two processes run five turns each on one session at once: every turn completes, each
    turn's four messages (question, call, output, answer) are contiguous, and every request
    that starts a turn carries the whole of the turn before it, ending with its answer (a
    turn never starts on a history another run is still writing). With ``--lease=0`` (no
    turns taken) the turns interleave and this fails."""
    messages = _turns(location, "shared", tmp_path)
    assert len(messages) == 40  # ten turns of four
    asked = []
    for start in range(0, 40, 4):
        question, call, output, answer = messages[start : start + 4]
        assert [m.role for m in (question, call, output, answer)] == [
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        prompt = _text_of(question)
        assert prompt in _text_of(call)
        assert f"found {prompt}" in _text_of(output)
        assert _text_of(answer) == "Deleted."
        asked.append(prompt)
    assert sorted(asked) == sorted(f"look up {n} {k}" for n in "ab" for k in range(5))
    for name in "ab":
        for line in (tmp_path / f"seen-{name}.jsonl").read_text().splitlines():
            items = json.loads(line)
            if items[-1].get("role") == "user" and len(items) > 1:  # a turn's first request
                assert items[-2] == {"role": "assistant", "content": "Deleted."}, items[-2:]


def test_session_semantics_limit_pop_and_clear(location: str) -> None:
    """get_items(limit) gives the latest N in order; pop_item returns and withdraws the
    latest; clear_session withdraws all; each is a rewind the log keeps."""
    asyncio.run(_semantics(location))


def test_session_id_maps_to_one_conversation_from_any_store(location: str) -> None:
    """Two stores (as two processes would open) and a sync Store wrapped by the session reach
    the same conversation, created once even when they race to create it."""

    async def race() -> None:
        first = convstore.open_store(location)
        second = convstore.open_store(location)
        try:
            sessions = [ConvstoreSession("shared", store=s) for s in (first, second)]
            await asyncio.gather(
                *(
                    s.add_items([{"role": "user", "content": f"hi {i}"}])
                    for i, s in enumerate(sessions)
                )
            )
            assert {s.conversation_id for s in sessions} == {conversation_for("shared")}
            items: list[Any] = await sessions[0].get_items()
            contents = sorted(i["content"] for i in items)
            assert contents == ["hi 0", "hi 1"]
            assert [c.id for c in first.conversations()] == [conversation_for("shared")]
        finally:
            first.close()
            second.close()

    asyncio.run(race())


def test_an_unknown_item_is_refused_and_nothing_is_recorded(tmp_path: Path) -> None:
    """add_items with an item type the converter does not know raises InvalidInput naming it,
    and none of the batch is recorded."""

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            session = ConvstoreSession("s", store=store)
            with pytest.raises(convstore.InvalidInput, match="item 1: item type 'item_reference'"):
                await session.add_items(
                    [{"role": "user", "content": "Search."}, {"type": "item_reference", "id": "ws"}]
                )
            assert await session.get_items() == []

    asyncio.run(go())


def test_images_come_back_as_input_image_parts_for_a_vision_model(tmp_path: Path) -> None:
    """With ``vision=True`` a user image comes back as an ``input_image`` part the Responses
    input type accepts; without it, as a marker in the prose."""

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
            text = {"type": "input_text", "text": "What is this?"}
            given: list[Any] = [{"role": "user", "content": [text, image]}]
            await ConvstoreSession("v", store=store).add_items(given)
            seen: list[Any] = await ConvstoreSession("v", store=store, vision=True).get_items()
            assert_valid_input(seen)
            assert seen[0]["content"] == [text, {**image, "detail": "auto"}]
            blind: list[Any] = await ConvstoreSession("v", store=store).get_items()
            assert "[Image not shown: an image/png image" in blind[0]["content"]

    asyncio.run(go())


def test_a_pdf_comes_back_as_an_input_file_part_for_a_vision_model(tmp_path: Path) -> None:
    """A user's input_file PDF is recorded as a document; with ``vision=True`` it comes back
    as an ``input_file`` the Responses input type accepts; without it, as the not-read
    marker."""
    pdf = base64.b64encode(b"%PDF-1.4\n%%EOF\n").decode()

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            file = {
                "type": "input_file",
                "file_data": f"data:application/pdf;base64,{pdf}",
                "filename": "a.pdf",
            }
            text = {"type": "input_text", "text": "Summarise."}
            given: list[Any] = [{"role": "user", "content": [text, file]}]
            await ConvstoreSession("d", store=store).add_items(given)
            seen: list[Any] = await ConvstoreSession("d", store=store, vision=True).get_items()
            assert_valid_input(seen)
            assert seen[0]["content"] == [text, file]
            blind: list[Any] = await ConvstoreSession("d", store=store).get_items()
            assert "[Document not read: a.pdf (application/pdf" in blind[0]["content"]

    asyncio.run(go())


POPPERS = 4
"""Sessions (each on a store of its own, as processes would hold) popping at once."""


async def _pops_race(location: str, rounds: int) -> None:
    stores = [await convstore.open_async_store(location) for _ in range(POPPERS)]
    try:
        sessions = [ConvstoreSession("popped", store=s) for s in stores]
        added = [f"m{i}" for i in range(POPPERS * rounds)]
        await sessions[0].add_items([{"role": "user", "content": text} for text in added])
        popped: list[Any] = []
        for _ in range(rounds):
            popped += await asyncio.gather(*(s.pop_item() for s in sessions))
        assert sorted(i["content"] for i in popped) == sorted(added)
        assert await sessions[0].get_items() == []
    finally:
        for store in stores:
            await store.close()


def test_concurrent_pops_each_take_a_different_item(location: str) -> None:
    """Four sessions on four stores popping at once: each pop withdraws exactly the item it
    returns, so every item comes back once and none is lost or returned twice."""
    asyncio.run(_pops_race(location, rounds=3))


async def _pop_against_adds(location: str, count: int) -> None:
    adder_store = await convstore.open_async_store(location)
    popper_store = await convstore.open_async_store(location)
    try:
        adder = ConvstoreSession("busy", store=adder_store)
        popper = ConvstoreSession("busy", store=popper_store)
        await adder.add_items([{"role": "user", "content": "first"}])
        acknowledged = ["first"]

        async def add() -> None:
            for i in range(count):
                await adder.add_items([{"role": "user", "content": f"a{i}"}])
                acknowledged.append(f"a{i}")

        async def pop() -> list[Any]:
            return [await popper.pop_item() for _ in range(count)]

        _, popped = await asyncio.gather(add(), pop())
        returned = [i["content"] for i in popped if i is not None]
        visible: list[Any] = await adder.get_items()
        left = [i["content"] for i in visible]
        # Every acknowledged item is still visible or was handed back by a pop, exactly once.
        assert sorted(returned + left) == sorted(acknowledged)
    finally:
        await adder_store.close()
        await popper_store.close()


def test_a_pop_racing_another_sessions_add_never_withdraws_what_it_did_not_return(
    location: str,
) -> None:
    """pop_item racing add_items on another store: the pop withdraws only the item it
    returns, never an item another session had just added and been told was saved."""
    asyncio.run(_pop_against_adds(location, count=15))
