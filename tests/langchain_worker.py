"""One LangChain turn through ``RunnableWithMessageHistory`` on a ConvstoreChatMessageHistory,
as its own process (no network).

``python -m tests.langchain_worker LOCATION SESSION_ID PROMPT SEEN_FILE REPLY``

The model is :class:`RecordingFakeChatModel`, LangChain's ``GenericFakeChatModel`` answering
REPLY, which appends every list of messages it is sent to SEEN_FILE as one JSON line (in the
OpenAI Chat shape, from LangChain's own ``convert_to_openai_messages``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatResult
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

import convstore
from convstore.integrations.langchain import ConvstoreChatMessageHistory


class RecordingFakeChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that writes down what it is sent."""

    seen: str

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with Path(self.seen).open("a", encoding="utf-8") as out:
            out.write(json.dumps(convert_to_openai_messages(messages)) + "\n")
        return super()._generate(messages, stop, run_manager, **kwargs)


def main(location: str, session: str, prompt: str, seen: str, reply: str) -> None:
    store = convstore.open_store(location)
    model = RecordingFakeChatModel(messages=iter([AIMessage(content=reply)]), seen=seen)
    template = ChatPromptTemplate.from_messages(
        [("system", "You are terse."), MessagesPlaceholder("history"), ("human", "{question}")]
    )
    chain = RunnableWithMessageHistory(
        template | model,
        lambda session_id: ConvstoreChatMessageHistory(session_id, store=store),
        input_messages_key="question",
        history_messages_key="history",
    )
    answer = chain.invoke({"question": prompt}, {"configurable": {"session_id": session}})
    print(answer.content)  # noqa: T201 - the test reads the answer
    store.close()


if __name__ == "__main__":
    main(*sys.argv[1:6])
