"""One Pydantic AI run recorded by ``RunRecorder``, as its own process (no network).

``python -m tests.pydantic_ai_worker LOCATION CONVERSATION PROMPT SEEN_FILE [--ready=FILE]``

The agent's model is a ``FunctionModel``: a prompt that names release-7 gets a
``delete_branch`` call, a tool return gets "Deleted.", anything else "I cannot tell.". Every
request it is sent is appended to SEEN_FILE as one JSON line (Pydantic AI's own message JSON).
With ``--ready=FILE`` the tool writes FILE and then waits for its parent to kill it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from uuid import uuid4

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import convstore
from convstore.integrations.pydantic_ai import RunRecorder, message_history
from tests import worker_tools


def main(location: str, conversation: str, prompt: str, seen: Path) -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        with seen.open("ab") as out:
            out.write(ModelMessagesTypeAdapter.dump_json(messages) + b"\n")
        kinds = [part.part_kind for part in messages[-1].parts]
        if "tool-return" in kinds:
            return ModelResponse(parts=[TextPart("Deleted.")])
        if "release-7" in str(messages[-1].parts[-1].content):  # type: ignore[union-attr]
            call = ToolCallPart("delete_branch", {"branch": "release-7"}, f"call_{uuid4().hex}")
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("I cannot tell.")])

    agent = Agent(FunctionModel(model))

    agent.tool_plain(worker_tools.delete_branch)

    with convstore.open_store(location) as store:
        result = agent.run_sync(
            prompt,
            message_history=message_history(store, conversation),
            capabilities=[RunRecorder(store, conversation)],
        )
    print(result.output)  # noqa: T201 - the test reads it


if __name__ == "__main__":
    for flag in sys.argv[5:]:
        if flag.startswith("--ready="):
            os.environ["CONVSTORE_READY_FILE"] = flag.removeprefix("--ready=")
    location_arg, conversation_arg, prompt_arg, seen_arg = sys.argv[1:5]
    main(location_arg, conversation_arg, prompt_arg, Path(seen_arg))
