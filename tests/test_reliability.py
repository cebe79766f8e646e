"""Reliability on one SQLite file: writers killed with SIGKILL mid-turn, and racing writers.

The kill test runs a writer process that streams a realistic agent turn block by block and,
after each call returns, appends that acknowledgement to a side file (one ``write`` and an
``fsync`` per line). The parent kills it with SIGKILL at a random moment, then checks that the
store opens, that everything acknowledged is in the log (at most one more operation landed:
the one in flight), that ``verify`` finds nothing, that replay is exactly what landed and is
accepted by the real SDK request types, and that the audit read model caught up run by run
equals one rebuilt from scratch.

This module's imports stay light on purpose: the writer processes import it (``spawn``), and
the SDK validators take seconds to import, so only the parent loads them, inside the checks.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import random
import signal
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import closing, suppress
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import pytest
from click.testing import CliRunner

from convstore import Store, build_models, open_store
from convstore.app.demo import tiny_png
from convstore.app.projector import catch_up, open_audit, rebuild
from convstore.audit.db import TABLES
from convstore.cli import cli
from convstore.domain.events import (
    Event,
    MessageEnded,
    MessageInterrupted,
    MessageStarted,
)
from convstore.domain.parsing import parse_block
from convstore.engine.plan import NOTHING_RECORDED
from convstore.projections.messages import RecordedMessage
from convstore.store.verify import Verifier
from tests.formats import BLOCK_EVENTS, events_of

SPAWN = multiprocessing.get_context("spawn")
PNG = tiny_png()
PNG_B64 = base64.b64encode(PNG).decode()
IMAGE = {"type": "image", "media_type": "image/png", "data": PNG_B64}
NOT_SHOWN = (
    f"[Image not shown: an image/png image ({len(PNG):,} bytes) was here, "
    "but this model cannot see images.]"
)

KILL_RUNS = 50
KILL_DELAY_SECONDS = (0.005, 0.150)
"""The kill lands this long after the writer is told to go: from before its first call to
(now and then) after its last, the writer pacing itself at a few milliseconds a call."""
WARM_AHEAD = 2
"""Writers started ahead of their run, so their interpreter start-up overlaps the checks."""

SYSTEM_TEXT = "You are a careful coding agent."


def seeded(seed: int | str) -> random.Random:
    """A deterministic generator for test data and timing (not for secrets)."""
    return random.Random(seed)  # noqa: S311


# -- the turn a writer streams --------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One streaming call: open a message, append a block, end or interrupt the message."""

    kind: Literal["start", "block", "end", "interrupt"]
    role: str = ""
    block: dict[str, Any] | None = None
    reason: str | None = None


def turn_script(seed: int) -> list[Op]:
    """The calls a writer makes for ``seed``: several tool rounds, reasoning, text, an image."""
    rng = seeded(seed)
    ops: list[Op] = []

    def message(role: str, *blocks: dict[str, Any], interrupted: str | None = None) -> None:
        ops.append(Op("start", role=role))
        ops.extend(Op("block", block=block) for block in blocks)
        ops.append(Op("interrupt", reason=interrupted) if interrupted else Op("end"))

    path = f"src/mod_{rng.randrange(100)}.py"
    message(
        "assistant",
        {"type": "reasoning", "text": f"Run {seed}: read {path} and grep for TODO at once."},
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": path}},
        {
            "type": "tool_use",
            "id": "call_2",
            "name": "grep",
            "input": {"pattern": "TODO", "paths": [".", "src"], "max": rng.randrange(1, 50)},
        },
    )
    message(
        "user",
        {"type": "tool_result", "tool_use_id": "call_1", "content": f"def f():\n    return {seed}"},
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": "grep: src: Is a directory",
            "is_error": True,
        },
    )
    message(
        "assistant",
        {"type": "reasoning", "text": "The error needs a screenshot of the window."},
        {"type": "tool_use", "id": "call_3", "name": "screenshot", "input": {}},
    )
    message(
        "user",
        {
            "type": "tool_result",
            "tool_use_id": "call_3",
            "content": [{"type": "text", "text": "the window:"}, IMAGE],
        },
    )
    if rng.random() < 0.5:
        message(
            "assistant",
            {"type": "tool_use", "id": "call_4", "name": "run_tests", "input": {"k": ["a", 1]}},
        )
        message(
            "user",
            {"type": "tool_result", "tool_use_id": "call_4", "content": "3 passed", "name": "pt"},
        )
    final = {"type": "text", "text": f"Done with run {seed}: the function returns {seed}."}
    message("assistant", final, interrupted="user pressed stop" if rng.random() < 0.3 else None)
    return ops


