"""ConvstoreChatMessageHistory: LangChain messages as blocks, the history as what the next
model call is sent, and LangChain's own RunnableWithMessageHistory over a fake chat model in
fresh processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    convert_to_openai_messages,
)
from openai.types.chat import ChatCompletionMessageParam

import convstore
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.integrations.langchain import (
    ConvstoreChatMessageHistory,
    conversation_for,
    message_blocks,
)
from tests.sdk import request_problems
from tests.strategies import TINY_IMAGES

ROOT = Path(__file__).resolve().parents[1]
PNG = TINY_IMAGES["image/png"][0]


def blocks_of(message: Any) -> tuple[str, list[dict[str, Any]]]:
    role, blocks = message_blocks(message)
    return role, [
        b.model_dump(exclude_none=True, exclude_defaults=True) | {"type": b.type} for b in blocks
    ]


def assert_valid_chat(messages: list[Any]) -> list[dict[str, Any]]:
    """What the model is sent, in the OpenAI Chat shape (LangChain's own conversion), passes
    the openai SDK's message type, and holds no tool call a result would have to answer."""
    wire: list[dict[str, Any]] = convert_to_openai_messages(messages)
    for message in wire:
        assert request_problems(message, ChatCompletionMessageParam) == []
        assert "tool_calls" not in message
        assert message["role"] != "tool"
    return wire


def test_ai_tool_calls_tool_messages_reasoning_and_images_map_to_blocks() -> None:
    """Each LangChain part lands as its convstore block: tool calls as tool_use (unparsed
    arguments kept raw), a ToolMessage as a tool_result whose error status is is_error,
    thinking with its signature as reasoning, images by data URL or address."""
    ai = AIMessage(
        content=[
            {"type": "thinking", "thinking": "Which dir?", "signature": "c2ln"},
            {"type": "text", "text": "Listing."},
        ],
        tool_calls=[{"name": "ls", "args": {"path": "/var/scratch"}, "id": "call_1"}],
        invalid_tool_calls=[
            {
                "type": "invalid_tool_call",
                "name": "rm",
                "args": '{"path": ',
                "id": "call_2",
                "error": None,
            }
        ],
    )
    assert blocks_of(ai) == (
        "assistant",
        [
            {"type": "reasoning", "text": "Which dir?", "signature": "c2ln"},
            {"type": "text", "text": "Listing."},
            {"type": "tool_use", "id": "call_1", "name": "ls", "input": {"path": "/var/scratch"}},
            {"type": "tool_use", "id": "call_2", "name": "rm", "input": '{"path": '},
        ],
    )
    failed = ToolMessage("no such dir", tool_call_id="call_1", status="error", name="ls")
    assert blocks_of(failed) == (
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": "no such dir",
                "is_error": True,
                "name": "ls",
            }
        ],
    )
    openai_reasoning = AIMessage(content="ok", additional_kwargs={"reasoning_content": "think"})
    assert blocks_of(openai_reasoning)[1][0] == {"type": "reasoning", "text": "think"}
    human = HumanMessage(
        content=[
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image", "url": "https://example.com/cat.png"},
        ]
    )
    assert blocks_of(human) == (
        "user",
        [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "media_type": "image/png", "data": PNG},
            {"type": "image", "url": "https://example.com/cat.png"},
        ],
    )


