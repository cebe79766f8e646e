"""The command group: every command, the lazily loaded ones by name, and the entry point.

Exit status: 0 on success; 2 for bad input or usage, with one line on stderr and nothing
written; 1 when the store itself fails. Set ``CONVSTORE_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from convstore.app.bootstrap import ENV_VAR
from convstore.cli import conversations, metadata
from convstore.cli.options import (
    EXIT_BAD_INPUT,
    EXIT_STORE_FAILURE,
    fail,
    usage_failure,
)
from convstore.domain.errors import ConvstoreError, InvalidInput
from convstore.infrastructure.sqlite.recorder import default_path

LAZY_COMMANDS = {
    "project": "convstore.cli.audit:project",
    "rebuild": "convstore.cli.audit:rebuild_",
    "audit": "convstore.cli.audit:audit",
    "compact": "convstore.cli.compaction:compact",
    "pressure": "convstore.cli.pressure:pressure",
    "verify": "convstore.cli.verify:verify",
    "dump": "convstore.cli.transfer:dump",
    "load": "convstore.cli.transfer:load",
    "export": "convstore.cli.transfer:export",
    "import": "convstore.cli.importing:import_",
    "serve": "convstore.cli.web:serve",
    "erase": "convstore.cli.lifecycle:erase",
    "vacuum": "convstore.cli.lifecycle:vacuum",
    "upgrade": "convstore.cli.upgrade:upgrade",
    "rewind": "convstore.cli.lifecycle:rewind",
    "fork": "convstore.cli.lifecycle:fork",
    "start": "convstore.cli.lifecycle:start",
}
"""Commands whose modules load only when asked for (they import heavier libraries), as
``module:attribute``."""


class _Group(click.Group):
    """Turns every error into one line on stderr and the right exit status.

    Click's own usage errors (an unknown option, a bad choice) are folded to one line too.
    Commands in :data:`LAZY_COMMANDS` are imported on first use.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in LAZY_COMMANDS:
            module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            usage_failure(exc)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            usage_failure(exc)
        except InvalidInput as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except ConvstoreError as exc:
            fail(str(exc), EXIT_STORE_FAILURE)
        except (click.exceptions.Exit, click.ClickException, click.Abort, BrokenPipeError):
            raise
        except Exception as exc:
            if os.environ.get("CONVSTORE_DEBUG"):
                raise
            fail(
                f"unexpected {type(exc).__name__}: {exc} (set CONVSTORE_DEBUG=1 for the traceback)",
                EXIT_STORE_FAILURE,
            )


# -- the group --------------------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    metavar="PATH",
    envvar=ENV_VAR,
    show_envvar=True,
    help=(
        "The store: a SQLite file path, a postgresql:// or a nats:// URL. "
        f"Default: {default_path()}"
    ),
)
@click.option(
    "--audit",
    metavar="PATH",
    envvar="CONVSTORE_AUDIT_DB",
    show_envvar=True,
    help="The audit read model (a SQLite file). Default: beside a SQLite store, as NAME.audit.db.",
)
@click.version_option(package_name="convstore")
@click.pass_context
def cli(ctx: click.Context, db: str | None, audit: str | None) -> None:
    """convstore: one event-sourced history per conversation, replayed as provider messages.

    Every block an agent produces is appended as an immutable event; replay turns the
    record into OpenAI or Anthropic request messages, all blocks as prose.

    \b
    Example:
        convstore demo
        CONV=$(convstore new --title "triage")
        echo '[{"type":"text","text":"hello"}]' | convstore append $CONV --role user
        convstore replay $CONV --shape anthropic
    """
    ctx.obj = {"db": db, "audit": audit}


def main() -> None:
    """Console-script entry point."""
    try:
        cli(prog_name="convstore")
    except BrokenPipeError:
        # The reader went away (``convstore log … | head``): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


def _add_commands_of(module: Any) -> None:
    """Add every command defined in ``module`` (not imported into it) to the group."""
    for value in vars(module).values():
        callback = getattr(value, "callback", None)
        if (
            isinstance(value, click.Command)
            and getattr(callback, "__module__", None) == module.__name__
        ):
            cli.add_command(value)


_add_commands_of(conversations)
_add_commands_of(metadata)
