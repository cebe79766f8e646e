"""One turn of one framework on an existing convstore conversation, as its own process (no
network): the hand-over of ``tests/test_cross_framework.py``.

``python -m tests.cross_framework_worker FRAMEWORK LOCATION CONVERSATION PROMPT SEEN_FILE``

FRAMEWORK, and how it is given the conversation:

- ``openai-agents``: ``ConvstoreSession(..., conversation_id=)`` under ``Runner.run``, with the
  scripted model of ``tests/agents_worker.py`` ("delete" calls ``delete_tmp``; its output
  gets "Deleted.");
- ``pydantic-ai``: ``message_history`` and ``RunRecorder`` on the conversation, a
  ``FunctionModel``;
- ``google-adk``: ``ConvstoreSessionService(conversation_for=..., handed_over_author=...)``
  under ADK's ``Runner``, a scripted ``BaseLlm``;
- ``langchain``: ``RunnableWithMessageHistory`` over
  ``ConvstoreChatMessageHistory(..., conversation_id=)``, a fake chat model.

Each framework is imported only when its turn runs. Every request a model is sent is appended
to SEEN_FILE as one JSON line, ``{"framework", "native", "chat"}``: the request as the
framework's own JSON, and as ``{"role", "content"}`` pairs of its text. The turn's answer is
printed.
"""

# Each framework is imported in its own turn's function: a process imports one, not four.
# ruff: noqa: PLC0415

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any
from uuid import UUID

import convstore


def _seen(seen: Path, framework: str, native: Any, chat: list[dict[str, Any]]) -> None:
    with seen.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"framework": framework, "native": native, "chat": chat}) + "\n")


async def openai_agents(location: str, conversation: UUID, prompt: str, seen: Path) -> str:
    from agents import Agent, Runner, set_tracing_disabled

    from convstore.integrations.openai_agents import ConvstoreSession
    from tests.agents_worker import ScriptedModel, delete_tmp

    class Model(ScriptedModel):
        """The scripted model, each input also written down as this worker's record."""

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            response = await super().get_response(*args, **kwargs)
            items = json.loads(self.seen.read_text().splitlines()[-1])  # ScriptedModel's note
            chat = [
                {"role": i["role"], "content": i["content"]}
                for i in items
                if "role" in i and isinstance(i.get("content"), str)
            ]
            _seen(seen, "openai-agents", items, chat)
            return response

    set_tracing_disabled(True)
    store = await convstore.open_async_store(location)
    try:
        session = ConvstoreSession("handover", store=store, conversation_id=conversation)
        model = Model(seen.with_suffix(".agents"))
        agent = Agent(name="janitor", model=model, tools=[delete_tmp])
        result = await Runner.run(agent, prompt, session=session, hooks=session.hooks)
        return str(result.final_output)
    finally:
        await store.close()


def pydantic_ai(location: str, conversation: UUID, prompt: str, seen: Path) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        TextPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from convstore.integrations.pydantic_ai import RunRecorder, message_history

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        chat: list[dict[str, Any]] = []
        for message in messages:
            for part in message.parts:
                if isinstance(message, ModelRequest) and part.part_kind == "user-prompt":
                    chat.append({"role": "user", "content": part.content})
                elif isinstance(message, ModelResponse) and part.part_kind == "text":
                    chat.append({"role": "assistant", "content": part.content})
        native = json.loads(ModelMessagesTypeAdapter.dump_json(messages))
        _seen(seen, "pydantic-ai", native, chat)
        return ModelResponse(parts=[TextPart("Pydantic AI: the scratch files are gone.")])

    agent = Agent(FunctionModel(model))
    with convstore.open_store(location) as store:
        result = agent.run_sync(
            prompt,
            message_history=message_history(store, conversation),
            capabilities=[RunRecorder(store, conversation)],
        )
    return result.output


async def google_adk(location: str, conversation: UUID, prompt: str, seen: Path) -> str:
    from google.adk.agents.llm_agent import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.genai import types

    from convstore.integrations.google_adk import ConvstoreSessionService

    class Model(BaseLlm):
        """Answers in one text, writing down the contents it is sent."""

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            native = [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]
            chat = [
                {
                    "role": "assistant" if c.role == "model" else c.role,
                    "content": "\n\n".join(p.text for p in c.parts or [] if p.text),
                }
                for c in llm_request.contents
            ]
            _seen(seen, "google-adk", native, chat)
            text = types.Part(text="ADK: the folder is empty now.")
            yield LlmResponse(content=types.Content(role="model", parts=[text]))

    store = await convstore.open_async_store(location)
    try:
        sessions = ConvstoreSessionService(
            store=store,
            conversation_for=lambda app, user, session: conversation,
            handed_over_author="keeper",  # earlier assistant turns: the agent's own
        )
        agent = LlmAgent(name="keeper", model=Model(model="scripted"))
        runner = Runner(app_name="handover", agent=agent, session_service=sessions)
        await sessions.create_session(app_name="handover", user_id="ada", session_id="s1")
        question = types.Content(role="user", parts=[types.Part(text=prompt)])
        answer = ""
        async for event in runner.run_async(user_id="ada", session_id="s1", new_message=question):
            if event.is_final_response() and event.content and event.content.parts:
                answer = event.content.parts[0].text or ""
        await runner.close()
        return answer
    finally:
        await store.close()


def langchain(location: str, conversation: UUID, prompt: str, seen: Path) -> str:
    from langchain_core.callbacks import CallbackManagerForLLMRun
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatResult
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from convstore.integrations.langchain import ConvstoreChatMessageHistory

    class Model(GenericFakeChatModel):
        """GenericFakeChatModel that writes down what it is sent."""

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: CallbackManagerForLLMRun | None = None,
            **kwargs: Any,
        ) -> ChatResult:
            chat = convert_to_openai_messages(messages)
            _seen(seen, "langchain", chat, chat)
            return super()._generate(messages, stop, run_manager, **kwargs)

    reply = AIMessage("LangChain: nothing is left in /tmp/scratch.")
    template = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )
    with convstore.open_store(location) as store:
        chain = RunnableWithMessageHistory(
            template | Model(messages=iter([reply])),
            lambda session_id: ConvstoreChatMessageHistory(
                session_id, store=store, conversation_id=conversation
            ),
            input_messages_key="question",
            history_messages_key="history",
        )
        answer = chain.invoke({"question": prompt}, {"configurable": {"session_id": "handover"}})
    return str(answer.content)


def main(framework: str, location: str, conversation: str, prompt: str, seen: Path) -> str:
    target = UUID(conversation)
    if framework == "openai-agents":
        return asyncio.run(openai_agents(location, target, prompt, seen))
    if framework == "pydantic-ai":
        return pydantic_ai(location, target, prompt, seen)
    if framework == "google-adk":
        return asyncio.run(google_adk(location, target, prompt, seen))
    if framework == "langchain":
        return langchain(location, target, prompt, seen)
    msg = f"no such framework: {framework}"
    raise SystemExit(msg)


if __name__ == "__main__":
    framework_arg, location_arg, conversation_arg, prompt_arg, seen_arg = sys.argv[1:6]
    print(main(framework_arg, location_arg, conversation_arg, prompt_arg, Path(seen_arg)))  # noqa: T201