def _stream_turn(  # noqa: PLR0917 - a Process target takes its arguments positionally
    location: str, conversation: str, seed: int, acks: str, ready: EventType, go: EventType
) -> None:
    """A writer process: streams ``turn_script(seed)``, acknowledging each call once it returns.

    Each acknowledgement is one line (``step result``) written with one ``write`` and fsynced
    before the next call, so the parent knows for certain which calls had returned (and that
    at most the one call after them can have landed too).
    """
    pace = seeded(f"pace-{seed}")
    fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    build_models()  # at start-up, as a writer that wants a quick first call does
    with open_store(location) as store:
        ready.set()
        if not go.wait(60):
            return
        message = ""
        for step, op in enumerate(turn_script(seed)):
            if op.kind == "start":
                message = str(store.start_message(conversation, op.role))
                result = message
            elif op.kind == "block":
                assert op.block is not None
                result = str(store.append_block(conversation, message, op.block))
            elif op.kind == "end":
                store.end_message(conversation, message)
                result = "-"
            else:
                store.interrupt_message(conversation, message, op.reason)
                result = "-"
            # The runtime does a little work before it records the call returned, so some
            # kills land between a call landing and its acknowledgement.
            time.sleep(pace.uniform(0, 0.002))
            os.write(fd, f"{step} {result}\n".encode())
            os.fsync(fd)
            time.sleep(pace.uniform(0.001, 0.004))  # the model producing its next block
    os.close(fd)


def read_acks(path: Path) -> list[str]:
    """The acknowledged results, in order; a line cut short by the kill does not count."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")[:-1]  # the last piece is "" or a line the kill cut short
    results = []
    for step, line in enumerate(lines):
        number, result = line.split(" ", 1)
        assert int(number) == step, lines
        results.append(result)
    return results


# -- the expected replay, written independently of the projection -----------------------------


def _prose(block: dict[str, Any], tool_names: dict[str, str]) -> str:
    """A block's prose for a text-only model, as the replay rules' table (docs/blocks.md) says."""
    kind = block["type"]
    if kind == "text":
        return str(block["text"])
    if kind == "reasoning":
        return f"[Reasoning]: {block['text']}"
    if kind == "tool_use":
        tool_names[block["id"]] = block["name"]
        return f"Tool use: {block['name']}({json.dumps(block['input'], separators=(',', ':'))})"
    if kind == "tool_result":
        name = block.get("name") or tool_names.get(block["tool_use_id"], "unknown")
        label = "Error" if block.get("is_error") else "Result"
        content = block["content"]
        if not isinstance(content, str):
            content = "\n".join(
                part["text"] if part["type"] == "text" else NOT_SHOWN for part in content
            )
        return f"{label} ({name}): {content}"
    assert kind == "image"
    return NOT_SHOWN


@dataclass
class Planned:
    """A message as the test planned it: its role, the blocks that landed, how it closed."""

    role: str
    blocks: list[dict[str, Any]]
    status: Literal["open", "ended", "interrupted"] = "open"
    reason: str | None = None


def expected_openai_text(messages: list[Planned]) -> list[dict[str, str]]:
    """The OpenAI text-only replay of ``messages``: one wire message each, blocks as prose,
    and a call no result answers marked as such unless it is in the last message."""
    tool_names: dict[str, str] = {}
    answered = {b["tool_use_id"] for m in messages for b in m.blocks if b["type"] == "tool_result"}
    wire = []
    for position, message in enumerate(messages):
        prose = []
        for block in message.blocks:
            prose.append(_prose(block, tool_names))
            unanswered = block["type"] == "tool_use" and block["id"] not in answered
            if unanswered and position < len(messages) - 1:
                prose.append("[No result was recorded for this call.]")
        text = "\n\n".join(prose)
        text = text or NOTHING_RECORDED
        if message.status == "interrupted":
            text += (
                f"\n\n[Interrupted: {message.reason}]" if message.reason else "\n\n[Interrupted]"
            )
        wire.append({"role": message.role, "content": text})
    return wire


# -- checks shared by the kill runs ------------------------------------------------------------


def sdk_problems(store: Store, conversation: UUID) -> list[str]:
    """What the real SDK request types reject in the replay, both shapes, vision on and off."""
    # The SDKs take seconds to import; the writer processes import this module and must not.
    from tests.sdk import rejections, request_body  # noqa: PLC0415

    problems: list[str] = []
    for shape in ("openai", "anthropic"):
        for vision in (False, True):
            fragment = store.replay(conversation, shape=shape, vision=vision)
            problems += [
                f"{shape}/{vision}: {p}" for p in rejections(shape, request_body(shape, fragment))
            ]
    return problems


def table_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of each audit table, sorted, so two read models compare table by table."""
    with closing(sqlite3.connect(path)) as conn:
        return {
            table: sorted(
                conn.execute(f"SELECT * FROM {table}").fetchall(),  # noqa: S608 - fixed names
                key=repr,
            )
            for table in TABLES
        }


