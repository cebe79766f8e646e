"""The Pydantic AI adapter, driven by pydantic-ai's own Agent and FunctionModel (no network).

A run is killed (SIGKILL) inside its tool, after the call was recorded and before the return
was; the next run resumes from ``message_history`` and succeeds, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    BinaryContent,
    CachePoint,
    CompactionPart,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    VideoUrl,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from convstore import (
    InvalidInput,
    ReasoningBlock,
    Store,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    open_async_store,
    open_store,
)
from convstore.engine.plan import HISTORY_STARTS
from convstore.integrations.pydantic_ai import (
    RunRecorder,
    amessage_history,
    arecord_messages,
    convert_messages,
    message_history,
    message_history_async,
    record_messages,
    record_messages_async,
)
from tests.killed_in_tool import kill_in_tool, missing_calls

ROOT = Path(__file__).resolve().parent.parent

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG."""

KILLED_RUN = """
import asyncio, os, signal, sys

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, ThinkingPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

import convstore
from convstore.integrations.pydantic_ai import record_messages

store = convstore.open_store(sys.argv[1])
conversation = sys.argv[2]


def model(messages, info):
    thinking = ThinkingPart("List the folder first.", signature="sig-1", provider_name="anthropic")
    call = ToolCallPart("ls", {"path": "."}, tool_call_id="call-1")
    return ModelResponse(parts=[thinking, call])


agent = Agent(FunctionModel(model), system_prompt="You are terse.")


@agent.tool_plain
def ls(path: str) -> str:
    os.kill(os.getpid(), signal.SIGKILL)  # the process dies inside the tool
    return "unreachable"


async def main():
    recorded = 0
    # Record as a runtime does: each message as soon as the run has it.
    async with agent.iter("What is in this folder?") as run:
        async for _node in run:
            messages = run.all_messages()
            record_messages(store, conversation, messages[recorded:])
            recorded = len(messages)


asyncio.run(main())
"""
"""A run whose process is killed in its tool, after recording the model's tool call."""


def _texts(store: Store, conversation: Any) -> list[tuple[str, list[Any]]]:
    return [(m.role, [b.block for b in m.blocks]) for m in store.messages(conversation)]


def test_a_run_killed_in_its_tool_resumes_from_the_prose_history(location: str) -> None:
    """A run killed by SIGKILL between its tool call and the tool's return leaves the call
    recorded; the next run with message_history succeeds, and its model sees the history as
    prose (no tool-call or tool-return parts), then the new prompt."""
    with open_store(location) as store:
        conversation = store.new_conversation(title="pydantic-ai")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, location, str(conversation)],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr

    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart("a.txt and b.txt")])

    agent = Agent(FunctionModel(model), system_prompt="You are terse.")

    @agent.tool_plain
    def ls(path: str) -> str:
        return "a.txt b.txt"

    with open_store(location) as store:
        roles = [m.role for m in store.messages(conversation)]
        assert roles == ["system", "user", "assistant"]
        [_, _, (_, calls)] = _texts(store, conversation)
        assert calls == [
            ReasoningBlock(text="List the folder first.", signature="sig-1"),
            ToolUseBlock(id="call-1", name="ls", input={"path": "."}),
        ]

        history = message_history(store, conversation)
        result = agent.run_sync("Go on.", message_history=history)
        assert result.output == "a.txt and b.txt"
        record_messages(store, conversation, result.new_messages())

        [request] = seen
        assert _contents(request) == [
            [
                ("SystemPromptPart", "You are terse."),
                ("UserPromptPart", "What is in this folder?"),
            ],
            [
                (
                    "TextPart",
                    '[Reasoning]: List the folder first.\n\nTool use: ls({"path":"."})',
                )
            ],
            [("UserPromptPart", "Go on.")],
        ]
        assert [m.role for m in store.messages(conversation)] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert store.replay(conversation)["messages"][-1] == {
            "role": "assistant",
            "content": "a.txt and b.txt",
        }


