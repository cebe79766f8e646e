"""SQL for the listing index, kept by the recorders in the insert's own transaction.

Two tables beside the events: ``convstore_listing`` (one row per conversation) and
``convstore_labels`` (one row per label). Every insert applies the
:class:`~convstore.projections.listing.ListingChange` of its events before it commits, so
the index is exactly the log: nothing to catch up, read-your-writes, on both backends.
The same statements serve every backend, each spelling them in its own :class:`Dialect`
(SQLite's ``?`` and ids as hex text, in its recorder; PostgreSQL's ``%s`` and ``uuid``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from convstore.domain.errors import ConversationActive
from convstore.domain.events import happened
from convstore.projections.listing import (
    ListedRow,
    ListingChange,
    ListingQuery,
    from_micros,
    micros,
)

LISTING_TABLE = "convstore_listing"
LABELS_TABLE = "convstore_labels"

Execute = Callable[[str, Sequence[Any]], Any]
"""Run one statement with its parameters (a cursor's or connection's ``execute``)."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one backend spells a placeholder, an id and a case-blind match."""

    mark: str
    id_type: str
    like: str
    to_id: Callable[[UUID], Any]

    def sql(self, text: str) -> str:
        return text.replace("?", self.mark)


def create_statements(d: Dialect, prefix: str = "") -> list[str]:
    """The tables and their indexes (``prefix`` is a schema, with its dot, on PostgreSQL)."""
    listing, labels = prefix + LISTING_TABLE, prefix + LABELS_TABLE
    return [
        f"CREATE TABLE IF NOT EXISTS {listing} (id {d.id_type} PRIMARY KEY, title TEXT, "
        f"parent_id {d.id_type}, source TEXT, created_at BIGINT NOT NULL, "
        "last_active BIGINT NOT NULL, events BIGINT NOT NULL, "
        f"preview_message {d.id_type}, preview TEXT)",
        f"CREATE INDEX IF NOT EXISTS {LISTING_TABLE}_active ON {listing} (last_active, id)",
        f"CREATE INDEX IF NOT EXISTS {LISTING_TABLE}_started ON {listing} (created_at, id)",
        parent_index_statement(prefix),
        f"CREATE TABLE IF NOT EXISTS {labels} (conversation_id {d.id_type} NOT NULL, "
        "key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (conversation_id, key))",
        f"CREATE INDEX IF NOT EXISTS {LABELS_TABLE}_kv ON {labels} (key, value)",
    ]


PARENT_INDEX = f"{LISTING_TABLE}_parent"
"""The index on a listed conversation's parent, in start order: what :meth:`Store.children`
and each row's count of children read (added after 0.3.0: opening a store whose table lacks
it makes it; nothing to refill)."""


def parent_index_statement(prefix: str = "") -> str:
    """Make :data:`PARENT_INDEX` if missing (``prefix`` as in :func:`create_statements`)."""
    return (
        f"CREATE INDEX IF NOT EXISTS {PARENT_INDEX} ON {prefix}{LISTING_TABLE} "
        "(parent_id, created_at, id)"
    )


PREVIEW_COLUMNS = ("preview_message", "preview")
"""Columns added to the listing row after it was first made (0.3.0): a store whose row lacks
them gets them (:func:`add_preview_statements`) and its index is rebuilt to fill them."""


def add_preview_statements(d: Dialect, prefix: str = "", *, if_missing: str = "") -> list[str]:
    """Add the preview columns to a listing table made before them (``if_missing``:
    PostgreSQL's ``IF NOT EXISTS``; SQLite has none, its callers check under the lock)."""
    add = f"ALTER TABLE {prefix}{LISTING_TABLE} ADD COLUMN {if_missing}".rstrip() + " "
    return [f"{add}preview_message {d.id_type}", f"{add}preview TEXT"]


def forget(execute: Execute, d: Dialect, conversation: UUID, prefix: str = "") -> None:
    """Delete a conversation's listing row and labels (inside an erasure's transaction)."""
    conv = d.to_id(conversation)
    for table, column in ((LISTING_TABLE, "id"), (LABELS_TABLE, "conversation_id")):
        execute(d.sql(f"DELETE FROM {prefix}{table} WHERE {column} = ?"), (conv,))  # noqa: S608


