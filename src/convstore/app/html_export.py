"""`export --format html`: the conversation page as one file that needs nothing else."""

from __future__ import annotations

from uuid import UUID

from convstore.domain.events import ConversationStarted
from convstore.domain.parsing import parse_id
from convstore.projections.messages import collect_history
from convstore.store import Store
from convstore.views.html import View, Window, conversation_body, document, side_html


def html_page(store: Store, conversation: UUID | str, *, vision: bool) -> str:
    """Every message of ``conversation`` (no paging), and the replay and pressure for
    ``vision`` beside them, rendered by the same functions as `convstore serve`'s page."""
    conversation_id = parse_id(conversation, "conversation")
    events = store.events(conversation_id)
    history = collect_history(events)
    view = View(vision=vision)
    side = side_html(
        store.replay(conversation_id, vision=vision),
        store.pressure(conversation_id, vision=vision),
        view,
    )
    first = events[0]
    title = first.title if isinstance(first, ConversationStarted) else None
    body = conversation_body(
        conversation_id,
        title,
        Window.whole(history),
        before=None,
        view=view,
        side=side,
        version=events[-1].originator_version,
    )
    return document(f"convstore: {title or conversation_id}", body, exported=True) + "\n"
