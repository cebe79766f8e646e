"""What only a terminal sees: progress bars under a real pseudo-terminal, and help layout.

Click draws a progress bar only when its stream is a terminal, so a plain subprocess or
``CliRunner`` never runs that code. Here the installed ``convstore`` runs with stdin, stdout
and stderr on a pty, for every command whose source draws a progress bar. A second test
walks every command's ``--help`` and checks the example keeps its own lines.
"""

from __future__ import annotations

import inspect
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from convstore import open_store
from convstore.app.demo import record_demo
from convstore.cli import cli

SCRIPT = Path(sys.executable).parent / "convstore"

PTY_RUNS: dict[str, list[str]] = {
    "rebuild": ["rebuild"],
}
"""Every command that draws a progress bar, and the arguments it runs with under a pty."""


def commands(
    group: click.Group, ctx: click.Context, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command below ``group``, lazily loaded ones included, with its path of names."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from commands(command, ctx, (*prefix, name))


def all_commands() -> list[tuple[tuple[str, ...], click.Command]]:
    with click.Context(cli) as ctx:
        return list(commands(cli, ctx))


def test_every_command_that_draws_progress_is_run_under_a_pty() -> None:
    """The commands whose code calls click.progressbar are exactly those PTY_RUNS covers."""
    drawing = {
        " ".join(path)
        for path, command in all_commands()
        if command.callback is not None and "progressbar" in inspect.getsource(command.callback)
    }
    assert drawing == set(PTY_RUNS)


def run_in_pty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` with a pty as its terminal; its exit status and everything it printed."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100"}
    child = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if child.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        code = child.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(master)
    return code, output.decode("utf-8", "replace")


@pytest.mark.slow
@pytest.mark.parametrize("name", PTY_RUNS)
def test_progress_is_drawn_on_a_terminal(name: str, tmp_path: Path) -> None:
    """Under a pty the command draws its bar (label, percentage, rate) and exits 0."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        for _ in range(5):
            record_demo(store)
    argv = [str(SCRIPT), "--db", str(db), "--audit", str(tmp_path / "a.db"), *PTY_RUNS[name]]
    code, output = run_in_pty(argv)
    assert code == 0, output
    assert "error" not in output, output
    assert "rebuilding audit" in output, output
    assert "100%" in output, output
    assert "events/s" in output, output
    assert "rebuilt audit:" in output, output


@pytest.mark.parametrize(
    "path", [p for p, _ in all_commands()], ids=[" ".join(p) for p, _ in all_commands()]
)
def test_help_shows_the_example_on_lines_of_its_own(path: tuple[str, ...]) -> None:
    """Every --help ends in 'Example:' alone on a line, then the example lines, never a '\\b'."""
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert not any("\\b" in line or "\b" in line for line in lines), result.output
    heading = [i for i, line in enumerate(lines) if line.strip() == "Example:"]
    assert len(heading) == 1, result.output
    rest = lines[heading[0] + 1 :]
    example = rest[: rest.index("")] if "" in rest else rest
    assert example, result.output
    assert all(line.startswith("      ") for line in example), result.output  # indented
    assert any("convstore" in line for line in example), result.output