@pytest.mark.slow
def test_a_run_recorder_keeps_a_call_killed_inside_its_tool(location: str, tmp_path: Path) -> None:
    """A run given ``RunRecorder`` and SIGKILLed by its parent inside ``delete_branch``: the
    call was recorded before the tool ran, ``audit tools --status missing`` lists it, and the
    next run's first request holds it as prose, with no tool-call part left without its
    return; that run's messages are recorded once each."""
    with open_store(location) as store:
        conversation = str(store.new_conversation(title="pydantic-ai"))
    seen, ready = tmp_path / "seen.jsonl", tmp_path / "in-tool"
    worker = [sys.executable, "-m", "tests.pydantic_ai_worker", location, conversation]
    kill_in_tool([*worker, "Delete release-7.", str(seen), f"--ready={ready}"], ready)

    with open_store(location) as store:
        stored = _texts(store, conversation)
    assert stored[0] == ("user", [TextBlock(text="Delete release-7.")])
    [(role, [call])] = stored[1:]
    assert (role, call.name, call.input) == ("assistant", "delete_branch", {"branch": "release-7"})
    assert missing_calls(location, tmp_path / "audit.db") == [
        ("delete_branch", '{"branch":"release-7"}')
    ]

    resumed = subprocess.run(
        [*worker, "Did that go through?", str(seen)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "I cannot tell."
    first_request = ModelMessagesTypeAdapter.validate_json(seen.read_text().splitlines()[-1])
    assert _contents(first_request) == [
        [("UserPromptPart", "Delete release-7.")],
        [("TextPart", 'Tool use: delete_branch({"branch":"release-7"})')],
        [("UserPromptPart", "Did that go through?")],
    ]
    with open_store(location) as store:
        assert [m.role for m in store.messages(conversation)] == [
            "user",
            "assistant",
            "user",
            "assistant",
        ]


def test_a_run_recorder_records_each_message_once_and_the_call_before_its_tool(
    tmp_path: Path,
) -> None:
    """In process: when the tool starts, the prompt and the response that called it are
    recorded; when the run ends, the tool's return and the answer follow, each once."""
    answers: Iterator[list[ModelResponsePart]] = iter(
        [
            [ToolCallPart("delete_branch", {"branch": "release-7"}, tool_call_id="c1")],
            [TextPart("Deleted.")],
        ]
    )

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=next(answers))

    agent = Agent(FunctionModel(model), system_prompt="You are terse.")
    with open_store(tmp_path / "s.db") as store:
        conversation = store.new_conversation(title="early")
        in_tool: list[list[str]] = []

        @agent.tool_plain
        def delete_branch(branch: str) -> str:
            in_tool.append([m.role for m in store.messages(conversation)])
            return f"deleted {branch}"

        recorder = RunRecorder(store, conversation)
        agent.run_sync("Delete release-7.", capabilities=[recorder])
        assert in_tool == [["system", "user", "assistant"]]
        assert [m.role for m in store.messages(conversation)] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert store.replay(conversation)["messages"][-2:] == [
            {"role": "user", "content": "Result (delete_branch): deleted release-7"},
            {"role": "assistant", "content": "Deleted."},
        ]


def _retrying_run() -> list[ModelMessage]:
    """A real run: thinking and a call, a call with broken JSON arguments, a tool that asks
    for a retry, then the answer."""
    responses: Iterator[list[ModelResponsePart]] = iter(
        [
            [
                ThinkingPart("Look first.", signature="sig-9", provider_name="anthropic"),
                ToolCallPart("ls", {"path": "."}, tool_call_id="c1"),
            ],
            [ToolCallPart("ls", '{"path": ', tool_call_id="c2")],
            [ToolCallPart("flaky", {}, tool_call_id="c3")],
            [TextPart("Two files.")],
        ]
    )

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=next(responses))

    agent = Agent(FunctionModel(model), system_prompt="You are terse.")

    @agent.tool_plain
    def ls(path: str) -> str:
        return "a.txt b.txt"

    @agent.tool_plain
    def flaky() -> str:
        msg = "try again later"
        raise ModelRetry(msg)

    return agent.run_sync("What is here?").new_messages()


