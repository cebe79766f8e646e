"""`convstore upgrade`: rewrite a store of an earlier format as format 3, whole or not at all."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import click

from convstore.app.upgrade import upgrade_store
from convstore.audit.file import default_audit_file
from convstore.cli.output import counted
from convstore.cli.transfer import progress_bar

_BARS = {"building": "upgrading", "checking": "checking"}
"""The steps a progress bar is shown for, and its label."""


@click.command()
@click.option(
    "--no-backup",
    is_flag=True,
    help="Do not keep the old store as NAME.format2 (or .format1) beside the new one.",
)
@click.pass_context
def upgrade(ctx: click.Context, no_backup: bool) -> None:
    """Rewrite a store of format 1 or 2 (convstore 0.3.x) as format 3, whole or not at all.

    The store is verified first (a damaged one is refused, naming the conversation). A
    new store is built beside it under a temporary name, each message folded into its
    block events, and every conversation must replay from it exactly as from the old log,
    in every mode, before it takes the old one's name in one rename. The old file is kept
    as NAME.format2 unless --no-backup. Writers wait (or time out, their append refused)
    while it runs, and the switch needs the store to itself: with another process holding
    it open, nothing is switched. A store of format 3 is left as it is. SQLite only for
    now: a PostgreSQL or NATS store is moved with `dump` and `load`.

    \b
    Example:
        convstore --db agent.db upgrade
        convstore --db agent.db verify && rm agent.db.format2
    """
    location = ctx.obj["db"]
    shown = sys.stderr.isatty()
    with ExitStack() as bars:
        step: list[Callable[[int], None] | None] = [None]

        def stage(name: str, total: int) -> None:
            bars.close()
            step[0] = None
            if name in _BARS:
                step[0] = bars.enter_context(progress_bar(total, _BARS[name], shown=shown))
            elif shown and name in {"verifying", "switching"}:
                click.echo(f"{name}…", err=True)

        def progress(count: int) -> None:
            if step[0] is not None:
                step[0](count)

        report = upgrade_store(location, backup=not no_backup, stage=stage, progress=progress)
    if not report.upgraded:
        click.echo(f"{report.location} is of format {report.to_format} already: nothing to do")
        return
    kept = f"; the old store is kept as {report.backup}" if report.backup else ""
    click.echo(
        f"upgraded {report.location} from format {report.from_format} to {report.to_format}: "
        f"{counted(report.conversations, 'conversation')}, events {report.events_before:,} → "
        f"{report.events_after:,}, bytes {report.bytes_before:,} → {report.bytes_after:,} "
        f"in {report.seconds:.2f} s{kept}"
    )
    audit = Path(ctx.obj.get("audit") or default_audit_file(report.location))
    if audit.exists():
        click.echo(
            f"note: the audit read model {audit} was built from the old log: delete it and run "
            "`convstore project` to build it from the new one",
            err=True,
        )
