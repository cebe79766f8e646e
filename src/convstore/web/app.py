"""`convstore serve`'s ASGI app: read-only pages over one store.

Built on Starlette: a small, typed, well-kept ASGI toolkit (routing, responses, a test
client) with no ORM, template engine or session machinery to switch off, under the same
uvicorn that `audit serve` already runs. Every route is GET (HEAD follows); anything else is
405. Store calls block, so the endpoints are plain functions Starlette runs in its thread
pool. The page's only script is /static/app.js (CSP ``script-src 'self'``): it loads the
replay pane, polls /c/ID/version to show appended messages within a second, and selects a
message's wire message when the message is clicked.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path
from typing import Any
from uuid import UUID

from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from convstore.app.export import conversation_facts, parent_of
from convstore.app.projector import audit_path
from convstore.audit.search import (
    AuditState,
    Counts,
    Found,
    add_hits,
    audit_state,
    conversation_counts,
    message_position,
    ranked_conversations,
)
from convstore.domain.blocks import AnyToolUse, HostedToolUseBlock
from convstore.domain.errors import ConversationNotFound, InvalidInput
from convstore.domain.events import ConversationStarted, Event, message_opened
from convstore.domain.parsing import parse_id
from convstore.engine.plan import SHAPES
from convstore.projections.messages import collect_history
from convstore.store import ConversationInfo, Store
from convstore.views.html import (
    CSS,
    PAGE_SIZE,
    Filters,
    ListedConversation,
    SearchRow,
    View,
    Window,
    conversation_body,
    document,
    esc,
    list_body,
    pressure_html,
    replay_html,
    replayed,
    search_body,
    side_html,
    tool_results,
    transcript_html,
)

LIST_PAGE_SIZE = 50
"""Conversations per list page, and per page of search results."""

READ_FOR_COUNTS = 2_000
"""A listed conversation the audit read model does not hold whole is read to count its
messages and tool calls when its log has at most this many events (else shown as unknown)."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
"""No inline script, nothing from another origin; images only as data: URLs."""

SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

GET = ["GET"]


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _bad_request(message: str) -> HTMLResponse:
    return _html(
        document("bad request", f"<main><p>{esc(message)}</p></main>", exported=False), 400
    )


class RefuseNul:
    """Answers 400 to a request whose query string holds NUL (``%00``) in any parameter's
    name or value, before any route reads it: no filter, cursor or search takes NUL (the
    audit read model's full-text search fails on it), so every parameter is refused alike."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            params = QueryParams(scope.get("query_string", b""))
            if any("\x00" in key or "\x00" in value for key, value in params.multi_items()):
                refused = _bad_request("a query parameter holds a NUL character (%00)")
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _int(request: Request, name: str, default: int | None, minimum: int) -> int | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        msg = f"{name} must be a whole number"
        raise InvalidInput(msg) from None
    if value < minimum:
        msg = f"{name} must be at least {minimum}"
        raise InvalidInput(msg)
    return value


def _view(request: Request) -> View:
    defaults = View()
    shape = request.query_params.get("shape", defaults.shape)
    if shape not in SHAPES:
        msg = f"shape must be one of {', '.join(SHAPES)}"
        raise InvalidInput(msg)
    vision = request.query_params.getlist("vision")
    full = request.query_params.getlist("full")
    for name, values in (("vision", vision), ("full", full)):
        if any(value not in {"0", "1"} for value in values):
            msg = f"{name} must be 0 or 1"
            raise InvalidInput(msg)
    return View(
        shape="openai" if shape == "openai" else "anthropic",
        vision=(vision[-1] == "1") if vision else defaults.vision,
        full=bool(full) and full[-1] == "1",
        keep_tool_results=_int(request, "keep", None, 0),
    )


def _conversation(request: Request) -> UUID:
    try:
        return parse_id(request.path_params["conversation"], "conversation")
    except InvalidInput:
        msg = "not a conversation id"
        raise ConversationNotFound(msg) from None


def _filters(request: Request) -> Filters:
    params = request.query_params
    labels: list[tuple[str, str]] = []
    for raw in params.getlist("label"):
        if not raw.strip():
            continue
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            msg = f"a label filter is key=value, not {raw[:80]!r}"
            raise InvalidInput(msg)
        labels.append((key.strip(), value.strip()))
    return Filters(
        q=params.get("q", "").strip(),
        title=params.get("title", ""),
        labels=tuple(labels),
        active_after=params.get("active_after", "").strip(),
        active_before=params.get("active_before", "").strip(),
    )


def _moment(text: str, name: str) -> datetime | None:
    """A date (``YYYY-MM-DD``, its midnight UTC) or an ISO time (UTC unless it says)."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        msg = f"{name} must be a date (YYYY-MM-DD) or an ISO time, not {text[:40]!r}"
        raise InvalidInput(msg) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _bounds(filters: Filters) -> dict[str, Any]:
    """The filters as :meth:`Store.list_conversations` takes them."""
    return {
        "labels": dict(filters.labels) or None,
        "title": filters.title or None,
        "active_after": _moment(filters.active_after, "active_after"),
        "active_before": _moment(filters.active_before, "active_before"),
    }


