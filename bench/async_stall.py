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
    ticks: int
    appends: int
    seconds: float

    @property
    def appends_per_second(self) -> float:
        return self.appends / self.seconds


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


async def _measure(work: Callable[[], Awaitable[int]]) -> tuple[list[float], int, float]:
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    await asyncio.sleep(0.05)  # the ticker is running before the work starts
    ticker.delays.clear()
    started = time.perf_counter()
    appends = await work()
    seconds = time.perf_counter() - started
    ticker.stop()
    await ticking
    return ticker.delays, appends, seconds


def _sample(backend: str, side: str, rnd: int, measured: tuple[list[float], int, float]) -> Sample:
    delays, appends, seconds = measured
    ordered = sorted(delays)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return Sample(backend, side, rnd, max(delays) * 1000, p99 * 1000, len(delays), appends, seconds)


def run_side(
    side: str, location: str, tasks: int, messages: int, writers: int | None
) -> tuple[list[float], int, float]:
    """One side of one round in a fresh event loop; opens and closes its own store."""

    async def async_side() -> tuple[list[float], int, float]:
        async with await convstore.open_async_store(location, writers=writers) as store:

            async def work() -> int:
                done = await asyncio.gather(*(_stream_async(store, messages) for _ in range(tasks)))
                return sum(done)

            return await _measure(work)

    async def sync_side() -> tuple[list[float], int, float]:
        with convstore.open_store(location) as store:

            async def work() -> int:
                done = await asyncio.gather(*(_stream_sync(store, messages) for _ in range(tasks)))
                return sum(done)

            return await _measure(work)

    async def control_side() -> tuple[list[float], int, float]:
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

        return await _measure(work)

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
                    measured = run_side(side, fresh(), args.tasks, args.messages, args.writers)
                    samples.append(_sample(backend, side, rnd, measured))
    return samples


def table(samples: list[Sample], args: argparse.Namespace) -> str:
    lines = [
        f"{args.tasks} tasks x {args.messages} messages x 5 appends (+1 new_conversation each), "
        f"{args.rounds} rounds; ticker sleeps {TICK_SECONDS * 1000:.0f} ms",
        "",
        "| backend | side | longest stall, median of rounds (worst) | p99 stall | appends/s |"
        " result |",
        "|---|---|---|---|---|---|",
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
            lines.append(
                f"| {backend} | {label} | {median:.1f} ms ({max(longest):.1f} ms) "
                f"| {statistics.median(s.p99_stall_ms for s in mine):.1f} ms "
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
