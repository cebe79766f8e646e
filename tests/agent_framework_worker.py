"""Agent Framework runs on a ConvstoreHistoryProvider, as their own process (no network).

``python -m tests.agent_framework_worker LOCATION SESSION_ID PROMPT SEEN_FILE [--ready=FILE]
[--turns=N] [--stream]``

The agent is the framework's own ``Agent`` over :class:`ScriptedClient`, a subclass of its
``BaseChatClient`` with its function-invocation and chat-middleware layers, whose replies come
from a script: a prompt that names release-7 gets a ``delete_branch`` call, one that says
"look up" a ``slow_lookup`` call, a tool's result a closing text, anything else "I am here.".
Every request the client is sent is appended to SEEN_FILE as a JSON line (each message's role,
text and content types). ``delete_branch`` with ``--ready=FILE`` writes FILE and then waits to
be killed; ``slow_lookup`` takes a tenth of a second. ``--turns=N`` runs N turns (the prompt
numbered); ``--stream`` runs them streamed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any
from uuid import uuid4

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationLayer,
    Message,
    ResponseStream,
    tool,
)

import convstore
from convstore.integrations.agent_framework import ConvstoreHistoryProvider
from tests import worker_tools


def request_record(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """What a request held, as JSON: each message's role, text and content types."""
    return [
        {"role": m.role, "text": m.text, "types": [c.type for c in m.contents]} for m in messages
    ]


class ScriptedClient(FunctionInvocationLayer[Any], ChatMiddlewareLayer[Any], BaseChatClient[Any]):
    """A chat client that answers from a script, recording every request it is sent."""

    def __init__(self, seen: Path | None = None) -> None:
        super().__init__()
        self.seen = seen
        self.requests: list[list[dict[str, Any]]] = []

    def reply(self, messages: Sequence[Message]) -> list[Content]:
        """The scripted reply to ``messages``."""
        record = request_record(messages)
        self.requests.append(record)
        if self.seen is not None:
            with self.seen.open("a") as seen:
                seen.write(json.dumps(record) + "\n")
        last = messages[-1]
        if any(c.type == "function_result" for c in last.contents):
            result = next(c for c in last.contents if c.type == "function_result")
            done = "Deleted." if str(result.call_id).startswith("release") else "Done."
            return [Content.from_text(done)]
        if "release-7" in last.text:
            call = Content.from_function_call(
                call_id=f"release-{uuid4().hex[:8]}",
                name="delete_branch",
                arguments={"branch": "release-7"},
            )
            return [Content.from_text_reasoning(text="Delete it."), call]
        if "look up" in last.text:
            call = Content.from_function_call(
                call_id=f"lookup-{uuid4().hex[:8]}",
                name="slow_lookup",
                arguments=json.dumps({"what": last.text}),
            )
            return [call]
        return [Content.from_text("I am here.")]

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        contents = self.reply(messages)
        if stream:

            async def updates() -> AsyncIterator[ChatResponseUpdate]:
                for content in contents:
                    yield ChatResponseUpdate(role="assistant", contents=[content])

            return ResponseStream(updates(), finalizer=ChatResponse.from_updates)

        async def response() -> ChatResponse:
            return ChatResponse(messages=[Message("assistant", contents)])

        return response()


delete_branch = tool(worker_tools.delete_branch)
slow_lookup = tool(worker_tools.slow_lookup)


def make_agent(store: Any, client: ScriptedClient) -> Agent[Any]:
    """The framework's agent, with the convstore history provider."""
    return Agent(
        client,
        "Clean up when asked.",
        tools=[delete_branch, slow_lookup],
        context_providers=[ConvstoreHistoryProvider(store)],
    )


async def main(
    location: str,
    session_id: str,
    prompt: str,
    seen: Path,
    *,
    turns: int = 1,
    stream: bool = False,
) -> None:
    store = await convstore.open_async_store(location)
    try:
        agent = make_agent(store, ScriptedClient(seen))
        session = agent.create_session(session_id=session_id)
        for turn in range(turns):
            asked = prompt if turns == 1 else f"{prompt} {turn}"
            if stream:
                response = await agent.run(asked, session=session, stream=True).get_final_response()
            else:
                response = await agent.run(asked, session=session)
            print(response.text)  # noqa: T201 - the test reads it
    finally:
        await store.close()


if __name__ == "__main__":
    turns_arg, stream_arg = 1, False
    for flag in sys.argv[5:]:
        if flag.startswith("--ready="):
            os.environ["CONVSTORE_READY_FILE"] = flag.removeprefix("--ready=")
        elif flag.startswith("--turns="):
            turns_arg = int(flag.removeprefix("--turns="))
        elif flag == "--stream":
            stream_arg = True
    location_arg, session_arg, prompt_arg, seen_arg = sys.argv[1:5]
    asyncio.run(
        main(
            location_arg,
            session_arg,
            prompt_arg,
            Path(seen_arg),
            turns=turns_arg,
            stream=stream_arg,
        )
    )
