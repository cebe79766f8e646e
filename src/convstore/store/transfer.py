"""Dump and load: the whole log as JSON lines, to move a store between backends or machines.

A dump is a header line, one line per stored event in log order, and a closing line::

    {"format": "convstore-dump", "version": 1, "created_at": "…", "source": "…", "through": 812,
     "store_format": 3}
    {"conversation": "<uuid>", "version": 1, "topic": "convstore:conversation_started",
     "event": {…the event's stored JSON…}}
    …
    {"end": {"events": 812, "conversations": 9}}

Dumping pages through the log (never more than one page in memory) and copies each event's
stored JSON as it is. Loading reads line by line, checks every event the way ``convstore
verify`` checks the log (versions gapless from ``conversation_started``, blocks only in open
messages …), and records the events in batches, one recorder transaction each, keeping their
ids, versions, timestamps and order. Each batch is checked whole before any of it is written,
and nothing is written past the last complete batch until the closing line has been read, so a
dump cut short at its end writes nothing of its tail.

A dump of a store of format 1 or 2 (its header's ``store_format``, which 0.3.x did not write)
loaded into a store of format 3 is folded as it is read: each conversation's events are
rewritten as format 3 records them (:func:`~convstore.projections.format3.format3_stream`: a
message's start, blocks and end become its block events, versions are renumbered and an undone
rewind names its rewind's new version), checked as the dump's own events were first. The target
store computes the hash chain of what it is given, as for any write. A store of format 1 or 2
receives a dump's events as they are (and refuses a block event of format 3).

A load that stopped half-way leaves the store holding a prefix of the dump; loading the same
dump again notices that (same number of events, same last event) and continues after it. Any
other non-empty store is refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import IntegrityError
from pydantic import ValidationError

from convstore.domain.errors import DumpError, InvalidInput, StoreError
from convstore.domain.event_parsing import parse_event
from convstore.domain.events import EVENT_ADAPTER, ConversationStarted, Event
from convstore.domain.limits import Limits
from convstore.infrastructure.common.gc_pause import paused_gc
from convstore.infrastructure.common.mapper import TOPICS, topic_of
from convstore.infrastructure.common.tables import BLOCK_EVENTS_FORMAT
from convstore.ports.records import Recorded
from convstore.projections.format3 import format3_stream
from convstore.store.scanning import LogScanner
from convstore.store.verify import Verifier
from convstore.store.writer import Writer

DUMP_FORMAT = "convstore-dump"
DUMP_VERSION = 1
"""The dump format this convstore writes and reads; a newer version is refused on load."""

PAGE_SIZE = 1000
"""Events read from the log per query while dumping."""

BATCH_SIZE = 1000
"""Events written per transaction while loading."""

_STARTED_TOPIC = topic_of(ConversationStarted)
_EVENT_KEYS = frozenset({"conversation", "version", "topic", "event"})

Progress = Callable[[int], None]
"""Called with how many more events were dumped or loaded."""


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a load did: events written now, events the store already held, conversations,
    and the dump's events they were made of (more than the store's when they were folded
    into format 3)."""

    loaded: int
    already_present: int
    conversations: int
    seconds: float
    read: int = 0
    """The dump's events read (its closing line's count)."""

    @property
    def events(self) -> int:
        """Events of the dump the store now holds (as the store records them)."""
        return self.loaded + self.already_present

    @property
    def folded(self) -> bool:
        """Whether the dump's events were rewritten as format 3 records them (fewer)."""
        return self.read != self.events


# -- dumping ----------------------------------------------------------------------------------


