"""The names of convstore's own tables, shared by every backend and by the quick replay path.

Nothing here imports anything, so the quick path (which answers before eventsourcing or
pydantic is imported) takes these names from the same module the backends do.
"""

from __future__ import annotations

MARKER_TABLE = "convstore_store"
"""The table that marks a SQLite file or a PostgreSQL schema as a convstore store; it holds
``('format', '2')`` (or ``'1'``) and ``('id', …)``, the store's identity."""

FULL_JSON_FORMAT = 1
"""Stores whose states are each event's full JSON: what convstore 0.2.0 reads and writes.
This version keeps writing such a store in that form, so hosts of both versions can share it."""

STORE_FORMAT = 2
"""The format this version gives a new store: compact states (convstore 0.2.0 refuses it)."""

STORE_FORMATS = (FULL_JSON_FORMAT, STORE_FORMAT)
"""The store formats this version reads and writes."""

HEADS = "convstore_replay_heads"
"""The replay model's heads: per conversation, the version folded and its head."""

MESSAGES = "convstore_replay_messages"
"""The replay model's rows: one per stored message, its id and its plan's JSON text."""
