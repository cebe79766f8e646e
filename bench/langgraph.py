"""``langgraph_disk``: bytes on disk for an N-message LangGraph agent conversation, checkpointed
by ConvstoreSaver and by LangGraph's SqliteSaver, against the raw messages (their
``message_to_dict`` JSON, one row each in a plain SQLite table).

``python -m bench.langgraph_disk [N]`` (N = 1,000 by default). The agent is a StateGraph with
an ``add_messages`` channel; each turn adds a user message and an answer of ~300 characters.
Files are checkpointed (WAL moved in) before they are measured. Target: convstore <= 3x raw.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, message_to_dict
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

import convstore
from convstore.integrations.langgraph import ConvstoreSaver

TARGET = 3.0
ANSWER = "Here is what I found about that: " + "the answer is well documented. " * 9


def graph(checkpointer: Any) -> Any:
    def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
        return {"messages": [AIMessage(ANSWER, id=f"ai-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=checkpointer)


def bytes_of(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(
        p.stat().st_size for p in path.parent.glob(path.name + "*") if not p.name.endswith("-shm")
    )


def run(n: int) -> None:
    here = Path(tempfile.mkdtemp())
    with convstore.open_store(str(here / "convstore.db")) as store:
        app = graph(ConvstoreSaver(store=store))
        for turn in range(n // 2):
            app.invoke(
                {"messages": [HumanMessage(f"Question {turn}?", id=f"h-{turn}")]},
                {"configurable": {"thread_id": "t"}},
                durability="sync",
            )
        messages = app.get_state({"configurable": {"thread_id": "t"}}).values["messages"]
    conn = sqlite3.connect(here / "sqlite-saver.db", check_same_thread=False)
    app = graph(SqliteSaver(conn))
    for turn in range(n // 2):
        app.invoke(
            {"messages": [HumanMessage(f"Question {turn}?", id=f"h-{turn}")]},
            {"configurable": {"thread_id": "t"}},
            durability="sync",
        )
    conn.close()
    with sqlite3.connect(here / "raw.db") as raw:
        raw.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
        raw.executemany(
            "INSERT INTO messages (body) VALUES (?)",
            [(json.dumps(message_to_dict(m)),) for m in messages],
        )
    raw_b, ours, theirs = (
        bytes_of(here / f) for f in ("raw.db", "convstore.db", "sqlite-saver.db")
    )
    n_messages = len(messages)
    verdict = "PASS" if ours <= TARGET * raw_b else "MISS"
    print(  # noqa: T201 - the benchmark's report
        f"{n_messages} messages: raw {raw_b:,} B; "
        f"ConvstoreSaver {ours:,} B ({ours / raw_b:.1f}x raw, {ours / n_messages:,.0f} B/message); "
        f"SqliteSaver {theirs:,} B ({theirs / raw_b:.1f}x raw, "
        f"{theirs / n_messages:,.0f} B/message); "
        f"target <= {TARGET}x raw: {verdict}"
    )


if __name__ == "__main__":
    run(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
