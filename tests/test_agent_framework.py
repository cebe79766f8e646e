"""ConvstoreHistoryProvider under the Microsoft Agent Framework's own ``Agent`` (a scripted
chat client, tests/agent_framework_worker.py, no network), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Agent, Content, HistoryProvider, Message

import convstore
from convstore.domain.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from convstore.domain.errors import InvalidInput
from convstore.integrations.agent_framework import (
    ConvstoreHistoryProvider,
    conversation_for,
    message_from_blocks,
)
from tests.agent_framework_worker import ScriptedClient, make_agent
from tests.killed_in_tool import kill_in_tool, missing_calls
from tests.strategies import TINY_IMAGES

ROOT = Path(__file__).resolve().parents[1]
PNG = TINY_IMAGES["image/png"][0]
PDF = base64.b64encode(b"%PDF-1.4 tiny").decode()


def worker(location: str, session: str, prompt: str, seen: Path, *flags: str) -> list[str]:
    """The worker's command line: one or more agent runs in a process of their own."""
    return [
        sys.executable,
        "-m",
        "tests.agent_framework_worker",
        location,
        session,
        prompt,
        str(seen),
        *flags,
    ]


def every_kind() -> list[Message]:
    """One message of each role, holding every content kind the provider converts."""
    return [
        Message("system", ["You are terse."]),
        Message(
            "user",
            [
                Content.from_text("Look:", annotations=[{"type": "citation", "url": "https://a"}]),
                Content.from_uri(f"data:image/png;base64,{PNG}", media_type="image/png"),
                Content.from_uri("https://example.com/cat.png", media_type="image/png"),
                Content.from_data(base64.b64decode(PDF), "application/pdf", name="r.pdf"),
                Content.from_uri("https://example.com/r.pdf", media_type="application/pdf"),
                Content.from_hosted_file("file-1", media_type="application/pdf", name="f.pdf"),
            ],
        ),
        Message(
            "assistant",
            [
                Content.from_text_reasoning(text="Plan it.", protected_data="ENCRYPTED"),
                Content.from_function_call("c1", "ls", arguments={"path": "."}),
                Content.from_function_call("c2", "raw", arguments="not json"),
                Content.from_function_call("h1", "web", arguments={"q": "x"}, hosted=True),
                Content.from_mcp_server_tool_call("m1", "lookup", server_name="docs"),
                Content.from_mcp_server_tool_result("m1", output="found"),
            ],
        ),
        Message(
            "tool",
            [
                Content.from_function_result("c1", result="a.txt"),
                Content.from_function_result(
                    "c2",
                    result=[
                        Content.from_text("see"),
                        Content.from_uri(f"data:image/png;base64,{PNG}", media_type="image/png"),
                    ],
                ),
            ],
        ),
        Message("tool", [Content.from_function_result("c3", result="boom", exception="boom")]),
        Message(
            "assistant", [Content.from_text("Done."), Content.from_usage({"input_token_count": 3})]
        ),
    ]


def essence(message: Message) -> list[Any]:
    """What a message says, field by field, for comparing a round trip."""
    out: list[Any] = [message.role]
    for c in message.contents:
        if c.type == "usage":
            continue  # token counts carry no block (the verbatim entry keeps them)
        out.append(
            (
                c.type,
                c.text,
                c.uri,
                c.media_type,
                c.file_id,
                c.call_id,
                c.name,
                c.protected_data,
                json.dumps(c.arguments, sort_keys=True),
                c.result if isinstance(c.result, str) else None,
                [(i.type, i.text, i.uri) for i in c.items or []],
                c.exception is not None,
                c.server_name,
                c.tool_name,
                c.output,
                c.annotations,
            )
        )
    return out


def test_every_content_kind_round_trips_through_blocks(location: str) -> None:
    """Each message is stored as blocks of the right kinds and its runtime entry keeps it
    verbatim; the blocks turn back into messages that say the same thing (``message_from_blocks``),
    and the replay is one prose message per stored message."""
    messages = every_kind()

    async def go() -> None:
        async with await convstore.open_async_store(location) as store:
            provider = ConvstoreHistoryProvider(store)
            await provider.save_messages("kinds", messages)
            stored = await store.messages(conversation_for("kinds"))
            assert [[b.block.type for b in m.blocks] for m in stored] == [
                ["text"],
                ["text", "image", "image", "document", "document", "document"],
                [
                    "reasoning",
                    "tool_use",
                    "tool_use",
                    "hosted_tool_use",
                    "hosted_tool_use",
                    *["hosted_tool_result"],
                ],
                ["tool_result", "tool_result"],
                ["tool_result"],
                ["text"],
            ]
            back = [message_from_blocks(m.role, [b.block for b in m.blocks]) for m in stored]
            assert [essence(m) for m in back] == [essence(m) for m in messages]
            entries = await store.entries(conversation_for("kinds"))
            assert entries is not None
            assert [e["agent_framework"] for e in entries] == [
                json.loads(json.dumps(m.to_dict(), default=repr)) for m in messages
            ]
            history = await provider.get_messages("kinds")
            assert len(history) == len(messages)
            assert {c.type for m in history for c in m.contents} == {"text"}
            assert history[3].text.startswith(
                "Result (ls): a.txt\n\nResult (raw): see\n[Image not shown: an image/png image"
            )
            seeing = await ConvstoreHistoryProvider(store, vision=True).get_messages("kinds")
            # With vision: images, and the PDF with its data, natively; the documents given
            # by url and file id as markers (the OpenAI shape cannot send them).
            kinds = ["text", "data", "uri", "data", "text", "text"]
            assert [c.type for c in seeing[1].contents] == kinds
            assert seeing[1].contents[1].uri == f"data:image/png;base64,{PNG}"
            assert seeing[1].contents[2].media_type == "image/png"
            assert seeing[1].contents[3].media_type == "application/pdf"

    asyncio.run(go())


