"""The command line of ``bench/run.py``: choose benchmarks, run them, print the table."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from bench import (
    adk,
    after_append,
    agent,
    append,
    cold,
    disk,
    langgraph,
    memory,
    nats,
    peer,
    postgres,
    rebuild,
    replay,
    writers,
)
from bench.common import DEFAULT_PG_URL, Context, compile_package, log, machine_info, pc, workdir
from bench.report import Report, render

BENCHMARKS: dict[str, Callable[[Context], None]] = {
    "append": append.run,
    "replay": replay.run,
    "cold": cold.run,
    "rebuild": rebuild.run,
    "postgres": postgres.run,
    "writers": writers.run,
    "memory": memory.run,
    "peer": peer.run,
    "after_append": after_append.run,
    "disk": disk.run,
    "agent": agent.run,
    "langgraph": langgraph.run,
    "adk": adk.run,
    "nats": nats.run,
}
"""Every benchmark by its ``--only`` name, in the order a run takes them."""

DESCRIPTION = "convstore benchmarks, each timed against a raw-driver baseline in the same run."


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/run.py", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    p.add_argument("--only", help=f"comma-separated benchmarks to run: {', '.join(BENCHMARKS)}")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL),
        help="PostgreSQL server for the postgres and writers benchmarks "
        "(default $BENCH_PG_URL or %(default)s); a fresh schema is created and dropped",
    )
    p.add_argument("--dir", help="where to put the temporary store files (default: $TMPDIR)")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    selected = list(BENCHMARKS)
    if args.only:
        selected = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in selected if s not in BENCHMARKS]
        if unknown:
            p.error(f"unknown benchmark(s) {unknown}; choose from {', '.join(BENCHMARKS)}")
    if args.dir and not Path(args.dir).is_dir():
        p.error(f"--dir {args.dir}: no such directory (the run makes its own inside it)")
    if not compile_package():
        log("warning: some convstore modules did not compile; fresh processes compile them")
    report = Report(mode="quick" if args.quick else "full", machine=machine_info(args.pg_url))
    started = pc()
    with workdir(args.dir) as tmp:
        ctx = Context(quick=args.quick, dir=tmp, pg_url=args.pg_url, report=report)
        try:
            for name, bench in BENCHMARKS.items():
                if name in selected:
                    bench(ctx)
        finally:
            ctx.close()
    report.seconds = pc() - started
    output = json.dumps(asdict(report), indent=2) if args.json else render(report)
    sys.stdout.write(output + "\n")
    return 0
