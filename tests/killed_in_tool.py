"""What the kill-inside-a-tool tests of every adapter share: run a framework's worker until its
tool says it started, SIGKILL it there, and ask ``convstore audit tools --status missing`` (the
command line, on that store) which calls were left without a result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from convstore.cli import cli

ROOT = Path(__file__).resolve().parents[1]

READY_WAIT = 120.0
"""Seconds a worker may take to reach its tool (imports and a store opened) before the test
gives up on it."""


def kill_in_tool(argv: list[str], ready: Path) -> None:
    """Start ``argv`` (a worker module run from the checkout), wait until its tool writes
    ``ready``, and SIGKILL it there: the tool has started and will never return.

    The worker runs in a process group of its own and the whole group is killed, as a host
    going down would: a runner the worker started (the Claude Agent SDK's CLI) dies with it
    instead of living on and holding the worker's output pipes open."""
    process = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + READY_WAIT
    while not ready.exists():
        if process.poll() is not None:
            out, err = process.communicate()
            msg = f"the worker ended before its tool started: {out}\n{err}"
            raise AssertionError(msg)
        assert time.monotonic() < deadline, "the worker never reached its tool"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL


def missing_calls(location: str, audit: Path) -> list[tuple[str, str]]:
    """``convstore audit tools --status missing --json`` on the store at ``location`` (its
    read model in ``audit``, caught up first with ``convstore project``): each call left
    without a result, as its name and input."""

    def ok(*args: str) -> str:
        result = CliRunner().invoke(cli, ["--db", location, "--audit", str(audit), *args])
        assert result.exit_code == 0, (result.stdout, result.stderr)
        return result.stdout

    ok("project")
    rows: list[dict[str, Any]] = json.loads(ok("audit", "tools", "--status", "missing", "--json"))
    return [(row["name"], row["input"]) for row in rows]
