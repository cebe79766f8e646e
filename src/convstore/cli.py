"""The ``convstore`` command line.

Exit status: 0 on success; 2 for bad input or usage, with one line on stderr and nothing
written; 1 when the store itself fails. Set ``CONVSTORE_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from convstore.domain.images import dimensions
from convstore.errors import ConvstoreError, InvalidInput, NoStore
from convstore.infrastructure.bootstrap import ENV_VAR, open_store, resolve_location
from convstore.infrastructure.sqlite import default_path
from convstore.projections.prose import Image, Text, block_segments
from convstore.projections.replay import SHAPES, interruption_marker
from convstore.store import Store

_F = TypeVar("_F", bound=Callable[..., Any])

EXIT_STORE_FAILURE = 1
EXIT_BAD_INPUT = 2


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _usage_failure(exc: click.UsageError) -> NoReturn:
    message = " ".join(exc.format_message().split())
    hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
    _fail(message + hint, EXIT_BAD_INPUT)


class _Group(click.Group):
    """Turns every error into one line on stderr and the right exit status.

    Click's own usage errors (an unknown option, a bad choice) are folded to one line too.
    """

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
            _usage_failure(exc)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            _usage_failure(exc)
        except InvalidInput as exc:
            _fail(str(exc), EXIT_BAD_INPUT)
        except ConvstoreError as exc:
            _fail(str(exc), EXIT_STORE_FAILURE)
        except (click.exceptions.Exit, click.ClickException, click.Abort, BrokenPipeError):
            raise
        except Exception as exc:
            if os.environ.get("CONVSTORE_DEBUG"):
                raise
            _fail(
                f"unexpected {type(exc).__name__}: {exc} (set CONVSTORE_DEBUG=1 for the traceback)",
                EXIT_STORE_FAILURE,
            )


# -- input ----------------------------------------------------------------------------------


class _StrictJSONError(ValueError):
    """JSON the standard parser accepts but convstore does not."""


def _reject_constant(name: str) -> NoReturn:
    msg = f"{name} is not a JSON number"
    raise _StrictJSONError(msg)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            msg = f"key {key!r} appears twice in one object"
            raise _StrictJSONError(msg)
        result[key] = value
    return result


def read_json(source: str | None) -> Any:
    """JSON from a file path, or from stdin for ``-`` or nothing; strict about what it takes."""
    if source in (None, "-"):
        if sys.stdin.isatty():
            msg = "no input: give a FILE argument or pipe JSON on stdin"
            raise InvalidInput(msg)
        raw = sys.stdin.buffer.read()
        where = "stdin"
    else:
        try:
            raw = Path(source).read_bytes()
        except OSError as exc:
            msg = f"cannot read {source}: {exc.strerror or exc}"
            raise InvalidInput(msg) from None
        where = source
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{where} is not valid UTF-8 (byte {exc.start})"
        raise InvalidInput(msg) from None
    try:
        return json.loads(
            text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicate_keys
        )
    except json.JSONDecodeError as exc:
        msg = f"malformed JSON in {where}: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise InvalidInput(msg) from None
    except _StrictJSONError as exc:
        msg = f"malformed JSON in {where}: {exc}"
        raise InvalidInput(msg) from None
    except RecursionError:
        msg = f"malformed JSON in {where}: nested too deeply"
        raise InvalidInput(msg) from None


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "a number, true, false or null"


def describe_image(image: Image) -> str:
    """An image as one line of a transcript: format, size and pixel dimensions."""
    raw = base64.b64decode(image.data)
    size = dimensions(raw)
    shown = f", {size[0]}x{size[1]} px" if size else ""
    return f"[image: {image.media_type}, {len(raw):,} bytes{shown}]"


# -- shared options ---------------------------------------------------------------------------


def _store(ctx: click.Context, *, create: bool) -> Store:
    store = open_store(ctx.obj["db"], create=create)
    ctx.call_on_close(store.close)
    return store


def shape_option(func: _F) -> _F:
    return click.option(
        "--shape",
        type=click.Choice(SHAPES),
        default="openai",
        show_default=True,
        help="Provider wire shape: OpenAI Chat Completions or Anthropic Messages.",
    )(func)


def vision_option(func: _F) -> _F:
    return click.option(
        "--vision/--no-vision",
        default=False,
        show_default=True,
        help="Whether the model can see: images go natively, or a marker says one was not shown.",
    )(func)


def json_option(func: _F) -> _F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(
        func
    )


input_argument = click.argument("source", metavar="[FILE|-]", required=False)
conversation_argument = click.argument("conversation", metavar="CONV")
message_argument = click.argument("message", metavar="MSG")


# -- commands ---------------------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    metavar="PATH",
    envvar=ENV_VAR,
    show_envvar=True,
    help=f"The store (a SQLite file). Default: {default_path()}",
)
@click.version_option(package_name="convstore")
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
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
    ctx.obj = {"db": db}


@cli.command()
@click.option("--title", "-t", help="A title to list the conversation by.")
@click.pass_context
def new(ctx: click.Context, title: str | None) -> None:
    """Start a conversation and print its id.

    \b
    Example:
        convstore new --title "refactor the parser"
    """
    click.echo(_store(ctx, create=True).new_conversation(title=title))


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
        msg = f"expected a JSON array of blocks, got {_json_kind(blocks)}"
        raise InvalidInput(msg)
    store = _store(ctx, create=False)
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
        MSG=$(echo '[]' | convstore append $CONV --role assistant --open)
        echo '{"type":"tool_use","id":"c1","name":"ls","input":{"path":"."}}' \\
          | convstore add-block $CONV $MSG
    """
    block = read_json(source)
    if not isinstance(block, dict):
        msg = f"expected one block as a JSON object, got {_json_kind(block)}"
        raise InvalidInput(msg)
    _store(ctx, create=False).append_block(conversation, message, block)


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
    _store(ctx, create=False).end_message(conversation, message)


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
    _store(ctx, create=False).interrupt_message(conversation, message, reason)


