"""`convstore serve`'s ASGI app: read-only pages over one store.

Built on Starlette: a small, typed, well-kept ASGI toolkit (routing, responses, a test
client) with no ORM, template engine or session machinery to switch off, under the same
uvicorn that `audit serve` already runs. Every route is GET (HEAD follows); anything else is
405. Store calls block, so the endpoints are plain functions Starlette runs in its thread
pool. The page's only script is /static/app.js (CSP ``script-src 'self'``): it loads the
replay pane and polls /c/ID/version to show appended messages within a second.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Any
from uuid import UUID

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from convstore.domain.blocks import ToolUseBlock
from convstore.domain.events import ConversationStarted
from convstore.domain.parsing import parse_id
from convstore.errors import ConversationNotFound, InvalidInput
from convstore.projections.messages import collect_history
from convstore.projections.replay import SHAPES
from convstore.store import ConversationInfo, Store
from convstore.web.render import (
    CSS,
    ListedConversation,
    View,
    conversation_body,
    document,
    esc,
    list_body,
    pages,
    side_html,
    transcript_html,
)

LIST_PAGE_SIZE = 50
"""Conversations per list page (each listed one is read to count its messages)."""

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
    shape = request.query_params.get("shape", "openai")
    if shape not in SHAPES:
        msg = f"shape must be one of {', '.join(SHAPES)}"
        raise InvalidInput(msg)
    vision = request.query_params.getlist("vision")
    return View(
        shape="openai" if shape == "openai" else "anthropic",
        vision=(vision[-1] == "1") if vision else True,
        full=request.query_params.get("full") == "1",
        keep_tool_results=_int(request, "keep", None, 0),
    )


def _conversation(request: Request) -> UUID:
    try:
        return parse_id(request.path_params["conversation"], "conversation")
    except InvalidInput:
        msg = "not a conversation id"
        raise ConversationNotFound(msg) from None


def _listed(store: Store, info: ConversationInfo) -> ListedConversation:
    """One list row: the conversation is read once to count its messages and tool calls
    (a listing index in the read model would make this one row; not there yet)."""
    messages = store.messages(info.id)
    calls = sum(1 for m in messages for b in m.blocks if isinstance(b.block, ToolUseBlock))
    last = store.last_event(info.id)
    when = last.timestamp if last is not None else info.created_at
    return ListedConversation(info.id, info.title, when, len(messages), calls)


def create_app(store: Store) -> Starlette:
    """The read-only web app over ``store`` (wrap it in a HostGuard before serving it)."""

    def listing(request: Request) -> Response:
        everything = store.conversations()
        last_page = max(1, -(-len(everything) // LIST_PAGE_SIZE))
        page = min(_int(request, "page", 1, 1) or 1, last_page)
        chosen = everything[::-1][(page - 1) * LIST_PAGE_SIZE : page * LIST_PAGE_SIZE]
        rows = [_listed(store, info) for info in chosen]
        body = list_body(rows, page, last_page, len(everything))
        return _html(document("convstore: conversations", body, exported=False))

    def conversation(request: Request) -> Response:
        conversation_id = _conversation(request)
        view = _view(request)
        events = store.events(conversation_id)
        history = collect_history(events)
        last_page = pages(len(history.messages))
        page = min(_int(request, "page", 1, 1) or 1, last_page)
        first = events[0]
        title = first.title if isinstance(first, ConversationStarted) else None
        body = conversation_body(
            conversation_id,
            title,
            history.messages,
            history.compactions,
            page=page,
            view=view,
            side=None,
            version=events[-1].originator_version,
        )
        name = title or str(conversation_id)
        return _html(document(f"convstore: {name}", body, exported=False))

    def transcript(request: Request) -> Response:
        conversation_id = _conversation(request)
        history = collect_history(store.events(conversation_id))
        last_page = pages(len(history.messages))
        page = min(_int(request, "page", 1, 1) or 1, last_page)
        fragment = transcript_html(
            conversation_id, history.messages, history.compactions, page=page, view=_view(request)
        )
        return _html(fragment)

    def side(request: Request) -> Response:
        conversation_id = _conversation(request)
        view = _view(request)
        options: dict[str, Any] = {
            "shape": view.shape,
            "vision": view.vision,
            "full": view.full,
            "keep_tool_results": view.keep_tool_results,
        }
        replayed = store.replay(conversation_id, **options)
        pressure = store.pressure(conversation_id, **options)
        return _html(side_html(replayed, pressure, view))

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
        return _html(
            document("bad request", f"<main><p>{esc(exc)}</p></main>", exported=False), 400
        )

    routes = [
        Route("/", listing, methods=GET),
        Route("/c/{conversation}", conversation, methods=GET),
        Route("/c/{conversation}/transcript", transcript, methods=GET),
        Route("/c/{conversation}/side", side, methods=GET),
        Route("/c/{conversation}/replay.json", replay_json, methods=GET),
        Route("/c/{conversation}/version", version, methods=GET),
        Route("/static/app.js", script, methods=GET),
        Route("/static/app.css", stylesheet, methods=GET),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={ConversationNotFound: not_found, InvalidInput: bad_input},
    )
