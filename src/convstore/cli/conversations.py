"""Commands that record, read and replay conversations."""

from __future__ import annotations

import base64
import json
import shlex
import tempfile
from dataclasses import replace
from pathlib import Path

import click
from click.core import ParameterSource

from convstore.cli.inputs import json_kind, read_json
from convstore.cli.metadata import meta_option, parse_assignment, parse_meta_option, parse_when
from convstore.cli.options import (
    EXIT_OVER_BUDGET,
    NO_MATCH,
    conversation_argument,
    input_argument,
    json_option,
    message_argument,
    replay_options,
    resolve_message,
    shape_option,
    store_from,
)
from convstore.domain.blocks import DocumentBlock, TextBlock
from convstore.domain.conversation import Conversation
from convstore.domain.errors import InvalidInput
from convstore.domain.events import Compacted
from convstore.domain.images import dimensions
from convstore.engine.plan import ReplayOptions, interruption_marker
from convstore.projections.listing import preview_of
from convstore.projections.messages import RecordedMessage, collect_history
from convstore.projections.prose import (
    Image,
    Text,
    block_segments,
    describe_meta,
    document_caption,
    document_text,
    source_claim,
)


def describe_image(image: Image) -> str:
    """An image as one line of a transcript: format, size and pixel dimensions (or its URL)."""
    if image.data is None:
        return f"[image: {image.media_type or 'by URL'}, at {image.url}]"
    raw = base64.b64decode(image.data)
    size = dimensions(raw)
    shown = f", {size[0]}x{size[1]} px" if size else ""
    return f"[image: {image.media_type}, {len(raw):,} bytes{shown}]"


def describe_document(document: DocumentBlock) -> str:
    """A document as a transcript shows it: a text document as its text (as replay words it),
    any other as one line naming it, like an image's; not replay's marker, which tells a model
    that could not see it that it was not read."""
    if document.text is not None:
        return document_text(document)
    return f"[document: {document_caption(document)}]"


def describe_compaction(
    number: int, compaction: Compacted, in_force: list[Compacted], withdrawn: bool
) -> str:
    """A compaction as ``show`` prints it after message ``number``: whether replay starts
    with it, then its summary, indented."""
    if compaction in in_force:
        state = ": replay starts here with this summary"
    elif withdrawn:
        state = " (not in force: a rewind withdrew that message)"
    else:
        state = " (superseded by a newer compaction)"
    summary = compaction.summary.replace("\n", "\n    ")
    return f"--- compacted through [{number}]{state} ---\n    {summary}\n"


# -- commands ---------------------------------------------------------------------------------


@click.command()
@click.option("--title", "-t", help="A title to list the conversation by.")
@click.pass_context
def new(ctx: click.Context, title: str | None) -> None:
    """Start a conversation and print its id.

    \b
    Example:
        convstore new --title "refactor the parser"
    """
    click.echo(store_from(ctx, create=True).new_conversation(title=title))


@click.command()
@conversation_argument
@click.option(
    "--role",
    "-r",
    required=True,
    type=click.Choice(["system", "user", "assistant"]),
    help="Who wrote the message. Tool results go in user messages.",
)
@click.option("--open", "leave_open", is_flag=True, help="Leave the message open for add-block.")
@meta_option
@input_argument
@click.pass_context
def append(
    ctx: click.Context,
    conversation: str,
    role: str,
    leave_open: bool,
    meta: str | None,
    source: str | None,
) -> None:
    """Record one message from a JSON array of blocks; print its id.

    Blocks come from FILE, or stdin when FILE is - or omitted: at least one, unless --open
    (an empty array is refused for a whole message). The whole message is written at once,
    or (on any bad block) not at all.

    \b
    Example:
        echo '[{"type":"text","text":"What does ls show?"}]' \\
          | convstore append $CONV --role user
    """
    checked_meta = parse_meta_option(meta)
    blocks = read_json(source)
    if not isinstance(blocks, list):
        msg = f"expected a JSON array of blocks, got {json_kind(blocks)}"
        raise InvalidInput(msg)
    if not blocks and not leave_open:
        msg = (
            "the array holds no blocks: a message needs at least one "
            "(to open one and add blocks as they come, use --open or `convstore start`)"
        )
        raise InvalidInput(msg)
    store = store_from(ctx, create=False)
    message = store.append_message(
        conversation, role, blocks, leave_open=leave_open, meta=checked_meta
    )
    click.echo(message)


@click.command("add-block")
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


@click.command()
@conversation_argument
@message_argument
@meta_option
@click.pass_context
def end(ctx: click.Context, conversation: str, message: str, meta: str | None) -> None:
    """Mark an open message complete (with its metadata, given --meta).

    \b
    Example:
        convstore end $CONV $MSG --meta '{"model": "gpt-4.1", "stop_reason": "stop"}'
    """
    checked_meta = parse_meta_option(meta)
    store_from(ctx, create=False).end_message(conversation, message, meta=checked_meta)


