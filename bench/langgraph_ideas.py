"""``langgraph_ideas``: what each way of storing ConvstoreSaver's checkpoints would cost on disk,
measured, not estimated (issue 24, item 2: the 3x-raw target at ``durability="sync"``).

The ``langgraph`` benchmark's thread is run once through ``ConvstoreSaver``; each of its writes
(one ``EntriesRecorded`` event: a ``put`` or a ``put_writes``, with the messages it carries) is
read back from the log and written again, in the same order, into a fresh store per idea:

- ``as now``: the same writes, one event each (checks that the copy costs what the saver did);
- ``messages only``: the message entries and their messages, no checkpoint nor pending write
  (the floor of every idea that keeps the LangGraph message entries in the log);
- ``smaller events``: one event per write, as now, its checkpoint entry cut to one short key
  (the floor of making entries smaller: what an event costs with nothing in it);
- ``side table``: the checkpoint and write entries as rows of a table of their own in the same
  file (``(conversation, seq) -> entry``, one transaction per write: a prototype through a
  second connection), the message entries in the log; then the same with every row cut to
  110 bytes (entries as compact as an entry can be made);
- ``one write a turn``: a turn's writes batched into one event (what batching could give at
  best; at ``sync`` it would give up the durability each call asks for);
- ``messages alone``: the thread's messages by ``append_message``, nothing else;
- ``one event a message``: a proxy for a log that kept a whole message in one event: each
  message as one runtime entry (its role and blocks) and no message events.

Each idea on a fresh store (none keeps a replay model beside its log since format 3).
``python -m bench.langgraph_ideas [N] [durability]`` (1,000
messages, ``sync`` by default). A measuring tool, not part of ``bench/run.py``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from langchain_core.messages import BaseMessage
from pydantic import JsonValue

import convstore
from bench.langgraph import bytes_of, converse, raw_bytes
from convstore import BlockAppended, EntriesRecorded, MessageStarted, Store
from convstore.domain.blocks import Block
from convstore.domain.conversation import EntryMessage
from convstore.integrations.langgraph import ConvstoreSaver, conversation_for
from convstore.integrations.langgraph_entries import Entry, is_message
from convstore.store import EntryBatch

Write = tuple[list[Entry], list[EntryMessage]]
"""One saver write: its entries, and the messages it carried."""

SMALL_ROW = 110
"""Bytes of an entry in the ``side table, compact entries`` idea."""


def saver_writes(n: int, durability: str, here: Path) -> tuple[list[Write], list[BaseMessage]]:
    """Run the thread through ConvstoreSaver; its writes as the log holds them."""
    with convstore.open_store(str(here / "source.db")) as store:
        _, messages = converse(ConvstoreSaver(store=store), n, durability)
        writes: list[Write] = []
        blocks: dict[object, list[Block]] = {}
        for event in store.events(conversation_for("t")):
            if isinstance(event, EntriesRecorded):
                writes.append(([dict(e) for e in event.entries], []))
            elif isinstance(event, MessageStarted) and writes:
                blocks[event.message_id] = []
                writes[-1][1].append((event.role, blocks[event.message_id], "ended", None))
            elif isinstance(event, BlockAppended) and event.message_id in blocks:
                blocks[event.message_id].append(event.block)
    return writes, messages


def carrying(messages: list[EntryMessage]) -> Callable[[list[dict[str, JsonValue]]], EntryBatch]:
    return lambda _fresh: (messages, [])


def turns(writes: list[Write]) -> list[Write]:
    """The writes of each turn as one (a turn starts with the checkpoint of its input)."""
    batched: list[Write] = []
    for entries, messages in writes:
        starts = any(_source(e) == "input" for e in entries)
        if starts or not batched:
            batched.append(([], []))
        batched[-1][0].extend(entries)
        batched[-1][1].extend(messages)
    return batched


def _source(entry: Entry) -> object:
    """A checkpoint entry's metadata ``source`` (its change from the parent's, or whole)."""
    metadata = entry.get("md", entry.get("m", {}).get("j", {}))
    return metadata.get("source") if isinstance(metadata, dict) else None


def write(store: Store, path: Path, idea: str, writes: list[Write]) -> None:
    conversation = store.new_conversation("t")
    side: sqlite3.Connection | None = None
    if idea.startswith("side table"):
        side = sqlite3.connect(path, isolation_level=None)
        side.execute("PRAGMA synchronous=FULL")
        side.execute(
            "CREATE TABLE lg_entries (conversation INTEGER NOT NULL, seq INTEGER NOT NULL, "
            "entry TEXT NOT NULL, PRIMARY KEY (conversation, seq)) WITHOUT ROWID"
        )
    seq = 0
    for entries, messages in turns(writes) if idea == "one write a turn" else writes:
        kept = [e for e in entries if is_message(e)]
        rest = [e for e in entries if not is_message(e)]
        if idea in {"as now", "one write a turn"}:
            store.record_entries(conversation, entries, carrying(messages))
        elif idea == "messages only":
            if kept:
                store.record_entries(conversation, kept, carrying(messages))
        elif idea == "smaller events":
            seq += 1
            store.record_entries(conversation, [*kept, {"uuid": f"c{seq}"}], carrying(messages))
        elif side is not None:
            if kept:
                store.record_entries(conversation, kept, carrying(messages))
            side.execute("BEGIN")
            for entry in rest:
                seq += 1
                body = json.dumps(entry, separators=(",", ":"))
                if idea.endswith("compact entries"):
                    body = body[:SMALL_ROW]
                side.execute("INSERT INTO lg_entries VALUES (1, ?, ?)", (seq, body))
            side.execute("COMMIT")
    if side is not None:
        side.close()


IDEAS = (
    "as now",
    "messages only",
    "smaller events",
    "side table",
    "side table, compact entries",
    "one write a turn",
)


def main(n: int, durability: str) -> None:
    here = Path(tempfile.mkdtemp())
    writes, messages = saver_writes(n, durability, here)
    raw = raw_bytes(here / "raw.db", messages)
    sys.stdout.write(f"{len(messages):,} messages, durability={durability}, raw {raw:,} B\n")
    for idea in (*IDEAS, "messages alone", "one event a message"):
        path = here / f"{idea}.db".replace(" ", "-").replace(",", "")
        with convstore.open_store(str(path)) as store:
            if idea == "messages alone":
                conversation = store.new_conversation("t")
                for _, carried in writes:
                    for role, blocks, _, _ in carried:
                        store.append_message(conversation, role, blocks)
            elif idea == "one event a message":
                conversation = store.new_conversation("t")
                whole = [m for _, carried in writes for m in carried]
                for index, (role, blocks, _, _) in enumerate(whole):
                    entry: Entry = {
                        "uuid": str(index),
                        "role": role,
                        "blocks": [b.model_dump(mode="json") for b in blocks],
                    }
                    store.record_entries(conversation, [entry])
            else:
                write(store, path, idea, writes)
        size = bytes_of(path)
        sys.stdout.write(f"  {idea:28} {size:>10,} B {size / raw:5.2f}x raw\n")


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 1_000,
        sys.argv[2] if len(sys.argv) > 2 else "sync",
    )