def refuse_if_active(conversation: UUID, last_active: int | None, idle_since: int | None) -> None:
    """Inside an erasure's transaction: raise :class:`~convstore.domain.errors.ConversationActive`
    when ``idle_since`` (microseconds) is given and the conversation's listing row says its
    newest event is at or after it (or has no row to say when)."""
    if idle_since is None or (last_active is not None and last_active < idle_since):
        return
    when = None if last_active is None else from_micros(last_active)
    stamp = "unknown" if when is None else when.isoformat(sep=" ", timespec="seconds")
    msg = (
        f"conversation {conversation} was active after the cutoff (last active {stamp}); not erased"
    )
    raise ConversationActive(msg, when)


def apply_changes(
    execute: Execute, d: Dialect, changes: Iterable[ListingChange], prefix: str = ""
) -> None:
    """Apply one write's changes to the index (inside the write's transaction)."""
    listing, labels = prefix + LISTING_TABLE, prefix + LABELS_TABLE
    for change in changes:
        conv = d.to_id(change.conversation_id)
        started = change.started
        first_user = None if change.first_user is None else d.to_id(change.first_user)
        if started is not None:
            parent = None if started.parent_id is None else d.to_id(started.parent_id)
            first_text = None if change.first_user is None else change.texts.get(change.first_user)
            execute(
                d.sql(
                    f"INSERT INTO {listing} (id, title, parent_id, source, created_at, "  # noqa: S608
                    "last_active, events, preview_message, preview) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                (
                    conv,
                    change.title,
                    parent,
                    started.source,
                    micros(happened(started)),
                    change.last_active,
                    change.version,
                    first_user,
                    first_text,
                ),
            )
        else:
            _update_row(execute, d, listing, change, first_user)
        for key in sorted(change.removed_labels):
            execute(
                d.sql(f"DELETE FROM {labels} WHERE conversation_id = ? AND key = ?"),  # noqa: S608
                (conv, key),
            )
        for key, value in change.set_labels.items():
            execute(
                d.sql(
                    f"INSERT INTO {labels} (conversation_id, key, value) VALUES (?, ?, ?) "  # noqa: S608
                    "ON CONFLICT (conversation_id, key) DO UPDATE SET value = excluded.value"
                ),
                (conv, key, value),
            )


def _update_row(
    execute: Execute, d: Dialect, listing: str, change: ListingChange, first_user: Any
) -> None:
    """One statement for a write to a listed conversation: its title when renamed, its
    event count and activity, and its first user message and that message's text (see
    :class:`~convstore.projections.listing.ListingChange`): every ``SET`` sees the row as it
    was, so ``COALESCE(preview_message, ?)`` is the first user message after this write."""
    sets = ["events = ?", "last_active = CASE WHEN last_active > ? THEN last_active ELSE ? END"]
    params: list[Any] = [change.version, change.last_active, change.last_active]
    if change.renamed:
        sets.insert(0, "title = ?")
        params.insert(0, change.title)
    if first_user is not None:
        sets.append("preview_message = COALESCE(preview_message, ?)")
        params.append(first_user)
    if change.texts:
        cases = ["WHEN preview IS NOT NULL THEN preview"]
        for message, text in change.texts.items():
            if first_user is None:
                cases.append("WHEN preview_message = ? THEN ?")
                params += [d.to_id(message), text]
            else:
                cases.append("WHEN COALESCE(preview_message, ?) = ? THEN ?")
                params += [first_user, d.to_id(message), text]
        sets.append(f"preview = CASE {' '.join(cases)} ELSE preview END")
    params.append(d.to_id(change.conversation_id))
    execute(d.sql(f"UPDATE {listing} SET {', '.join(sets)} WHERE id = ?"), params)  # noqa: S608


def clear_statements(prefix: str = "") -> list[str]:
    """Empty both tables (a rebuild refills them in the same transaction)."""
    return [f"DELETE FROM {prefix}{LISTING_TABLE}", f"DELETE FROM {prefix}{LABELS_TABLE}"]  # noqa: S608


DRIVE_RATIO = 20
"""How many rows of the listing index a walk may visit for each label match before a page is
read from the label's matches instead (see :func:`driving_label`): fetching and sorting a match
costs about twenty times what skipping a row in the walk does (measured on SQLite, 10,000
conversations: 14 µs against 0.7 µs)."""


def count_label(d: Dialect, prefix: str = "") -> str:
    """How many conversations carry one label (its key and value as parameters)."""
    return d.sql(f"SELECT count(*) FROM {prefix}{LABELS_TABLE} WHERE key = ? AND value = ?")  # noqa: S608