def dump_lines(store: Transferring, *, progress: Progress | None = None) -> Iterator[bytes]:
    """The store's whole log as dump lines (each ending in a newline), read page by page.

    The dump is of the log as it was when it started: events recorded meanwhile are left out.
    """
    recorder = store._log.recorder  # the transfer service is part of the store's layer
    plain = store._log.pydantic_mapper.plain
    end = store.log_position()
    header = {
        "format": DUMP_FORMAT,
        "version": DUMP_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        "source": store.location,
        "through": end,
        "store_format": store._log.store_format,
    }
    yield _line(header)
    events = conversations = 0
    after = 0
    while after < end:
        # Every row, whatever its topic: one whose topic is no event's is damage to refuse,
        # not a row to leave out of the dump without a word.
        page = store._guarded(
            lambda after=after: recorder.select_notifications(  # type: ignore[misc]
                after, PAGE_SIZE, stop=end, inclusive_of_start=False
            )
        )
        if not page:
            break
        for n in page:
            if n.topic not in TOPICS:
                msg = (
                    f"stored event {n.originator_id} v{n.originator_version} (log position "
                    f"{n.id}) is damaged: its topic {n.topic[:80]!r} names no convstore event; "
                    "convstore verify lists every such row"
                )
                raise StoreError(msg)
            # The stored JSON goes in as it is, not parsed and dumped again.
            fields = {
                "conversation": str(n.originator_id),
                "version": n.originator_version,
                "topic": n.topic,
            }
            yield json.dumps(fields).encode()[:-1] + b', "event": ' + plain(n.state) + b"}\n"
            conversations += n.topic == _STARTED_TOPIC
        events += len(page)
        if progress is not None:
            progress(len(page))
        after = page[-1].id
    yield _line({"end": {"events": events, "conversations": conversations}})


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode() + b"\n"


# -- loading ----------------------------------------------------------------------------------


class DumpReader:
    """Reads a dump's lines: the header at once (:attr:`header`), then events as checked:
    each decoded by the event model and held to the write API's checks within ``limits``."""

    def __init__(
        self, lines: Iterable[bytes], *, max_line_bytes: int, limits: Limits | None = None
    ) -> None:
        if isinstance(lines, str | bytes) or not isinstance(lines, Iterable):
            msg = f"a dump is given as lines (bytes), not {type(lines).__name__}"
            raise DumpError(msg)
        self._lines = iter(lines)
        self._max = max_line_bytes
        self._limits = limits or Limits()
        self.line_number = 0
        self.header = self._read_header()
        self.closing: dict[str, Any] | None = None

    def _next(self) -> bytes | None:
        raw = next(self._lines, None)
        if raw is None:
            return None
        self.line_number += 1
        if not isinstance(raw, bytes):
            msg = f"line {self.line_number} is {type(raw).__name__}, not bytes"
            raise DumpError(msg)
        if len(raw) > self._max:
            msg = (
                f"line {self.line_number} is longer than {self._max:,} bytes "
                "(CONVSTORE_MAX_INPUT_BYTES)"
            )
            raise DumpError(msg)
        return raw

    def _json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            cut = "" if raw.endswith(b"\n") else " (the file ends inside it: truncated?)"
            msg = f"line {self.line_number} is not JSON{cut}"
            raise DumpError(msg) from None

    def _read_header(self) -> dict[str, Any]:
        raw = self._next()
        if raw is None:
            msg = "the input is empty, not a convstore dump"
            raise DumpError(msg)
        try:
            header = json.loads(raw)
        except (ValueError, RecursionError):
            header = None
        if not isinstance(header, dict) or header.get("format") != DUMP_FORMAT:
            msg = f'not a convstore dump: line 1 is not the header {{"format": "{DUMP_FORMAT}"…}}'
            raise DumpError(msg)
        version = header.get("version")
        if version != DUMP_VERSION:
            msg = (
                f"dump format version {version!r} is not one this convstore reads ({DUMP_VERSION})"
            )
            raise DumpError(msg)
        return header

    def events(self) -> Iterator[Event]:
        """Each event line decoded and checked on its own, until the closing line."""
        while (raw := self._next()) is not None:
            value = self._json(raw)
            if isinstance(value, dict) and set(value) == {"end"}:
                self._close(value["end"])
                return
            yield self._event(value)
        msg = (
            f"the dump ends after line {self.line_number} without its closing line "
            '{"end": …}: it was cut short'
        )
        raise DumpError(msg)

    def _close(self, closing: Any) -> None:
        if not isinstance(closing, dict) or not isinstance(closing.get("events"), int):
            msg = f'line {self.line_number}: the closing line must be {{"end": {{"events": N}}}}'
            raise DumpError(msg)
        self.closing = closing
        if self._next() is not None:
            msg = f"line {self.line_number} follows the closing line"
            raise DumpError(msg)

    def _event(self, value: Any) -> Event:
        where = f"line {self.line_number}"
        if not isinstance(value, dict) or set(value) != _EVENT_KEYS:
            msg = f"{where} is not an event line (keys: {', '.join(sorted(_EVENT_KEYS))})"
            raise DumpError(msg)
        try:
            event = EVENT_ADAPTER.validate_python(value["event"])
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            at = ".".join(str(p) for p in first["loc"]) or "the top"
            msg = f"{where}: the event does not decode ({first['msg']} at {at})"
            raise DumpError(msg) from None
        if (value["conversation"], value["version"], value["topic"]) != (
            str(event.originator_id),
            event.originator_version,
            topic_of(type(event)),
        ):
            msg = f"{where}: its conversation, version or topic disagrees with the event inside"
            raise DumpError(msg)
        try:
            return parse_event(event, self._limits)
        except InvalidInput as exc:
            msg = f"{where}: {exc} (conversation {event.originator_id})"
            raise DumpError(msg) from None


