"""Scanning the whole log: every conversation's events in log order.

``notifications`` pages through events for read models (refusing a damaged row), ``scan`` reads
every stored record for ``verify`` and ``dump`` (reporting a damaged row and going on),
``log_position`` and ``heads`` say how far the log and its hash chains reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from uuid import UUID

from eventsourcing.persistence import MapperDeserialisationError, Notification

from convstore.domain.events import Event
from convstore.domain.parsing import MAX_COUNT, parse_count
from convstore.ports.chain import Head
from convstore.ports.records import Recorded
from convstore.store.reading import TOPIC_BYTES, LogReader, damaged_topic


class LogScanner(LogReader):
    """Reads across conversations, in the order events were committed."""

    def notifications(self, after: int, limit: int) -> list[tuple[int, Event]]:
        """Up to ``limit`` events of every conversation recorded after log position ``after``.

        Positions are the log's notification ids: increasing in the order events committed.
        Every row is read, whatever its topic: a row whose stored topic disagrees with its
        event (damage ``verify`` reports and replay refuses) raises :class:`StoreError` naming
        the row instead of being skipped, so a projection never silently differs from replay.
        """
        after = parse_count(after, "after", maximum=MAX_COUNT)
        limit = parse_count(limit, "limit", 1, MAX_COUNT)
        page = self._guarded(
            lambda: self._log.recorder.select_notifications(after, limit, inclusive_of_start=False)
        )
        decode = self._log.pydantic_mapper.decode
        found: list[tuple[int, Event]] = []
        for n in page:
            event = self._guarded(lambda n=n: decode(n))  # type: ignore[misc]
            topic = n.topic.encode("utf-8", "surrogateescape")
            if topic != TOPIC_BYTES[event.type]:
                raise damaged_topic(event.originator_id, event, topic, position=n.id)
            found.append((n.id, event))
        return found

    def log_position(self) -> int:
        """The position of the newest event in the log (0 when it is empty)."""
        return self._guarded(self._log.recorder.max_notification_id) or 0

    def heads(self) -> dict[UUID, Head]:
        """Every conversation's chained head (the start marker under the nil id)."""
        return self._guarded(self._log.store_recorder.select_heads)

    def scan(self, page_size: int = 1000) -> Iterator[Recorded]:
        """Every stored record in log order, decoded one by one.

        A record that does not decode, or whose columns cannot even be read (a damaged or
        tampered row), is yielded with the reason instead of stopping the scan. On SQLite the
        rows are read with TEXT columns as bytes, so text that is not UTF-8 is one more reason.
        """
        return self._scan(parse_count(page_size, "page_size", 1, MAX_COUNT))

    def _scan(self, page_size: int) -> Iterator[Recorded]:
        select = self._log.store_recorder.select_raw_records
        after = 0
        while True:
            page = self._guarded(lambda after=after: select(after, page_size))  # type: ignore[misc]
            yield from map(self._recorded_row, page)
            if len(page) < page_size:
                return
            after = page[-1][0]

    def _recorded_row(self, row: tuple[Any, ...]) -> Recorded:
        """One raw stored row (position, id, version, topic, state; TEXT as bytes) decoded."""
        position, raw_id, version, raw_topic, state = row
        try:
            originator_id = UUID(bytes(raw_id).decode("utf-8"))
        except (TypeError, ValueError):
            detail = f"originator_id {_shown(raw_id)} is not a conversation id"
            return Recorded(position, None, None, None, detail)
        if version is None:
            return Recorded(position, originator_id, None, None, "the version is empty (NULL)")
        if not isinstance(state, bytes):
            return Recorded(position, originator_id, version, None, "the state is not bytes")
        unreadable = topic = None
        if not isinstance(raw_topic, bytes):
            unreadable, raw_topic = f"the topic {raw_topic!r} is not text", b""
        else:
            try:
                topic = raw_topic.decode("utf-8")
            except UnicodeDecodeError:
                unreadable = f"the topic column is not valid UTF-8 ({_shown(raw_topic)})"
        notification = Notification(
            originator_id=originator_id,
            originator_version=version,
            topic=topic or "",
            state=state,
            id=position,
        )
        recorded = self._recorded(notification)
        return replace(recorded, topic=topic, unreadable=unreadable, raw_topic=raw_topic)

    def _recorded(self, n: Notification) -> Recorded:
        """One scanned record, with the reason instead of the event if it does not decode."""
        try:
            event: Event | None = self._log.pydantic_mapper.decode(n)
            error = None
        except MapperDeserialisationError as exc:
            event, error = None, " ".join(str(exc.__cause__ or exc).split())[:300]
        return Recorded(
            n.id,
            n.originator_id,
            n.originator_version,
            event,
            error,
            n.topic,
            raw_topic=n.topic.encode("utf-8", "surrogateescape"),
            state=n.state,
        )


def _shown(value: object) -> str:
    """A damaged column's value, short and printable."""
    if isinstance(value, bytes):
        return repr(value[:40].decode("utf-8", "backslashreplace"))
    return repr(value)[:40]
