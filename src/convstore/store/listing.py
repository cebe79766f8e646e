"""Listing conversations from the listing index (never from the log)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from uuid import UUID

from convstore.domain.errors import ConversationNotFound, InvalidInput
from convstore.domain.metadata import parse_labels
from convstore.domain.parsing import (
    MAX_COUNT,
    describe_value,
    parse_count,
    parse_id,
    parse_optional_name,
)
from convstore.ports.erasure import Erasure
from convstore.projections.listing import ListedRow, ListingQuery, from_micros, micros
from convstore.store.reading import LogReader


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """A conversation as listed: its id, title and when it started (and, when set, the
    conversation it branched from and where it was imported from)."""

    id: UUID
    title: str | None
    created_at: datetime
    parent_id: UUID | None = None
    """The conversation this one branched from (a subagent's parent), if any."""
    source: str | None = None
    """Where its history came from (an import's key, a runtime's session key), if recorded."""
    last_active: datetime | None = None
    """When its newest event happened (an imported message's time as its source gave it,
    unless that is later than the store recorded it)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Its labels (see :meth:`Store.set_labels`)."""
    events: int = 0
    """How many events its log holds."""
    preview: str | None = None
    """The start of its first user message's first text (whitespace made single spaces, at
    most 80 characters): what to show for a conversation without a title."""
    children: int = 0
    """How many conversations branched from it (see :meth:`Store.children`)."""

    @property
    def shown_title(self) -> str:
        """Its title, else its :attr:`preview` in quotes, else ``(untitled)``."""
        if self.title:
            return self.title
        return f"“{self.preview}”" if self.preview else "(untitled)"


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing: its conversations, and the cursor of the next page (``None``
    when this is the last). Pass ``next`` as ``after`` to get the next page."""

    conversations: list[ConversationInfo]
    next: str | None


class Listing(LogReader):
    """Lists conversations, filtered and paged, with one indexed read."""

    def conversations(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        title: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        active_after: datetime | None = None,
        active_before: datetime | None = None,
    ) -> list[ConversationInfo]:
        """Every conversation (matching the filters, as in :meth:`list_conversations`) in the
        order they were started, read from the listing index, never from the log."""
        query = self._listing_query(
            labels, title, started_after, started_before, active_after, active_before
        )
        return self._every(query)

    def list_conversations(
        self,
        *,
        labels: Mapping[str, str] | None = None,
        title: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        active_after: datetime | None = None,
        active_before: datetime | None = None,
        limit: int = 50,
        after: str | None = None,
    ) -> Page:
        """One page of conversations, newest activity first, from the listing index.

        ``labels`` keeps those holding every given key with that value; ``title`` those
        whose title contains the text (case-blind for ASCII); the four bounds compare with
        when a conversation started and when it was last active (exclusive). ``after`` is
        the ``next`` cursor of the previous page. Costs one indexed read however many
        conversations or events the store holds.
        """
        query = self._listing_query(
            labels, title, started_after, started_before, active_after, active_before
        )
        limit = parse_count(limit, "limit", 1, MAX_COUNT)
        cursor = None if after is None else _parse_cursor(after)
        rows, labels_of = self._select_listing(replace(query, limit=limit + 1, after=cursor))
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = f"{rows[-1].last_active}.{rows[-1].id.hex}" if more else None
        return Page([_info(row, labels_of.get(row.id, {})) for row in rows], next_cursor)

    def children(self, conversation: UUID | str) -> list[ConversationInfo]:
        """The conversations that branched from ``conversation`` (a session's subagents, its
        forks), oldest start first, from the listing index, never from the log."""
        return self._every(ListingQuery(parent=parse_id(conversation, "conversation")))

    def _every(self, query: ListingQuery) -> list[ConversationInfo]:
        """Every conversation ``query`` selects, oldest start first, read a thousand at a time."""
        found: list[ConversationInfo] = []
        query = replace(query, order="started", limit=1000)
        while True:
            rows, labels_of = self._select_listing(query)
            found += [_info(row, labels_of.get(row.id, {})) for row in rows]
            if len(rows) < 1000:
                return found
            query = replace(query, after=(rows[-1].created_at, rows[-1].id.hex))

    def conversation_info(self, conversation: UUID | str) -> ConversationInfo:
        """One conversation as :meth:`list_conversations` lists it (title, labels, last
        activity, events), from the listing index: one indexed read."""
        conversation_id = parse_id(conversation, "conversation")
        rows, labels_of = self._select_listing(ListingQuery(ids=(conversation_id,), limit=1))
        if not rows:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return _info(rows[0], labels_of.get(rows[0].id, {}))

    def rebuild_listing(self) -> int:
        """Refill the listing index from the log in one transaction (writers wait meanwhile);
        returns how many conversations it lists. Opening a store made before the index does
        this on its own."""
        decode = self._log.pydantic_mapper.decode_state
        previews = self._log.mapper.cipher is None  # no message text in the clear otherwise
        recorder = self._log.store_recorder
        return self._guarded(lambda: recorder.rebuild_listing(decode, previews=previews))

    def _listing_query(  # noqa: PLR0917 - the public filters, passed on as they came
        self,
        labels: Mapping[str, str] | None,
        title: str | None,
        started_after: datetime | None,
        started_before: datetime | None,
        active_after: datetime | None,
        active_before: datetime | None,
    ) -> ListingQuery:
        wanted = () if labels is None else tuple(parse_labels(labels, self.limits).items())
        return ListingQuery(
            labels=wanted,
            title=parse_optional_name(title, "title", self.limits.max_note_bytes),
            started_after=parse_moment(started_after, "started_after"),
            started_before=parse_moment(started_before, "started_before"),
            active_after=parse_moment(active_after, "active_after"),
            active_before=parse_moment(active_before, "active_before"),
        )

    def _select_listing(
        self, query: ListingQuery
    ) -> tuple[list[ListedRow], dict[UUID, dict[str, str]]]:
        return self._guarded(lambda: self._log.store_recorder.select_listing(query))

    def erasures(self, after: int = 0) -> list[Erasure]:
        """The tombstones of erased conversations after ``seq`` ``after``, in order."""
        after = parse_count(after, "after", maximum=MAX_COUNT)
        return self._guarded(lambda: self._log.store_recorder.select_erasures(after))


def _info(row: ListedRow, labels: dict[str, str]) -> ConversationInfo:
    return ConversationInfo(
        row.id,
        row.title,
        from_micros(row.created_at),
        row.parent_id,
        row.source,
        last_active=from_micros(row.last_active),
        labels=labels,
        events=row.events,
        preview=row.preview,
        children=row.children,
    )


def parse_moment(value: datetime | None, what: str) -> int | None:
    """A bound on a listing (or an erasure's ``idle_since``) as microseconds since the epoch;
    a naive time is refused."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        msg = f"{what} must be a datetime, not {describe_value(value)}"
        raise InvalidInput(msg)
    if value.tzinfo is None or value.utcoffset() is None:
        msg = f"{what} must be timezone-aware (e.g. datetime.now(UTC)), not a naive time"
        raise InvalidInput(msg)
    return micros(value)


def _parse_cursor(value: str) -> tuple[int, str]:
    """A ``next`` cursor from :meth:`Store.list_conversations`: ``<microseconds>.<id hex>``."""
    if isinstance(value, str):
        stamp, _, hex_id = value.partition(".")
        if stamp.isascii() and stamp.lstrip("-").isdigit() and len(hex_id) == 32:
            try:
                micros_ = int(stamp)
                if -(2**63) <= micros_ < 2**63:  # the index's 64-bit column
                    return micros_, UUID(hex_id).hex
            except ValueError:
                pass
    msg = f"{describe_value(value)} is not a listing cursor (give a page's `next` value)"
    raise InvalidInput(msg)
