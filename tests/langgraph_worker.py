"""A LangGraph agent (StateGraph: a model node and a tool node) checkpointed by ConvstoreSaver,
as its own process (no network).

``python -m tests.langgraph_worker LOCATION THREAD_ID run PROMPT [--die-in-tool] [--ready=FILE]
[--seen=FILE]``
``python -m tests.langgraph_worker LOCATION THREAD_ID resume``

The model is LangChain's ``GenericFakeChatModel``, scripted per process: ``run`` answers with
a ``delete_tmp`` tool call, ``resume`` with "Done.". With ``--die-in-tool`` the tool kills its
own process (SIGKILL) before it returns. ``resume`` continues the thread from its last
checkpoint (``invoke(None, ...)``) and prints the roles of the final state's messages. With
``--ready=FILE`` the tool writes FILE and then waits for its parent to kill it; with
``--seen=FILE`` every request the model is sent is appended to FILE as one JSON line (each
message's type, content, tool calls' ids and a tool message's call id).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import convstore
from convstore.integrations.langgraph import ConvstoreSaver

DIE = "--die-in-tool" in sys.argv
FLAGS = dict(
    a.removeprefix("--").split("=", 1) for a in sys.argv if a.startswith("--") and "=" in a
)


@tool
def delete_tmp(path: str) -> str:
    """Delete a scratch directory."""
    if DIE:
        os.kill(os.getpid(), signal.SIGKILL)
    if "ready" in FLAGS:
        Path(FLAGS["ready"]).write_text(path)
        time.sleep(120)
    return f"deleted {path}"


def main(location: str, thread_id: str, mode: str, prompt: str | None) -> None:
    script = (
        [
            AIMessage(
                "", tool_calls=[{"name": "delete_tmp", "args": {"path": "scratch"}, "id": "call_1"}]
            )
        ]
        if mode == "run"
        else [AIMessage("Done.")]
    )
    model = GenericFakeChatModel(messages=iter(script))

    def agent(state: MessagesState) -> dict[str, list[object]]:
        if "seen" in FLAGS:
            sent = [
                {
                    "type": m.type,
                    "content": m.content,
                    "calls": [c["id"] for c in getattr(m, "tool_calls", [])],
                    "answers": getattr(m, "tool_call_id", None),
                }
                for m in state["messages"]
            ]
            with Path(FLAGS["seen"]).open("a") as seen:
                seen.write(json.dumps(sent) + "\n")
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([delete_tmp]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    with convstore.open_store(location) as store:
        app = graph.compile(checkpointer=ConvstoreSaver(store=store))
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        payload = MessagesState(messages=[HumanMessage(prompt)]) if mode == "run" else None
        # durability="sync": each checkpoint is written before the next step runs, so a
        # process killed inside the tool leaves the checkpoint that called it.
        final = app.invoke(payload, config, durability="sync")
        print(" ".join(m.type for m in final["messages"]))  # noqa: T201 - the test reads it


if __name__ == "__main__":
    positional = [a for a in sys.argv[1:] if not a.startswith("--")]
    location_arg, thread_arg, mode_arg = positional[:3]
    main(location_arg, thread_arg, mode_arg, positional[3] if len(positional) > 3 else None)