def log_problems(store: Store) -> list[str]:
    """What the verifier finds wrong with the whole log."""
    verifier = Verifier()
    verifier.check_all(store.scan())
    return [f"{p.position} v{p.version}: {p.problem}" for p in verifier.problems]


def planned_prefix() -> list[Planned]:
    """The messages the parent records before a writer starts."""
    return [
        Planned("system", [{"type": "text", "text": SYSTEM_TEXT}], "ended"),
        Planned(
            "user",
            [{"type": "text", "text": "Why does the build fail? Screenshot attached."}, IMAGE],
            "ended",
        ),
    ]


def record_prefix(store: Store, seed: int) -> UUID:
    conversation = store.new_conversation(title=f"kill run {seed}")
    for planned in planned_prefix():
        store.append_message(conversation, planned.role, planned.blocks)
    return conversation


def landed(events: list[Event], script: list[Op], acks: list[str]) -> list[Planned]:
    """Check the writer's events against its script and acknowledgements; the messages landed.

    Every acknowledged call is in the log, in order, with the acknowledged message id and
    block index; at most one more call (the one in flight at the kill) landed after them.
    """
    assert len(acks) <= len(events) <= min(len(acks) + 1, len(script)), (len(acks), len(events))
    planned: list[Planned] = []
    message_id: UUID | None = None
    for step, (event, op) in enumerate(zip(events, script, strict=False)):
        ack = acks[step] if step < len(acks) else None
        if op.kind == "start":
            assert isinstance(event, MessageStarted), (step, event)
            assert event.role == op.role
            message_id = event.message_id
            assert ack in (None, str(message_id))
            planned.append(Planned(op.role, []))
            continue
        assert getattr(event, "message_id", None) == message_id, (step, event)
        if op.kind == "block":
            assert isinstance(event, BLOCK_EVENTS), (step, event)
            assert op.block is not None
            assert event.block == parse_block(op.block)
            assert event.index == len(planned[-1].blocks)
            assert ack in (None, str(event.index))
            planned[-1].blocks.append(op.block)
        elif op.kind == "end":
            assert isinstance(event, MessageEnded), (step, event)
            planned[-1].status = "ended"
        else:
            assert isinstance(event, MessageInterrupted), (step, event)
            assert event.reason == op.reason
            planned[-1].status, planned[-1].reason = "interrupted", op.reason
    return planned


def assert_messages_match(recorded: list[RecordedMessage], planned: list[Planned]) -> None:
    """The stored messages are the planned ones: roles, statuses and blocks, in order."""
    assert [m.role for m in recorded] == [p.role for p in planned]
    assert [m.status for m in recorded] == [p.status for p in planned]
    for message, plan in zip(recorded, planned, strict=True):
        assert [b.block for b in message.blocks] == [parse_block(b) for b in plan.blocks]


# -- the kill test ---------------------------------------------------------------------------


@dataclass
class Writer:
    """A writer process started ahead of its run, waiting for ``go``."""

    seed: int
    conversation: UUID
    acks: Path
    process: BaseProcess
    ready: EventType
    go: EventType


def _launch(store: Store, location: str, tmp_path: Path, seed: int) -> Writer:
    conversation = record_prefix(store, seed)
    acks = tmp_path / f"acks-{seed}.txt"
    ready, go = SPAWN.Event(), SPAWN.Event()
    process = SPAWN.Process(
        target=_stream_turn,
        args=(location, str(conversation), seed, str(acks), ready, go),
        daemon=True,
    )
    process.start()
    return Writer(seed, conversation, acks, process, ready, go)