def test_every_part_of_a_real_run_is_recorded(tmp_path: Path) -> None:
    """System and user prompts, thinking with its signature, tool calls (raw arguments kept
    as emitted), tool returns with their tool names, and retries as error results all land,
    and replay shows them as prose."""
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        ids = record_messages(store, conversation, _retrying_run())
        assert len(ids) == 9
        recorded = _texts(store, conversation)
        assert recorded[:4] == [
            ("system", [TextBlock(text="You are terse.")]),
            ("user", [TextBlock(text="What is here?")]),
            (
                "assistant",
                [
                    ReasoningBlock(text="Look first.", signature="sig-9"),
                    ToolUseBlock(id="c1", name="ls", input={"path": "."}),
                ],
            ),
            (
                "user",
                [ToolResultBlock(tool_use_id="c1", name="ls", content="a.txt b.txt")],
            ),
        ]
        assert recorded[4] == ("assistant", [ToolUseBlock(id="c2", name="ls", input='{"path": ')])
        [retried] = recorded[5][1]
        assert isinstance(retried, ToolResultBlock)
        assert (retried.tool_use_id, retried.is_error) == ("c2", True)
        assert "Invalid JSON" in str(retried.content)
        assert recorded[7] == (
            "user",
            [
                ToolResultBlock(
                    tool_use_id="c3", name="flaky", content="try again later", is_error=True
                )
            ],
        )
        assert recorded[8] == ("assistant", [TextBlock(text="Two files.")])

        prose = [m["content"] for m in store.replay(conversation)["messages"]]
        assert prose[4] == 'Tool use: ls({"path": )'
        assert prose[7] == "Error (flaky): try again later"


def test_hand_built_parts_convert_as_documented() -> None:
    """Images (bytes and URLs), cache points, legacy and tool-less retries, redacted and
    OpenAI-encrypted thinking, and failed tool returns convert as
    docs/integrations/pydantic-ai.md says."""
    retry_info: RetryInfo[Any] = RetryInfo(cause="no_output", attempt=1, max_retries=1)
    with pytest.warns(
        UserWarning, match="RetryPromptPart. is deprecated"
    ):  # history from older runs
        legacy = [
            RetryPromptPart("bad", tool_name="grep", tool_call_id="g9"),
            RetryPromptPart("Answer in JSON."),
        ]
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                SystemPromptPart("Be brief."),
                UserPromptPart(
                    [
                        "Look:",
                        BinaryContent(data=PNG, media_type="image/png"),
                        CachePoint(),
                        ImageUrl(url="https://example.com/cat.png"),
                    ]
                ),
            ]
        ),
        ModelResponse(
            parts=[
                ThinkingPart("", id="redacted_thinking", signature="ENC", provider_name="x"),
                ThinkingPart("Sum.", id="rs_1", signature="gAAA", provider_name="openai"),
                ToolCallPart("grep", None, tool_call_id="g1"),
                ToolCallPart("grep", "[1, 2]", tool_call_id="g2"),
            ]
        ),
        ModelRequest(
            parts=[
                ToolReturnPart("grep", "boom", tool_call_id="g1", outcome="failed"),
                ToolReturnPart("grep", "no", tool_call_id="g2", outcome="denied"),
                *legacy,
                RetryFeedbackPart("Say something.", retry=retry_info),
            ]
        ),
    ]
    [system, user, assistant, answers] = convert_messages(messages)
    assert (system.role, system.blocks) == ("system", (TextBlock(text="Be brief."),))
    assert user.role == "user"
    assert [b.type for b in user.blocks] == ["text", "image", "image"]
    assert user.blocks[2].model_dump(exclude_none=True) == {
        "type": "image",
        "url": "https://example.com/cat.png",
        "media_type": "image/png",
    }
    assert (assistant.role, assistant.status) == ("assistant", "ended")
    assert assistant.blocks == (
        ReasoningBlock(text="", redacted=True, encrypted_content="ENC"),
        ReasoningBlock(text="Sum.", encrypted_content="gAAA"),
        ToolUseBlock(id="g1", name="grep", input={}),
        ToolUseBlock(id="g2", name="grep", input="[1, 2]"),
    )
    assert answers.role == "user"
    *results, legacy_text, feedback = answers.blocks
    assert results == [
        ToolResultBlock(tool_use_id="g1", name="grep", content="boom", is_error=True),
        ToolResultBlock(tool_use_id="g2", name="grep", content="no"),
        ToolResultBlock(
            tool_use_id="g9",
            name="grep",
            content="bad\n\nFix the errors and try again.",
            is_error=True,
        ),
    ]
    assert legacy_text == TextBlock(
        text="Validation feedback:\nAnswer in JSON.\n\nFix the errors and try again."
    )
    assert isinstance(feedback, TextBlock)
    assert "Say something." in feedback.text


