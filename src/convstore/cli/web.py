"""`convstore serve`: the read-only web pages over the store."""

from __future__ import annotations

import importlib.util

import click

from convstore.cli.app import cli, listen_options, store_from
from convstore.errors import InvalidInput
from convstore.extras import missing_extra


@cli.command()
@listen_options(8002)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, allow_hosts: tuple[str, ...]) -> None:
    """Browse the store's conversations in a web browser, read-only, until Ctrl-C.

    Needs the web extra (pip install -e '.[web]' in the checkout). Lists conversations; a
    conversation's page shows its transcript (tool rounds and reasoning folded, images
    inline, withdrawn, open and interrupted messages marked, compactions with their
    summary) and, beside it, exactly what replay sends for the chosen shape, vision,
    full and keep-tool-results, with its context pressure. New messages appear within a
    second. No route writes.

    The list is paged and filtered by title, labels and last activity (the listing
    index); its search box searches the text of every block through the audit read
    model (--audit), which serve only reads: keep it current with `convstore project
    --follow`. A page says when that read model is missing or behind.

    Who can read what: anyone who can connect to the address reads every conversation in
    the store, in full. On 127.0.0.1 (the default) that is every user and process on this
    machine; with --host 0.0.0.0, the network. There is no login. Requests whose Host
    header is not localhost, 127.0.0.1, [::1], --host or an --allow-host name are refused
    (403), so a web page cannot reach the server through DNS rebinding.

    \b
    Example:
        convstore serve --port 8002
        convstore --db postgresql://app@db/agents serve --allow-host devbox.internal
    """
    if importlib.util.find_spec("starlette") is None or importlib.util.find_spec("uvicorn") is None:
        msg = missing_extra("convstore serve", "web", "'starlette>=0.40' 'uvicorn>=0.30'")
        raise InvalidInput(msg)
    import uvicorn  # noqa: PLC0415 - the web extra, only for this command

    from convstore.cli.serve import HostGuard, allowed_hosts  # noqa: PLC0415
    from convstore.projector import audit_path  # noqa: PLC0415
    from convstore.web.app import create_app  # noqa: PLC0415

    store = store_from(ctx, create=False)
    audit = audit_path(store, ctx.obj["audit"])
    guard = allowed_hosts(host, allow_hosts)
    app = HostGuard(create_app(store, audit=audit), guard, "convstore serve")
    shown = f"[{host}]" if ":" in host else host
    click.echo(
        f"serving {store.location} read-only on http://{shown}:{port}/ "
        "(every conversation is readable by anyone who can connect)",
        err=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning", workers=1)
