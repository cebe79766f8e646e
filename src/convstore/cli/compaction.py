"""The ``compact`` command: record a summary that replay sends instead of older messages."""

from __future__ import annotations

from typing import Any

import click

from convstore.cli.app import (
    cli,
    conversation_argument,
    input_argument,
    resolve_message,
    store_from,
)
from convstore.cli.inputs import json_kind, parse_json, read_input
from convstore.domain.blocks import TextBlock
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_blocks
from convstore.errors import InvalidInput

_PLAIN = "for plain text pass --text"


def summary_from_blocks(value: Any) -> str:
    """The summary a JSON array of text blocks spells: their texts, a blank line between."""
    if not isinstance(value, list):
        msg = f"expected a JSON array of text blocks, got {json_kind(value)}; {_PLAIN}"
        raise InvalidInput(msg)
    if not value:
        msg = "a summary needs at least one text block"
        raise InvalidInput(msg)
    texts: list[str] = []
    for index, block in enumerate(parse_blocks(value, Limits.from_env())):
        if not isinstance(block, TextBlock):
            msg = f"block {index} is a {block.type} block; a summary is text blocks only"
            raise InvalidInput(msg)
        texts.append(block.text)
    return "\n\n".join(texts)


@cli.command()
@conversation_argument
@click.option("--through", "-t", metavar="MSG", required=True, help="The last message summarised.")
@click.option(
    "--text", "plain", is_flag=True, help="Read the summary as plain text, not JSON blocks."
)
@input_argument
@click.pass_context
def compact(
    ctx: click.Context, conversation: str, through: str, plain: bool, source: str | None
) -> None:
    """Record a summary that replaces every message up to and including MSG on replay.

    The summary is a JSON array of text blocks (as `append` reads; their texts are
    joined by a blank line), or plain text with --text, from FILE or stdin. The log
    keeps every message; replay sends the system messages, the summary, then
    everything after MSG, and `replay --full` ignores compaction. The newest
    compaction wins.

    \b
    Example:
        convstore compact $CONV --through $MSG --text < summary.txt
        echo '[{"type":"text","text":"The user wants the login test fixed."}]' \\
          | convstore compact $CONV --through $MSG
    """
    text, where = read_input(source, "text" if plain else "JSON")
    if plain:
        summary = text
    else:
        try:
            value = parse_json(text, where)
        except InvalidInput as exc:
            msg = f"{exc}; {_PLAIN}"
            raise InvalidInput(msg) from None
        summary = summary_from_blocks(value)
    through = resolve_message(ctx, conversation, through)
    store_from(ctx, create=False).compact(conversation, summary, through=through)