def test_a_cut_off_response_is_recorded_interrupted_and_a_streaming_one_left_open(
    tmp_path: Path,
) -> None:
    """A response whose state is 'interrupted' is recorded with its blocks and then
    interrupted; an 'incomplete' one is left open, as a turn still streaming."""
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        cut = ModelResponse(parts=[TextPart("Let me che")], state="interrupted")
        streaming = ModelResponse(parts=[TextPart("So far")], state="incomplete")
        record_messages(store, conversation, [cut, streaming])
        [first, second] = store.messages(conversation)
        assert (first.status, second.status) == ("interrupted", "open")
        prose = [m["content"] for m in store.replay(conversation)["messages"]]
        assert prose == [HISTORY_STARTS, "Let me che\n\n[Interrupted]", "So far"]


@pytest.mark.parametrize(
    ("message", "named"),
    [
        (ModelResponse(parts=[CompactionPart("Earlier: the user asked.")]), "'compaction'"),
        (ModelRequest(parts=[UserPromptPart([VideoUrl(url="https://x/y.mp4")])]), "'video-url'"),
        (
            ModelRequest(
                parts=[UserPromptPart([BinaryContent(data=b"RIFF", media_type="audio/wav")])]
            ),
            "audio/wav",
        ),
    ],
)
def test_a_part_convstore_cannot_keep_is_refused_and_nothing_is_recorded(
    tmp_path: Path, message: ModelMessage, named: str
) -> None:
    """A part kind (or content) the adapter does not keep fails with one InvalidInput naming
    it, and the messages before it in the same call are not recorded either."""
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        before = store.log_position()
        first = ModelRequest(parts=[UserPromptPart("hello")])
        with pytest.raises(InvalidInput, match=named) as caught:
            record_messages(store, conversation, [first, message])
        assert "\n" not in str(caught.value)
        assert str(caught.value).startswith("message 1 (")
        assert store.log_position() == before
        assert store.messages(conversation) == []


def test_images_come_back_as_images_for_a_vision_model(tmp_path: Path) -> None:
    """With vision=True a recorded user image returns as BinaryContent (and a URL image as
    ImageUrl); without it, as the not-shown marker text."""
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        prompt = UserPromptPart(
            [
                "Look:",
                BinaryContent(data=PNG, media_type="image/png"),
                ImageUrl("https://e.x/a.png"),
            ]
        )
        record_messages(store, conversation, [ModelRequest(parts=[prompt])])
        [seen] = message_history(store, conversation, vision=True)
        assert isinstance(seen, ModelRequest)
        [part] = seen.parts
        assert isinstance(part, UserPromptPart)
        assert not isinstance(part.content, str)
        text, image, url = part.content
        assert text == "Look:"
        assert isinstance(image, BinaryContent)
        assert (image.data, image.media_type) == (PNG, "image/png")
        assert isinstance(url, ImageUrl)
        assert url.url == "https://e.x/a.png"
        [blind] = message_history(store, conversation)
        assert isinstance(blind, ModelRequest)
        assert isinstance(blind.parts[0], UserPromptPart)
        assert "[Image not shown" in str(blind.parts[0].content)


