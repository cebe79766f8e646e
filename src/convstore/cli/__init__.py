"""The ``convstore`` command line: one click group; each module adds its commands to it.

The conversation commands load with the group; the others (audit, compaction and pressure,
verify) load when one of them is asked for, so `convstore replay` starts without importing
sqlite-utils or the tokenizer.

The console script enters through :func:`convstore.console.main`, which alone sets
``PYDANTIC_DISABLE_PLUGINS``; importing this package changes no environment variable.
"""

import click

from convstore.cli import conversations as conversations
from convstore.cli import metadata as metadata
from convstore.cli.app import cli, main


def command_names() -> list[str]:
    """Every top-level command, the lazily loaded ones included."""
    with click.Context(cli) as ctx:
        return cli.list_commands(ctx)


__all__ = ["cli", "command_names", "main"]
