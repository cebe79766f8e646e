"""`convstore verify`: check the log and the read models' positions; change nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from convstore.app.projector import audit_path, erased_still_held
from convstore.app.verifying import store_verifier
from convstore.cli.options import store_from
from convstore.cli.output import chosen_format, counted, emit, format_options
from convstore.domain.errors import ConvstoreError, InvalidInput
from convstore.infrastructure.common.readonly import read_only_query
from convstore.store.verify import Problem


@click.command()
@format_options
@click.pass_context
def verify(ctx: click.Context, as_json: bool, as_csv: bool) -> None:
    """Check the log and report problems; exit 1 if there are any. Writes nothing.

    Checks that every stored row can be read and decodes, versions run 1, 2, 3 … per
    conversation, each conversation obeys every rule the writer enforces (the first
    break is reported with its position), its events match the hash chain in its head
    (a changed, removed or added event, or a lost last event, shows there), the
    storage engine finds no damaged page (SQLite: its quick check of every table and index,
    the listing included, which no read of the log touches), no read model is tracked
    past the end of the log, and the audit read model holds nothing of an erased
    conversation. Conversations written before hash chains
    are noted on stderr, not reported.

    \b
    Example:
        convstore verify && echo "log is sound"
    """
    fmt = chosen_format(as_json, as_csv)
    store = store_from(ctx, create=False)
    verifier = store_verifier(store)
    verifier.check_all(store.scan())
    for text in store.storage_problems():
        verifier.problems.append(Problem(None, "", None, f"storage: {text}"))
    # An erasure of the newest events leaves the log ending before positions a read model
    # may already have passed: those positions were handed out, so they count as the end.
    end = max([store.log_position(), *(e.high for e in store.erasures())])
    try:
        path: Path | None = audit_path(store, ctx.obj["audit"])
    except InvalidInput as exc:  # the store itself, or a file that is no read model of it
        verifier.problems.append(Problem(None, "", None, f"audit read model: {exc}"))
        path = None
    if path is not None and path.exists():
        try:
            _, rows = read_only_query(
                path, "SELECT position FROM _tracking WHERE projection = 'audit'"
            )
            held = erased_still_held(store, path)
        except ConvstoreError as exc:
            verifier.problems.append(Problem(None, "", None, f"audit read model: {exc}"))
        else:
            for (position,) in rows:
                if position > end:
                    text = f"audit read model at position {position}, past the log's end {end}"
                    verifier.problems.append(Problem(position, "", None, text))
            for conversation in held:
                text = "audit read model still holds its erased text: run `convstore project`"
                verifier.problems.append(Problem(None, str(conversation), None, text))
    problems = verifier.problems
    for note in verifier.notes:
        click.echo(f"note: {note}", err=True)
    if problems or fmt != "table":
        columns = ["position", "conversation", "version", "problem"]
        table = [[p.position, p.conversation, p.version, p.problem] for p in problems]
        emit(columns, table, fmt, count=False)
    if problems:
        click.echo(f"error: {len(problems)} problem(s) in {store.location}", err=True)
        sys.exit(1)
    if fmt == "table":
        click.echo(
            f"ok: {counted(verifier.events, 'event')} in "
            f"{counted(len(verifier.conversations), 'conversation')}, "
            f"log position {end}"
        )
