"""Issue 23's workload: an agent conversation with reasoning, parallel tool calls and 2 KB
tool outputs, and the same messages as each peer keeps them.

Messages repeat a turn of four:

1. ``user``: one text block (~300 characters);
2. ``assistant``: a reasoning block (~500), a short text (~200) and two parallel ``tool_use``
   blocks;
3. ``user``: the two calls' ``tool_result`` blocks, ~2 KB of output each;
4. ``assistant``: the answer, one text block (~600).

The peers store the same content in their own shapes: the OpenAI Agents SDK's
``SQLiteSession`` as Responses input items (a message, a reasoning item, function calls and
their outputs; one ``add_items`` per message), eventsourcing's plain ``Application`` as one
aggregate whose every message is one event (``Chat.add``, one ``save`` per message), and the
raw baseline as one JSON row per message (the message as convstore's blocks).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from bench.workload import Message, make_texts, role_of
from convstore import BlockRecorded, MessageEnded, open_store
from convstore.infrastructure.sqlite.files import PAGE_SIZE
from convstore.infrastructure.sqlite.tables import EVENTS_TABLE

USER_TEXTS = make_texts(32, 300, seed=11)
REASONING = make_texts(32, 500, seed=12)
NOTES = make_texts(32, 200, seed=13)
OUTPUTS = make_texts(64, 2000, seed=14)
ANSWERS = make_texts(32, 600, seed=15)
TOOLS = ("read_file", "run_tests", "search_code", "list_dir")


def call_id(i: int, j: int) -> str:
    return f"call_{i:06d}_{j}"


def agent_message(i: int) -> Message:
    """Message ``i`` of the agent workload as convstore's blocks (see the module's notes)."""
    turn, step = divmod(i, 4)
    if step == 0:
        content: list[dict[str, Any]] = [{"type": "text", "text": USER_TEXTS[turn % 32]}]
    elif step == 1:
        content = [
            {"type": "reasoning", "text": REASONING[turn % 32]},
            {"type": "text", "text": NOTES[turn % 32]},
        ] + [
            {
                "type": "tool_use",
                "id": call_id(i, j),
                "name": TOOLS[(turn + j) % 4],
                "input": {"path": f"src/module_{turn % 97}_{j}.py", "limit": 200},
            }
            for j in range(2)
        ]
    elif step == 2:
        content = [
            {
                "type": "tool_result",
                "tool_use_id": call_id(i - 1, j),
                "content": OUTPUTS[(2 * turn + j) % 64],
            }
            for j in range(2)
        ]
    else:
        content = [{"type": "text", "text": ANSWERS[turn % 32]}]
    assert role_of(i) == ("user" if step % 2 == 0 else "assistant")
    return {"role": role_of(i), "content": content}


def sdk_items(message: Message, i: int) -> list[dict[str, Any]]:
    """A message of the workload as the Responses input items the Agents SDK's session keeps."""
    items: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in message["content"]:
        kind = block["type"]
        if kind == "text":
            texts.append(block["text"])
        elif kind == "reasoning":
            items.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{i:06d}",
                    "summary": [{"type": "summary_text", "text": block["text"]}],
                }
            )
        elif kind == "tool_use":
            items.append(
                {
                    "type": "function_call",
                    "call_id": block["id"],
                    "name": block["name"],
                    "arguments": json.dumps(block["input"]),
                }
            )
        elif kind == "tool_result":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": block["tool_use_id"],
                    "output": block["content"],
                }
            )
    if texts and message["role"] == "user":
        items.insert(0, {"role": "user", "content": texts[0]})
    elif texts:
        items.insert(
            len(items) and 1,  # after the reasoning item, before the calls
            {
                "type": "message",
                "id": f"msg_{i:06d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
            },
        )
    return items


class Chat(Aggregate):
    """eventsourcing's idiom for the peer: one aggregate per conversation, one event per
    message, the message kept as a plain dict."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    @event("MessageAdded")
    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)


def es_env(path: str) -> dict[str, str]:
    """eventsourcing's settings for a SQLite file (it sets WAL; ``synchronous`` stays FULL)."""
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": path}