def _matches(info: ConversationInfo, bounds: dict[str, Any]) -> bool:
    """Whether a listed conversation passes the filters, as the listing index decides."""
    labels: dict[str, str] | None = bounds["labels"]
    title: str | None = bounds["title"]
    after: datetime | None = bounds["active_after"]
    before: datetime | None = bounds["active_before"]
    last = info.last_active or info.created_at
    return (
        all(info.labels.get(key) == value for key, value in (labels or {}).items())
        and (title is None or title.lower() in (info.title or "").lower())
        and (after is None or last > after)
        and (before is None or last < before)
    )


def _counted(
    store: Store, infos: list[ConversationInfo], counts: dict[UUID, Counts]
) -> list[ListedConversation]:
    """List rows; counts come from the audit read model for each conversation it holds
    whole (its event count is the listing's), else from reading the conversation, when
    it is small enough to read for a list."""
    rows = []
    parents: dict[UUID, tuple[UUID, str] | None] = {}
    for info in infos:
        known = counts.get(info.id)
        if known is not None and known.events != info.events:
            known = None
        if known is None and info.events <= READ_FOR_COUNTS:
            recorded = store.messages(info.id)
            blocks = [b.block for m in recorded for b in m.blocks]
            calls = sum(1 for block in blocks if isinstance(block, AnyToolUse))
            hosted = sum(1 for block in blocks if isinstance(block, HostedToolUseBlock))
            known = Counts(info.events, len(recorded), calls, hosted)
        rows.append(_listed(store, info, known, parents))
    return rows


def _listed(
    store: Store,
    info: ConversationInfo,
    counts: Counts | None,
    parents: dict[UUID, tuple[UUID, str] | None],
) -> ListedConversation:
    """One list row: the conversation as listed, its counts (unknown when ``None``), and its
    parent's shown title (read once per page: ``parents`` keeps those read)."""
    if info.parent_id is not None and info.parent_id not in parents:
        parents[info.parent_id] = parent_of(store, info)
    return ListedConversation(
        info.id,
        info.title,
        info.last_active or info.created_at,
        info.labels,
        None if counts is None else counts.messages,
        None if counts is None else counts.calls,
        None if counts is None else counts.hosted,
        preview=info.preview,
        parent=None if info.parent_id is None else parents[info.parent_id],
        children=info.children,
        source=info.source,
    )


def _window(
    store: Store, conversation: UUID, before: int | None, audit: Path
) -> tuple[Window, int]:
    """The page of messages started before version ``before`` (the newest page when
    ``None``), and the version of the newest event. Read backwards from the end of the
    log: no more of it is decoded than the page and what was recorded after it (results,
    rewinds, compactions)."""
    events = store.tail(conversation, messages=PAGE_SIZE, before=before)
    whole = isinstance(events[0], ConversationStarted)
    history = collect_history(events, tail=not whole)
    starts = _starts(events)
    shown = {m for m, version in starts.items() if before is None or version < before}
    page = [m for m in history.messages if m.message_id in shown]
    first: int | None = 1 if whole else None
    if first is None and page:
        first = message_position(audit, page[0].message_id, store.identity)
    after_page = len(history.messages) - len(page)
    total = None if first is None else first - 1 + len(page) + after_page
    earlier = None
    if not whole:
        earlier = min(starts.values())
    window = Window(
        page,
        tool_results(history.messages),
        history.compactions,
        first,
        total,
        earlier=earlier,
        newest=after_page == 0,
    )
    return window, events[-1].originator_version


