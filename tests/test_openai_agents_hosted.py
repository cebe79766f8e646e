"""ConvstoreSession with hosted tool items: a real Agents SDK ``Runner`` driven by a scripted
model whose responses hold provider-run tool calls (web search, file search, code
interpreter, image generation, remote MCP), and the session used directly; what it stores
and what ``get_items`` gives back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from openai.types.responses import ResponseInputParam, ResponseOutputItem
from openai.types.responses.response_prompt_param import ResponsePromptParam
from pydantic import TypeAdapter

import convstore
from convstore.domain.blocks import HostedToolResultBlock, HostedToolUseBlock, TextBlock
from convstore.integrations.openai_agents import ConvstoreSession
from tests import responses_items as items
from tests.sdk import request_problems

OUTPUT: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
INPUT: TypeAdapter[Any] = TypeAdapter(ResponseInputParam)
ANSWER = {
    "type": "message",
    "id": "msg_end",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Found it.", "annotations": []}],
}
TURN = (
    items.WEB_SEARCH,
    items.FILE_SEARCH,
    items.CODE_INTERPRETER,
    items.IMAGE_GENERATION,
    items.MCP_CALL,
    ANSWER,
)


class HostedModel(Model):
    """Answers its first request with hosted tool calls and a text, later ones with a text."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],  # noqa: A002 - the SDK's parameter name
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.inputs.append(
            [{"role": "user", "content": input}] if isinstance(input, str) else input
        )
        turn = TURN if len(self.inputs) == 1 else ({**ANSWER, "id": "msg_again"},)
        output = [OUTPUT.validate_python(item) for item in turn]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(
        self, *args: object, **kwargs: object
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError


def test_a_runner_turn_with_hosted_tools_is_stored_and_replayed_as_prose(tmp_path: Path) -> None:
    """A real Runner saves the scripted model's hosted calls through the session: they are
    stored as hosted calls and results (the provider's items kept whole), and the next
    run's model gets them back as prose in input the SDK's type accepts."""
    set_tracing_disabled(True)
    model = HostedModel()

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            session = ConvstoreSession("hosted", store=store)
            agent = Agent(name="researcher", instructions="Look things up.", model=model)
            first = await Runner.run(agent, "Look it up.", session=session)
            assert first.final_output == "Found it."
            await Runner.run(agent, "And again.", session=session)
            user, turn, *_ = await store.messages(session.conversation_id)
            blocks = [b.block for b in turn.blocks]
            uses = [b for b in blocks if isinstance(b, HostedToolUseBlock)]
            results = [b for b in blocks if isinstance(b, HostedToolResultBlock)]
            assert [u.name for u in uses] == [
                "web_search",
                "file_search",
                "code_interpreter",
                "image_generation",
                "ask_question",
            ]
            assert [r.tool_use_id for r in results] == [u.id for u in uses]
            assert uses[0].provider_data == items.WEB_SEARCH
            assert blocks[-1] == TextBlock(text="Found it.")
            assert [b.block for b in user.blocks] == [TextBlock(text="Look it up.")]

    asyncio.run(go())
    second = model.inputs[1]
    assert request_problems(second, ResponseInputParam) == []
    INPUT.validate_python(second)
    assert [item.get("role") for item in second] == ["user", "assistant", "user"]
    prose = str(second[1]["content"])
    assert prose.startswith(
        'Tool use (run by the provider): web_search({"type":"search","query":"convstore"})'
    )
    assert "Result (ask_question, run by the provider): It stores conversations." in prose
    assert prose.endswith("Found it.")


def test_the_session_takes_every_tool_item_directly(tmp_path: Path) -> None:
    """``add_items`` takes every hosted and caller-run item (computer, local shell, MCP
    approvals, …) and ``get_items`` gives the history back as prose items the Responses
    input type accepts."""

    async def go() -> list[Any]:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            session = ConvstoreSession("direct", store=store)
            given: list[Any] = [{"role": "user", "content": "Everything."}, *items.EVERY_ITEM]
            await session.add_items(given)
            return list(await session.get_items())

    got = asyncio.run(go())
    assert request_problems(got, ResponseInputParam) == []
    assert all(set(item) == {"role", "content"} for item in got)
    joined = "\n".join(str(item["content"]) for item in got)
    assert "Tool use (run by the provider, MCP server deepwiki): mcp_list_tools({})" in joined
    assert 'Tool use: local_shell({"type":"exec"' in joined
    assert "Result (computer): [Image not shown" in joined


@pytest.mark.parametrize("kind", ["compaction", "mystery_call"])
def test_an_unknown_or_refused_item_is_named_and_nothing_is_recorded(
    tmp_path: Path, kind: str
) -> None:
    """An item type the session does not take is refused in one line naming it; nothing of
    the batch is recorded."""

    async def go() -> None:
        async with await convstore.open_async_store(tmp_path / "s.db") as store:
            session = ConvstoreSession("s", store=store)
            batch: list[Any] = [items.WEB_SEARCH, {"type": kind, "id": "x"}]
            with pytest.raises(convstore.InvalidInput, match=f"^item 1: item type '{kind}'"):
                await session.add_items(batch)
            assert await session.get_items() == []

    asyncio.run(go())


def test_an_answer_holding_calls_the_provider_ran_ends_the_turn(tmp_path: Path) -> None:
    """A turn whose answer holds calls the provider ran (web search, MCP, ... beside the text)
    is over: nothing of the caller's is left to run, so another run (a new session object, as
    in another process) takes the session at once instead of waiting out the turn lease."""

    async def scenario() -> float:
        store = await convstore.open_async_store(tmp_path / "store.db")
        try:
            first = ConvstoreSession("hosted-turn", store=store)
            await first.take_turn()
            await first.add_items([{"role": "user", "content": "Search."}, *TURN])  # type: ignore[list-item]
            other = ConvstoreSession("hosted-turn", store=store)
            started = time.monotonic()
            await asyncio.wait_for(other.take_turn(), timeout=10)
            return time.monotonic() - started
        finally:
            await store.close()

    assert asyncio.run(scenario()) < 5
