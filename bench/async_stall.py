#!/usr/bin/env python
"""How long the event loop stalls while many tasks append at once: AsyncStore vs sync calls.

    .venv/bin/python bench/async_stall.py [--tasks 50] [--messages 10] [--rounds 3]
                                          [--pg-url URL | --no-pg] [--json]

Each round, ``--tasks`` tasks each stream ``--messages`` messages (start_message, 3 text blocks
of ~1 KB, end_message: 5 committed appends each) into a conversation of their own, all at
once, while a ticker task sleeps 1 ms in a loop and records how late each wake-up is. The
longest of those delays is the loop's longest stall. Three sides per round, in alternating
order, each on a fresh store:

- ``async``: the work through :class:`convstore.AsyncStore`;
- ``sync``: the sync :class:`convstore.Store` called straight from the coroutines (what a
  runtime gets without the async API);
- ``control``: the sync side's work in a child process while this loop only ticks: the same
  disk, database and CPU load with nothing of convstore on this process's threads, so its
  stall is what the shared machine alone causes.

Target: a longest stall of at most 10 ms through the AsyncStore.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import convstore

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
TICK_SECONDS = 0.001
RT_PRIORITY = 10
TARGET_STALL_MS = 10.0
SIDES = ("async", "sync", "control")
LABELS = {
    "async": "AsyncStore",
    "sync": "sync Store called from the coroutines",
    "control": "control: the sync work in another process, this loop only ticks",
}
TEXTS = [f"block {i}: " + ("lorem ipsum dolor sit amet " * 40)[:1000] for i in range(16)]


@dataclass
class Sample:
    """One side of one round."""

    backend: str
    side: str
    round: int
    longest_stall_ms: float
    p99_stall_ms: float
    over_target: int
    """Wake-ups later than the target (10 ms)."""
    ticks: int
    appends: int
    seconds: float
    steal_ms: float | None
    """CPU time the hypervisor took from this machine's CPUs meanwhile (/proc/stat), if known."""

    @property
    def appends_per_second(self) -> float:
        return self.appends / self.seconds


@dataclass
class Measured:
    """What one measurement saw."""

    delays: list[float]
    appends: int
    seconds: float
    steal_ms: float | None


def _steal_ms() -> float | None:
    """CPU time stolen by the hypervisor so far, summed over CPUs (``/proc/stat``), in ms."""
    try:
        with Path("/proc/stat").open(encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else None


class Ticker:
    """Sleeps ``TICK_SECONDS`` in a loop and records how late each wake-up was."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self._running = True

    async def run(self) -> None:
        while self._running:
            before = time.perf_counter()
            await asyncio.sleep(TICK_SECONDS)
            self.delays.append(time.perf_counter() - before - TICK_SECONDS)

    def stop(self) -> None:
        self._running = False


async def _stream_async(store: convstore.AsyncStore, messages: int) -> int:
    conv = await store.new_conversation()
    for m in range(messages):
        turn = await store.start_message(conv, "assistant" if m % 2 else "user")
        for b in range(3):
            await store.append_block(conv, turn, {"type": "text", "text": TEXTS[(m + b) % 16]})
        await store.end_message(conv, turn)
    return 1 + 5 * messages


async def _stream_sync(store: convstore.Store, messages: int) -> int:
    # The baseline: blocking calls made straight from the coroutine. The sleep(0) between
    # calls lets the other tasks (and the ticker) interleave, as awaits on a network would.
    conv = store.new_conversation()
    await asyncio.sleep(0)
    for m in range(messages):
        turn = store.start_message(conv, "assistant" if m % 2 else "user")
        await asyncio.sleep(0)
        for b in range(3):
            store.append_block(conv, turn, {"type": "text", "text": TEXTS[(m + b) % 16]})
            await asyncio.sleep(0)
        store.end_message(conv, turn)
        await asyncio.sleep(0)
    return 1 + 5 * messages


async def _measure(work: Callable[[], Awaitable[int]], rt: bool) -> Measured:
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    with _real_time(rt):
        await asyncio.sleep(0.05)  # the ticker is running before the work starts
        ticker.delays.clear()
        stolen = _steal_ms()
        started = time.perf_counter()
        appends = await work()
        seconds = time.perf_counter() - started
        stolen_after = _steal_ms()
        ticker.stop()
        await ticking
    steal = None if stolen is None or stolen_after is None else stolen_after - stolen
    return Measured(ticker.delays, appends, seconds, steal)


@contextlib.contextmanager
def _real_time(on: bool) -> Iterator[None]:
    """With ``on``, the loop's thread (only it) runs at real-time priority meanwhile, so the
    OS's scheduling of a busy machine stays out of the figure; threads and processes started
    meanwhile get the normal policy (``SCHED_RESET_ON_FORK``)."""
    if not on:
        yield
        return
    policy = os.SCHED_FIFO | os.SCHED_RESET_ON_FORK
    os.sched_setscheduler(0, policy, os.sched_param(RT_PRIORITY))
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _sample(backend: str, side: str, rnd: int, measured: Measured) -> Sample:
    ordered = sorted(measured.delays)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    over = sum(1 for d in ordered if d * 1000 > TARGET_STALL_MS)
    return Sample(
        backend,
        side,
        rnd,
        longest_stall_ms=ordered[-1] * 1000,
        p99_stall_ms=p99 * 1000,
        over_target=over,
        ticks=len(ordered),
        appends=measured.appends,
        seconds=measured.seconds,
        steal_ms=measured.steal_ms,
    )


def run_side(side: str, location: str, args: argparse.Namespace) -> Measured:
    """One side of one round in a fresh event loop; opens and closes its own store."""
    tasks: int = args.tasks
    messages: int = args.messages
    rt: bool = args.rt

    async def async_side() -> Measured:
        async with await convstore.open_async_store(location, writers=args.writers) as store:

            async def work() -> int:
                done = await asyncio.gather(*(_stream_async(store, messages) for _ in range(tasks)))
                return sum(done)

            return await _measure(work, rt)

    async def sync_side() -> Measured:
        with convstore.open_store(location) as store:

            async def work() -> int:
                done = await asyncio.gather(*(_stream_sync(store, messages) for _ in range(tasks)))
                return sum(done)

            return await _measure(work, rt)

    async def control_side() -> Measured:
        async def work() -> int:
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                __file__,
                "--child",
                location,
                "--tasks",
                str(tasks),
                "--messages",
                str(messages),
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await child.communicate()
            assert child.returncode == 0
            return int(out)

        return await _measure(work, rt)

    sides = {"async": async_side, "sync": sync_side, "control": control_side}
    return asyncio.run(sides[side]())


def child(location: str, tasks: int, messages: int) -> int:
    """The control's other process: the sync side's work, with no ticker; prints appends."""

    async def main() -> int:
        with convstore.open_store(location) as store:
            done = await asyncio.gather(*(_stream_sync(store, messages) for _ in range(tasks)))
            return sum(done)

    return asyncio.run(main())


def _say(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


@contextlib.contextmanager
def pg_locations(url: str) -> Iterator[Callable[[], str]]:
    """Fresh schemas on the server, dropped afterwards."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    schemas: list[str] = []

    def make() -> str:
        schemas.append(f"bench_{uuid.uuid4().hex[:12]}")
        return f"{url}?schema={schemas[-1]}"

    try:
        yield make
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


def pg_error(url: str) -> str | None:
    try:
        import psycopg  # noqa: PLC0415

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as exc:  # noqa: BLE001 - any reason to skip is reported
        return " ".join(str(exc).split()) or type(exc).__name__


def run(args: argparse.Namespace) -> list[Sample]:
    samples: list[Sample] = []
    backends: list[tuple[str, Callable[[], str]]] = []
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir)))
        backends.append(("sqlite", lambda: str(workdir / f"{uuid.uuid4().hex}.db")))
        if not args.no_pg:
            error = pg_error(args.pg_url)
            if error is None:
                backends.append(("postgres", stack.enter_context(pg_locations(args.pg_url))))
            else:
                _say(f"PostgreSQL skipped: {error}")
        for backend, fresh in backends:
            for rnd in range(args.rounds):
                order = SIDES if rnd % 2 == 0 else SIDES[::-1]
                for side in order:
                    _say(f"{backend} round {rnd + 1}: {side}")
                    measured = run_side(side, fresh(), args)
                    samples.append(_sample(backend, side, rnd, measured))
    return samples