def _audit_note(store: Store, state: AuditState, *, searching: bool) -> str:
    """What the page says about the audit read model: missing, behind (by how much), or
    current, with the command that brings it up to date."""
    command = shlex.join(
        ["convstore", "--db", store.location, "--audit", str(state.path), "project"]
    )
    if state.position is None:
        what = "Search needs" if searching else "Search and the counts of large conversations need"
        return (
            f"<p class='note' id='audit-note'>{what} the audit read model, and "
            f"{esc(state.problem)}. Build it with <code>{esc(command)}</code> (add "
            "<code>--follow</code> to keep it current).</p>"
        )
    head = store.log_position()
    erasures = len(store.erasures(state.erasures))
    if state.position < head or erasures:
        missed = (
            f"it holds the log up to position {state.position:,} of {head:,} "
            f"({head - state.position:,} positions behind), so search misses what was "
            "recorded since"
            if state.position < head
            else "it holds every event"
        )
        if erasures:
            missed += (
                f"; {erasures:,} {'erasure is' if erasures == 1 else 'erasures are'} not "
                "applied to it yet (erased conversations are left out of the results)"
            )
        return (
            f"<p class='note' id='audit-note'>The audit read model is behind the store: "
            f"{missed}. Catch it up with <code>{esc(command)}</code> (add "
            "<code>--follow</code> to keep it current).</p>"
        )
    return (
        f"<p class='note ok' id='audit-note'>Search index current (log position "
        f"{state.position:,}).</p>"
    )


def _search_page(  # noqa: PLR0917 - the request's parts, as the page has them
    store: Store,
    audit_file: Path,
    filters: Filters,
    bounds: dict[str, Any],
    state: AuditState,
    note: str,
    skip: int,
) -> str:
    """Search results: every matching conversation ranked by the read model's full-text
    index, then looked up in the listing index (an erased one is dropped) and filtered; the
    page shows the ``LIST_PAGE_SIZE`` kept after the first ``skip`` kept ones."""
    if state.position is None:
        return search_body([], filters, note=note)
    kept: list[tuple[Found, ConversationInfo]] = []
    first, more = skip, False
    for entry in ranked_conversations(audit_file, filters.q, store.identity):
        try:
            info = store.conversation_info(entry.conversation_id)
        except ConversationNotFound:
            continue  # erased since the read model saw it: never shown
        if not _matches(info, bounds):
            continue
        if skip:
            skip -= 1
            continue
        if len(kept) == LIST_PAGE_SIZE:
            more = True
            break
        kept.append((entry, info))
    add_hits(audit_file, filters.q, [entry for entry, _ in kept], store.identity)
    counts = conversation_counts(audit_file, [info.id for _, info in kept], store.identity)
    parents: dict[UUID, tuple[UUID, str] | None] = {}
    rows = [
        SearchRow(_listed(store, info, counts.get(info.id), parents), entry.matches, entry.hits)
        for entry, info in kept
    ]
    return search_body(rows, filters, note=note, skip=first, more=more)


def _replay_options(request: Request) -> tuple[UUID, View, dict[str, Any]]:
    """The conversation, the view, and the view as Store.replay's keyword arguments."""
    view = _view(request)
    options: dict[str, Any] = {
        "shape": view.shape,
        "vision": view.vision,
        "full": view.full,
        "keep_tool_results": view.keep_tool_results,
    }
    return _conversation(request), view, options


