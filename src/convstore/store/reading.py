"""Reading conversations back: the part of the store every other part stands on.

:class:`LogReader` holds the event log and turns backend failures into :class:`StoreError`
(one line, never the password). It reads one conversation's events, decoded one by one, and
refuses a row whose stored topic disagrees with its event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import TypeVar
from uuid import UUID

from eventsourcing.persistence import MapperDeserialisationError, PersistenceError
from pydantic import JsonValue

from convstore.domain.errors import ConversationNotFound, StoreError
from convstore.domain.events import (
    BlockRecorded,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    message_opened,
)
from convstore.domain.limits import Limits
from convstore.domain.parsing import MAX_COUNT, parse_count, parse_id, parse_optional_count
from convstore.engine.model import Folded
from convstore.infrastructure.common.application import EventLog
from convstore.infrastructure.common.gc_pause import paused_gc
from convstore.infrastructure.common.mapper import TOPIC_PREFIX, TOPICS
from convstore.infrastructure.common.trusted_decode import decode_stored, stored_block
from convstore.ports.records import failure_detail
from convstore.projections.messages import RecordedMessage, collect_messages

_T = TypeVar("_T")


class LogReader:
    """One event log, read conversation by conversation."""

    def __init__(
        self, log: EventLog, location: str, *, secret: str = "", limits: Limits | None = None
    ) -> None:
        self._log = log
        self.limits = limits or Limits()
        """The block and image size limits this store enforces."""
        self.location = location
        """Where the store is, safe to show: a file path, or a URL without its password."""
        self._secret = secret

    def events(self, conversation: UUID | str) -> list[Event]:
        """Every recorded event of a conversation, in order."""
        conversation_id = parse_id(conversation, "conversation")
        with paused_gc():
            events = list(self._stream(conversation_id))
        if not events:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return events

    def tail(
        self, conversation: UUID | str, *, messages: int, before: int | None = None
    ) -> list[Event]:
        """The end of a conversation's log, in order: every event after the start of the
        message before the ``messages``-th newest one started before version ``before``
        (before the end when ``None``) through the newest event. Read backwards from the end
        in growing pages, so the newest messages of a long log cost a few hundred decodes.

        When no message started before those, the whole log is returned: it begins with the
        conversation's start. Fold a tail that does not with
        ``collect_history(events, tail=True)``.
        """
        conversation_id = parse_id(conversation, "conversation")
        wanted = parse_count(messages, "messages", 1)
        limit = parse_optional_count(before, "before", 1)
        recorder, decode = self._log.recorder, self._log.pydantic_mapper.decode
        found: list[Event] = []
        started = 0
        counted: set[UUID] = set()  # a message's first block, then (earlier) its start
        top: int | None = None
        chunk = min(4 * wanted + 16, 100_000)  # a message is a few events; never a huge LIMIT
        with paused_gc():
            while True:
                rows = self._guarded(
                    lambda top=top, chunk=chunk: recorder.select_events(  # type: ignore[misc]
                        conversation_id, lte=top, desc=True, limit=chunk
                    )
                )
                for row in rows:
                    event = self._guarded(lambda row=row: decode(row))  # type: ignore[misc]
                    topic = row.topic.encode("utf-8", "surrogateescape")
                    if topic != TOPIC_BYTES[event.type]:
                        raise damaged_topic(conversation_id, event, topic)
                    opening = message_opened(event)
                    if (
                        opening is not None
                        and opening not in counted
                        and (limit is None or event.originator_version < limit)
                    ):
                        if started == wanted:
                            return found[::-1]
                        started += 1
                        counted.add(opening)
                    found.append(event)
                if len(rows) < chunk:
                    break
                top = rows[-1].originator_version - 1
                chunk = min(chunk * 2, 100_000)
        if not found:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return found[::-1]

    def events_after(self, conversation: UUID | str, after: int) -> tuple[int, list[Event]]:
        """A conversation's events after version ``after`` (none when there are none, or the
        conversation does not exist), with its log's change count read in the same snapshot.

        For a reader that keeps a fold of the log and catches it up: a change count that
        differs from the one it read before means rows it folded were changed in place (see
        :data:`convstore.infrastructure.common.log_changes.CHANGES_TABLE`), so it folds again
        from 0.
        """
        conversation_id = parse_id(conversation, "conversation")
        after = parse_count(after, "after", maximum=MAX_COUNT)
        with paused_gc():
            changes, tail = self._counted_stream(conversation_id, after)
            return changes, list(tail.events())

    def raw_events(self, conversation: UUID | str) -> Iterator[bytes]:
        """Every recorded event of a conversation as its full JSON, whatever its stored form."""
        conversation_id = parse_id(conversation, "conversation")
        states = self._guarded(lambda: self._log.store_recorder.select_states(conversation_id))
        if not states:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return map(self._log.pydantic_mapper.plain, states)

    def messages(self, conversation: UUID | str) -> list[RecordedMessage]:
        """The stored messages of a conversation with their blocks and status."""
        return collect_messages(self.events(conversation))

    def entries(self, conversation: UUID | str) -> list[dict[str, JsonValue]] | None:
        """The runtime entries recorded since the last deletion, in order; ``None`` when
        there are none (never recorded, or deleted) or the conversation does not exist."""
        conversation_id = parse_id(conversation, "conversation")
        found: list[dict[str, JsonValue]] | None = None
        with paused_gc():
            for event in self._stream(conversation_id):
                if isinstance(event, EntriesRecorded):
                    found = [*(found or []), *event.entries]
                elif isinstance(event, EntriesDeleted):
                    found = None
        return found

    def last_event(self, conversation: UUID | str) -> Event | None:
        """The newest event of a conversation (``None`` when it does not exist); one read."""
        conversation_id = parse_id(conversation, "conversation")
        found = self._guarded(
            lambda: self._log.recorder.select_events(conversation_id, desc=True, limit=1)
        )
        if not found:
            return None
        return self._guarded(lambda: self._log.pydantic_mapper.decode(found[0]))

    def _failure(self, exc: Exception) -> StoreError:
        """A backend failure as one line naming the store, never showing its password."""
        detail = failure_detail(exc, self._secret)
        if isinstance(exc, MapperDeserialisationError):
            return StoreError(detail)
        return StoreError(f"store failed at {self.location}: {detail}")

    def _guarded(self, call: Callable[[], _T]) -> _T:
        """Run a backend call, turning its failures into :class:`StoreError`."""
        try:
            return call()
        except (MapperDeserialisationError, PersistenceError) as exc:
            raise self._failure(exc) from exc

    def _stream(self, conversation_id: UUID, after: int = 0) -> Iterator[Event]:
        """A conversation's events after version ``after``, decoded one by one as they are
        consumed (replay folds them without holding a list)."""
        rows = self._guarded(
            lambda: self._log.store_recorder.select_topics_and_states(conversation_id, after)
        )
        yield from self._decoded(conversation_id, rows)

    def _counted_stream(self, conversation_id: UUID, after: int = 0) -> tuple[int, _Tail]:
        """:meth:`_stream`, with the conversation's change count read in the same snapshot
        (see :data:`convstore.infrastructure.common.log_changes.CHANGES_TABLE`)."""
        changes, rows = self._guarded(
            lambda: self._log.store_recorder.select_log_tail(conversation_id, after)
        )
        return changes, _Tail(self, conversation_id, rows)

    def _decoded(
        self,
        conversation_id: UUID,
        rows: Iterable[tuple[bytes, bytes]],
        *,
        trusted: bool = False,
    ) -> Iterator[Event]:
        """(topic, state) rows of one conversation decoded, refusing a damaged topic;
        ``trusted``: rebuilt from their fields without validating them again, as replay reads
        them (:mod:`convstore.infrastructure.common.trusted_decode`)."""
        mapper = self._log.pydantic_mapper
        decode = partial(decode_stored, mapper) if trusted else mapper.decode_state
        for topic, state in rows:
            yield _checked(conversation_id, decode, topic, state)

    def _folded(
        self, conversation_id: UUID, rows: Iterable[tuple[bytes, bytes]]
    ) -> Iterator[Folded]:
        """Rows as replay's fold takes them: a block event's row as it holds it, without a
        model (:func:`~convstore.infrastructure.common.trusted_decode.stored_block`), any
        other decoded as :meth:`_decoded` with ``trusted`` decodes it."""
        mapper = self._log.pydantic_mapper
        decode = partial(decode_stored, mapper)
        for topic, state in rows:
            if topic == _BLOCK_TOPIC:
                stored = stored_block(
                    mapper.unwrapped(state),
                    partial(_checked, conversation_id, decode, topic, state),
                )
                if stored is not None:
                    yield stored
                    continue
            yield _checked(conversation_id, decode, topic, state)

    def _exists(self, conversation_id: UUID) -> bool:
        found = self._guarded(lambda: self._log.recorder.select_events(conversation_id, limit=1))
        return bool(found)

    def _read(self, conversation_id: UUID, after: int = 0) -> list[Event]:
        return list(self._stream(conversation_id, after))


TOPIC_BYTES: dict[str, bytes] = {
    topic.removeprefix(TOPIC_PREFIX): topic.encode() for topic in TOPICS
}
_BLOCK_TOPIC = TOPIC_BYTES[str(BlockRecorded.model_fields["type"].default)]


def _checked(
    conversation_id: UUID, decode: Callable[[bytes], Event], topic: bytes, state: bytes
) -> Event:
    """One row's event, refusing a state that does not decode or a damaged topic in one line."""
    try:
        event = decode(state)
    except ValueError as exc:  # a pydantic ValidationError, or a bad compressed state
        msg = f"a stored event of conversation {conversation_id} does not decode: {exc}"
        raise StoreError(" ".join(msg.split())[:500]) from exc
    if topic != TOPIC_BYTES[event.type]:
        raise damaged_topic(conversation_id, event, topic)
    return event


