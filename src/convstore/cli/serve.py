"""`audit serve`'s server: a private snapshot of the audit file in Datasette, guarded by Host.

Datasette runs in this process (its ASGI app under uvicorn), wrapped in :class:`HostGuard`,
which answers 403 to any request whose ``Host`` header is not one of the names the server
was bound to: a page on another site that rebinds its DNS name to 127.0.0.1 cannot read
through the browser of whoever runs the server.

The file Datasette opens is a snapshot, copied with SQLite's backup API (one consistent read)
into a private temporary directory. A projector keeps rewriting the real file; Datasette
opens its copy immutable, which is only sound for a file nobody changes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from convstore.audit.db import STORE_ID
from convstore.domain.errors import InvalidInput
from convstore.infrastructure.sqlite.recorder import create_private_file

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port: ``[::1]:8001`` → ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostGuard:
    """ASGI middleware: only requests addressed to an allowed host name get through."""

    def __init__(
        self, app: App, allowed: frozenset[str], server: str = "convstore audit serve"
    ) -> None:
        self.app = app
        self.allowed = frozenset(name.lower().strip("[]") for name in allowed)
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            host = headers.get(b"host", b"").decode("latin-1")
            if host_name(host) not in self.allowed:
                await _refuse(scope, send, self.server)
                return
        await self.app(scope, receive, send)


async def _refuse(scope: Scope, send: Send, server: str) -> None:
    body = f"Host not allowed: {server} answers only to the names it listens on.\n".encode()
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def allowed_hosts(host: str, extra: tuple[str, ...]) -> frozenset[str]:
    """The loopback names, the address bound to, and any names the operator added."""
    return LOOPBACK_NAMES | {host.lower().strip("[]")} | {name.lower() for name in extra}


@contextmanager
def snapshot(path: Path, store_id: str) -> Iterator[Path]:
    """A consistent copy of the SQLite file ``path``, owner-only, deleted afterwards.

    The copy must be the read model of the store whose identity is ``store_id`` (a file of
    another store swapped in since it was checked is refused with :class:`InvalidInput`).
    Datasette serves that copy, which never changes, so checking it once here holds for
    every request.
    """
    with tempfile.TemporaryDirectory(prefix="convstore-serve-") as scratch:  # mode 0700
        copy = Path(scratch) / path.name
        create_private_file(copy)
        source = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=10.0)
        with closing(source), closing(sqlite3.connect(copy)) as target:
            source.backup(target)
            found = target.execute("SELECT value FROM _meta WHERE key = ?", [STORE_ID]).fetchone()
        if found is None or found[0] != store_id:
            msg = f"{path} was replaced by another store's audit read model; serve again"
            raise InvalidInput(msg)
        yield copy


def serve_datasette(
    path: Path,
    *,
    host: str,
    port: int,
    allowed: frozenset[str],
    metadata: dict[str, Any],
    allow_sql: bool,
) -> None:
    """Serve the (snapshot) file at ``path`` immutable in Datasette until Ctrl-C or SIGTERM."""
    import uvicorn  # noqa: PLC0415 - the web extra, only for this command
    from datasette.app import Datasette  # noqa: PLC0415

    datasette = Datasette(
        immutables=[str(path)],
        metadata=metadata,
        settings={"default_allow_sql": allow_sql},
    )
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(datasette.invoke_startup())
    finally:
        loop.close()
    app = HostGuard(datasette.app(), allowed)
    uvicorn.run(app, host=host, port=port, log_level="warning", lifespan="on", workers=1)
