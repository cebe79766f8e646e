"""The listing index: what one write changes in a conversation's listed row and labels.

The recorders keep a ``convstore_listing`` row per conversation (title, parentage, when it
started, when it was last active, how many events) and a ``convstore_labels`` row per label,
written in the same transaction as the events (see :mod:`convstore.infrastructure.common.listing`).
This module decides, from the events of one write, what that write changes: a pure fold.

Times are when things happened (:func:`~convstore.domain.events.happened`): an imported
message's source time, not the moment of the import, so ``list``'s activity, its order and
retention (``erase --inactive-for``) go by what the source knew.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import assert_never
from uuid import UUID

from convstore.domain.blocks import TextBlock
from convstore.domain.events import (
    BlockAppended,
    BlockRecorded,
    Compacted,
    ConversationRenamed,
    ConversationStarted,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    LabelsRemoved,
    LabelsSet,
    MessageEnded,
    MessageInterrupted,
    MessageMetaRecorded,
    MessageStarted,
    RewindUndone,
    Rewound,
    Role,
    happened,
)
from convstore.domain.previews import preview_of as preview_of  # noqa: PLC0414 (cli imports it here)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(moment: datetime) -> int:
    """A moment as whole microseconds since the Unix epoch (exact, sortable)."""
    return (moment - EPOCH) // timedelta(microseconds=1)


def from_micros(value: int) -> datetime:
    """The moment :func:`micros` gave ``value`` for, in UTC."""
    return EPOCH + timedelta(microseconds=value)


@dataclass
class ListingChange:
    """What one write changes in one conversation's listed row."""

    conversation_id: UUID
    started: ConversationStarted | None = None
    renamed: bool = False
    title: str | None = None
    set_labels: dict[str, str] = field(default_factory=dict)
    removed_labels: set[str] = field(default_factory=set)
    last_active: int = 0
    version: int = 0
    first_user: UUID | None = None
    """The first user message started in this write (the conversation's first user message
    unless an earlier write started one)."""
    texts: dict[UUID, str] = field(default_factory=dict)
    """The preview (see :func:`preview_of`) of the first non-blank text block this write gave
    each message that may be the conversation's first user message: :attr:`first_user`, and
    messages started by earlier writes. The index keeps the one of the first user message."""
    opened: set[UUID] = field(default_factory=set, repr=False)
    """Messages started in this write."""
    known_first: tuple[UUID | None, ...] = field(default=(), repr=False)
    """``(first user message before this write,)`` when the writer knows it, else ``()``."""


def listing_changes(
    events: Iterable[Event],
    first_users: Mapping[UUID, UUID | None] | None = None,
    *,
    previews: bool = True,
) -> list[ListingChange]:
    """Fold the events of one write into one change per conversation, in first-seen order.

    ``first_users`` is what the writer knows of a conversation's first user message before
    the write (``None``: it has none yet); with it, a change leaves out the preview facts the
    index would ignore (a later user message, a block of a message that is not the first
    user's), so most writes stay plain appends. Without it (a rebuild, a load) every
    candidate is kept and the index's own ``preview_message`` decides: the same rows.
    ``previews=False`` (an encrypted store, whose message text must not sit in the clear in
    the index) leaves every preview out.
    """
    changes: dict[UUID, ListingChange] = {}
    known = first_users or {}
    for event in events:
        change = changes.get(event.originator_id)
        if change is None:
            change = changes[event.originator_id] = ListingChange(event.originator_id)
            if event.originator_id in known:
                change.known_first = (known[event.originator_id],)
        change.last_active = max(change.last_active, micros(happened(event)))
        change.version = max(change.version, event.originator_version)
        match event:
            case ConversationStarted():
                change.started = event
                change.renamed, change.title = True, event.title
            case ConversationRenamed():
                change.renamed, change.title = True, event.title
            case LabelsSet():
                change.set_labels.update(event.labels)
                change.removed_labels.difference_update(event.labels)
            case LabelsRemoved():
                for key in event.keys:
                    change.set_labels.pop(key, None)
                change.removed_labels.update(event.keys)
            case MessageStarted():
                _note_opened(change, event.message_id, event.role)
            case BlockAppended():
                if previews:
                    _note_text(change, event)
            case BlockRecorded():
                # The first block opens its message, unless a start already did: one the
                # writer knows as the first user message was, in an earlier write.
                if event.index == 0 and change.known_first != (event.message_id,):
                    _note_opened(change, event.message_id, event.role)
                if previews:
                    _note_text(change, event)
            case (
                MessageEnded()
                | MessageInterrupted()
                | Compacted()
                | Rewound()
                | RewindUndone()
                | EntriesRecorded()
                | EntriesDeleted()
                | MessageMetaRecorded()
            ):
                pass
            case _:
                assert_never(event)
    return list(changes.values())


def _note_opened(change: ListingChange, message: UUID, role: Role) -> None:
    if message in change.opened:
        return
    change.opened.add(message)
    if role == "user" and change.first_user is None and change.known_first in ((), (None,)):
        change.first_user = message


def _note_text(change: ListingChange, event: BlockAppended | BlockRecorded) -> None:
    message = event.message_id
    if not isinstance(event.block, TextBlock) or message in change.texts:
        return
    earlier = message not in change.opened and change.known_first in ((), (message,))
    if (message == change.first_user or earlier) and event.block.text.strip():
        change.texts[message] = preview_of(event.block.text)


@dataclass(frozen=True, slots=True)
class ListingQuery:
    """Which conversations to list, in which order, from where (all checked already)."""

    labels: tuple[tuple[str, str], ...] = ()
    title: str | None = None
    started_after: int | None = None
    started_before: int | None = None
    active_after: int | None = None
    active_before: int | None = None
    order: str = "active"
    """``active``: newest activity first; ``started``: oldest start first."""
    after: tuple[int, str] | None = None
    """The sort key and id (hex) of the last row of the previous page."""
    limit: int | None = None
    ids: tuple[UUID, ...] = ()
    """When given, only these conversations."""
    parent: UUID | None = None
    """When given, only the conversations that branched from this one."""


@dataclass(frozen=True, slots=True)
class ListedRow:
    """One row of the listing index."""

    id: UUID
    title: str | None
    created_at: int
    last_active: int
    parent_id: UUID | None
    source: str | None
    events: int
    preview: str | None = None
    children: int = 0
    """How many listed conversations name this one as their parent (counted when read)."""
