"""ADK turns through the real ``Runner`` on a ConvstoreSessionService, as their own process
(no network).

``python -m tests.adk_worker LOCATION SESSION_ID SEEN_FILE TURNS [HANG_FILE]``

The agent's model is :class:`ScriptedModel`: asked with no function response after the last
user text, it calls the ``lookup`` tool; given the response, it answers ``done: <result>``.
It appends every request it is sent to SEEN_FILE as one JSON line (ADK's own
``LlmRequest.contents``, as JSON). The worker runs TURNS turns, one after another; a turn
that loses a race (ADK's ``StaleSessionError``: another process appended to the session
meanwhile) is run again on the reloaded session. Each event the runner yields is written to
stdout as ``event <invocation_id> <event_id>``, each lost race as ``stale``, and at the end
the seconds the turns took as ``took <seconds>``. With HANG_FILE,
the tool creates that file and then waits forever (the test kills the process there).
``ADK_TURN_LEASE`` in the environment sets the service's ``turn_lease`` (seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents.llm_agent import LlmAgent
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

import convstore
from convstore.integrations.google_adk import ConvstoreSessionService

APP, USER = "weather", "ada"


class ScriptedModel(BaseLlm):
    """A model that calls ``lookup`` once per user turn, then answers with its result."""

    seen: str

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        contents = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
        with Path(self.seen).open("a", encoding="utf-8") as out:
            out.write(json.dumps(contents) + "\n")
        last = llm_request.contents[-1]
        responses = [p.function_response for p in last.parts or [] if p.function_response]
        if responses:
            result = (responses[0].response or {}).get("result")
            text = types.Part(text=f"done: {result}")
            yield LlmResponse(content=types.Content(role="model", parts=[text]))
            return
        city = next((p.text for p in last.parts or [] if p.text), "nowhere")
        call = types.FunctionCall(name="lookup", args={"city": city})
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(function_call=call)])
        )


def make_lookup(hang: str | None) -> object:
    def lookup(city: str) -> dict[str, str]:
        """The weather in a city."""
        if hang is not None:
            Path(hang).write_text("in the tool", encoding="utf-8")
            while True:
                time.sleep(1)
        time.sleep(0.02)  # long enough for another process's turn to overlap this one
        return {"result": f"sunny in {city}"}

    return lookup


async def main(location: str, session_id: str, seen: str, turns: int, hang: str | None) -> None:
    store = convstore.open_store(location)
    agent = LlmAgent(
        name="forecaster",
        model=ScriptedModel(model="scripted", seen=seen),
        instruction="Answer with the tool.",
        tools=[make_lookup(hang)],
    )
    lease = float(os.environ.get("ADK_TURN_LEASE", "30"))
    service = ConvstoreSessionService(store=store, turn_lease=lease)
    runner = Runner(app_name=APP, agent=agent, session_service=service)
    done = 0
    started = time.perf_counter()
    while done < turns:
        message = types.Content(role="user", parts=[types.Part(text=f"city{done}")])
        try:
            async for event in runner.run_async(
                user_id=USER, session_id=session_id, new_message=message
            ):
                print(f"event {event.invocation_id} {event.id}", flush=True)  # noqa: T201
        except StaleSessionError:
            print("stale", flush=True)  # noqa: T201
            continue
        done += 1
    print(f"took {time.perf_counter() - started:.6f}", flush=True)  # noqa: T201
    await runner.close()
    store.close()


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], int(args[3]), args[4] if len(args) > 4 else None))