def test_bad_messages_are_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    """A part convstore cannot keep (audio), an image whose bytes are not what it claims, or
    a message type it does not know: one line naming it, and the session is untouched."""
    with convstore.open_store(str(tmp_path / "s.db")) as store:
        history = ConvstoreChatMessageHistory("s", store=store)
        audio = HumanMessage(
            content=[{"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}]
        )
        with pytest.raises(
            InvalidInput, match=r"^message 1: a LangChain content block of type 'audio'"
        ):
            history.add_messages([HumanMessage("fine"), audio])
        liar = HumanMessage(content=[{"type": "image", "base64": "AAAA", "mime_type": "image/png"}])
        with pytest.raises(InvalidBlock) as caught:
            history.add_messages([liar])
        assert "\n" not in str(caught.value)
        assert history.messages == []
        assert store.messages(history.conversation_id) == []


def test_a_killed_tool_round_leaves_no_unanswered_tool_call_in_what_the_model_is_sent(
    tmp_path: Path,
) -> None:
    """The call landed, its ToolMessage never did (the process died in the tool): the history
    is prose the model can be sent, and the call is kept as a tool_use block in the log."""
    with convstore.open_store(str(tmp_path / "s.db")) as store:
        history = ConvstoreChatMessageHistory("ops", store=store)
        history.add_messages(
            [
                SystemMessage("You run shell tools."),
                HumanMessage("Delete scratch."),
                AIMessage(
                    "",
                    tool_calls=[{"name": "rm", "args": {"path": "/var/scratch"}, "id": "call_9"}],
                ),
            ]
        )
        sent = [*history.messages, HumanMessage("Still there?")]
        wire = assert_valid_chat(sent)
        assert [m["role"] for m in wire] == ["system", "user", "assistant", "user"]
        assert wire[2]["content"] == 'Tool use: rm({"path":"/var/scratch"})'
        [_, _, call] = store.messages(history.conversation_id)
        assert call.blocks[0].block.type == "tool_use"


def test_messages_round_trip_verbatim_as_entries_and_ids_are_not_recorded_twice(
    tmp_path: Path,
) -> None:
    """Every message is kept as LangChain wrote it (message_to_dict), and a message whose id
    was recorded already is skipped, so a retried add does not repeat it."""
    with convstore.open_store(str(tmp_path / "s.db")) as store:
        history = ConvstoreChatMessageHistory("s", store=store)
        answer = AIMessage("Hi.", id="run-1", response_metadata={"model_name": "fake"})
        history.add_messages([HumanMessage("Hello.", id="h-1"), answer])
        history.add_messages([answer])
        entries = store.entries(history.conversation_id)
        assert entries is not None
        assert [e["uuid"] for e in entries] == ["langchain:h-1", "langchain:run-1"]
        assert entries[1]["langchain"]["data"]["response_metadata"] == {"model_name": "fake"}  # type: ignore[index,call-overload]
        assert [m.content for m in history.messages] == ["Hello.", "Hi."]


def test_async_methods_and_clear(tmp_path: Path) -> None:
    """The async variants read and write the same conversation; clear withdraws every
    message from what is sent while the log keeps them."""

    async def main() -> None:
        async with await convstore.open_async_store(str(tmp_path / "s.db")) as store:
            history = ConvstoreChatMessageHistory("a", store=store)
            await history.aadd_messages([HumanMessage("One."), AIMessage("Two.")])
            assert [m.content for m in await history.aget_messages()] == ["One.", "Two."]
            assert [m.content for m in history.messages] == ["One.", "Two."]
            await history.aclear()
            assert await history.aget_messages() == []
            assert len(await store.messages(conversation_for("a"))) == 2

    asyncio.run(main())


def run_turn(location: str, session: str, prompt: str, seen: Path, reply: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.langchain_worker",
            location,
            session,
            prompt,
            str(seen),
            reply,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_runnable_with_message_history_across_processes(location: str, tmp_path: Path) -> None:
    """RunnableWithMessageHistory over GenericFakeChatModel, one turn per fresh process: the
    second turn's model is sent the first turn's messages from the store, as valid Chat
    messages; the store holds the whole session."""
    seen = tmp_path / "seen.jsonl"
    assert run_turn(location, "chat-1", "Hello.", seen, "Hi there.") == "Hi there."
    assert run_turn(location, "chat-1", "Again?", seen, "Yes.") == "Yes."
    sent = [json.loads(line) for line in seen.read_text().splitlines()]
    assert sent[0] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello."},
    ]
    assert sent[1] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hi there."},
        {"role": "user", "content": "Again?"},
    ]
    for message in sent[1]:
        assert request_problems(message, ChatCompletionMessageParam) == []
    with convstore.open_store(location) as store:
        stored = store.messages(conversation_for("chat-1"))
        assert [(m.role, m.blocks[0].block.text) for m in stored] == [  # type: ignore[union-attr]
            ("user", "Hello."),
            ("assistant", "Hi there."),
            ("user", "Again?"),
            ("assistant", "Yes."),
        ]