def test_a_content_kind_without_a_block_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """A shell call (no convstore block) is refused in one line naming it; nothing of the batch
    is recorded. A run without a session id is refused too."""

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            provider = ConvstoreHistoryProvider(store)
            shell = Content.from_shell_tool_call(call_id="s1", commands=["ls"])
            batch = [Message("user", ["Hi."]), Message("assistant", [shell])]
            with pytest.raises(InvalidInput) as refused:
                await provider.save_messages("bad", batch)
            assert str(refused.value) == (
                "message 1 content 0: content type 'shell_tool_call' is not supported; accepted: "
                "text, text_reasoning, data, uri, hosted_file, error, function_call, "
                "function_result, code_interpreter_tool_call, image_generation_tool_call, "
                "mcp_server_tool_call, search_tool_call, code_interpreter_tool_result, "
                "image_generation_tool_result, mcp_server_tool_result, search_tool_result, "
                "function_approval_request, function_approval_response, usage"
            )
            assert "\n" not in str(refused.value)
            assert await store.messages(conversation_for("bad")) == []
            with pytest.raises(InvalidInput, match="needs a session id"):
                await provider.get_messages(None)

    asyncio.run(go())


def test_a_multi_turn_run_resumes_in_a_fresh_store_object(location: str) -> None:
    """Two runs of the framework's Agent (a tool round, then a plain question), then a third
    run from a fresh store, provider, agent and client: its first request is the stored history
    as prose, one message per stored message, with no function call or result content."""

    async def first() -> None:
        async with await convstore.open_async_store(location) as store:
            agent = make_agent(store, ScriptedClient())
            session = agent.create_session(session_id="multi")
            assert (await agent.run("Delete release-7.", session=session)).text == "Deleted."
            assert (await agent.run("Still there?", session=session)).text == "I am here."

    async def resumed() -> list[dict[str, Any]]:
        async with await convstore.open_async_store(location) as store:
            client = ScriptedClient()
            agent = make_agent(store, client)
            session = agent.create_session(session_id="multi")
            assert (await agent.run("And now?", session=session)).text == "I am here."
            return client.requests[0]

    asyncio.run(first())
    request = asyncio.run(resumed())
    assert request == [
        {"role": "user", "text": "Delete release-7.", "types": ["text"]},
        {
            "role": "assistant",
            "text": '[Reasoning]: Delete it.\n\nTool use: delete_branch({"branch":"release-7"})',
            "types": ["text"],
        },
        {"role": "user", "text": "Result (delete_branch): deleted release-7", "types": ["text"]},
        {"role": "assistant", "text": "Deleted.", "types": ["text"]},
        {"role": "user", "text": "Still there?", "types": ["text"]},
        {"role": "assistant", "text": "I am here.", "types": ["text"]},
        {"role": "user", "text": "And now?", "types": ["text"]},
    ]
    with convstore.open_store(location) as store:
        assert len(store.messages(conversation_for("multi"))) == 8  # each message once


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["run", "stream"])
def test_a_call_killed_inside_its_tool_is_recorded_and_resumes_as_prose(
    location: str, mode: str, tmp_path: Path
) -> None:
    """The worker's run is SIGKILLed inside ``delete_branch`` (the tool has started,
    ``after_run`` never comes): the provider's middleware recorded the question and the call
    before the tool ran, so both are in the store, ``audit tools --status missing`` lists the
    call, and the next run's first request, in a fresh process, shows it as prose with no
    call left dangling."""
    seen, ready = tmp_path / "seen.jsonl", tmp_path / "in-tool"
    flags = ["--stream"] if mode == "stream" else []
    kill_in_tool(
        worker(location, "ops", "Delete release-7.", seen, f"--ready={ready}", *flags), ready
    )

    with convstore.open_store(location) as store:
        stored = [
            (m.role, [b.block for b in m.blocks]) for m in store.messages(conversation_for("ops"))
        ]
    assert [(role, [b.type for b in blocks]) for role, blocks in stored] == [
        ("user", ["text"]),
        ("assistant", ["reasoning", "tool_use"]),
    ]
    call = stored[1][1][1]
    assert isinstance(call, ToolUseBlock)
    assert (call.name, call.input) == ("delete_branch", {"branch": "release-7"})
    assert missing_calls(location, tmp_path / "audit.db") == [
        ("delete_branch", '{"branch":"release-7"}')
    ]

    resumed = subprocess.run(
        worker(location, "ops", "Did that go through?", seen),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "I am here."
    first_request = json.loads(seen.read_text().splitlines()[-1])
    assert first_request == [
        {"role": "user", "text": "Delete release-7.", "types": ["text"]},
        {
            "role": "assistant",
            "text": '[Reasoning]: Delete it.\n\nTool use: delete_branch({"branch":"release-7"})',
            "types": ["text"],
        },
        {"role": "user", "text": "Did that go through?", "types": ["text"]},
    ]


@pytest.mark.slow
def test_two_processes_on_one_session_lose_nothing_and_write_no_half_turn(
    location: str, tmp_path: Path
) -> None:
    """Two processes run five tool-round turns each on one session at once. Every message
    of every turn is stored exactly once; each write is whole (a question is followed by its
    call, recorded together before the tool ran; a result by its answer, saved together
    after); every call has its result. The two processes' turns may interleave."""
    runs = [
        subprocess.Popen(
            worker(
                location, "shared", f"look up {name}", tmp_path / f"seen-{name}.jsonl", "--turns=5"
            ),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in "ab"
    ]
    for run in runs:
        out, err = run.communicate(timeout=180)
        assert run.returncode == 0, err
        assert out.split() == ["Done."] * 5
    with convstore.open_store(location) as store:
        messages = store.messages(conversation_for("shared"))
    firsts = [m.blocks[0].block for m in messages]
    assert len(messages) == 2 * 5 * 4
    texts = [b.text for b in firsts if isinstance(b, TextBlock)]
    questions = [text for text in texts if text.startswith("look up")]
    assert sorted(questions) == sorted(f"look up {n} {i}" for n in "ab" for i in range(5))
    for first, following in pairwise(firsts):
        if isinstance(first, TextBlock) and first.text.startswith("look up"):
            assert isinstance(following, ToolUseBlock)  # recorded in one write with it
            assert following.input == {"what": first.text}
        if isinstance(first, ToolResultBlock):
            assert isinstance(following, TextBlock)  # its answer, saved in one write with it
            assert following.text == "Done."
    calls = {b.id for b in firsts if isinstance(b, ToolUseBlock)}
    results = {b.tool_use_id for b in firsts if isinstance(b, ToolResultBlock)}
    assert calls == results
    assert len(calls) == 10


def test_per_service_call_persistence_is_refused_in_one_line(tmp_path: Path) -> None:
    """``require_per_service_call_history_persistence`` reloads the history before every model
    call of the function loop, which the prose replay cannot serve (a native result would
    follow its call in prose): the run is refused at once, in one line."""

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            agent = Agent(
                ScriptedClient(),
                context_providers=[ConvstoreHistoryProvider(store)],
                require_per_service_call_history_persistence=True,
            )
            with pytest.raises(InvalidInput) as refused:
                await agent.run("Hi.", session=agent.create_session(session_id="p"))
            assert "\n" not in str(refused.value)
            assert "require_per_service_call_history_persistence" in str(refused.value)

    asyncio.run(go())


def test_the_provider_is_the_frameworks_history_provider(tmp_path: Path) -> None:
    """It is a ``HistoryProvider``, so the agent loads it and adds no in-memory one beside it;
    a store of the wrong type is refused in one line."""
    with convstore.open_store(tmp_path / "s.db") as store:
        provider = ConvstoreHistoryProvider(store)
        assert isinstance(provider, HistoryProvider)
        agent = Agent(ScriptedClient(), context_providers=[provider])
        assert agent.context_providers == [provider]
        assert provider.conversation_id("x") == conversation_for("x")
    with pytest.raises(
        InvalidInput, match=r"^store must be a convstore Store or AsyncStore, not str$"
    ):
        ConvstoreHistoryProvider("store.db")  # type: ignore[arg-type]


class FailsAfterTheTool(ScriptedClient):
    """A scripted client whose model call after a tool's result fails; after that failure,
    it answers everything with "I am here." and calls no tool."""

    failed = False

    def reply(self, messages: Sequence[Message]) -> list[Content]:
        if self.failed:
            return [Content.from_text("I am here.")]
        if messages[-1].role == "tool":
            self.failed = True
            msg = "the service is down"
            raise RuntimeError(msg)
        return super().reply(messages)


def test_a_run_that_fails_after_its_early_write_leaves_the_next_run_whole(
    tmp_path: Path,
) -> None:
    """A run fails after its question and call were recorded early (its save never comes);
    the same question asked again in the next run, answered without a tool, is recorded:
    nothing of that run is skipped for what the failed run had recorded early."""

    async def go() -> list[list[str]]:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            agent = make_agent(store, FailsAfterTheTool())
            session = agent.create_session(session_id="retry")
            with pytest.raises(RuntimeError, match="the service is down"):
                await agent.run("Delete release-7.", session=session)
            assert (await agent.run("Delete release-7.", session=session)).text == "I am here."
            stored = await store.messages(conversation_for("retry"))
            return [[b.block.type for b in m.blocks] for m in stored]

    assert asyncio.run(go()) == [["text"], ["reasoning", "tool_use"], ["text"], ["text"]]