class EsPeer:
    """A plain eventsourcing ``Application`` appending the workload, one ``save`` a message."""

    def __init__(self, path: str) -> None:
        self.app: Application[UUID] = Application(env=es_env(path))
        self.chat = Chat()
        self.app.save(self.chat)

    def append(self, message: Message) -> None:
        self.chat.add(message)
        self.app.save(self.chat)

    def close(self) -> None:
        self.app.close()


EventRow = tuple[str, int, str, bytes]
"""One stored event as convstore's log table holds it: originator id, version, topic, state."""


def convstore_event_rows(path: str, n: int) -> list[list[EventRow]]:
    """The event rows convstore stores for the workload's first ``n`` messages, message by
    message (start, each block, end), made by appending them to a store at ``path``: what the
    append floor writes without convstore's work (see :class:`FloorRows`)."""
    with open_store(path) as store:
        conv = store.new_conversation(title="agent")
        for i in range(n):
            message = agent_message(i)
            store.append_message(conv, message["role"], message["content"])
        # Where each message ends: its end event (format 2), or its block that closes it
        # (format 3, which a new store is).
        ends = [
            isinstance(e, MessageEnded) or (isinstance(e, BlockRecorded) and bool(e.closes))
            for e in store.events(conv)
        ]
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT originator_id, originator_version, topic, state "  # noqa: S608
            f"FROM {EVENTS_TABLE} WHERE originator_id = ? ORDER BY originator_version",
            (conv.hex,),
        ).fetchall()
    messages: list[list[EventRow]] = []
    current: list[EventRow] = []
    for row, ends_a_message in zip(rows[1:], ends[1:], strict=True):  # [0]: the start
        current.append(row)
        if ends_a_message:
            messages.append(current)
            current = []
    assert len(messages) == n, (len(messages), n)
    return messages


class FloorRows:
    """The append floor without any library: convstore's own event rows for a message, written
    by raw ``sqlite3`` in one transaction into a table made by the same statement as the log's
    in the store at ``like`` (WAL, ``synchronous=FULL``, the pages of a new convstore store)."""

    def __init__(self, path: str, like: str) -> None:
        with closing(sqlite3.connect(like)) as source:
            (table,) = source.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (EVENTS_TABLE,)
            ).fetchone()
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        assert self.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
        self.conn.execute(table)

    def append(self, rows: list[EventRow]) -> None:
        execute = self.conn.execute
        execute("BEGIN")
        self.conn.executemany(f"INSERT INTO {EVENTS_TABLE} VALUES (?, ?, ?, ?)", rows)  # noqa: S608
        execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class FloorRecorder:
    """The append floor through eventsourcing: the same rows as :class:`FloorRows`, inserted
    by eventsourcing's own ``SQLiteApplicationRecorder.insert_events`` (its connection pool,
    transaction and statements; WAL, ``synchronous`` FULL)."""

    def __init__(self, path: str) -> None:
        self.datastore = SQLiteDatastore(path)
        self.recorder = SQLiteApplicationRecorder(self.datastore)
        self.recorder.create_table()

    @staticmethod
    def prepare(rows: list[EventRow]) -> list[StoredEvent]:
        """The rows as the recorder takes them (made before the clock starts)."""
        return [
            StoredEvent(UUID(origin), version, topic, state)
            for origin, version, topic, state in rows
        ]

    def append(self, events: list[StoredEvent]) -> None:
        self.recorder.insert_events(events)

    def close(self) -> None:
        self.datastore.close()


class Floor:
    """The floor's two writers for the workload's first ``n`` messages, in ``directory``, with
    the rows each writes for message ``i`` (:attr:`rows`, :attr:`events`), made beforehand."""

    def __init__(self, directory: Path, n: int) -> None:
        source = str(directory / "floor-source.db")
        self.rows = convstore_event_rows(source, n)
        self.events = [FloorRecorder.prepare(rows) for rows in self.rows]
        self.raw = FloorRows(str(directory / "floor-rows.db"), like=source)
        self.recorder = FloorRecorder(str(directory / "floor-recorder.db"))

    def close(self) -> None:
        self.raw.close()
        self.recorder.close()
