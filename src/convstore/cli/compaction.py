"""The ``compact`` command: record a summary that replay sends instead of older messages."""

from __future__ import annotations

import click

from convstore.cli.app import (
    cli,
    conversation_argument,
    input_argument,
    resolve_message,
    store_from,
)
from convstore.cli.inputs import read_text


@cli.command()
@conversation_argument
@click.option("--through", "-t", metavar="MSG", required=True, help="The last message summarised.")
@input_argument
@click.pass_context
def compact(ctx: click.Context, conversation: str, through: str, source: str | None) -> None:
    """Record a summary that replaces every message up to and including MSG on replay.

    The summary is plain text from FILE or stdin. The log keeps every message; replay
    sends the system messages, the summary, then everything after MSG, and
    `replay --full` ignores compaction. The newest compaction wins.

    \b
    Example:
        echo "The user wants the login test fixed; CI log read." \\
          | convstore compact $CONV --through $MSG
    """
    summary = read_text(source)
    through = resolve_message(ctx, conversation, through)
    store_from(ctx, create=False).compact(conversation, summary, through=through)