def _stop(process: BaseProcess) -> None:
    """SIGKILL a writer this test started (if it is still running) and reap it."""
    if process.is_alive() and process.pid is not None:
        with suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    process.join(timeout=30)


def _check_run(
    location: str, writer: Writer, audit_live: Path, audit_rebuilt: Path
) -> tuple[int, int]:
    """Every check after one kill; returns how many calls were acknowledged and landed."""
    script = turn_script(writer.seed)
    acks = read_acks(writer.acks)
    with open_store(location) as store:  # the store opens after the kill
        events = store.events(writer.conversation)
        prefix_events = 1 + sum(events_of(store, len(p.blocks)) for p in planned_prefix())
        turn = landed(events[prefix_events:], script, acks)
        planned = planned_prefix() + turn
        assert_messages_match(store.messages(writer.conversation), planned)
        assert store.replay(writer.conversation)["messages"] == expected_openai_text(planned)
        assert sdk_problems(store, writer.conversation) == []
        assert log_problems(store) == []
        audit = open_audit(store, audit_live)
        try:
            catch_up(store, audit)
        finally:
            audit.close()
        rebuild(store, audit_rebuilt)
    assert table_rows(audit_live) == table_rows(audit_rebuilt)
    return len(acks), len(events) - prefix_events


@pytest.mark.slow
def test_sigkilled_writers_lose_nothing_acknowledged(tmp_path: Path) -> None:
    """50 writers SIGKILLed mid-turn: acked blocks kept, log sound, replay valid, audit exact."""
    location = str(tmp_path / "kill.db")
    audit_live, audit_rebuilt = tmp_path / "live.audit.db", tmp_path / "rebuilt.audit.db"
    started: list[Writer] = []
    outcomes: list[tuple[int, int]] = []  # (acknowledged, landed) per run
    with open_store(location) as parent:
        try:
            pending: deque[Writer] = deque()
            for seed in range(KILL_RUNS):
                while len(pending) <= WARM_AHEAD and len(started) < KILL_RUNS:
                    started.append(_launch(parent, location, tmp_path, len(started)))
                    pending.append(started[-1])
                writer = pending.popleft()
                assert writer.seed == seed
                assert writer.ready.wait(60), f"writer {seed} never got ready"
                writer.go.set()
                time.sleep(seeded(f"kill-{seed}").uniform(*KILL_DELAY_SECONDS))
                _stop(writer.process)
                assert writer.process.exitcode in (0, -signal.SIGKILL), writer.process.exitcode
                outcomes.append(_check_run(location, writer, audit_live, audit_rebuilt))
        finally:
            for writer in started:
                _stop(writer.process)
    # The kills must land across the turn, or this test would prove little.
    landed = [n for _, n in outcomes]
    cut_short = [n for n, w in zip(landed, started, strict=True) if n < len(turn_script(w.seed))]
    assert len(cut_short) >= KILL_RUNS // 2, outcomes
    assert len(set(landed)) >= 4, outcomes
    assert any(n == acked + 1 for acked, n in outcomes), outcomes  # a call landed, unacked
    result = CliRunner().invoke(cli, ["--db", location, "--audit", str(audit_live), "verify"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout.startswith("ok: "), result.stdout


# -- races: threads and processes, same and different conversations ----------------------------

RACE_PROCESSES = 3
RACE_THREADS = 2
RACE_MESSAGES = 6
RACE_BLOCKS = 5


def _race_label(process: int, thread: int, message: int, block: int) -> str:
    return f"p{process}/t{thread}/m{message}/b{block}"


def _race_thread(store: Store, conversations: list[str], process: int, thread: int) -> None:
    """Alternates between the two conversations; odd messages are streamed, even ones whole."""
    for m in range(RACE_MESSAGES):
        conversation = conversations[(m + thread) % 2]
        blocks = [
            {"type": "text", "text": _race_label(process, thread, m, b)} for b in range(RACE_BLOCKS)
        ]
        if m % 2 == 0:
            store.append_message(conversation, "user", blocks)
            continue
        message = store.start_message(conversation, "user")
        for b, block in enumerate(blocks):
            assert store.append_block(conversation, message, block) == b
            time.sleep(0.002)  # a streaming model pauses between blocks; others get a turn
        store.end_message(conversation, message)


def _race_process(
    location: str, conversations: list[str], process: int, ready: EventType, go: EventType
) -> None:
    """A writer process: two threads sharing one store, racing the other processes."""
    errors: list[BaseException] = []

    def run(thread: int) -> None:
        try:
            _race_thread(store, conversations, process, thread)
        except BaseException as exc:  # noqa: BLE001 - reported through the exit code
            errors.append(exc)

    with open_store(location) as store:
        ready.set()
        go.wait(60)
        threads = [threading.Thread(target=run, args=(t,)) for t in range(RACE_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]


def _race_messages(store: Store, conversation: UUID) -> Iterator[tuple[str, str]]:
    """Each message of a raced conversation as (its label prefix, the conversation), checked."""
    events = store.events(conversation)
    assert [e.originator_version for e in events] == list(range(1, len(events) + 1))
    for message in store.messages(conversation):
        assert message.status == "ended"
        texts = [b.block.model_dump()["text"] for b in message.blocks]
        label = texts[0].rsplit("/", 1)[0]
        assert texts == [f"{label}/b{b}" for b in range(RACE_BLOCKS)], texts
        yield label, str(conversation)


def interleaved(store: Store, conversation: UUID) -> bool:
    """Whether two messages were open at once in the log: the writers really raced."""
    open_now: set[UUID] = set()
    for event in store.events(conversation):
        if isinstance(event, MessageStarted):
            if open_now:
                return True
            open_now.add(event.message_id)
        elif isinstance(event, MessageEnded):
            open_now.discard(event.message_id)
    return False


@pytest.mark.slow
def test_threads_and_processes_racing_on_two_conversations(tmp_path: Path) -> None:
    """3 processes x 2 threads over 2 conversations: nothing lost, doubled or reordered."""
    location = str(tmp_path / "race.db")
    with open_store(location) as store:
        conversations = [str(store.new_conversation(title=f"race {n}")) for n in range(2)]
    go = SPAWN.Event()
    readies = [SPAWN.Event() for _ in range(RACE_PROCESSES)]
    workers = [
        SPAWN.Process(target=_race_process, args=(location, conversations, p, readies[p], go))
        for p in range(RACE_PROCESSES)
    ]
    try:
        for worker in workers:
            worker.start()
        assert all(ready.wait(60) for ready in readies)
        go.set()  # all at once, so they really race
        for worker in workers:
            worker.join(timeout=120)
        assert [w.exitcode for w in workers] == [0] * RACE_PROCESSES
    finally:
        for worker in workers:
            _stop(worker)
    with open_store(location) as store:
        seen = [pair for c in conversations for pair in _race_messages(store, UUID(c))]
        assert log_problems(store) == []
        assert all(interleaved(store, UUID(c)) for c in conversations)
    expected = {
        (f"p{p}/t{t}/m{m}", conversations[(m + t) % 2])
        for p in range(RACE_PROCESSES)
        for t in range(RACE_THREADS)
        for m in range(RACE_MESSAGES)
    }
    assert sorted(seen) == sorted(expected)  # each message exactly once, in its conversation
    # And within each writer, its messages to one conversation kept their order.
    for conversation in conversations:
        for p in range(RACE_PROCESSES):
            for t in range(RACE_THREADS):
                mine = [
                    label
                    for label, c in seen
                    if c == conversation and label.startswith(f"p{p}/t{t}/")
                ]
                assert mine == sorted(mine, key=lambda label: int(label.rsplit("m", 1)[1]))


def test_threads_of_one_store_racing_on_one_conversation(tmp_path: Path) -> None:
    """Eight threads sharing a store stream into one conversation; every message stays whole."""
    with open_store(tmp_path / "threads.db") as store:
        conversation = store.new_conversation()
        errors: list[BaseException] = []

        def run(thread: int) -> None:
            try:
                for m in range(4):
                    message = store.start_message(conversation, "assistant")
                    for b in range(RACE_BLOCKS):
                        store.append_block(
                            conversation,
                            message,
                            {"type": "text", "text": _race_label(0, thread, m, b)},
                        )
                    store.end_message(conversation, message)
            except BaseException as exc:  # noqa: BLE001 - checked below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == []
        labels = sorted(label for label, _ in _race_messages(store, conversation))
        assert labels == sorted(f"p0/t{t}/m{m}" for t in range(8) for m in range(4))
        assert log_problems(store) == []
        assert interleaved(store, conversation)
