"""The log's change count: how many of a conversation's stored rows were changed or deleted in
place, kept by triggers on the events table, so a reader of a derived copy (replay's
in-process fold, a runtime adapter's) learns from one small row that its copy no longer
matches the log.

Names only, and no import of the domain's models. Each backend makes the table and triggers
(:func:`convstore.infrastructure.sqlite.recorder.change_count_statements`, and the PostgreSQL
recorder's create statements).
"""

from __future__ import annotations

NIL_HEX = "0" * 32
"""The nil id in 32 hex digits: the row that counts changes concerning every conversation."""

CHANGES_TABLE = "convstore_log_changes"
"""Per conversation, a count of its stored event rows changed or deleted in place. The log is
only ever appended to, so nothing of convstore's moves it but an erasure (which deletes the
row with the rest); triggers on the events table (:data:`CHANGE_TRIGGERS`) count every other
``UPDATE`` and ``DELETE``, whoever runs it. A reader that folded a conversation keeps the count
it saw, so it learns from one small row that its fold no longer matches the log."""

CHANGE_TRIGGERS = ("convstore_log_updated", "convstore_log_deleted")
"""The triggers that keep :data:`CHANGES_TABLE`: one on ``UPDATE``, one on ``DELETE``."""

TRUNCATE_TRIGGER = "convstore_log_truncated"
"""PostgreSQL's third trigger: a ``TRUNCATE`` of the events table concerns every conversation,
so it counts under the nil id, which every reader adds to its own conversation's count
(:data:`SELECT_CHANGE_COUNT`). SQLite has no ``TRUNCATE``; its ``DELETE`` triggers fire for
every row, with or without a ``WHERE``."""

SELECT_CHANGE_COUNT = (
    f"SELECT coalesce(sum(changes), 0) FROM {CHANGES_TABLE} "  # noqa: S608 - a fixed name
    f"WHERE originator_id IN (?, '{NIL_HEX}')"
)
"""A conversation's change count on SQLite, its id (32 hex digits) as the one parameter: its
own rows' count plus the whole table's."""