def test_documents_are_kept_and_a_pdf_comes_back_for_a_vision_model(tmp_path: Path) -> None:
    """A PDF as BinaryContent and a DocumentUrl are recorded as documents; with vision=True
    the PDF returns as BinaryContent, without it as the not-read marker."""
    pdf = b"%PDF-1.4\n1 0 obj <</Type /Page>> endobj\n%%EOF\n"
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        prompt = UserPromptPart(
            [
                BinaryContent(data=pdf, media_type="application/pdf"),
                DocumentUrl("https://e.x/a.pdf"),
            ]
        )
        record_messages(store, conversation, [ModelRequest(parts=[prompt])])
        kinds = [b.block.type for m in store.messages(conversation) for b in m.blocks]
        assert kinds == ["document", "document"]
        [seen] = message_history(store, conversation, vision=True)
        assert isinstance(seen, ModelRequest)
        [part] = seen.parts
        assert isinstance(part, UserPromptPart)
        assert not isinstance(part.content, str)
        document = part.content[0]
        assert isinstance(document, BinaryContent)
        assert (document.data, document.media_type) == (pdf, "application/pdf")
        [blind] = message_history(store, conversation)
        assert isinstance(blind, ModelRequest)
        assert "[Document not read" in str(blind.parts[0].content)  # type: ignore[union-attr]


def test_the_async_variants_take_either_store(location: str) -> None:
    """arecord_messages and amessage_history give what the sync functions give, on an
    AsyncStore or on a Store (through as_async); a sync function refuses an AsyncStore and
    names its async variant."""
    messages = _retrying_run()

    async def main() -> tuple[list[ModelMessage], UUID]:
        async with await open_async_store(location) as store:
            conversation, other = await store.new_conversation(), await store.new_conversation()
            assert len(await arecord_messages(store, conversation, messages)) == 9
            assert len(await arecord_messages(store.store, other, messages)) == 9
            with pytest.raises(InvalidInput, match="await arecord_messages"):
                record_messages(store, conversation, messages)  # type: ignore[arg-type]
            with pytest.raises(InvalidInput, match="await amessage_history"):
                message_history(store, conversation)  # type: ignore[arg-type]
            history = await amessage_history(store, conversation)
            assert _contents(await amessage_history(store.store, other)) == _contents(history)
            return history, conversation

    history, conversation = asyncio.run(main())
    kinds = ["request", "request", *["response", "request"] * 3, "response"]
    assert [m.kind for m in history] == kinds
    with open_store(location) as store:
        assert _contents(history) == _contents(message_history(store, conversation))
        assert len(store.messages(conversation)) == 9


def _contents(history: list[ModelMessage]) -> list[list[tuple[str, Any]]]:
    return [[(type(p).__name__, getattr(p, "content", None)) for p in m.parts] for m in history]


THINKING_CASE = "anthropic-messages/pydanticai-anthropic-tool-with-thinking"
"""pydantic-ai's recorded test: claude-sonnet-4 answers with thinking (signed), text and a
tool call (resp0); req1 is the request pydantic-ai sent next, with the tool's return."""


class _Died(BaseException):
    """The process dying inside the tool."""


