"""The names of convstore's own tables, shared by every backend. Nothing here imports
anything."""

from __future__ import annotations

MARKER_TABLE = "convstore_store"
"""The table that marks a SQLite file or a PostgreSQL schema as a convstore store; it holds
``('format', '2')`` (or ``'1'``) and ``('id', …)``, the store's identity."""

FULL_JSON_FORMAT = 1
"""Stores whose states are each event's full JSON: what convstore 0.2.0 reads and writes.
This version keeps writing such a store in that form, so hosts of both versions can share it."""

COMPACT_FORMAT = 2
"""Stores whose states are compact (convstore 0.2.0 refuses them) and whose messages are a
start, their blocks and an end: what convstore 0.3.x reads and writes. This version keeps
writing such a store in that form, so hosts of both versions can share it until it is
upgraded."""

STORE_FORMAT = 3
"""The format this version gives a new store: a message is its block events, each carrying
its message's boundaries (docs/design/format-3.md); convstore 0.3.x refuses it."""

BLOCK_EVENTS_FORMAT = 3
"""The first format whose messages are recorded as block events."""

STORE_FORMATS = (FULL_JSON_FORMAT, COMPACT_FORMAT, STORE_FORMAT)
"""The store formats this version reads and writes."""

RETIRED_HEADS = "convstore_replay_heads"
"""The heads of the replay model earlier versions kept (per conversation, the version folded);
never read or written now, only emptied of an erased conversation
(:mod:`convstore.infrastructure.common.retired_replay`)."""

RETIRED_MESSAGES = "convstore_replay_messages"
"""The rows of that model: one per message, holding its text; emptied as
:data:`RETIRED_HEADS` is."""
