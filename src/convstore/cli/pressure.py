"""The ``pressure`` command: the tokens of exactly what replay would send."""

from __future__ import annotations

import json
from dataclasses import asdict

import click

from convstore.cli.options import conversation_argument, json_option, replay_options, store_from
from convstore.engine.plan import ReplayOptions


@click.command()
@conversation_argument
@replay_options
@json_option
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Largest messages to list (0 lists none).",
)
@click.pass_context
def pressure(
    ctx: click.Context,
    conversation: str,
    options: ReplayOptions,
    as_json: bool,
    top: int,
) -> None:
    """Count the tokens of exactly what `replay` would send with the same options.

    Every block counts as sent: text, tool input and output, reasoning, markers, the
    summary, and native images (from their pixel size, by the provider's formula).
    Tokens are cl100k_base, counted offline; for Anthropic shapes it is an estimate.
    Messages are numbered in replay order, system messages included, counting from 1 as
    `show` and the web page count; --json's `index` counts from 0 (with --shape openai,
    #3 is the request's messages[2], index 2).

    \b
    Example:
        convstore pressure $CONV --shape anthropic --vision --keep-tool-results 5
    """
    result = store_from(ctx, create=False).pressure(conversation, options=options)
    if as_json:
        click.echo(json.dumps(asdict(result), indent=2))
        return
    click.echo(f"{result.total:,} tokens ({result.tokenizer}, {options.shape} shape)")
    wide = max(map(len, result.by_kind), default=0)  # hosted_tool_result is the longest kind
    for kind, tokens in sorted(result.by_kind.items(), key=lambda kv: -kv[1]):
        click.echo(f"  {kind:<{wide}} {tokens:>10,}")
    if top:
        click.echo(f"largest messages (of {len(result.by_message)}):")
        for message in sorted(result.by_message, key=lambda m: -m.tokens)[:top]:
            click.echo(f"  #{message.number:<5} {message.role:<10} {message.tokens:>10,}")
