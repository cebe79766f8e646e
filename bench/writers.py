"""``writers``: N processes appending at once on PostgreSQL, aggregate appends/s.

Each convstore process streams its own conversation through its own ``Store``; each raw one
inserts into ``raw_events`` under its own stream id, one transaction per row. Both groups are
spawned and connected first; rounds then alternate between them, each starting on a barrier.
"""

from __future__ import annotations

import multiprocessing as mp
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.context import SpawnContext
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

from bench.common import Context, log, median, pc, remove_db, store_rows
from bench.report import Row, verdict
from bench.workload import (
    BLOCKS_PER_MESSAGE,
    EVENTS_PER_MESSAGE,
    block_of,
    role_of,
    stream_conversation,
)
from convstore import open_store


@dataclass(frozen=True)
class Plan:
    processes: list[int]
    rounds: int
    seconds: float  # per round


TARGET_RATIO = {1: 0.6, 4: 0.5}
"""Issue 23: at least this share of raw psycopg's appends/s, by number of writer processes
(both ``synchronous_commit=on``, one transaction per append)."""

FULL = Plan([1, 2, 4, 8], 3, 3.0)
QUICK = Plan([1, 4], 3, 0.5)

Payload = tuple[str, bytes]
"""(topic, state) of one stored event."""


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Appender:
    """What a writer process runs."""

    append: Callable[[], None]
    """One append."""
    close: Callable[[], None]
    """At the end of the last round."""
    settle: Callable[[], None] = _nothing
    """At the end of each round, inside its time: whatever the round's appends leave for the
    store to do before a read sees them, so a store that defers work is charged for it (a NATS
    store's replica applying them); nothing for a store whose append is read at once."""


def run(ctx: Context) -> None:
    log("writers: N processes, each appending to its own conversation, PostgreSQL")
    pg = ctx.pg_context()
    if pg is None:
        ctx.skip("writers", ctx.pg.reason if ctx.pg else "?")
        return
    plan = ctx.pick(FULL, QUICK)
    payloads = sample_payloads(ctx.dir)
    spawn = mp.get_context("spawn")
    base: dict[int, tuple[float, float]] = {}
    for n in plan.processes:
        # Both groups are started and connected first; their rounds then alternate
        # (convstore first on even rounds), so each pair runs seconds apart.
        makers = {
            "convstore": partial(convstore_appender, pg.store_url),
            "raw": partial(_raw_appender, pg.base_url, pg.schema, payloads),
        }
        results = alternate_rounds(
            spawn, {kind: [make] * n for kind, make in makers.items()}, plan, label=f"x{n}"
        )
        c = results["convstore"]
        b = results["raw"]
        ratios = [x / y for x, y in zip(c, b, strict=True)]
        base[n] = (median(c), median(b))
        first = plan.processes[0]
        ctx.add(
            Row(
                "writers, PostgreSQL, aggregate appends/s",
                f"{n} process{'es' if n > 1 else ''}",
                plan.rounds,
                median(c),
                median(b),
                "/s",
                median(ratios),
                "higher",
                f">= {TARGET_RATIO[n]}x" if n in TARGET_RATIO else "",
                verdict(median(ratios) >= TARGET_RATIO[n]) if n in TARGET_RATIO else "",
                note=(
                    f"{plan.seconds:g} s per round; scaling vs 1 process: convstore "
                    f"{median(c) / base[first][0]:.2f}x, raw "
                    f"{median(b) / base[first][1]:.2f}x"
                )
                if n != first
                else f"{plan.seconds:g} s per round; each process streams its own conversation",
                samples={"convstore": c, "baseline": b, "ratios": ratios},
            )
        )


def alternate_rounds(
    spawn: SpawnContext,
    makers: dict[str, list[Callable[[], Appender]]],
    plan: Plan,
    *,
    label: str,
) -> dict[str, list[float]]:
    """Start a :class:`WriterGroup` per kind (one process for each of its makers), then run
    ``plan.rounds`` rounds in which the groups take turns, the order flipping every round (so
    each pair runs seconds apart); each kind's aggregate appends/s per round."""
    groups = {kind: WriterGroup(spawn, make, plan=plan) for kind, make in makers.items()}
    results: dict[str, list[float]] = {kind: [] for kind in groups}
    try:
        for r in range(plan.rounds):
            for kind in sorted(groups) if r % 2 == 0 else sorted(groups, reverse=True):
                rate = groups[kind].round(r)
                results[kind].append(rate)
                log(f"    {kind} {label} round {r + 1}/{plan.rounds}: {rate:,.0f} appends/s")
    finally:
        for group in groups.values():
            group.stop()
    return results