@click.command()
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


@click.command()
@conversation_argument
@replay_options
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
    "or fewer (counted as `pressure` counts). If no amount of clearing meets N, the smallest "
    "request found is printed and the exit status is 3.",
)
@click.option("--compact", is_flag=True, help="One line of JSON instead of indented.")
@click.pass_context
def replay(
    ctx: click.Context,
    conversation: str,
    options: ReplayOptions,
    live: str | None,
    fit_tokens: int | None,
    compact: bool,
) -> None:
    """Print the conversation as provider request messages (JSON).

    One wire message per stored message (plus one user message first when the
    history opens with the assistant), every block as prose; tool calls and
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
    over_budget = False
    if fit_tokens is not None:
        if options.keep_tool_results is not None:
            msg = "--fit-tokens chooses --keep-tool-results itself; give one or the other"
            raise click.UsageError(msg)
        keep, fitted = store.fit_tool_results(conversation, fit_tokens, options=options)
        options = replace(options, keep_tool_results=keep)
        over_budget = fitted.total > fit_tokens
        if over_budget:
            kept = "every" if keep is None else f"the newest {keep:,}"
            click.echo(
                f"note: the smallest request found is {fitted.total:,} tokens (keeping {kept} "
                f"tool output(s)); still over {fit_tokens:,} (exit status {EXIT_OVER_BUDGET})",
                err=True,
            )
    if live is None:
        result = store.replay(conversation, options=options)
    else:
        live_message = resolve_message(ctx, conversation, live)
        result = store.live_request(conversation, live_message, options=options)
    click.echo(json.dumps(result, ensure_ascii=False, indent=None if compact else 2))
    if over_budget:
        ctx.exit(EXIT_OVER_BUDGET)


@click.command()
@conversation_argument
@click.option(
    "--all", "everything", is_flag=True, help="Also show messages a rewind withdrew, marked."
)
@click.option(
    "--verbose",
    is_flag=True,
    help="Also show each message's metadata extras (an import's line and request ids).",
)
@click.pass_context
def show(ctx: click.Context, conversation: str, everything: bool, verbose: bool) -> None:
    """Print a readable transcript: each message with its id, role, status and blocks.

    The title (and labels) head it. Each compaction follows the message it runs through,
    marked when a newer one supersedes it. Messages a rewind withdrew are left out (as
    replay leaves them out) unless --all. Under each message its metadata (model, tokens,
    stop reason, id); its extras only with --verbose.

    \b
    Example:
        convstore show $CONV --all | less
    """
    events = store_from(ctx, create=False).events(conversation)
    state = Conversation.from_events(events[0].originator_id, events)
    shown = ", ".join(f"{key}={value}" for key, value in sorted(state.labels.items()))
    history = collect_history(events)
    heading = state.title or _first_user_text(history.messages) or "(untitled)"
    click.echo(f"{heading}{' · labels: ' + shown if shown else ''}\n")
    withdrawn_ids = {m.message_id for m in history.messages if m.withdrawn}
    in_force = [c for c in history.compactions if c.through not in withdrawn_ids][-1:]
    hidden = 0
    for number, message in enumerate(history.messages, 1):
        if message.withdrawn and not everything:
            hidden += 1
            continue
        status = {"open": "open (never ended)"}.get(message.status, message.status)
        stamp = f"{message.started_at:%Y-%m-%d %H:%M:%S}{source_claim(message.claimed_at)}"
        withdrawn = " · withdrawn by a rewind" if message.withdrawn else ""
        click.secho(
            f"[{number}] {message.role} · {status} · {stamp}{withdrawn} · {message.message_id}",
            bold=True,
        )
        if message.meta is not None and (described := describe_meta(message.meta, extra=verbose)):
            click.echo(f"    ({described})")
        if not message.blocks:
            click.echo("    (no blocks)")
        for recorded in message.blocks:
            segments = block_segments(
                recorded.block, recorded.tool_name, None, document=describe_document
            )
            for segment in segments:
                text = segment.text if isinstance(segment, Text) else describe_image(segment)
                click.echo("    " + text.replace("\n", "\n    "))
        if message.status == "interrupted":
            click.echo("    " + interruption_marker(message.interrupt_reason))
        click.echo()
        for compaction in history.compactions:
            if compaction.through == message.message_id:
                click.echo(describe_compaction(number, compaction, in_force, message.withdrawn))
    if hidden:
        click.echo(f"({hidden} message(s) withdrawn by a rewind not shown; --all shows them)")


@click.command()
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


def _first_user_text(messages: list[RecordedMessage]) -> str | None:
    """The start of the first user text, quoted, as ``list`` shows an untitled conversation."""
    first = next((message for message in messages if message.role == "user"), None)
    for recorded in [] if first is None else first.blocks:
        if isinstance(recorded.block, TextBlock) and recorded.block.text.strip():
            return f"“{preview_of(recorded.block.text)}”"
    return None


@click.command("list")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Only those with it.")
@click.option("--title", "title", metavar="TEXT", help="Only titles containing TEXT.")
@click.option("--started-after", metavar="WHEN", help="ISO 8601 date or time (UTC if no zone).")
@click.option("--started-before", metavar="WHEN", help="Started before WHEN.")
@click.option("--active-after", metavar="WHEN", help="Last active after WHEN.")
@click.option("--active-before", metavar="WHEN", help="Last active before WHEN.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--after", "cursor", metavar="CURSOR", help="The `next` cursor of a page.")
@json_option
@click.pass_context
def list_(
    ctx: click.Context,
    labels: tuple[str, ...],
    title: str | None,
    started_after: str | None,
    started_before: str | None,
    active_after: str | None,
    active_before: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List conversations, newest activity first: id, last active, title, labels.

    Last active is when the newest message happened (for an imported history, the time its
    source gave). A conversation without a title shows its first user text in quotes; one
    that branched from another (a subagent's sidechain, a fork) is marked ↳ and the start
    of its parent's id.

    Served from the store's listing index, so a page costs the same however many
    conversations and events the store holds. With --json: {"conversations": [...],
    "next": CURSOR or null}; pass CURSOR to --after, with the same filters and --limit, for
    the next page. Without --json, a page with more after it ends with a `more:` command on
    stderr that does that, and an empty result says "no conversations match" there.

    \b
    Example:
        convstore list --label team=search --active-after 2026-05-01 --json | jq -r '.next'
    """
    wanted = dict(parse_assignment(text) for text in labels)
    bounds = {
        "started_after": parse_when(started_after, "--started-after"),
        "started_before": parse_when(started_before, "--started-before"),
        "active_after": parse_when(active_after, "--active-after"),
        "active_before": parse_when(active_before, "--active-before"),
    }
    store = store_from(ctx, create=False)
    page = store.list_conversations(
        labels=wanted or None, title=title, limit=limit, after=cursor, **bounds
    )
    rows, next_cursor = page.conversations, page.next
    if as_json:
        payload = {
            "conversations": [
                {
                    "id": str(c.id),
                    "title": c.title,
                    "created_at": c.created_at.isoformat(),
                    "last_active": c.last_active.isoformat() if c.last_active else None,
                    "labels": c.labels,
                    "events": c.events,
                    "parent_id": str(c.parent_id) if c.parent_id else None,
                    "source": c.source,
                    "preview": c.preview,
                    "children": c.children,
                }
                for c in rows
            ],
            "next": next_cursor,
        }
        click.echo(json.dumps(payload, ensure_ascii=False, indent=2))
        return
    if not rows:
        click.echo(NO_MATCH, err=True)
    for c in rows:
        stamp = (c.last_active or c.created_at).strftime("%Y-%m-%d %H:%M:%S")
        shown = " ".join(f"[{key}={value}]" for key, value in sorted(c.labels.items()))
        branch = f"↳ {str(c.parent_id)[:8]} " if c.parent_id else ""
        click.echo(f"{c.id}  {stamp}  {branch}{c.shown_title}  {shown}".rstrip())
    if next_cursor:
        more = ["convstore"]
        parent = ctx.parent
        if parent is not None and parent.get_parameter_source("db") is ParameterSource.COMMANDLINE:
            more += ["--db", store.location]
        more.append("list")
        for text in labels:
            more += ["--label", text]
        given = {
            "--title": title,
            "--started-after": started_after,
            "--started-before": started_before,
            "--active-after": active_after,
            "--active-before": active_before,
        }
        for option, value in given.items():
            if value is not None:
                more += [option, value]
        more += ["--limit", str(limit), "--after", next_cursor]
        click.echo(f"more: {shlex.join(more)}", err=True)


@click.command()
@shape_option
@json_option
@click.pass_context
def demo(ctx: click.Context, shape: str, as_json: bool) -> None:
    """Record a realistic agent conversation and print its replay twice.

    The conversation has reasoning, parallel tool calls, an error result, an image,
    and a tool round killed mid-turn. It is replayed for a text-only model and for
    a vision model. Without --db or $CONVSTORE_DB it goes into a fresh store in a new
    temporary directory (never your default store); the first line says where.

    \b
    Example:
        convstore demo --shape anthropic
    """
    from convstore.app.demo import record_demo  # noqa: PLC0415 - only this command needs it

    if not ctx.obj["db"]:
        # Neither --db nor $CONVSTORE_DB: a fresh store of its own, never the default one.
        ctx.obj["db"] = str(Path(tempfile.mkdtemp(prefix="convstore-demo-")) / "demo.db")
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