def table(samples: list[Sample], args: argparse.Namespace) -> str:
    lines = [
        f"{args.tasks} tasks x {args.messages} messages x 5 appends (+1 new_conversation each), "
        f"{args.rounds} rounds; ticker sleeps {TICK_SECONDS * 1000:.0f} ms"
        + ("; loop thread at real-time priority (--rt)" if args.rt else ""),
        "",
        "| backend | side | longest stall, median of rounds (worst) | p99 stall "
        f"| wake-ups > {TARGET_STALL_MS:.0f} ms (all rounds) | CPU stolen by the hypervisor "
        "| appends/s | result |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for backend in dict.fromkeys(s.backend for s in samples):
        for side in SIDES:
            mine = [s for s in samples if s.backend == backend and s.side == side]
            longest = [s.longest_stall_ms for s in mine]
            median = statistics.median(longest)
            result = "-"
            if side == "async":
                result = "PASS" if max(longest) <= TARGET_STALL_MS else "MISS"
            label = LABELS[side]
            over = sum(s.over_target for s in mine)
            ticks = sum(s.ticks for s in mine)
            stolen = [s.steal_ms for s in mine if s.steal_ms is not None]
            steal = f"{sum(stolen) / 1000:.1f} s" if stolen else "?"
            lines.append(
                f"| {backend} | {label} | {median:.1f} ms ({max(longest):.1f} ms) "
                f"| {statistics.median(s.p99_stall_ms for s in mine):.1f} ms "
                f"| {over} of {ticks:,} | {steal} "
                f"| {statistics.median(s.appends_per_second for s in mine):,.0f} | {result} |"
            )
    lines.append("")
    lines.append(f"target: longest stall <= {TARGET_STALL_MS:.0f} ms (every round) via AsyncStore")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--messages", type=int, default=10, help="messages per task")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL),
        help="PostgreSQL server (default $BENCH_PG_URL or %(default)s); fresh schemas, dropped",
    )
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument(
        "--rt",
        action="store_true",
        help="run the loop's thread at real-time priority while measuring (needs root or "
        "CAP_SYS_NICE), to take a busy machine's scheduling out of the figure",
    )
    parser.add_argument(
        "--writers", type=int, default=None, help="AsyncStore writer threads (default: its own)"
    )
    parser.add_argument("--dir", default=None, help="where the SQLite files go (default $TMPDIR)")
    parser.add_argument("--json", action="store_true", help="every sample as JSON on stdout")
    parser.add_argument("--child", metavar="LOCATION", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        sys.stdout.write(f"{child(args.child, args.tasks, args.messages)}\n")
        return 0
    samples = run(args)
    if args.json:
        rows: list[dict[str, Any]] = [
            {**asdict(s), "appends_per_second": s.appends_per_second} for s in samples
        ]
        report = {"samples": rows}
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(table(samples, args) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
