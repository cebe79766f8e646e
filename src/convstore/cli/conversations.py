"""Commands that record, read and replay conversations."""

from __future__ import annotations

import base64
import json

import click

from convstore.cli.app import (
    cli,
    conversation_argument,
    input_argument,
    json_option,
    message_argument,
    resolve_message,
    shape_option,
    store_from,
    vision_option,
    window_options,
)
from convstore.cli.inputs import json_kind, read_json
from convstore.domain.images import dimensions
from convstore.errors import InvalidInput, NoStore
from convstore.projections.prose import Image, Text, block_segments
from convstore.projections.replay import interruption_marker


def describe_image(image: Image) -> str:
    """An image as one line of a transcript: format, size and pixel dimensions (or its URL)."""
    if image.data is None:
        return f"[image: {image.media_type or 'by URL'}, at {image.url}]"
    raw = base64.b64decode(image.data)
    size = dimensions(raw)
    shown = f", {size[0]}x{size[1]} px" if size else ""
    return f"[image: {image.media_type}, {len(raw):,} bytes{shown}]"


# -- commands ---------------------------------------------------------------------------------


@cli.command()
@click.option("--title", "-t", help="A title to list the conversation by.")
@click.pass_context
def new(ctx: click.Context, title: str | None) -> None:
    """Start a conversation and print its id.

    \b
    Example:
        convstore new --title "refactor the parser"
    """
    click.echo(store_from(ctx, create=True).new_conversation(title=title))


@cli.command()
@conversation_argument
@click.option(
    "--role",
    "-r",
    required=True,
    type=click.Choice(["system", "user", "assistant"]),
    help="Who wrote the message. Tool results go in user messages.",
)
@click.option("--open", "leave_open", is_flag=True, help="Leave the message open for add-block.")
@input_argument
@click.pass_context
def append(
    ctx: click.Context, conversation: str, role: str, leave_open: bool, source: str | None
) -> None:
    """Record one message from a JSON array of blocks; print its id.

    Blocks come from FILE, or stdin when FILE is - or omitted. The whole message is
    written at once, or (on any bad block) not at all.

    \b
    Example:
        echo '[{"type":"text","text":"What does ls show?"}]' \\
          | convstore append $CONV --role user
    """
    blocks = read_json(source)
    if not isinstance(blocks, list):
        msg = f"expected a JSON array of blocks, got {json_kind(blocks)}"
        raise InvalidInput(msg)
    store = store_from(ctx, create=False)
    click.echo(store.append_message(conversation, role, blocks, leave_open=leave_open))


@cli.command("add-block")
@conversation_argument
@message_argument
@input_argument
@click.pass_context
def add_block(ctx: click.Context, conversation: str, message: str, source: str | None) -> None:
    """Append one block (a JSON object) to an open message, as an agent streams.

    \b
    Example:
        MSG=$(convstore start $CONV --role assistant)
        echo '{"type":"tool_use","id":"c1","name":"ls","input":{"path":"."}}' \\
          | convstore add-block $CONV $MSG
    """
    block = read_json(source)
    if not isinstance(block, dict):
        msg = f"expected one block as a JSON object, got {json_kind(block)}"
        raise InvalidInput(msg)
    store_from(ctx, create=False).append_block(conversation, message, block)


@cli.command()
@conversation_argument
@message_argument
@click.pass_context
def end(ctx: click.Context, conversation: str, message: str) -> None:
    """Mark an open message complete.

    \b
    Example:
        convstore end $CONV $MSG
    """
    store_from(ctx, create=False).end_message(conversation, message)


@cli.command()
@conversation_argument
@message_argument
@click.option("--reason", help="Why it was cut short; replay shows it.")
@click.pass_context
def interrupt(ctx: click.Context, conversation: str, message: str, reason: str | None) -> None:
    """Record that an open message was cut short on purpose.

    A message that was simply never ended (the process died) needs nothing: it
    replays as exactly what landed.

    \b
    Example:
        convstore interrupt $CONV $MSG --reason "user pressed stop"
    """
    store_from(ctx, create=False).interrupt_message(conversation, message, reason)