def driving_label(
    counts: Iterable[tuple[int, tuple[str, str]]], listed: int, limit: int | None
) -> tuple[str, str] | None:
    """The label a page should be read from, or ``None`` to walk the index in page order.

    A walk visits the conversations in the page's order and keeps those carrying every label:
    cheap per row, but a selective label makes it visit nearly every conversation to fill a
    page. Read from the rarest label's matches instead (their rows fetched by id, then
    sorted) when there are few enough of them: fewer than :data:`DRIVE_RATIO` times the rows a
    walk would visit (``listed``, the index's size, or with a ``limit`` about
    ``limit * listed / matches`` of them)."""
    rarest = min(counts, default=None)
    if rarest is None:
        return None
    matches, label = rarest
    if matches == 0:
        return label
    visited = listed if limit is None else min(listed, limit * listed // matches)
    return label if matches * DRIVE_RATIO < visited else None


def select_page(
    d: Dialect,
    query: ListingQuery,
    prefix: str = "",
    drive: tuple[str, str] | None = None,
) -> tuple[str, list[Any]]:
    """The statement for one page of the listing, newest activity (or oldest start) first:
    walking the index in that order, or with ``drive`` (one of the query's labels, see
    :func:`driving_label`) reading that label's matches first and sorting them."""
    listing, labels = prefix + LISTING_TABLE, prefix + LABELS_TABLE
    key = "last_active" if query.order == "active" else "created_at"
    where: list[str] = []
    params: list[Any] = []
    source = f"{listing} c"
    if drive is not None:
        # CROSS JOIN keeps SQLite's join order: the label's index first, then each row by id.
        source = (
            f"{labels} d CROSS JOIN {listing} c "
            "ON c.id = d.conversation_id AND d.key = ? AND d.value = ?"
        )
        params += list(drive)
    for name, value in query.labels:
        if (name, value) == drive:
            continue
        where.append(
            f"EXISTS (SELECT 1 FROM {labels} l WHERE l.conversation_id = c.id "  # noqa: S608
            "AND l.key = ? AND l.value = ?)"
        )
        params += [name, value]
    if query.ids:
        where.append(f"c.id IN ({', '.join(['?'] * len(query.ids))})")
        params += [d.to_id(conversation) for conversation in query.ids]
    if query.parent is not None:
        where.append("c.parent_id = ?")
        params.append(d.to_id(query.parent))
    if query.title is not None:
        escaped = query.title.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append(f"c.title {d.like} ? ESCAPE '\\'")
        params.append(f"%{escaped}%")
    for column, op, bound in (
        ("created_at", ">", query.started_after),
        ("created_at", "<", query.started_before),
        ("last_active", ">", query.active_after),
        ("last_active", "<", query.active_before),
    ):
        if bound is not None:
            where.append(f"c.{column} {op} ?")
            params.append(bound)
    if query.after is not None:
        op = "<" if query.order == "active" else ">"
        where.append(f"(c.{key}, c.id) {op} (?, ?)")
        params += [query.after[0], d.to_id(UUID(query.after[1]))]
    direction = "DESC" if query.order == "active" else "ASC"
    text = (
        "SELECT c.id, c.title, c.created_at, c.last_active, c.parent_id, c.source, c.events, "  # noqa: S608
        f"c.preview, (SELECT count(*) FROM {listing} k WHERE k.parent_id = c.id) "
        f"FROM {source}"
        + (" WHERE " + " AND ".join(where) if where else "")
        + f" ORDER BY c.{key} {direction}, c.id {direction}"
    )
    if query.limit is not None:
        text += " LIMIT ?"
        params.append(query.limit)
    return d.sql(text), params


def select_labels(d: Dialect, count: int, prefix: str = "") -> str:
    """The labels of ``count`` conversations (their ids as parameters)."""
    marks = ", ".join(["?"] * count)
    return d.sql(
        f"SELECT conversation_id, key, value FROM {prefix}{LABELS_TABLE} "  # noqa: S608
        f"WHERE conversation_id IN ({marks}) ORDER BY key"
    )


def listed_row(row: Sequence[Any]) -> ListedRow:
    """One selected row (ids as hex text or ``uuid``)."""
    raw_id, title, created_at, last_active, parent, source, events, preview, children = row
    return ListedRow(
        _uuid(raw_id),
        title,
        created_at,
        last_active,
        _uuid(parent) if parent else None,
        source,
        events,
        preview,
        int(children),
    )


def _uuid(value: Any) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
