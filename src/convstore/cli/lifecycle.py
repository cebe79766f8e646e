"""Commands over a conversation's whole life: erase (and retention), rewind and its undo, fork."""

from __future__ import annotations

import re
from datetime import timedelta

import click

from convstore.cli.app import (
    cli,
    conversation_argument,
    resolve_conversation,
    resolve_message,
    store_from,
)
from convstore.cli.metadata import parse_assignment
from convstore.domain.events import utcnow
from convstore.errors import InvalidInput

_DURATION = re.compile(r"^(\d{1,6})([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` or ``45s`` as a time span, short enough that the
    moment that long ago is a date (not before the year 1)."""
    found = _DURATION.match(text.strip())
    if found is None:
        msg = f"--inactive-for takes a number and a unit (s, m, h, d or w), e.g. 30d; not {text!r}"
        raise InvalidInput(msg)
    span = timedelta(seconds=int(found[1]) * _UNIT_SECONDS[found[2]])
    try:
        utcnow() - span
    except OverflowError:
        msg = f"--inactive-for {text.strip()} reaches back before the year 1: give a shorter span"
        raise InvalidInput(msg) from None
    return span


@cli.command()
@click.argument("conversation", metavar="[CONV]", required=False)
@click.option("--reason", help="Why it is erased; kept in the tombstone (required).")
@click.option(
    "--inactive-for",
    "inactive_for",
    metavar="SPAN",
    help="Instead of CONV: erase every conversation with no event for SPAN (30d, 12h, 2w).",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="With --inactive-for: only conversations holding this label (repeatable).",
)
@click.option("--dry-run", is_flag=True, help="With --inactive-for: list them, erase nothing.")
@click.pass_context
def erase(
    ctx: click.Context,
    conversation: str | None,
    reason: str | None,
    inactive_for: str | None,
    labels: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Delete a conversation's events for good, leaving only a tombstone.

    Every event goes, and every row the audit read model derived from it goes at its next
    catch-up; the tombstone keeps the id, when, the reason and how many events. On SQLite the
    bytes are overwritten in the file and its write-ahead log. Copies made before (backups,
    dumps, exports) are not touched. Prints one line per erased conversation.

    \b
    Example:
        convstore erase $CONV --reason "user asked (ticket 4411)"
        convstore erase --inactive-for 30d --label tenant=acme --dry-run
    """
    if (conversation is None) == (inactive_for is None):
        msg = "give either CONV or --inactive-for SPAN"
        raise InvalidInput(msg)
    if (dry_run or labels) and inactive_for is None:
        msg = "--dry-run and --label go with --inactive-for"
        raise InvalidInput(msg)
    wanted = dict(parse_assignment(text) for text in labels)
    span = None if inactive_for is None else parse_duration(inactive_for)
    if reason is None and not dry_run:
        msg = "--reason is required: the tombstone keeps why the conversation was erased"
        raise InvalidInput(msg)
    store = store_from(ctx, create=False)
    if conversation is not None:
        assert reason is not None
        erased = store.erase(resolve_conversation(ctx, conversation), reason=reason)
        click.echo(f"erased {erased.id}: {erased.events} event(s)")
        return
    assert span is not None
    cutoff = utcnow() - span
    # The listing index answers "idle since, with these labels" a page at a time; the cursor
    # is absolute, so erasing the rows of a page does not shift the next one.
    after: str | None = None
    while True:
        page = store.list_conversations(
            labels=wanted or None, active_before=cutoff, limit=500, after=after
        )
        for info in page.conversations:
            assert info.last_active is not None
            stamp = info.last_active.strftime("%Y-%m-%d %H:%M:%S")
            if dry_run:
                click.echo(f"would erase {info.id} (last active {stamp})")
                continue
            assert reason is not None
            erased = store.erase(info.id, reason=reason)
            click.echo(f"erased {erased.id}: {erased.events} event(s) (last active {stamp})")
        if page.next is None:
            return
        after = page.next


@cli.command()
@conversation_argument
@click.option("--to", "to", metavar="MSG", help="Keep MSG and every message before it.")
@click.option("--all", "everything", is_flag=True, help="Withdraw every message.")
@click.option(
    "--undo",
    metavar="VERSION",
    type=int,
    help="Undo the rewind recorded at VERSION (the number a rewind prints).",
)
@click.pass_context
def rewind(
    ctx: click.Context, conversation: str, to: str | None, everything: bool, undo: int | None
) -> None:
    """Withdraw every message after MSG from replay (the log keeps them), or undo a rewind.

    Prints the rewind's version, which --undo takes. Withdrawn messages stay in `log` and
    in `show --all` (marked), and in the audit read model (messages.withdrawn = 1).

    \b
    Example:
        convstore rewind $CONV --to $MSG
        convstore rewind $CONV --undo 42
    """
    if sum((to is not None, everything, undo is not None)) != 1:
        msg = "give exactly one of --to MSG, --all or --undo VERSION"
        raise InvalidInput(msg)
    store = store_from(ctx, create=False)
    if undo is not None:
        store.undo_rewind(conversation, undo)
        click.echo(f"undid the rewind at version {undo}")
        return
    version = store.rewind(
        conversation, to=None if to is None else resolve_message(ctx, conversation, to)
    )
    click.echo(f"rewound at version {version} (undo: convstore rewind CONV --undo {version})")


@cli.command()
@conversation_argument
@click.option("--at", "at", metavar="MSG", required=True, help="The last message to copy.")
@click.option("--title", "-t", help="A title for the new conversation.")
@click.pass_context
def fork(ctx: click.Context, conversation: str, at: str, title: str | None) -> None:
    """Start a new conversation from CONV's history up to and including MSG; print its id.

    The fork copies what replay would see of CONV up to MSG (new message ids), records CONV
    as its parent and MSG as the fork point, and then appends independently.

    \b
    Example:
        FORK=$(convstore fork $CONV --at $MSG --title "try the other fix")
    """
    at = resolve_message(ctx, conversation, at)
    click.echo(store_from(ctx, create=False).fork(conversation, at=at, title=title))


@cli.command()
@conversation_argument
@click.option(
    "--role",
    "-r",
    required=True,
    type=click.Choice(["system", "user", "assistant"]),
    help="Who writes the message.",
)
@click.pass_context
def start(ctx: click.Context, conversation: str, role: str) -> None:
    """Open a message for streaming and print its id (add blocks with add-block, then end).

    \b
    Example:
        MSG=$(convstore start $CONV --role assistant)
        echo '{"type":"text","text":"Looking."}' | convstore add-block $CONV $MSG
        convstore end $CONV $MSG
    """
    click.echo(store_from(ctx, create=False).start_message(conversation, role))