def damaged_topic(
    conversation_id: UUID, event: Event, topic: bytes, position: int | None = None
) -> StoreError:
    """Replay, ``project`` and ``dump`` refuse a row whose stored topic disagrees with its event:
    a reader selecting by topic would skip it, and the views must not differ silently.
    ``position`` (the row's place in the log) is named when the reader knows it."""
    shown = topic.decode("utf-8", "backslashreplace")[:80]
    where = "" if position is None else f" (log position {position})"
    return StoreError(
        f"stored event {conversation_id} v{event.originator_version}{where} is damaged: its "
        f"topic {shown!r} disagrees with the event ({TOPIC_PREFIX}{event.type}); "
        "convstore verify lists every such row"
    )


class _Tail:
    """A conversation's (topic, state) rows after a version, decoded as consumed (a
    :class:`convstore.infrastructure.common.replay_tables.LogTail`)."""

    __slots__ = ("_conversation", "_reader", "_rows")

    def __init__(
        self, reader: LogReader, conversation: UUID, rows: list[tuple[bytes, bytes]]
    ) -> None:
        self._reader, self._conversation, self._rows = reader, conversation, rows

    def first_version(self) -> int | None:
        if not self._rows:
            return None
        version = self._reader._log.pydantic_mapper.version_in_header(self._rows[0][1])
        if version is not None:
            return version
        return next(self._reader._decoded(self._conversation, self._rows[:1])).originator_version

    def events(self, *, skip_first: bool = False) -> Iterator[Event]:
        rows = self._rows[1:] if skip_first else self._rows
        return self._reader._decoded(self._conversation, rows, trusted=True)

    def folded(self, *, skip_first: bool = False) -> Iterator[Folded]:
        rows = self._rows[1:] if skip_first else self._rows
        return self._reader._folded(self._conversation, rows)
