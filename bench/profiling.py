#!/usr/bin/env python
"""Profile the convstore side of a benchmark (see bench/README.md and RESULTS.md).

    python bench/profiling.py append|replay|cold|rebuild|pg-append [--messages N] [--top N]
                            [--tool pyinstrument|cprofile] [--dir DIR]

pyinstrument (a sampling profiler, if installed) is the default: its percentages are not
inflated by per-call overhead the way cProfile's are. It prints the functions with the most
self time (percent of the total), then the call tree.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

if __name__ == "__main__":
    # As in bench/run.py: import the bench package from the repo root, not bench/ itself.
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(_here)]
    sys.path.insert(0, str(Path(_here).parent))

import sqlite_utils

from bench import common, workload
from bench.report import Report


def emit(*parts: object) -> None:
    """Write a line of the report to stdout."""
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")


def have_pyinstrument() -> bool:
    try:
        import pyinstrument  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def profile(call: Callable[[], Any], tool: str, top: int, title: str) -> None:
    emit(f"\n=== {title} ===")
    if tool == "pyinstrument":
        from pyinstrument import Profiler  # noqa: PLC0415

        profiler = Profiler(interval=0.0002)
        profiler.start()
        call()
        profiler.stop()
        flat = profiler.output_text(flat=True, time="percent_of_total", short_mode=False)
        lines = [line for line in flat.splitlines() if line.strip()]
        emit("-- self time, percent of total --")
        head = [i for i, line in enumerate(lines) if "%" in line]
        emit("\n".join(lines[: (head[0] if head else 0)]))
        emit("\n".join(lines[head[0] : head[0] + top] if head else lines[:top]))
        emit("-- call tree --")
        emit(
            profiler.output_text(
                time="percent_of_total",
                processor_options={"filter_threshold": 0.02, "hide_regex": r".*/(click)/.*"},
            )
        )
        return
    prof = cProfile.Profile()
    prof.enable()
    call()
    prof.disable()
    stats = pstats.Stats(prof)
    total = stats.total_tt  # type: ignore[attr-defined]
    emit(f"total {total:.3f} s (cProfile; Python-call-heavy code is over-weighted)")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    emit(f"{'self%':>6} {'cum%':>6} {'calls':>9}  function")
    for (file, line, name), (_cc, nc, tt, ct, _callers) in rows[:top]:
        where = f"{name} ({short(file)}:{line})"
        emit(f"{tt / total * 100:6.1f} {ct / total * 100:6.1f} {nc:9d}  {where}")


def short(file: str) -> str:
    match = re.search(r"site-packages/(.*)|/src/(convstore/.*)", file)
    return (match.group(1) or match.group(2)) if match else file


def median_time(call: Callable[[], Any], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# -- scenarios ------------------------------------------------------------------------------


def scenario_append(args: argparse.Namespace, tmp: Path) -> None:
    from convstore import open_store  # noqa: PLC0415

    with open_store(tmp / "warm.db") as store:
        workload.stream_conversation(store, 3)
    store = open_store(tmp / "append.db")

    def work() -> None:
        workload.stream_conversation(store, args.messages)

    profile(work, args.tool, args.top, f"append: stream {args.messages:,} messages, SQLite")
    store.close()


def build(n: int, tmp: Path) -> tuple[Path, UUID]:
    ctx = common.Context(
        quick=False, dir=tmp, pg_url=common.DEFAULT_PG_URL, report=Report("full", {})
    )
    return ctx.fixture(n)


def scenario_replay(args: argparse.Namespace, tmp: Path) -> None:
    from convstore import open_store  # noqa: PLC0415
    from convstore.engine.plan import replay  # noqa: PLC0415

    path, conv = build(args.messages, tmp)
    store = open_store(path, create=False)
    store.replay(conv)
    profile(
        lambda: store.replay(conv, shape="openai", vision=False),
        args.tool,
        args.top,
        f"replay of {args.messages:,} messages, warm, SQLite",
    )
    # Where the time goes, stage by stage, and what the cyclic GC costs.
    recorder = store._log.recorder
    decode = store._log.pydantic_mapper.decode
    stored = recorder.select_events(conv)
    events = [decode(s) for s in stored]
    stages = {
        "select_events (SQL + StoredEvent objects)": lambda: recorder.select_events(conv),
        "decode (pydantic validate_json per event)": lambda: [decode(s) for s in stored],
        "projection (collect_messages + to_openai)": lambda: replay(events),
        "Store.replay, GC enabled": lambda: store.replay(conv),
    }
    emit("\n-- stages (median of 5) --")
    for name, call in stages.items():
        emit(f"{median_time(call) * 1000:9.1f} ms  {name}")
    gc.disable()
    try:
        emit(f"{median_time(lambda: store.replay(conv)) * 1000:9.1f} ms  Store.replay, GC disabled")
        emit(
            f"{median_time(lambda: [decode(s) for s in stored]) * 1000:9.1f} ms  "
            "decode, GC disabled"
        )
    finally:
        gc.enable()
    conn = __import__("sqlite3").connect(path)
    emit(f"{median_time(lambda: common.raw_read(conn, conv.hex)) * 1000:9.1f} ms  raw baseline")
    gc.disable()
    emit(
        f"{median_time(lambda: common.raw_read(conn, conv.hex)) * 1000:9.1f} ms  "
        "raw baseline, GC disabled"
    )
    gc.enable()
    emit(f"gc thresholds {gc.get_threshold()}")


def scenario_rebuild(args: argparse.Namespace, tmp: Path) -> None:
    from convstore import open_store  # noqa: PLC0415
    from convstore.app.projector import rebuild  # noqa: PLC0415

    path, _ = build(args.messages, tmp)
    n = args.messages * workload.EVENTS_PER_MESSAGE + 1
    store = open_store(path, create=False)
    audit = tmp / "audit.db"
    rebuild(store, audit)
    profile(
        lambda: rebuild(store, audit),
        args.tool,
        args.top,
        f"rebuild of the audit read model, {n:,} events",
    )
    # Time per kind of SQL statement (the audit database's execute, wrapped).
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    real_execute = sqlite_utils.Database.execute

    def timed_execute(self: Any, sql: str, parameters: Any = None) -> Any:
        started = time.perf_counter()
        try:
            return real_execute(self, sql, parameters)
        finally:
            entry = spent[" ".join(sql.split()[:4])[:48]]
            entry[0] += time.perf_counter() - started
            entry[1] += 1

    sqlite_utils.Database.execute = timed_execute  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        rebuild(store, audit)
        whole = time.perf_counter() - started
    finally:
        sqlite_utils.Database.execute = real_execute  # type: ignore[method-assign]
    emit(f"\n-- SQL statements during one rebuild ({whole:.2f} s) --")
    for name, (seconds, calls) in sorted(spent.items(), key=lambda kv: -kv[1][0]):
        emit(f"{seconds / whole * 100:6.1f}%  {seconds:6.2f} s  {calls:7d} x  {name}")
    store_notifications = median_time(lambda: _all_notifications(store), 3)
    rate = n / store_notifications
    emit(f"reading + decoding the whole log via Store.notifications: {rate:,.0f} events/s")


def _all_notifications(store: Any) -> int:
    position, count = 0, 0
    while True:
        batch = store.notifications(position, 500)
        if not batch:
            return count
        position = batch[-1][0]
        count += len(batch)


def scenario_cold(args: argparse.Namespace, tmp: Path) -> None:
    path, conv = build(args.messages, tmp)
    # 1. import time by top-level package (python -X importtime)
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import convstore.cli"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    by_package: dict[str, int] = defaultdict(int)
    total = 0
    for line in out.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if not match:
            continue
        self_us, name = int(match.group(1)), match.group(4)
        by_package[name.split(".")[0]] += self_us
        total += self_us
    emit("\n=== cold: import convstore.cli, self time by top-level package (-X importtime) ===")
    emit(f"total {total / 1000:.0f} ms")
    for name, us in sorted(by_package.items(), key=lambda kv: -kv[1])[: args.top]:
        emit(f"{us / total * 100:6.1f}%  {us / 1000:7.1f} ms  {name}")
    # 2. the whole command, profiled in a fresh process
    code = (
        "import sys, io\n"
        "tool = sys.argv[1]\n"
        "if tool == 'pyinstrument':\n"
        "    from pyinstrument import Profiler\n"
        "    p = Profiler(interval=0.0002); p.start()\n"
        "else:\n"
        "    import cProfile; p = cProfile.Profile(); p.enable()\n"
        "real = sys.stdout; sys.stdout = io.StringIO()\n"
        "import convstore.cli\n"
        "sys.argv = ['convstore', *sys.argv[2:]]\n"
        "try:\n"
        "    convstore.cli.main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stdout = real\n"
        "if tool == 'pyinstrument':\n"
        "    p.stop()\n"
        "    print(p.output_text(time='percent_of_total', "
        "processor_options={'filter_threshold': 0.02}))\n"
        "else:\n"
        "    p.disable(); import pstats; pstats.Stats(p).sort_stats('cumulative').print_stats(40)\n"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, our own code
        [
            sys.executable,
            "-c",
            code,
            args.tool,
            "--db",
            str(path),
            "replay",
            str(conv),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    emit(f"\n=== cold: `convstore --db PATH replay CONV`, {args.messages:,} messages ===")
    emit(result.stdout)


def scenario_pg_append(args: argparse.Namespace, tmp: Path) -> None:
    from convstore import open_store  # noqa: PLC0415

    pg = common.PgContext.create(args.pg_url)
    if not pg.ok:
        emit(f"SKIPPED: {pg.reason}")
        return
    try:
        store = open_store(pg.store_url)
        workload.stream_conversation(store, 3)
        profile(
            lambda: workload.stream_conversation(store, args.messages),
            args.tool,
            args.top,
            f"append: stream {args.messages:,} messages, PostgreSQL",
        )
        store.close()
    finally:
        pg.drop()
    del tmp


SCENARIOS = {
    "append": (scenario_append, 1_000),
    "replay": (scenario_replay, 10_000),
    "cold": (scenario_cold, 1_000),
    "rebuild": (scenario_rebuild, 10_000),
    "pg-append": (scenario_pg_append, 300),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--messages", type=int, help="conversation size (messages)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--tool",
        choices=["pyinstrument", "cprofile"],
        default="pyinstrument" if have_pyinstrument() else "cprofile",
    )
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", common.DEFAULT_PG_URL))
    parser.add_argument(
        "--dir", help="where the store files go, e.g. /dev/shm to leave out fsync (default $TMPDIR)"
    )
    args = parser.parse_args()
    func, default_size = SCENARIOS[args.scenario]
    args.messages = args.messages or default_size
    with tempfile.TemporaryDirectory(prefix="convstore-profile-", dir=args.dir) as tmp:
        func(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