@cli.command()
@conversation_argument
@shape_option
@vision_option
@click.option("--compact", is_flag=True, help="One line of JSON instead of indented.")
@click.pass_context
def replay(ctx: click.Context, conversation: str, shape: str, vision: bool, compact: bool) -> None:
    """Print the conversation as provider request messages (JSON).

    One wire message per stored message, every block as prose; tool calls and
    results never become tool roles or call ids.

    \b
    Example:
        convstore replay $CONV --shape anthropic --vision | jq '.messages | length'
    """
    result = _store(ctx, create=False).replay(conversation, shape=shape, vision=vision)
    click.echo(json.dumps(result, ensure_ascii=False, indent=None if compact else 2))


@cli.command()
@conversation_argument
@click.pass_context
def show(ctx: click.Context, conversation: str) -> None:
    """Print a readable transcript: each message with its role, status and blocks.

    \b
    Example:
        convstore show $CONV | less
    """
    for number, message in enumerate(_store(ctx, create=False).messages(conversation), 1):
        status = {"open": "open (never ended)"}.get(message.status, message.status)
        stamp = message.started_at.strftime("%Y-%m-%d %H:%M:%S")
        click.secho(f"[{number}] {message.role} · {status} · {stamp}", bold=True)
        if not message.blocks:
            click.echo("    (no blocks)")
        for recorded in message.blocks:
            for segment in block_segments(recorded.block, recorded.tool_name, None):
                text = segment.text if isinstance(segment, Text) else describe_image(segment)
                click.echo("    " + text.replace("\n", "\n    "))
        if message.status == "interrupted":
            click.echo("    " + interruption_marker(message.interrupt_reason))
        click.echo()


@cli.command()
@conversation_argument
@click.pass_context
def log(ctx: click.Context, conversation: str) -> None:
    """Print the conversation's raw events, one JSON object per line, in order.

    \b
    Example:
        convstore log $CONV | jq -c 'select(.type == "block_appended") | .block.type'
    """
    for state in _store(ctx, create=False).raw_events(conversation):
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
        conversations = _store(ctx, create=False).conversations()
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

    store = _store(ctx, create=True)
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


def main() -> None:
    """Console-script entry point."""
    try:
        cli(prog_name="convstore")
    except BrokenPipeError:
        # The reader went away (``convstore log … | head``): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


__all__ = ["cli", "main", "read_json", "resolve_location"]
