"""Export: one conversation in a format people read or tools take (`convstore export`).

The request bodies are exactly replay's; Markdown is the readable transcript; ``jsonl`` the raw
events; ``html`` the `convstore serve` conversation page as one file that needs nothing else;
``otel`` the OpenTelemetry GenAI span attributes (messages in the conventions' JSON schemas).
"""

from __future__ import annotations

import json
from typing import Literal, TypeAlias, assert_never, get_args
from uuid import UUID

from convstore.domain.errors import ConversationNotFound
from convstore.domain.events import ConversationStarted
from convstore.domain.parsing import parse_id
from convstore.projections.messages import collect_history
from convstore.store import ConversationInfo, Store
from convstore.views.html import (
    Facts,
    View,
    Window,
    conversation_body,
    document,
    replayed,
    side_html,
)
from convstore.views.markdown import Transcript, markdown_transcript
from convstore.views.otel import otel_document

ExportFormat: TypeAlias = Literal["openai-chat", "anthropic", "markdown", "jsonl", "html", "otel"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)


def export_conversation(
    store: Store,
    conversation: UUID | str,
    fmt: ExportFormat,
    *,
    vision: bool = False,
    image_dir: str | None = None,
) -> Transcript:
    """One conversation in an export format, as text (plus image files for Markdown).

    ``openai-chat`` and ``anthropic`` are exactly :meth:`Store.replay`'s request body (prose,
    no ``model`` key: add the model, and for Anthropic ``max_tokens``, when sending it);
    ``markdown`` is a readable transcript whose images go to files under ``image_dir`` (or
    become markers without one); ``jsonl`` is the raw events, one JSON object per line;
    ``html`` is `convstore serve`'s conversation page as one self-contained file (images and
    CSS inline, no script, nothing fetched), with the replay for ``vision`` beside it;
    ``otel`` is one JSON object of OpenTelemetry GenAI span attributes
    (``gen_ai.input.messages``, ``gen_ai.output.messages``: every message with its tool
    calls, results, reasoning and images kept as typed parts; see :mod:`convstore.views.otel`).
    """
    match fmt:
        case "openai-chat" | "anthropic":
            shape = "openai" if fmt == "openai-chat" else "anthropic"
            body = store.replay(conversation, shape=shape, vision=vision)
            return Transcript(json.dumps(body, ensure_ascii=False, indent=2) + "\n")
        case "markdown":
            return markdown_transcript(store.events(conversation), image_dir=image_dir)
        case "jsonl":
            lines = [raw.decode() + "\n" for raw in store.raw_events(conversation)]
            return Transcript("".join(lines))
        case "html":
            return Transcript(html_page(store, conversation, vision=vision))
        case "otel":
            document = otel_document(store.events(conversation))
            return Transcript(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        case _:
            assert_never(fmt)


def parent_of(store: Store, info: ConversationInfo) -> tuple[UUID, str] | None:
    """The conversation ``info`` branched from and its shown title (one indexed read), or
    ``None`` when it branched from none."""
    if info.parent_id is None:
        return None
    try:
        return info.parent_id, store.conversation_info(info.parent_id).shown_title
    except ConversationNotFound:
        return info.parent_id, "(not in this store: erased, or never copied)"


def conversation_facts(store: Store, info: ConversationInfo) -> Facts:
    """What the conversation page heads itself with: its start, source and labels from the
    listing index, its parent's title and its children (one indexed read each)."""
    children = [(child.id, child.shown_title) for child in store.children(info.id)]
    return Facts(info.created_at, info.labels, info.source, parent_of(store, info), children)


def html_page(store: Store, conversation: UUID | str, *, vision: bool) -> str:
    """Every message of ``conversation`` (no paging), and the replay and pressure for
    ``vision`` beside them, rendered by the same functions as `convstore serve`'s page."""
    conversation_id = parse_id(conversation, "conversation")
    events = store.events(conversation_id)
    history = collect_history(events)
    view = View(vision=vision)
    side = side_html(
        replayed(events, view.options), store.pressure(conversation_id, vision=vision), view
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
        facts=conversation_facts(store, store.conversation_info(conversation_id)),
    )
    return document(f"convstore: {title or conversation_id}", body, exported=True) + "\n"
