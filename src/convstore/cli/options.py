"""What the commands share: exit statuses, one-line failures, the store, ids and options.

Exit status: 0 on success; 2 for bad input or usage, with one line on stderr and nothing
written; 1 when the store itself fails. Set ``CONVSTORE_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar
from uuid import UUID

import click

from convstore.app.bootstrap import open_store
from convstore.domain.errors import (
    ConversationNotFound,
    InvalidInput,
    MessageNotFound,
)
from convstore.domain.parsing import parse_id
from convstore.engine.plan import SHAPES, ReplayOptions, Shape
from convstore.store import Store

_F = TypeVar("_F", bound=Callable[..., Any])

EXIT_STORE_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_OVER_BUDGET = 3
"""``replay --fit-tokens N`` printed its best request, but even that is over N tokens."""
NO_MATCH = "no conversations match"
"""What a listing that found nothing says on stderr (stdout stays empty; exit 0)."""


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so it stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(code)


def usage_failure(exc: click.UsageError) -> NoReturn:
    message = " ".join(exc.format_message().split())
    hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
    fail(message + hint, EXIT_BAD_INPUT)


# -- shared options ---------------------------------------------------------------------------


def store_from(ctx: click.Context, *, create: bool) -> Store:
    """The command's store, opened once per command (an id prefix resolved while the
    arguments are parsed uses the same one)."""
    key = "store (create)" if create else "store"
    cached: Store | None = ctx.obj.get(key)
    if cached is not None:
        return cached
    store = open_store(ctx.obj["db"], create=create)
    ctx.obj[key] = store

    def close() -> None:
        ctx.obj.pop(key, None)
        store.close()

    ctx.call_on_close(close)
    return store


MIN_PREFIX = 4
"""The shortest id prefix resolved (as git's short hashes); shorter text is taken as given."""

_PREFIX_CHARS = frozenset("0123456789abcdef-")


def _prefix(text: str) -> str | None:
    """``text`` as an id prefix to search for (lowercase hex, dashes kept), or ``None`` when it
    is a whole id or no prefix (then it is passed on as given and checked as usual)."""
    lowered = text.strip().lower()
    if len(lowered) < MIN_PREFIX or not set(lowered) <= _PREFIX_CHARS:
        return None
    try:
        UUID(lowered)
    except ValueError:
        return lowered
    return None


def _pick(prefix: str, kind: str, where: str, ids: list[UUID]) -> str:
    found = [i for i in ids if str(i).startswith(prefix) or i.hex.startswith(prefix)]
    if not found:
        msg = f"no {kind} id{where} starts with {prefix!r}"
        raise (ConversationNotFound if kind == "conversation" else MessageNotFound)(msg)
    if len(found) > 1:
        shown = ", ".join(str(i) for i in found[:5]) + (" …" if len(found) > 5 else "")
        msg = f"{prefix!r} is ambiguous: {len(found)} {kind} ids{where} start with it ({shown})"
        raise InvalidInput(msg)
    return str(found[0])


def resolve_conversation(ctx: click.Context, text: str) -> str:
    """A conversation id from a unique prefix of it (a whole id passes as given; other text
    is refused now, before the command reads its input)."""
    prefix = _prefix(text)
    if prefix is None:
        parse_id(text, "conversation")
        return text
    ids = [c.id for c in store_from(ctx, create=False).conversations()]
    return _pick(prefix, "conversation", "", ids)


def resolve_message(ctx: click.Context, conversation: str, text: str) -> str:
    """A message id from a unique prefix of it among ``conversation``'s messages (a whole id
    passes as given; other text is refused now)."""
    prefix = _prefix(text)
    if prefix is None:
        parse_id(text, "message")
        return text
    messages = store_from(ctx, create=False).messages(conversation)
    return _pick(prefix, "message", " in that conversation", [m.message_id for m in messages])


def _conversation_callback(ctx: click.Context, _: click.Parameter, value: str | None) -> str | None:
    return None if value is None else resolve_conversation(ctx, value)


def _message_callback(ctx: click.Context, _: click.Parameter, value: str | None) -> str | None:
    conversation = ctx.params.get("conversation")
    if value is None or conversation is None:
        return value
    return resolve_message(ctx, conversation, value)


def shape_option(func: _F) -> _F:
    return click.option(
        "--shape",
        type=click.Choice(SHAPES),
        default=ReplayOptions().shape,
        show_default=True,
        help="Provider wire shape: OpenAI Chat Completions or Anthropic Messages.",
    )(func)


def vision_option(func: _F) -> _F:
    return click.option(
        "--vision/--no-vision",
        default=ReplayOptions().vision,  # one default for the CLI, the web page and the API
        show_default=True,
        help="Whether the model can see: images go natively, or a marker says one was not shown.",
    )(func)


def window_options(func: _F) -> _F:
    """``--full`` and ``--keep-tool-results``: what part of the history replay sends."""
    func = click.option(
        "--keep-tool-results",
        type=click.IntRange(min=0),
        metavar="N",
        help="Microcompact: clear the output of all but the newest N tool results.",
    )(func)
    return click.option("--full", is_flag=True, help="Ignore compaction: send every message.")(func)


def replay_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--shape``, ``--vision``, ``--full`` and ``--keep-tool-results``, handed to the command
    as one :class:`~convstore.ReplayOptions` named ``options``."""

    @functools.wraps(func)
    def command(
        *args: Any,
        shape: Shape,
        vision: bool,
        full: bool,
        keep_tool_results: int | None,
        **kwargs: Any,
    ) -> Any:
        options = ReplayOptions(
            shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
        )
        return func(*args, options=options, **kwargs)

    return shape_option(vision_option(window_options(command)))


def listen_options(default_port: int) -> Callable[[_F], _F]:
    """``--host``, ``--port`` and ``--allow-host``: where a local server listens, and which
    other names it answers to (see :class:`convstore.cli.serve.HostGuard`)."""

    def decorate(func: _F) -> _F:
        func = click.option(
            "--allow-host",
            "allow_hosts",
            multiple=True,
            metavar="NAME",
            help="Also answer requests addressed to NAME (a host name this machine is reached by).",
        )(func)
        func = click.option(
            "--port",
            "-p",
            type=click.IntRange(0, 65535),
            default=default_port,
            show_default=True,
            help="Port.",
        )(func)
        return click.option(
            "--host", default="127.0.0.1", show_default=True, help="Address to listen on."
        )(func)

    return decorate


def json_option(func: _F) -> _F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(
        func
    )


input_argument = click.argument("source", metavar="[FILE|-]", required=False)
conversation_argument = click.argument(
    "conversation", metavar="CONV", callback=_conversation_callback
)
"""CONV: a conversation id, or a unique prefix of one (at least 4 characters)."""
message_argument = click.argument("message", metavar="MSG", callback=_message_callback)
"""MSG (after CONV): a message id, or a unique prefix of one within that conversation."""
