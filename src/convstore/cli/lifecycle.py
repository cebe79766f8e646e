"""Commands over a conversation's whole life: erase (and retention) and vacuum, rewind and its
undo, fork."""

from __future__ import annotations

import re
import shlex
import time
from datetime import datetime, timedelta
from uuid import UUID

import click

from convstore.app.projector import audit_path, forget_erased
from convstore.cli.metadata import parse_assignment
from convstore.cli.options import (
    NO_MATCH,
    conversation_argument,
    resolve_conversation,
    resolve_message,
    store_from,
)
from convstore.domain.errors import (
    ConversationActive,
    ConversationErased,
    ConvstoreError,
    InvalidInput,
    StoreError,
)
from convstore.domain.events import utcnow
from convstore.domain.parsing import parse_id
from convstore.store import Store

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


@click.command()
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

    Every event goes, and so does every row this host's audit read model (--audit, or its
    default file, if it exists) derived from it, its full-text index included; a read model
    elsewhere forgets at its next `project`. The tombstone keeps the id, when, the reason and
    how many events. On SQLite the bytes are overwritten in the file and its write-ahead log
    (the audit file's too); on PostgreSQL they stay in the tables' pages until
    `convstore vacuum`. Copies made before (backups, dumps, exports) are
    not touched. Prints one line per erased conversation; one erased
    before is "already erased" (exit 0, once its old bytes are out of the files), and with
    --inactive-for one that had an event since the run began is "skipped"; on stderr,
    "no conversations match" when --inactive-for finds none. If the audit read model cannot
    be cleaned (its file stays locked), the erasure stands and the command fails (exit 1)
    naming the `project` command that finishes the job.

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
        _erase_one(ctx, store, conversation, reason)
        return
    assert span is not None
    cutoff = utcnow() - span
    # The listing index answers "idle since, with these labels" a page at a time; the cursor
    # is absolute, so erasing the rows of a page does not shift the next one. Each erasure
    # checks again, in its own transaction, that the conversation is still idle.
    after: str | None = None
    matched = 0
    while True:
        page = store.list_conversations(
            labels=wanted or None, active_before=cutoff, limit=500, after=after
        )
        matched += len(page.conversations)
        for info in page.conversations:
            assert info.last_active is not None
            stamp = _stamp(info.last_active)
            if dry_run:
                click.echo(f"would erase {info.id} (last active {stamp})")
                continue
            assert reason is not None
            try:
                erased = store.erase(info.id, reason=reason, idle_since=cutoff)
            except ConversationActive as exc:
                now = "unknown" if exc.last_active is None else _stamp(exc.last_active)
                click.echo(f"skipped {info.id}: active after the cutoff (last active {now})")
                continue
            except ConversationErased:
                click.echo(_already_erased(store, info.id))
                continue
            click.echo(f"erased {erased.id}: {erased.events} event(s) (last active {stamp})")
        if page.next is None:
            break
        after = page.next
    if not matched:
        click.echo(NO_MATCH, err=True)
    elif not dry_run:
        _forget_in_audit(ctx, store)


def _erase_one(ctx: click.Context, store: Store, conversation: str, reason: str) -> None:
    conversation = resolve_conversation(ctx, conversation)
    try:
        erased = store.erase(conversation, reason=reason)
    except ConversationErased:
        click.echo(_already_erased(store, parse_id(conversation, "conversation")))
    else:
        click.echo(f"erased {erased.id}: {erased.events} event(s)")
    _forget_in_audit(ctx, store)


def _forget_in_audit(ctx: click.Context, store: Store) -> None:
    """Delete the erased conversations' rows from this host's audit read model (the one
    ``--audit`` / ``$CONVSTORE_AUDIT_DB`` / the default names), if it exists. If that cannot be
    done, fail (exit 1) naming the file and the command that finishes the job: the erasure
    itself is committed."""
    try:
        path = audit_path(store, ctx.obj["audit"])
    except InvalidInput:
        return  # the path holds no read model of this store: none of its text is there
    if not path.exists():
        return
    try:
        forget_erased(store, path)
    except ConvstoreError as exc:
        command = shlex.join(["convstore", "--db", store.location, "--audit", str(path), "project"])
        msg = (
            f"erased, but the audit read model {path} still holds the erased text ({exc}); "
            f"run `{command}` to remove it"
        )
        raise StoreError(msg) from None


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _already_erased(store: Store, conversation: UUID) -> str:
    """The line for a conversation erased before (by another run, or one that stopped
    before emptying the write-ahead log, which this run has now done)."""
    found = next((e for e in store.erasures() if e.id == conversation), None)
    if found is None:  # pragma: no cover - a tombstone is never deleted
        return f"already erased {conversation}"
    return f"already erased {conversation}: {found.events} event(s) at {_stamp(found.erased_at)}"


@click.command()
@click.pass_context
def vacuum(ctx: click.Context) -> None:
    """Rewrite the store so erased text leaves its files, not just its rows.

    Run it after `erase` on PostgreSQL, where deleted rows stay in the tables' pages (a plain
    VACUUM only marks the space free): each of convstore's tables in the store's schema is
    rewritten with VACUUM (FULL, ANALYZE), one at a time, into new files (TOAST and indexes
    too), holding that table's ACCESS EXCLUSIVE lock while it runs, so readers and writers
    of the store wait for it (under a second in all for a 1,000-message store). The old files are
    unlinked, not overwritten; the server's write-ahead log, archives, replicas and backups
    keep their copies. On SQLite, where erase already overwrites what it deletes, this
    rebuilds the file without free pages and empties the write-ahead log (writers wait).
    Progress goes to stderr.

    \b
    Example:
        convstore erase $CONV --reason "user asked (ticket 4411)" && convstore vacuum
    """
    store = store_from(ctx, create=False)
    started = time.perf_counter()
    store.vacuum(lambda name: click.echo(f"vacuum: rewriting {name}", err=True))
    click.echo(f"vacuum: done in {time.perf_counter() - started:.2f} s", err=True)


@click.command()
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

    Prints the rewind's version alone, which --undo takes (the undo command goes to
    stderr); --undo prints nothing. Withdrawn messages stay in `log` and in `show --all`
    (marked), and in the audit read model (messages.withdrawn = 1).

    \b
    Example:
        V=$(convstore rewind $CONV --to $MSG)
        convstore rewind $CONV --undo $V
    """
    if sum((to is not None, everything, undo is not None)) != 1:
        msg = "give exactly one of --to MSG, --all or --undo VERSION"
        raise InvalidInput(msg)
    store = store_from(ctx, create=False)
    if undo is not None:
        store.undo_rewind(conversation, undo)
        return
    version = store.rewind(
        conversation, to=None if to is None else resolve_message(ctx, conversation, to)
    )
    click.echo(version)
    click.echo(f"undo: convstore rewind {conversation} --undo {version}", err=True)


@click.command()
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


@click.command()
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
