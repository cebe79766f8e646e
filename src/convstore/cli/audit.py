"""Commands over the audit read model: keep it caught up, rebuild it, and query it."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import click

from convstore.app.projector import audit_path, catch_up, open_audit, rebuild
from convstore.app.projector import follow as follow_log
from convstore.audit.db import AuditDatabase
from convstore.cli.options import listen_options, store_from
from convstore.cli.output import chosen_format, emit, emit_dicts, format_options
from convstore.domain.errors import InvalidInput, NoStore, ReadModelBusy
from convstore.infrastructure.common.readonly import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIME_LIMIT_SECONDS,
    read_only_query,
)
from convstore.ports.extras import missing_extra
from convstore.store import Store

PROJECTIONS = ("audit", "listing")


def _audit(ctx: click.Context) -> tuple[Store, Path]:
    store = store_from(ctx, create=False)
    return store, audit_path(store, ctx.obj["audit"])


def _caught_up(ctx: click.Context) -> AuditDatabase:
    """The audit read model, caught up with the log unless ``--stale`` was given."""
    store, path = _audit(ctx)
    if ctx.obj.get("stale") and not path.exists():
        msg = f"no audit read model at {path} yet (run `convstore project`)"
        raise NoStore(msg)
    audit = open_audit(store, path)
    ctx.call_on_close(audit.close)
    if not ctx.obj.get("stale"):
        catch_up(store, audit)
    return audit


@click.command()
@click.option("--follow", is_flag=True, help="Keep following the log until Ctrl-C.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between polls of the log with --follow.",
)
@click.pass_context
def project(ctx: click.Context, follow: bool, interval: float) -> None:
    """Catch the audit read model up with the log (and keep following with --follow).

    Each batch of events commits together with the read model's position in the log, so
    stopping at any moment (Ctrl-C, a crash) neither skips nor double-counts an event.
    Works the same against a PostgreSQL store: every host keeps its own local read model.

    \b
    Example:
        convstore project
        convstore --db postgresql://app@db/convstore project --follow
    """
    store, path = _audit(ctx)
    if not follow:
        audit = open_audit(store, path)
        try:
            applied = catch_up(store, audit)
            position = audit.position()
        finally:
            audit.close()
        click.echo(f"audit: applied {applied} events; at log position {position} ({path})")
        return
    click.echo(f"audit: following the log into {path} (Ctrl-C stops)", err=True)

    def report(count: int) -> None:
        click.echo(f"audit: applied {count} events", err=True)

    def busy(exc: ReadModelBusy) -> None:
        click.echo(f"audit: {exc}; retrying at the next poll", err=True)

    applied = follow_log(store, path, interval=interval, on_catch_up=report, on_busy=busy)
    click.echo(f"audit: stopped after applying {applied} events", err=True)


@click.command("rebuild")
@click.option(
    "--projection",
    type=click.Choice(PROJECTIONS),
    default="audit",
    show_default=True,
    help="Which read model to rebuild.",
)
@click.pass_context
def rebuild_(ctx: click.Context, projection: str) -> None:
    """Rebuild a read model from the start of the log into a fresh file, then swap it in.

    Readers never see a half-built view: the new file replaces the old in one atomic
    rename, and a running `project --follow` reopens it. Rebuild after upgrading
    convstore or when a read model is lost or suspect. The listing index lives inside
    the store and is refilled in one transaction (writers wait meanwhile).

    \b
    Example:
        convstore rebuild --projection audit
    """
    if projection == "listing":
        started = time.perf_counter()
        count = store_from(ctx, create=False).rebuild_listing()
        seconds = time.perf_counter() - started
        click.echo(f"rebuilt listing: {count} conversations in {seconds:.2f} s")
        return
    store, path = _audit(ctx)
    total = store.log_position()
    started = time.perf_counter()
    if sys.stderr.isatty():
        done = 0

        def rate(_: object) -> str:
            # Called while the bar first draws too, before `bar` below exists: count here.
            elapsed = time.perf_counter() - started
            return f"{done / elapsed:,.0f} events/s" if done and elapsed > 0 else ""

        with click.progressbar(
            length=total, label=f"rebuilding {projection}", file=sys.stderr, item_show_func=rate
        ) as bar:

            def step(count: int) -> None:
                nonlocal done
                done += count
                bar.update(count)

            report = rebuild(store, path, progress=step)
    else:
        report = rebuild(store, path)
    click.echo(
        f"rebuilt {projection}: {report.events} events in {report.seconds:.2f} s "
        f"({report.rate:,.0f} events/s) into {path}"
    )


@click.group()
@click.option(
    "--stale", is_flag=True, help="Query the read model as it is, without catching up first."
)
@click.pass_context
def audit(ctx: click.Context, stale: bool) -> None:
    """Ask what agents did, across conversations (the audit read model).

    Each query first catches the read model up with the log (skip that with --stale).
    Output is a table for people, --json or --csv for scripts.

    \b
    Example:
        convstore audit tools --status missing
        convstore audit sql "SELECT name, count(*) FROM tool_calls GROUP BY name"
    """
    ctx.obj["stale"] = stale


@audit.command()
@click.option("--status", type=click.Choice(["ok", "error", "missing"]), help="Only this outcome.")
@click.option("--name", help="Only calls of this tool.")
@click.option(
    "--hosted/--not-hosted",
    default=None,
    help="Only calls the provider ran itself (web search, code execution, …), or only the "
    "caller's own.",
)
@click.option("--server", help="Only calls to this MCP server (run by the provider).")
@click.option("--conversation", metavar="CONV", help="Only this conversation.")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True)
@format_options
@click.pass_context
def tools(
    ctx: click.Context,
    status: str | None,
    name: str | None,
    hosted: bool | None,
    server: str | None,
    conversation: str | None,
    limit: int,
    as_json: bool,
    as_csv: bool,
) -> None:
    """List tool calls with their outcome: ok, error, or missing (no result ever landed).

    Calls the provider ran itself (hosted) are listed too, with hosted 1, and a
    remote MCP server's calls with that server's name.

    \b
    Example:
        convstore audit tools --status error --name run_tests --json
        convstore audit tools --hosted --status missing
        convstore audit tools --server github
    """
    fmt = chosen_format(as_json, as_csv)
    rows = _caught_up(ctx).query(
        "SELECT conversation_id, call_id, name, outcome, hosted, server, called_at, "
        "seconds_to_result, result_size, input FROM tool_calls "
        "WHERE (:status IS NULL OR outcome = :status) AND (:name IS NULL OR name = :name) "
        "AND (:hosted IS NULL OR hosted = :hosted) AND (:server IS NULL OR server = :server) "
        "AND (:conversation IS NULL OR conversation_id = :conversation) "
        "ORDER BY coalesce(called_at, result_at), call_id LIMIT :limit",
        {
            "status": status,
            "name": name,
            "hosted": None if hosted is None else int(hosted),
            "server": server,
            "conversation": conversation,
            "limit": limit,
        },
    )
    columns = ["conversation_id", "call_id", "name", "outcome", "hosted", "server", "called_at"]
    emit_dicts(rows, fmt, [*columns, "seconds_to_result", "result_size", "input"])


@audit.command()
@click.argument("text")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--raw", is_flag=True, help="TEXT is an FTS5 query (AND, OR, NEAR, prefix*).")
@format_options
@click.pass_context
def search(
    ctx: click.Context, text: str, limit: int, raw: bool, as_json: bool, as_csv: bool
) -> None:
    """Full-text search over text, reasoning, tool calls and tool output.

    \b
    Example:
        convstore audit search "access_token" --limit 5
    """
    fmt = chosen_format(as_json, as_csv)
    audit = _caught_up(ctx)
    if not raw and not any(ch.isalnum() for ch in text):
        emit_dicts([], fmt, ["conversation_id", "role", "kind", "tool_name", "snippet"])
        return  # nothing a word index can match
    query = text if raw else audit.db.quote_fts(text)
    try:
        rows = audit.query(
            "SELECT b.conversation_id, m.role, b.kind, b.tool_name, "
            "snippet(blocks_fts, 0, '[', ']', '…', 12) AS snippet, b.recorded_at "
            "FROM blocks_fts JOIN blocks b ON b.rowid = blocks_fts.rowid "
            "JOIN messages m ON m.id = b.message_id "
            "WHERE blocks_fts MATCH :query ORDER BY rank LIMIT :limit",
            {"query": query, "limit": limit},
        )
    except Exception as exc:  # noqa: BLE001 - an FTS syntax error is the user's input
        msg = f"bad search query {text!r}: {exc}"
        raise InvalidInput(msg) from None
    emit_dicts(rows, fmt, ["conversation_id", "role", "kind", "tool_name", "snippet"])


@audit.command()
@format_options
@click.pass_context
def stats(ctx: click.Context, as_json: bool, as_csv: bool) -> None:
    """Counts: conversations, messages by role and status, blocks by kind, tools by outcome.

    \b
    Example:
        convstore audit stats
    """
    fmt = chosen_format(as_json, as_csv)
    audit = _caught_up(ctx)
    rows = audit.query(
        "SELECT 'conversations' AS metric, '' AS detail, count(*) AS value FROM conversations "
        "UNION ALL SELECT 'messages', role || ' ' || status, count(*) FROM messages "
        "GROUP BY role, status "
        "UNION ALL SELECT 'blocks', kind, count(*) FROM blocks GROUP BY kind "
        "UNION ALL SELECT 'tool calls', outcome, count(*) FROM tool_calls GROUP BY outcome "
        "UNION ALL SELECT 'hosted tool calls', outcome, count(*) FROM tool_calls "
        "WHERE hosted GROUP BY outcome "
        "UNION ALL SELECT 'tool errors', name, count(*) FROM tool_calls "
        "WHERE outcome = 'error' GROUP BY name "
        "UNION ALL SELECT 'images', 'count', count(*) FROM images "
        "UNION ALL SELECT 'images', 'bytes', coalesce(sum(byte_size), 0) FROM images "
        "UNION ALL SELECT 'documents', 'count', count(*) FROM documents "
        "UNION ALL SELECT 'documents', 'bytes', coalesce(sum(byte_size), 0) FROM documents "
        "UNION ALL SELECT 'read model', 'log position', position FROM _tracking"
    )
    emit_dicts(rows, fmt, ["metric", "detail", "value"])


@audit.command()
@click.argument("query")
@click.option(
    "-p",
    "--param",
    "params",
    nargs=2,
    multiple=True,
    metavar="NAME VALUE",
    help="A named parameter, used in QUERY as :NAME.",
)
@click.option(
    "--time-limit",
    type=click.FloatRange(min=0.1),
    default=DEFAULT_TIME_LIMIT_SECONDS,
    show_default=True,
    help="Seconds before the query is stopped.",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_ROWS,
    show_default=True,
    help="Stop with an error when the result has more rows.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BYTES,
    show_default=True,
    help="Stop with an error when the result holds more bytes.",
)
@format_options
@click.pass_context
def sql(
    ctx: click.Context,
    query: str,
    params: tuple[tuple[str, str], ...],
    time_limit: float,
    max_rows: int,
    max_bytes: int,
    as_json: bool,
    as_csv: bool,
) -> None:
    """Run one read-only SQL query over the audit read model.

    The connection is read-only: writes, ATTACH and extension loading are refused and
    change nothing. A query stops at --time-limit; no value may grow past 64 MiB; a
    result over --max-rows or --max-bytes stops with an error. Tables: conversations,
    messages, blocks (and blocks_fts), tool_calls, images, documents, compactions.

    \b
    Example:
        convstore audit sql "SELECT * FROM tool_calls WHERE name = :tool" -p tool grep
    """
    fmt = chosen_format(as_json, as_csv)
    audit = _caught_up(ctx)
    columns, rows = read_only_query(
        audit.path,
        query,
        dict(params),
        time_limit=time_limit,
        max_rows=max_rows,
        max_bytes=max_bytes,
    )
    emit(columns, rows, fmt)


CANNED_QUERIES = {
    "calls_without_result": {
        "title": "Tool calls that never got a result",
        "description": "Calls whose result never landed: the round was killed or cut short.",
        "sql": "SELECT conversation_id, call_id, name, input, called_at, message_id "
        "FROM tool_calls WHERE outcome = 'missing' ORDER BY called_at",
    },
    "errors_per_tool": {
        "title": "Errors per tool",
        "description": "How often each tool failed, out of its calls that got a result.",
        "sql": "SELECT name, sum(outcome = 'error') AS errors, "
        "sum(outcome IN ('ok', 'error')) AS answered, count(*) AS calls "
        "FROM tool_calls GROUP BY name ORDER BY errors DESC, calls DESC",
    },
}
"""The queries `audit serve` offers by name in Datasette."""


@audit.command()
@listen_options(8001)
@click.option(
    "--allow-sql",
    is_flag=True,
    help="Let visitors run their own read-only SQL (off: only tables and canned queries).",
)
@click.pass_context
def serve(
    ctx: click.Context, host: str, port: int, allow_hosts: tuple[str, ...], allow_sql: bool
) -> None:
    """Open a snapshot of the audit read model in Datasette, read-only, until Ctrl-C.

    Needs the web extra (pip install -e '.[web]' in the checkout). The read model is caught up, then
    copied (one consistent read) to a private temporary file that Datasette opens
    immutable; restart to see newer events. Canned queries list calls that never got a
    result and errors per tool; arbitrary SQL only with --allow-sql.

    Who can read it: anyone who can connect to the address. On 127.0.0.1 (the default)
    that is every user and process on this machine, although the file itself is 0600;
    with --host 0.0.0.0, the network. There is no login. Requests whose Host header is
    not localhost, 127.0.0.1, [::1], --host or an --allow-host name are refused (403),
    so a web page cannot reach the server through DNS rebinding.

    \b
    Example:
        convstore audit serve --port 8001
        convstore audit serve --allow-sql
    """
    if importlib.util.find_spec("datasette") is None:
        msg = missing_extra("audit serve (Datasette)", "web", "'datasette>=0.64'")
        raise InvalidInput(msg)
    from convstore.cli.serve import allowed_hosts, serve_datasette, snapshot  # noqa: PLC0415

    audit_db = _caught_up(ctx)
    path = audit_db.path
    metadata = {
        "title": "convstore audit",
        "databases": {path.stem: {"queries": CANNED_QUERIES}},
    }
    allowed = allowed_hosts(host, allow_hosts)
    with snapshot(path, audit_db.store_id) as copy:
        shown = f"[{host}]" if ":" in host else host
        sql_note = "SQL allowed" if allow_sql else "canned queries only"
        click.echo(
            f"audit: serving a snapshot of {path} read-only on http://{shown}:{port}/ "
            f"({sql_note}; readable by anyone who can connect)",
            err=True,
        )
        serve_datasette(
            copy,
            host=host,
            port=port,
            allowed=allowed,
            metadata=metadata,
            allow_sql=allow_sql,
        )
