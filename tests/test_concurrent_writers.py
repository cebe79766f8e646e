"""Several processes append to one conversation at once: nothing lost, doubled or reordered."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pytest

from convstore import open_store

PROCESSES = 4
MESSAGES_PER_PROCESS = 10
BLOCKS_PER_MESSAGE = 25  # 4 processes x 250 block appends, plus each message's start and end


def _write(location: str, conversation: str, name: str) -> None:
    """One writer process: streams its messages block by block into the shared conversation."""
    with open_store(location) as store:
        for m in range(MESSAGES_PER_PROCESS):
            message = store.start_message(conversation, "user")
            for b in range(BLOCKS_PER_MESSAGE):
                store.append_block(
                    conversation, message, {"type": "text", "text": f"{name}/{m}/{b}"}
                )
            store.end_message(conversation, message)


def _race(location: str) -> None:
    with open_store(location) as store:
        conversation = store.new_conversation(title="race")
    spawn = multiprocessing.get_context("spawn")
    workers = [
        spawn.Process(target=_write, args=(location, str(conversation), f"p{i}"))
        for i in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert [worker.exitcode for worker in workers] == [0] * PROCESSES
    _check(location, conversation)


def _check(location: str, conversation: UUID) -> None:
    with open_store(location) as reader:
        events = reader.events(conversation)
        messages = reader.messages(conversation)
        wire = reader.replay(conversation)["messages"]
    expected_events = 1 + PROCESSES * MESSAGES_PER_PROCESS * (BLOCKS_PER_MESSAGE + 2)
    assert [e.originator_version for e in events] == list(range(1, expected_events + 1))
    assert len(messages) == PROCESSES * MESSAGES_PER_PROCESS == len(wire)
    seen: set[str] = set()
    for message in messages:
        texts = [b.block.model_dump()["text"] for b in message.blocks]
        name, m, _ = texts[0].split("/")
        assert texts == [f"{name}/{m}/{b}" for b in range(BLOCKS_PER_MESSAGE)]
        assert message.status == "ended"
        seen.add(f"{name}/{m}")
    assert len(seen) == PROCESSES * MESSAGES_PER_PROCESS


@pytest.mark.slow
def test_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    """4 processes x 250 appends on one conversation in one SQLite file: every message whole."""
    _race(str(tmp_path / "shared.db"))


@pytest.mark.slow
def test_processes_share_one_postgres_store(make_postgres_url: Callable[[], str]) -> None:
    """4 processes x 250 appends on one conversation in PostgreSQL: every message whole."""
    _race(make_postgres_url())


def test_a_sqlite_writer_that_wrote_last_reads_nothing_and_one_that_lost_retries(
    tmp_path: Path,
) -> None:
    """The happy path reads no event row before it inserts (one writer per conversation);
    a writer whose conversation another store wrote to since (its cached state behind)
    finds its version taken and writes again after what it missed, nothing lost."""
    path = tmp_path / "s.db"
    with open_store(path) as a, open_store(path) as b:
        conversation = a.new_conversation(title="two writers")
        a.append_message(conversation, "user", [{"type": "text", "text": "a1"}])
        statements: list[str] = []
        a._log.recorder._connection().set_trace_callback(statements.append)  # type: ignore[attr-defined]
        a.append_message(conversation, "assistant", [{"type": "text", "text": "a2"}])
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert not [s for s in reads if "stored_events WHERE originator_id" in s], reads
        b.append_message(conversation, "user", [{"type": "text", "text": "b1"}])
        a.append_message(conversation, "assistant", [{"type": "text", "text": "a3"}])
        texts = [m["content"] for m in b.replay(conversation, shape="openai")["messages"]]
    assert texts == ["a1", "a2", "b1", "a3"]