def _anthropic_agent(corpus: dict[str, Any], bodies: list[dict[str, Any]]) -> Agent[None, str]:
    """An Agent on pydantic-ai's AnthropicModel and the real anthropic SDK, whose HTTP
    transport answers from recorded responses instead of the network."""
    import httpx2  # noqa: PLC0415 - the transport of the anthropic SDK installed here
    from anthropic import AsyncAnthropic  # noqa: PLC0415
    from pydantic_ai.models.anthropic import AnthropicModel  # noqa: PLC0415
    from pydantic_ai.providers.anthropic import AnthropicProvider  # noqa: PLC0415

    responses = iter(corpus["responses"])

    def answer(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        return httpx2.Response(200, json=next(responses))

    transport = httpx2.MockTransport(answer)
    client = AsyncAnthropic(api_key="recorded", http_client=httpx2.AsyncClient(transport=transport))
    model = AnthropicModel("claude-sonnet-4-0", provider=AnthropicProvider(anthropic_client=client))
    return Agent(model)


def test_a_recorded_anthropic_tool_round_survives_a_killed_run(
    location: str, corpus_dir: Path
) -> None:
    """A real Claude response (signed thinking, text, a tool call) recorded through
    pydantic-ai's Anthropic model, the run dying in the tool: the signature is kept, the live
    round rebuilt from the store equals the request pydantic-ai really sent next, and a
    resumed run sends Anthropic prose history the SDK's request types accept."""
    from tests.sdk import rejections  # noqa: PLC0415 - needs the anthropic SDK

    response = json.loads((corpus_dir / f"{THINKING_CASE}-resp0.json").read_text())
    next_request = json.loads((corpus_dir / f"{THINKING_CASE}-req1.json").read_text())
    [thinking, text, call] = response["content"]
    final = {**response, "id": "msg_2", "stop_reason": "end_turn"}
    final["content"] = [{"type": "text", "text": "Mexico City."}]
    bodies: list[dict[str, Any]] = []
    agent = _anthropic_agent({"responses": [response, final]}, bodies)

    @agent.tool_plain
    def get_user_country() -> str:
        raise _Died

    async def killed_run(store: Store, conversation: UUID) -> None:
        recorded = 0
        async with agent.iter("What is the largest city in the user country?") as run:
            async for _node in run:
                messages = run.all_messages()
                record_messages(store, conversation, messages[recorded:])
                recorded = len(messages)

    with open_store(location) as store:
        conversation = store.new_conversation()
        with pytest.raises(_Died):
            asyncio.run(killed_run(store, conversation))
        [(_, asked), (_, answered)] = _texts(store, conversation)
        assert asked == [TextBlock(text="What is the largest city in the user country?")]
        assert answered == [
            ReasoningBlock(text=thinking["thinking"], signature=thinking["signature"]),
            TextBlock(text=text["text"]),
            ToolUseBlock(id=call["id"], name=call["name"], input=call["input"]),
        ]

        # The tool's return, recorded once it is known: the live round is the real request.
        returned = ToolReturnPart(call["name"], "Mexico", tool_call_id=call["id"])
        record_messages(store, conversation, [ModelRequest(parts=[returned])])
        turn = store.messages(conversation)[1].message_id
        live = store.live_request(conversation, turn, shape="anthropic")
        assert live["messages"][:2] == next_request["messages"][:2]
        [result] = live["messages"][2]["content"]
        [sent_result] = next_request["messages"][2]["content"]
        assert result == {**sent_result, "content": [{"type": "text", "text": "Mexico"}]}

        resumed = agent.run_sync(
            "And how many people live there?", message_history=message_history(store, conversation)
        )
        assert resumed.output == "Mexico City."
    sent = bodies[-1]
    kinds = {part["type"] for m in sent["messages"] for part in m["content"]}
    assert kinds == {"text"}
    assert "Tool use: get_user_country({})" in json.dumps(sent["messages"])
    assert rejections("anthropic", sent) == []


def test_the_old_async_names_still_work() -> None:
    """record_messages_async and message_history_async (the names before the ``a`` prefix
    rule) are the same functions, kept for one release."""
    assert record_messages_async is arecord_messages
    assert message_history_async is amessage_history