def sample_payloads(workdir: Path) -> list[Payload]:
    """(topic, state) of one streamed message's five events, recorded by convstore itself."""
    path = workdir / "sample.db"
    with open_store(path) as store:
        stream_conversation(store, 2)
    rows = store_rows(path)
    remove_db(path)
    return [(topic, bytes(state)) for _, _, topic, state in rows[1 : 1 + EVENTS_PER_MESSAGE]]


def convstore_appender(store_url: str) -> Appender:
    """One streaming agent: start, 3 blocks, end, one committed event per call."""
    store = open_store(store_url)
    conv = store.new_conversation(title="writer")
    i = 0
    j = 0
    msg: uuid.UUID | None = None

    def append() -> None:
        nonlocal i, j, msg
        if msg is None:
            msg = store.start_message(conv, role_of(i))
            j = 0
        elif j < BLOCKS_PER_MESSAGE:
            store.append_block(conv, msg, block_of(i, j))
            j += 1
        else:
            store.end_message(conv, msg)
            msg = None
            i += 1

    def settle() -> None:
        # A read of the conversation waits for every append acknowledged before it began.
        store.last_event(conv)

    return Appender(append, store.close, settle)


def _raw_appender(base_url: str, schema: str, payloads: list[Payload]) -> Appender:
    """Raw inserts of the same payloads into ``raw_events`` under a stream id of its own."""
    import psycopg  # noqa: PLC0415 - optional: only the PostgreSQL benchmarks need it

    conn = psycopg.connect(base_url, autocommit=True)
    cur = conn.cursor()
    oid = uuid.uuid4()
    insert = (
        f'INSERT INTO "{schema}".raw_events '  # noqa: S608
        "(originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s) "
        "RETURNING notification_id"
    )
    version = 0

    def append() -> None:
        nonlocal version
        version += 1
        topic, payload = payloads[version % len(payloads)]
        cur.execute(insert, (oid, version, topic, payload))
        cur.fetchone()

    return Appender(append, conn.close)


def writer_process(
    *,
    make: Callable[[], Appender],
    rounds: int,
    seconds: float,
    barrier: Barrier,
    results: Queue[tuple[int, int, float]],
) -> None:
    """One writer: set up (``make``, a picklable top-level function or a partial of one),
    then per round wait at the barrier and append for ``seconds``."""
    appender = make()
    append = appender.append
    for _ in range(5):  # warm
        append()
    appender.settle()
    try:
        for r in range(rounds):
            barrier.wait()
            start = pc()
            deadline = start + seconds
            count = 0
            now = start
            while now < deadline:
                append()
                count += 1
                now = pc()
            appender.settle()
            results.put((r, count, pc() - start))
    finally:
        appender.close()


class WriterGroup:
    """Spawned writer processes, one for each of ``makes`` (what it sets up), run round by
    round on a barrier. Also the NATS benchmark's (:mod:`bench.nats`)."""

    def __init__(
        self, spawn: SpawnContext, makes: Sequence[Callable[[], Appender]], *, plan: Plan
    ) -> None:
        n = self.n = len(makes)
        self.seconds = plan.seconds
        self.barrier = spawn.Barrier(n + 1)
        self.results: Queue[tuple[int, int, float]] = spawn.Queue()
        self.workers = [
            spawn.Process(
                target=writer_process,
                kwargs={
                    "make": make,
                    "rounds": plan.rounds,
                    "seconds": plan.seconds,
                    "barrier": self.barrier,
                    "results": self.results,
                },
            )
            for make in makes
        ]
        for w in self.workers:
            w.start()

    def round(self, r: int) -> float:
        """Release the writers for round ``r``; their aggregate appends/s."""
        self.barrier.wait(timeout=120)
        got = [self.results.get(timeout=self.seconds + 120) for _ in range(self.n)]
        assert all(g[0] == r for g in got)
        return sum(count / elapsed for _, count, elapsed in got)

    def stop(self) -> None:
        for w in self.workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()
