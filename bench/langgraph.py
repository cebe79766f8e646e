"""``langgraph``: a LangGraph agent thread of N messages checkpointed by ConvstoreSaver and by
LangGraph's SqliteSaver, in the same run: bytes on disk against the raw messages (their
``message_to_dict`` JSON, one row each in a plain SQLite table), and the time to run it.

The agent is a StateGraph with an ``add_messages`` channel; each turn (one ``invoke``) adds a
user message and an answer of ~300 characters. Three durabilities, since they ask different
amounts of a checkpointer: ``sync`` (every step's checkpoint and every task's writes durable
before the next step: per turn three checkpoints and two ``put_writes``, each one write),
``async`` (LangGraph's default: the same writes, made while the next step runs) and ``exit``
(one checkpoint per turn, written when the run ends). Files are checkpointed (WAL moved in)
before they are measured. Target: convstore <= 3x raw.

One more figure says where convstore's bytes go: the floor, the thread's messages alone,
appended as the convstore messages the saver records (``append_message``, the same
blocks), with no checkpoint at all.

``python -m bench.langgraph [N]`` runs it alone (N = 1,000 by default).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, message_to_dict
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph

import convstore
from bench.common import Context, checkpoint, log, store_files
from bench.report import Row, verdict
from convstore.integrations.langchain import message_blocks
from convstore.integrations.langgraph import ConvstoreSaver

TARGET = 3.0
FULL = 1_000  # messages
QUICK = 200
ANSWER = "Here is what I found about that: " + "the answer is well documented. " * 9
DURABILITIES = ("sync", "async", "exit")


def graph(checkpointer: Any) -> Any:
    def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
        return {"messages": [AIMessage(ANSWER, id=f"ai-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=checkpointer)


def bytes_of(path: Path) -> int:
    checkpoint(path)
    return sum(f.stat().st_size for f in store_files(path))


def converse(checkpointer: Any, n: int, durability: str) -> tuple[float, list[BaseMessage]]:
    """Run ``n // 2`` turns of one thread; the seconds they took and the thread's messages."""
    app = graph(checkpointer)
    config = {"configurable": {"thread_id": "t"}}
    started = time.perf_counter()
    for turn in range(n // 2):
        message = HumanMessage(f"Question {turn}?", id=f"h-{turn}")
        app.invoke({"messages": [message]}, config, durability=durability)
    took = time.perf_counter() - started
    return took, app.get_state(config).values["messages"]


def raw_bytes(path: Path, messages: list[BaseMessage]) -> int:
    with closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body TEXT)")
        raw.executemany(
            "INSERT INTO messages (body) VALUES (?)",
            [(json.dumps(message_to_dict(m)),) for m in messages],
        )
    return bytes_of(path)


def floor_bytes(path: Path, messages: list[BaseMessage]) -> int:
    """Bytes of a store holding ``messages`` alone, as the convstore messages the saver
    records for them (their blocks, one ``append_message`` each), and no checkpoint."""
    with convstore.open_store(str(path)) as store:
        conversation = store.new_conversation("the messages alone")
        for message in messages:
            role, blocks = message_blocks(message, store.limits)
            store.append_message(conversation, role, blocks)
    return bytes_of(path)


def measure(here: Path, n: int, durability: str) -> dict[str, float]:
    """Both savers on one workload: bytes, seconds, the raw bytes, events read per turn."""
    ours_path, theirs_path = here / f"convstore-{durability}.db", here / f"sqlite-{durability}.db"
    with convstore.open_store(str(ours_path)) as store:
        saver = ConvstoreSaver(store=store)
        ours_s, messages = converse(saver, n, durability)
        events_read = saver.events_read
    with closing(sqlite3.connect(theirs_path, check_same_thread=False)) as conn:
        theirs_s, _ = converse(SqliteSaver(conn), n, durability)
    return {
        "messages": len(messages),
        "raw": raw_bytes(here / f"raw-{durability}.db", messages),
        "floor": floor_bytes(here / f"floor-{durability}.db", messages),
        "ours": bytes_of(ours_path),
        "theirs": bytes_of(theirs_path),
        "ours_s": ours_s,
        "theirs_s": theirs_s,
        "events_read_per_turn": events_read / (n // 2),
    }


def run(ctx: Context) -> None:
    log("langgraph: a LangGraph agent thread under ConvstoreSaver and SqliteSaver")
    n = ctx.pick(FULL, QUICK)
    for durability in DURABILITIES:
        log(f"  {n:,} messages, durability={durability} ...")
        m = measure(ctx.dir, n, durability)
        size = f"{m['messages']:,.0f} msgs, durability={durability}"
        ratio = m["ours"] / m["raw"]
        ctx.add(
            Row(
                "langgraph: ConvstoreSaver bytes vs the raw messages",
                size,
                1,
                m["ours"] / 1e6,
                m["raw"] / 1e6,
                "MB",
                ratio,
                "lower",
                f"<= {TARGET}x",
                verdict(ratio <= TARGET),
                note=(
                    f"{m['ours'] / m['messages']:,.0f} B/message vs raw "
                    f"{m['raw'] / m['messages']:,.0f}; SqliteSaver {m['theirs']:,.0f} B "
                    f"({m['theirs'] / m['raw']:.1f}x raw, {m['theirs'] / m['ours']:.1f}x ours); "
                    f"the messages alone (the floor) {m['floor'] / m['raw']:.2f}x raw"
                ),
                samples=m,
            )
        )
        ctx.add(
            Row(
                "langgraph: time to run the thread, ConvstoreSaver vs SqliteSaver",
                size,
                1,
                m["ours_s"],
                m["theirs_s"],
                "s",
                m["ours_s"] / m["theirs_s"],
                "lower",
                note=f"info: {m['events_read_per_turn']:.1f} events read per turn",
                samples=m,
            )
        )


def main(n: int) -> None:
    here = Path(tempfile.mkdtemp())
    for durability in DURABILITIES:
        m = measure(here, n, durability)
        sys.stdout.write(
            f"{m['messages']:,.0f} messages, durability={durability}: raw {m['raw']:,.0f} B; "
            f"ConvstoreSaver {m['ours']:,.0f} B ({m['ours'] / m['raw']:.1f}x raw, "
            f"{m['ours'] / m['messages']:,.0f} B/message) in {m['ours_s']:.1f} s; "
            f"SqliteSaver {m['theirs']:,.0f} B ({m['theirs'] / m['raw']:.1f}x raw) in "
            f"{m['theirs_s']:.1f} s; target <= {TARGET}x raw: "
            f"{verdict(m['ours'] <= TARGET * m['raw'])}; the messages alone, no checkpoints "
            f"(the floor): {m['floor']:,.0f} B "
            f"({m['floor'] / m['raw']:.2f}x raw)\n"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else FULL)
