"""Commands that name and label conversations."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from convstore.cli.options import conversation_argument, store_from
from convstore.domain.errors import InvalidInput


def parse_assignment(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` as a pair (the value may hold ``=`` and be empty)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        msg = f"{text[:80]!r} is not KEY=VALUE"
        raise InvalidInput(msg)
    return key, value


def parse_when(text: str | None, what: str) -> datetime | None:
    """An ISO 8601 date or time (UTC when it names no zone), for a listing bound."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        msg = f"{what} {text[:80]!r} is not an ISO 8601 date or time (e.g. 2026-05-01T12:00Z)"
        raise InvalidInput(msg) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_meta_option(text: str | None) -> dict[str, object] | None:
    """The ``--meta`` option: a JSON object (see ``MessageMeta``)."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        msg = f"--meta is not JSON: {exc}"
        raise InvalidInput(msg) from None
    if not isinstance(value, dict):
        msg = '--meta must be a JSON object such as \'{"model": "gpt-4.1"}\''
        raise InvalidInput(msg)
    return value


meta_option = click.option(
    "--meta",
    metavar="JSON",
    help=(
        "The message's metadata as a JSON object: model, provider_message_id, stop_reason, "
        "usage {input_tokens, output_tokens, …}, latency_ms, extra {…}. Never replayed."
    ),
)


@click.command()
@conversation_argument
@click.argument("title")
@click.pass_context
def rename(ctx: click.Context, conversation: str, title: str) -> None:
    """Give a conversation a new title (an empty TITLE clears it).

    \b
    Example:
        convstore rename $CONV "parser refactor, part 2"
    """
    store_from(ctx, create=False).rename(conversation, title or None)


@click.command()
@conversation_argument
@click.argument("assignments", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--remove", "removed", multiple=True, metavar="KEY", help="Remove this label.")
@click.pass_context
def label(
    ctx: click.Context, conversation: str, assignments: tuple[str, ...], removed: tuple[str, ...]
) -> None:
    """Set labels (KEY=VALUE) on a conversation, or remove them (--remove KEY).

    Keys are letters, digits and . _ - : / ; list by them with `list --label KEY=VALUE`.

    \b
    Example:
        convstore label $CONV team=search env=prod
        convstore label $CONV --remove env
    """
    if not assignments and not removed:
        msg = "give KEY=VALUE labels to set or --remove KEY"
        raise InvalidInput(msg)
    labels = dict(parse_assignment(text) for text in assignments)
    if labels.keys() & set(removed):
        msg = "a label cannot be set and removed in one call"
        raise InvalidInput(msg)
    store = store_from(ctx, create=False)
    if labels:
        store.set_labels(conversation, labels)
    if removed:
        store.remove_labels(conversation, list(removed))
