"""One OpenAI Agents SDK run on a ConvstoreSession, as its own process (no network).

``python -m tests.agents_worker LOCATION SESSION_ID PROMPT SEEN_FILE [--die-in-tool]
[--ready=FILE] [--turns=N] [--lease=SECONDS]``

The agent's model is :class:`ScriptedModel`, written against the SDK's ``Model`` interface: a
prompt that says "delete" gets a ``delete_tmp`` tool call, a tool output gets a closing text,
anything else gets "I am here.". Every input the model is given is appended to SEEN_FILE as a
JSON line. With ``--die-in-tool`` the tool kills its own process (SIGKILL) before it returns,
so the tool's output is never saved. A prompt that says "wipe" calls ``wipe_disk``, a tool that
needs a person's approval: the run stops there with the call saved and no output. A prompt
that names release-7 calls ``delete_branch``, which with ``--ready=FILE`` writes FILE and then
waits for its parent to kill it. A prompt that says "look up" calls ``slow_lookup``, which
takes a tenth of a second. ``--turns=N`` runs N turns (the prompt numbered), ``--lease`` sets
the session's ``turn_lease``. The run passes the session's hooks, which record a call before
its tool runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam

import convstore
from convstore.integrations.openai_agents import ConvstoreSession
from tests import worker_tools


def _text(message: TResponseInputItem) -> str:
    content: Any = message.get("content")
    if isinstance(content, str):
        return content
    return " ".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))


class ScriptedModel(Model):
    """A model that answers from a script, recording every input it is given."""

    def __init__(self, seen: Path) -> None:
        self.seen = seen

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
        items: list[TResponseInputItem] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        )
        with self.seen.open("a") as seen:
            seen.write(json.dumps(items) + "\n")
        last = items[-1]
        if last.get("type") == "function_call_output":
            output: Any = _message("Deleted.")
        elif "look up" in _text(last):
            output = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{uuid4().hex}",
                name="slow_lookup",
                arguments=json.dumps({"what": _text(last)}),
            )
        elif "release-7" in _text(last):
            output = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{uuid4().hex}",
                name="delete_branch",
                arguments=json.dumps({"branch": "release-7"}),
            )
        elif "delete" in _text(last).lower() or "wipe" in _text(last).lower():
            tool = "delete_tmp" if "delete" in _text(last).lower() else "wipe_disk"
            output = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call_{uuid4().hex}",
                name=tool,
                arguments=json.dumps({"path": "/tmp/scratch"}),  # noqa: S108 - never touched
            )
        else:
            output = _message("I am here.")
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(
        self, *args: object, **kwargs: object
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError


def _message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{uuid4().hex}",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def delete_tmp(path: str) -> str:
    """Delete a scratch directory."""
    if os.environ.get("CONVSTORE_DIE_IN_TOOL"):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"deleted {path}"


delete_branch = function_tool(worker_tools.delete_branch)
slow_lookup = function_tool(worker_tools.slow_lookup)


@function_tool(needs_approval=True)
def wipe_disk(path: str) -> str:
    """Wipe a disk; a person must approve it first."""
    return f"wiped {path}"


async def main(
    location: str, session_id: str, prompt: str, seen: Path, *, turns: int = 1, lease: float = 30.0
) -> None:
    set_tracing_disabled(True)
    store = await convstore.open_async_store(location)
    try:
        session = ConvstoreSession(session_id, store=store, turn_lease=lease)
        agent = Agent(
            name="janitor",
            instructions="Clean up when asked.",
            model=ScriptedModel(seen),
            tools=[delete_tmp, delete_branch, wipe_disk, slow_lookup],
        )
        for turn in range(turns):
            asked = prompt if turns == 1 else f"{prompt} {turn}"
            result = await Runner.run(agent, asked, session=session, hooks=session.hooks)
            # The test reads it: the answer, or the tools left waiting for approval.
            waiting = [i.raw_item.name for i in result.interruptions]  # type: ignore[union-attr]
            print(f"waiting for approval: {waiting}" if waiting else result.final_output)  # noqa: T201
    finally:
        await store.close()


if __name__ == "__main__":
    if "--die-in-tool" in sys.argv:
        os.environ["CONVSTORE_DIE_IN_TOOL"] = "1"
    turns_arg, lease_arg = 1, 30.0
    for flag in sys.argv[5:]:
        if flag.startswith("--ready="):
            os.environ["CONVSTORE_READY_FILE"] = flag.removeprefix("--ready=")
        elif flag.startswith("--turns="):
            turns_arg = int(flag.removeprefix("--turns="))
        elif flag.startswith("--lease="):
            lease_arg = float(flag.removeprefix("--lease="))
    location_arg, session_arg, prompt_arg, seen_arg = sys.argv[1:5]
    asyncio.run(
        main(
            location_arg, session_arg, prompt_arg, Path(seen_arg), turns=turns_arg, lease=lease_arg
        )
    )