def create_app(store: Store, *, audit: Path | None = None) -> Starlette:
    """The read-only web app over ``store`` (wrap it in a HostGuard before serving it).

    ``audit`` is the audit read model searched (default: the store's, as ``project`` finds
    it); the app only ever reads it, and says on the page when it is missing or behind. Every
    request that reads it checks first that the file is still this store's read model (by
    the store's identity): another store's swapped in at that path is never searched.
    """
    audit_file = audit if audit is not None else audit_path(store)

    def listing(request: Request) -> Response:
        filters = _filters(request)
        bounds = _bounds(filters)
        state = audit_state(audit_file, store.identity)
        note = _audit_note(store, state, searching=bool(filters.q))
        if filters.q:
            return _html(
                document(
                    "convstore: search",
                    _search_page(
                        store,
                        audit_file,
                        filters,
                        bounds,
                        state,
                        note,
                        _int(request, "skip", 0, 0) or 0,
                    ),
                    exported=False,
                )
            )
        after = request.query_params.get("after") or None
        page = store.list_conversations(**bounds, limit=LIST_PAGE_SIZE, after=after)
        ids = [info.id for info in page.conversations]
        counts = (
            conversation_counts(audit_file, ids, store.identity)
            if state.position is not None
            else {}
        )
        rows = _counted(store, page.conversations, counts)
        body = list_body(rows, filters, next_cursor=page.next, first=after is None, note=note)
        return _html(document("convstore: conversations", body, exported=False))

    def conversation(request: Request) -> Response:
        conversation_id = _conversation(request)
        view = _view(request)
        before = _int(request, "before", None, 1)
        info = store.conversation_info(conversation_id)
        window, version = _window(store, conversation_id, before, audit_file)
        body = conversation_body(
            conversation_id,
            info.title or (f"“{info.preview}”" if info.preview else None),
            window,
            before=before,
            view=view,
            side=None,
            version=version,
            facts=conversation_facts(store, info),
        )
        name = info.shown_title if info.title or info.preview else str(conversation_id)
        return _html(document(f"convstore: {name}", body, exported=False))

    def transcript(request: Request) -> Response:
        conversation_id = _conversation(request)
        before = _int(request, "before", None, 1)
        window, _ = _window(store, conversation_id, before, audit_file)
        return _html(transcript_html(conversation_id, window, view=_view(request), paged=True))

    def side(request: Request) -> Response:
        conversation_id, view, options = _replay_options(request)
        replay = replayed(store.events(conversation_id), view.options)
        pressure = store.pressure(conversation_id, **options)
        return _html(side_html(replay, pressure, view))

    def replay_pane(request: Request) -> Response:
        conversation_id, view, _ = _replay_options(request)
        return _html(replay_html(replayed(store.events(conversation_id), view.options), view))

    def pressure_pane(request: Request) -> Response:
        conversation_id, _, options = _replay_options(request)
        return _html(pressure_html(store.pressure(conversation_id, **options)))

    def replay_json(request: Request) -> Response:
        conversation_id = _conversation(request)
        view = _view(request)
        body = store.replay(
            conversation_id,
            shape=view.shape,
            vision=view.vision,
            full=view.full,
            keep_tool_results=view.keep_tool_results,
        )
        return JSONResponse(body, headers=SECURITY_HEADERS)

    def version(request: Request) -> Response:
        conversation_id = _conversation(request)
        last = store.last_event(conversation_id)
        if last is None:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return JSONResponse({"version": last.originator_version}, headers=SECURITY_HEADERS)

    def script(_: Request) -> Response:
        text = files("convstore.web").joinpath("app.js").read_text()
        return Response(text, media_type="text/javascript", headers=SECURITY_HEADERS)

    def stylesheet(_: Request) -> Response:
        return Response(CSS, media_type="text/css", headers=SECURITY_HEADERS)

    def not_found(_: Request, exc: Exception) -> Response:
        return _html(document("not found", f"<main><p>{esc(exc)}</p></main>", exported=False), 404)

    def bad_input(_: Request, exc: Exception) -> Response:
        return _bad_request(str(exc))

    routes = [
        Route("/", listing, methods=GET),
        Route("/c/{conversation}", conversation, methods=GET),
        Route("/c/{conversation}/transcript", transcript, methods=GET),
        Route("/c/{conversation}/side", side, methods=GET),
        Route("/c/{conversation}/replay", replay_pane, methods=GET),
        Route("/c/{conversation}/pressure", pressure_pane, methods=GET),
        Route("/c/{conversation}/replay.json", replay_json, methods=GET),
        Route("/c/{conversation}/version", version, methods=GET),
        Route("/static/app.js", script, methods=GET),
        Route("/static/app.css", stylesheet, methods=GET),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={ConversationNotFound: not_found, InvalidInput: bad_input},
        middleware=[Middleware(RefuseNul)],
    )


def _starts(events: list[Event]) -> dict[UUID, int]:
    """The version each message in ``events`` opened at: its start, or its first block (store
    format 3, where a start before it, when there is one, comes first)."""
    starts: dict[UUID, int] = {}
    for event in events:
        if (opened := message_opened(event)) is not None:
            starts.setdefault(opened, event.originator_version)
    return starts
