"""ConvstoreSaver: LangGraph's own checkpointer contract suite (langgraph-checkpoint-conformance,
every capability, none skipped), messages stored once as convstore messages, and a real
StateGraph agent killed mid tool round and resumed, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate

import convstore
from convstore.integrations.langgraph import ConvstoreSaver, conversation_for
from tests.killed_in_tool import kill_in_tool, missing_calls

ROOT = Path(__file__).resolve().parents[1]


def test_conformance_suite_passes_with_no_capability_skipped(location: str) -> None:
    """Every contract of langgraph-checkpoint-conformance, the optional ones included
    (delete_for_runs, copy_thread, prune): all detected, all passed."""
    store = convstore.open_store(location)

    @checkpointer_test(name=f"ConvstoreSaver-{location[:10]}")
    async def saver() -> AsyncIterator[ConvstoreSaver]:
        yield ConvstoreSaver(store=store)

    try:
        report = asyncio.run(validate(saver))
    finally:
        store.close()
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert failures == {}
    assert all(result.detected for result in report.results.values())
    assert sum(result.tests_passed for result in report.results.values()) == 81


def agent(location: str, thread: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.langgraph_worker", location, thread, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_call_killed_inside_its_tool_is_checkpointed_and_resumed_answered(
    location: str, tmp_path: Path
) -> None:
    """SIGKILLed by its parent inside the tool, with durability="sync": the AIMessage that
    called the tool was checkpointed before the ToolNode ran, so the call is in the store and
    ``audit tools --status missing`` lists it; resuming runs the tool again, and the model's
    first request holds the call followed by its ToolMessage (no call left unanswered)."""
    ready, seen = tmp_path / "in-tool", tmp_path / "seen.jsonl"
    argv = [sys.executable, "-m", "tests.langgraph_worker", location, "t-2"]
    kill_in_tool([*argv, "run", "Delete scratch.", f"--ready={ready}"], ready)
    with convstore.open_store(location) as store:
        stored = store.messages(conversation_for("t-2"))
        assert [(m.role, [b.block.type for b in m.blocks]) for m in stored] == [
            ("user", ["text"]),
            ("assistant", ["tool_use"]),
        ]
    assert missing_calls(location, tmp_path / "audit.db") == [("delete_tmp", '{"path":"scratch"}')]

    resumed = agent(location, "t-2", "resume", f"--seen={seen}")
    assert resumed.returncode == 0, resumed.stderr
    first_request = json.loads(seen.read_text().splitlines()[0])
    assert first_request == [
        {"type": "human", "content": "Delete scratch.", "calls": [], "answers": None},
        {"type": "ai", "content": "", "calls": ["call_1"], "answers": None},
        {"type": "tool", "content": "deleted scratch", "calls": [], "answers": "call_1"},
    ]
    assert missing_calls(location, tmp_path / "audit.db") == []


@pytest.mark.slow
def test_agent_killed_mid_tool_round_resumes_from_its_checkpoint(location: str) -> None:
    """A StateGraph agent's process is SIGKILLed inside its tool; a fresh process resumes the
    thread from the checkpoint (the tool runs again, the model answers), and the thread is a
    conversation whose messages are recorded once each and replay as valid prose."""
    killed = agent(location, "t-1", "run", "Delete scratch.", "--die-in-tool")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = agent(location, "t-1", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.split() == ["human", "ai", "tool", "ai"]
    with convstore.open_store(location) as store:
        conversation = conversation_for("t-1")
        stored = store.messages(conversation)
        kinds = [(m.role, [b.block.type for b in m.blocks]) for m in stored]
        assert kinds == [
            ("user", ["text"]),
            ("assistant", ["tool_use"]),
            ("user", ["tool_result"]),
            ("assistant", ["text"]),
        ]
        wire = store.replay(conversation)["messages"]
        assert [m["content"] for m in wire] == [
            "Delete scratch.",
            'Tool use: delete_tmp({"path":"scratch"})',
            "Result (delete_tmp): deleted scratch",
            "Done.",
        ]
        history = list(ConvstoreSaver(store=store).list({"configurable": {"thread_id": "t-1"}}))
        assert len(history) >= 5  # every step, for time travel