@cli.command()
@conversation_argument
@shape_option
@vision_option
@window_options
@click.option(
    "--live",
    metavar="MSG",
    help="Build the request for the tool round in progress: history before MSG as prose, "
    "then MSG's calls and their results with real call-id linkage.",
)
@click.option(
    "--fit-tokens",
    type=click.IntRange(min=1),
    metavar="N",
    help="Microcompact by budget: clear the oldest tool output until the request is N tokens "
    "or fewer (counted as `pressure` counts).",
)
@click.option("--compact", is_flag=True, help="One line of JSON instead of indented.")
@click.pass_context
def replay(
    ctx: click.Context,
    conversation: str,
    shape: str,
    vision: bool,
    full: bool,
    keep_tool_results: int | None,
    live: str | None,
    fit_tokens: int | None,
    compact: bool,
) -> None:
    """Print the conversation as provider request messages (JSON).

    One wire message per stored message, every block as prose; tool calls and
    results never become tool roles or call ids. After `convstore compact`, replay
    starts with the summary (--full ignores it). --keep-tool-results N clears the
    output of all but the newest N tool results. --live MSG is the one exception to
    prose: the request for a tool round still in progress.

    \b
    Example:
        convstore replay $CONV --shape anthropic --vision | jq '.messages | length'
        convstore replay $CONV --keep-tool-results 3
        convstore replay $CONV --fit-tokens 100000
        convstore replay $CONV --live $MSG --shape openai
    """
    store = store_from(ctx, create=False)
    if fit_tokens is not None:
        if keep_tool_results is not None:
            msg = "--fit-tokens chooses --keep-tool-results itself; give one or the other"
            raise click.UsageError(msg)
        keep_tool_results, fitted = store.fit_tool_results(
            conversation, fit_tokens, shape=shape, vision=vision, full=full
        )
        if fitted.total > fit_tokens:
            click.echo(
                f"note: {fitted.total:,} tokens with every tool output cleared; "
                f"still over {fit_tokens:,}",
                err=True,
            )
    if live is None:
        result = store.replay(
            conversation, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
        )
    else:
        result = store.live_request(
            conversation,
            resolve_message(ctx, conversation, live),
            shape=shape,
            vision=vision,
            full=full,
            keep_tool_results=keep_tool_results,
        )
    click.echo(json.dumps(result, ensure_ascii=False, indent=None if compact else 2))


@cli.command()
@conversation_argument
@click.option(
    "--all", "everything", is_flag=True, help="Also show messages a rewind withdrew, marked."
)
@click.pass_context
def show(ctx: click.Context, conversation: str, everything: bool) -> None:
    """Print a readable transcript: each message with its id, role, status and blocks.

    Messages a rewind withdrew are left out (as replay leaves them out) unless --all.

    \b
    Example:
        convstore show $CONV --all | less
    """
    hidden = 0
    for number, message in enumerate(store_from(ctx, create=False).messages(conversation), 1):
        if message.withdrawn and not everything:
            hidden += 1
            continue
        status = {"open": "open (never ended)"}.get(message.status, message.status)
        stamp = message.started_at.strftime("%Y-%m-%d %H:%M:%S")
        withdrawn = " · withdrawn by a rewind" if message.withdrawn else ""
        click.secho(
            f"[{number}] {message.role} · {status} · {stamp}{withdrawn} · {message.message_id}",
            bold=True,
        )
        if not message.blocks:
            click.echo("    (no blocks)")
        for recorded in message.blocks:
            for segment in block_segments(recorded.block, recorded.tool_name, None):
                text = segment.text if isinstance(segment, Text) else describe_image(segment)
                click.echo("    " + text.replace("\n", "\n    "))
        if message.status == "interrupted":
            click.echo("    " + interruption_marker(message.interrupt_reason))
        click.echo()
    if hidden:
        click.echo(f"({hidden} message(s) withdrawn by a rewind not shown; --all shows them)")


@cli.command()
@conversation_argument
@click.pass_context
def log(ctx: click.Context, conversation: str) -> None:
    """Print the conversation's raw events, one JSON object per line, in order.

    \b
    Example:
        convstore log $CONV | jq -c 'select(.type == "block_appended") | .block.type'
    """
    for state in store_from(ctx, create=False).raw_events(conversation):
        click.echo(state.decode())


@cli.command("list")
@json_option
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """List conversations, oldest first: id, start time, title.

    \b
    Example:
        convstore list --json | jq -r '.[].id'
    """
    try:
        conversations = store_from(ctx, create=False).conversations()
    except NoStore:
        conversations = []
    if as_json:
        rows = [
            {"id": str(c.id), "title": c.title, "created_at": c.created_at.isoformat()}
            for c in conversations
        ]
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    for c in conversations:
        stamp = c.created_at.strftime("%Y-%m-%d %H:%M:%S")
        click.echo(f"{c.id}  {stamp}  {c.title or ''}".rstrip())


@cli.command()
@shape_option
@json_option
@click.pass_context
def demo(ctx: click.Context, shape: str, as_json: bool) -> None:
    """Record a realistic agent conversation and print its replay twice.

    The conversation has reasoning, parallel tool calls, an error result, an image,
    and a tool round killed mid-turn. It is replayed for a text-only model and for
    a vision model.

    \b
    Example:
        convstore demo --shape anthropic
    """
    from convstore.demo import record_demo  # noqa: PLC0415 - only this command needs it

    store = store_from(ctx, create=True)
    conversation = record_demo(store)
    text_only = store.replay(conversation, shape=shape, vision=False)
    vision = store.replay(conversation, shape=shape, vision=True)
    if as_json:
        payload = {
            "conversation": str(conversation),
            "store": store.location,
            "text_only": text_only,
            "vision": vision,
        }
        click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
        return
    click.echo(f"Recorded demo conversation {conversation} in {store.location}\n")
    for title, body in (("a text-only model", text_only), ("a vision model", vision)):
        click.secho(f"--- Replay for {title} ({shape} shape) ---", bold=True)
        click.echo(json.dumps(body, ensure_ascii=False, indent=2))
        click.echo()
    click.echo(f"See the transcript: convstore --db {store.location} show {conversation}")
