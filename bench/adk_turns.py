"""What the turn lease of ``ConvstoreSessionService`` costs and what it buys (issue 41, item 2).

ADK's real ``Runner`` with a scripted model and a tool (``tests.adk_worker``, a checkout's),
on one SQLite session, every configuration in fresh processes, taking turns in each repeat:

- **alone**: one runner, TURNS turns, with the lease (30 s) and without it (``turn_lease=0``):
  the lease's price when no one else writes (the worker's time for its turns, its imports and
  start left out; ratio with / without);
- **two runners**: two processes, TURNS turns each, with and without the lease: wall time,
  turns run again after ``StaleSessionError``, and attempts left half-written in the session
  (an invocation whose events end without the agent's answer).

``python -m bench.adk_turns [TURNS] [REPEATS]`` (10 and 3 by default; ``--help``); a
standalone script, not part of ``bench/run.py`` (it measures behaviour under contention more
than speed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import convstore
from convstore.integrations.google_adk import ConvstoreSessionService

ROOT = Path(__file__).resolve().parent.parent
LEASES = {"lease": 30.0, "no lease": 0.0}


def _session(location: Path) -> None:
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store)
        asyncio.run(service.create_session(app_name="weather", user_id="ada", session_id="s"))


def _runners(location: Path, count: int, turns: int, lease: float) -> tuple[float, int]:
    """``count`` worker processes of ``turns`` turns each; the longest worker's time for its
    turns (its imports and start left out) and the turns run again after a lost race."""
    env = {**os.environ, "ADK_TURN_LEASE": str(lease), "PYTHONPATH": str(ROOT)}
    workers = [
        subprocess.Popen(  # noqa: S603 - this interpreter, the checkout's worker
            [sys.executable, "-m", "tests.adk_worker", str(location), "s", os.devnull, str(turns)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(count)
    ]
    outputs = [worker.communicate(timeout=600)[0].splitlines() for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    took = [float(line.split()[1]) for out in outputs for line in out if line.startswith("took ")]
    return max(took), sum(out.count("stale") for out in outputs)


def _stranded(location: Path) -> tuple[int, int]:
    """Invocations in the session, and those whose events end without the agent's answer."""
    with convstore.open_store(location) as store:
        service = ConvstoreSessionService(store=store, unanswered_calls_as_prose=False)
        session = asyncio.run(
            service.get_session(app_name="weather", user_id="ada", session_id="s")
        )
    assert session is not None
    last: dict[str, str] = {}
    for event in session.events:
        parts = event.content.parts if event.content else None
        last[event.invocation_id] = (parts[0].text or "") if parts else ""
    return len(last), sum(not text.startswith("done:") for text in last.values())


def main(turns: int, repeats: int) -> None:
    results: dict[tuple[str, int], list[tuple[float, int, int, int]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(repeats):
            order = list(LEASES.items())
            for name, lease in order[repeat % 2 :] + order[: repeat % 2]:
                for count in (1, 2):
                    location = Path(folder) / f"{name}-{count}-{repeat}.db"
                    _session(location)
                    elapsed, stale = _runners(location, count, turns, lease)
                    invocations, stranded = _stranded(location)
                    results.setdefault((name, count), []).append(
                        (elapsed, stale, invocations, stranded)
                    )
                    print(  # noqa: T201 - progress
                        f"  {name}, {count} runner(s): {elapsed:.2f} s, {stale} run again, "
                        f"{stranded} of {invocations} invocations half-written",
                        file=sys.stderr,
                    )
    print(f"{turns} turns a runner, {repeats} repeats (medians):")  # noqa: T201
    for (name, count), rows in results.items():
        wall = statistics.median(r[0] for r in rows)
        retried = statistics.median(r[1] for r in rows)
        halfway = statistics.median(r[3] for r in rows)
        print(  # noqa: T201 - the result
            f"  {count} runner(s), {name:8}: {wall:6.2f} s (slowest runner), "
            f"{retried:4.0f} turns run again, {halfway:4.0f} attempts half-written"
        )
    for count in (1, 2):
        ratio = statistics.median(
            a[0] / b[0]
            for a, b in zip(results[("lease", count)], results[("no lease", count)], strict=True)
        )
        print(f"  time with the lease / without, {count} runner(s): {ratio:.2f}x")  # noqa: T201


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.adk_turns",
        description="ADK's Runner on one session: one runner and two, with and without "
        "ConvstoreSessionService's turn lease.",
        epilog="example: python -m bench.adk_turns 10 4",
    )
    parser.add_argument("turns", nargs="?", type=_positive, default=10, help="turns a runner")
    parser.add_argument("repeats", nargs="?", type=_positive, default=3, help="repeats")
    return parser.parse_args()


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        msg = f"a whole number of at least 1, not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return int(text)


if __name__ == "__main__":
    arguments = _arguments()
    main(arguments.turns, arguments.repeats)
