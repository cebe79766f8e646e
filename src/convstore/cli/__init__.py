"""The ``convstore`` command line: one click group; each module adds its commands to it.

The conversation commands load with the group; the others (audit, compaction and pressure,
verify) load when one of them is asked for, so `convstore replay` starts without importing
sqlite-utils or the tokenizer.
"""

import os

# Before anything imports pydantic: the command line needs no third-party pydantic plugins, and
# discovering them scans every installed package's metadata (about 20 ms of each command's
# start-up). Set PYDANTIC_DISABLE_PLUGINS yourself to decide otherwise.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import click

from convstore.cli import conversations as conversations
from convstore.cli import metadata as metadata
from convstore.cli.app import cli, main


def command_names() -> list[str]:
    """Every top-level command, the lazily loaded ones included."""
    with click.Context(cli) as ctx:
        return cli.list_commands(ctx)


__all__ = ["cli", "command_names", "main"]
