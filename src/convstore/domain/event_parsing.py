"""A whole event given from outside (a dump's line) checked as the write API checks its input.

The store's methods build events from checked parts: a title or a source is a name (no NUL),
a block is within the store's limits, labels and metadata are parsed, a new conversation's id
is not the nil UUID. An event that arrives already built has skipped those checks; here it is
held to the same ones, with the same functions, so what a load accepts is what the write API
would have written. The event's model itself refuses the rest (a timestamp without a zone, an
unknown kind, a missing field) when it is decoded.
"""

from __future__ import annotations

from typing import assert_never

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
)
from convstore.domain.limits import Limits
from convstore.domain.metadata import parse_label_keys, parse_labels, parse_meta
from convstore.domain.parsing import (
    parse_block,
    parse_new_id,
    parse_optional_name,
    parse_optional_text,
    parse_text,
)


def parse_event(event: Event, limits: Limits) -> Event:
    """``event``, if the write API could have recorded it within ``limits``; raises
    :class:`~convstore.domain.errors.InvalidInput` naming the field at fault otherwise."""
    note = limits.max_note_bytes
    match event:
        case ConversationStarted():
            parse_new_id(event.originator_id, "conversation")
            parse_optional_name(event.title, "title", note)
            parse_optional_name(event.source, "source", note)
        case ConversationRenamed():
            parse_optional_name(event.title, "title", note)
        case BlockAppended():
            parse_block(event.block, limits)
        case BlockRecorded():
            parse_block(event.block, limits)
            if event.meta is not None:
                parse_meta(event.meta, limits)
        case MessageInterrupted():
            parse_optional_text(event.reason, "reason", note)
        case Compacted():
            parse_text(event.summary, "summary", limits.max_block_bytes)
        case LabelsSet():
            parse_labels(event.labels, limits)
        case LabelsRemoved():
            parse_label_keys(event.keys, limits)
        case MessageMetaRecorded():
            parse_meta(event.meta, limits)
        case (
            MessageStarted()
            | MessageEnded()
            | Rewound()
            | RewindUndone()
            | EntriesRecorded()
            | EntriesDeleted()
        ):
            pass  # ids, roles, versions and JSON entries: the event's model checked them
        case _:
            assert_never(event)
    return event