@dataclass(frozen=True, slots=True)
class _Present:
    """What the target store already holds: how many events, and a way to read them again in
    log order (a page at a time), to hold them against the dump's first lines."""

    count: int
    events: Callable[[], Iterator[Event]]


def _none() -> Iterator[Event]:
    return iter(())


def _present(store: Transferring) -> _Present:
    if store.log_position() == 0:
        return _Present(0, _none)
    count, after = 0, 0
    while page := store.notifications(after, PAGE_SIZE):
        count += len(page)
        after = page[-1][0]

    def events() -> Iterator[Event]:
        after = 0
        while page := store.notifications(after, PAGE_SIZE):
            yield from (event for _, event in page)
            after = page[-1][0]

    return _Present(count, events)


class Loader:
    """Loads one dump into a store. The header is read (and checked) on construction, so a
    caller can refuse a file that is no dump before opening or creating any store. Events
    are held to the write API's checks within ``limits`` (the target store's)."""

    def __init__(
        self, lines: Iterable[bytes], *, max_line_bytes: int, limits: Limits | None = None
    ) -> None:
        self.reader = DumpReader(lines, max_line_bytes=max_line_bytes, limits=limits)
        self._resumed = False
        self._read = 0
        """The dump's events read and checked so far."""
        self._shown = 0
        """How many of them the progress callback was told of."""

    def folds_into(self, store: Transferring) -> bool:
        """Whether this dump's events are rewritten as format 3 on their way into ``store``:
        a store of format 3, and a dump of an earlier format (0.3.x wrote no
        ``store_format``: its stores were of format 1 or 2)."""
        made_from = self.header.get("store_format", 1)
        made_from = made_from if isinstance(made_from, int) else 1
        return store._log.block_events and made_from < BLOCK_EVENTS_FORMAT

    @property
    def header(self) -> dict[str, Any]:
        return self.reader.header

    def run(
        self,
        store: Transferring,
        *,
        batch_size: int = BATCH_SIZE,
        progress: Progress | None = None,
        on_resume: Callable[[int], None] | None = None,
        kept_on_failure: bool = True,
    ) -> LoadReport:
        """Write the dump's events into ``store`` (empty, or holding a prefix of this dump).

        A dump refused part-way leaves the store holding the batches written before, and the
        refusal says so (loading a corrected dump continues from there). A caller that throws
        the store away on failure (a new store made only for this load) passes
        ``kept_on_failure=False``, and the refusal names no prefix."""
        started = time.perf_counter()
        present = _present(store)
        verifier = Verifier()
        written = [0]
        self._resumed = False
        self._read = self._shown = 0
        try:
            self._load(
                store,
                present=present,
                verifier=verifier,
                written=written,
                batch_size=batch_size,
                progress=progress,
                on_resume=on_resume,
            )
        except DumpError as exc:
            held = written[0] + (present.count if self._resumed else 0)
            if not held or not kept_on_failure:
                raise
            msg = (
                f"{exc}; the store holds the first {held} events of the dump, so loading "
                "a corrected dump into it continues from there"
            )
            raise DumpError(msg) from None
        return LoadReport(
            loaded=written[0],
            already_present=present.count,
            conversations=len(verifier.conversations),
            seconds=time.perf_counter() - started,
            read=self._read,
        )

    def _load(
        self,
        store: Transferring,
        *,
        present: _Present,
        verifier: Verifier,
        written: list[int],
        batch_size: int,
        progress: Progress | None,
        on_resume: Callable[[int], None] | None,
    ) -> None:
        batch: list[Event] = []
        placed = 0
        held = present.events()
        checked = self._checked(verifier)
        # Folded or not, what is written is a function of the dump alone, so a store holding
        # the start of what this dump writes is resumed the same way.
        events = format3_stream(checked) if self.folds_into(store) else checked
        for event in events:
            placed += 1
            if placed <= present.count:
                self._check_prefix(present, next(held, None), event)
                if placed == present.count:
                    self._resumed = True
                    if on_resume is not None:
                        on_resume(placed)
                continue
            batch.append(event)
            if len(batch) == batch_size:
                written[0] += self._write(store, batch, progress)
                batch = []
        if placed < present.count:
            msg = (
                f"the store is not empty ({present.count} events) and this dump has only "
                f"{placed}: load into an empty store"
            )
            raise DumpError(msg)
        written[0] += self._write(store, batch, progress)

    def _checked(self, verifier: Verifier) -> Iterator[Event]:
        """The dump's events, each checked as it is read, then its closing line's count."""
        for event in self.reader.events():
            self._read += 1
            self._check(verifier, event, self._read)
            yield event
        counted = (self.reader.closing or {}).get("events")
        if counted != self._read:
            msg = f"the dump's closing line counts {counted} events but it holds {self._read}"
            raise DumpError(msg)

    def _check(self, verifier: Verifier, event: Event, seen: int) -> None:
        """The checks ``convstore verify`` makes, applied as the dump is read."""
        before = len(verifier.problems)
        record = Recorded(
            seen, event.originator_id, event.originator_version, event, topic=topic_of(type(event))
        )
        verifier.check(record)
        if len(verifier.problems) > before:
            problem = verifier.problems[before].problem
            msg = f"line {self.reader.line_number}: {problem} (conversation {event.originator_id})"
            raise DumpError(msg)

    def _check_prefix(self, present: _Present, held: Event | None, event: Event) -> None:
        """The store's event at this place must be the dump's: a store holding the start of
        this very dump is resumed, any other is refused."""
        if held != event:
            msg = (
                f"the store is not empty ({present.count} events) and does not hold the start "
                f"of this dump (its event at line {self.reader.line_number}'s place differs): "
                "load into an empty store"
            )
            raise DumpError(msg)

    def _write(self, store: Transferring, batch: list[Event], progress: Progress | None) -> int:
        """Write one batch; the progress is told of the dump's events read since last time
        (more than the batch when a dump is folded, or resumed)."""
        if not batch:
            return 0
        try:
            with paused_gc():
                store._save(batch)  # one recorder transaction per batch
        except IntegrityError as exc:
            msg = (
                "another writer recorded events in the store during the load "
                f"({' '.join(str(exc).split())[:200]}); load into a store nobody else writes to"
            )
            raise StoreError(msg) from None
        if progress is not None:
            progress(self._read - self._shown)
            self._shown = self._read
        return len(batch)


def load_lines(store: Transferring, lines: Iterable[bytes]) -> LoadReport:
    """Load a dump (its lines as bytes) into ``store``, within its limits; see :class:`Loader`."""
    limits = store.limits
    return Loader(lines, max_line_bytes=limits.max_input_bytes, limits=limits).run(store)


class Transferring(Writer, LogScanner):
    """The store's part that moves whole logs: dump lines out, load them in."""

    def dump(self) -> Iterator[bytes]:
        """The whole log as dump lines (JSON, each ending in a newline), page by page."""
        return dump_lines(self)

    def load(self, lines: Iterable[bytes]) -> LoadReport:
        """Record a dump's events into this store, which must be empty or hold a prefix of it
        (an interrupted load), keeping ids, versions, timestamps and order."""
        return load_lines(self, lines)
