"""The names of a SQLite store's tables that are SQLite's alone (see also
:mod:`convstore.infrastructure.common.tables`); imports nothing."""

from __future__ import annotations

EVENTS_TABLE = "stored_events"
"""The events table eventsourcing's SQLite recorder makes."""
