#!/usr/bin/env python
"""The first page of ``list_conversations`` at 10,000 and 100,000 conversations.

    python bench/listing.py [--sizes 10000,100000] [--events 30] [--dir DIR]

Each store is filled fast: every conversation's 30 events (started, nine whole messages, an
open one with a block) are made once as a template, copied per conversation with a fresh id
and timestamp, and inserted straight through the store's recorder in batches of 1,000
conversations, with the listing changes the store itself would pass. Then, on a freshly
opened store:

- ``first page``: ``Store.list_conversations(limit=50)`` (newest activity first);
- ``labelled page``: the same with ``labels={"team": "t3"}`` (every 7th conversation);
- ``page 20``: the 20th page, reached through the cursors;
- baseline: the raw indexed ``SELECT … ORDER BY last_active DESC, id DESC LIMIT 50`` on a
  plain ``sqlite3`` connection, in the same run.

At the smaller size it also times the listing as it was before the index (a scan of every
``conversation_started`` in the log) to show what the index replaces. Figures are medians of
25 runs, in milliseconds.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.persistence import StoredEvent

import convstore
from convstore.domain.blocks import TextBlock
from convstore.domain.conversation import Conversation
from convstore.domain.events import ConversationStarted, Event, LabelsSet, Role
from convstore.infrastructure.common.mapper import topic_of
from convstore.projections.listing import listing_changes

TEMPLATE_ID = UUID("00000000-0000-4000-8000-000000000000")
START = datetime(2026, 1, 1, tzinfo=UTC)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # noqa: T201


def template(events_per_conversation: int) -> list[Event]:
    """One conversation's events: started, whole messages, then an open one, labelled."""
    state = Conversation(id=TEMPLATE_ID)
    events: list[Event] = []

    def take(new: list[Event]) -> None:
        for event in new:
            state.apply(event)
        events.extend(new)

    take([Conversation.start(TEMPLATE_ID, "bench conversation")])
    take([state.set_labels({"team": "t0"}, convstore.Limits())])
    while len(events) + 3 <= events_per_conversation:
        role: Role = "user" if len(events) % 2 else "assistant"
        take(state.record_message(role, [TextBlock(text="a short turn of the conversation")]))
    while len(events) < events_per_conversation:
        take([state.start_message("user")])
    return [e.model_copy(update={"timestamp": START}) for e in events]


def fill(path: Path, count: int, per: int) -> float:
    """Write ``count`` conversations of ``per`` events each; returns the seconds it took."""
    events = template(per)
    topics = [topic_of(type(e)) for e in events]
    states = [e.model_dump_json() for e in events]
    stamp = START.isoformat().replace("+00:00", "Z")
    started = time.perf_counter()
    with convstore.open_store(path) as store:
        recorder = store._log.recorder
        batch: list[StoredEvent] = []
        changes: list[Any] = []
        for n in range(count):
            conv = uuid4()
            when = START + timedelta(seconds=n)
            text_when = when.isoformat().replace("+00:00", "Z")
            label = f"t{n % 7}"
            for event, topic, state in zip(events, topics, states, strict=True):
                body = state.replace(str(TEMPLATE_ID), str(conv)).replace(stamp, text_when)
                if isinstance(event, LabelsSet):
                    body = body.replace('"t0"', f'"{label}"')
                batch.append(StoredEvent(conv, event.originator_version, topic, body.encode()))
            first = events[0]
            assert isinstance(first, ConversationStarted)
            changes += listing_changes(
                [
                    first.model_copy(update={"originator_id": conv, "timestamp": when}),
                    LabelsSet(
                        originator_id=conv,
                        originator_version=per,
                        timestamp=when,
                        labels={"team": label},
                    ),
                ]
            )
            if (n + 1) % 1000 == 0 or n + 1 == count:
                recorder.insert_events(batch, listing=changes)
                batch, changes = [], []
                if (n + 1) % 20_000 == 0:
                    log(f"  {n + 1:,} conversations written")
    return time.perf_counter() - started


def median_ms(call: Callable[[], Any], runs: int = 25) -> float:
    call()  # warm the page cache and the statement cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def old_scan(store: convstore.Store) -> int:
    """The listing before the index: every conversation_started in the log, decoded."""
    topic = topic_of(ConversationStarted)
    recorder = store._log.recorder
    found, start = 0, 1
    while True:
        page = recorder.select_notifications(start, 500, topics=[topic])
        found += len([store._log.pydantic_mapper.decode(n) for n in page])
        if len(page) < 500:
            return found
        start = page[-1].id + 1


def measure(path: Path, size: int, *, scan: bool) -> dict[str, float]:
    figures: dict[str, float] = {}
    with convstore.open_store(path) as store:
        first = store.list_conversations(limit=50)
        assert len(first.conversations) == 50
        figures["first page"] = median_ms(lambda: store.list_conversations(limit=50))
        figures["labelled page"] = median_ms(
            lambda: store.list_conversations(limit=50, labels={"team": "t3"})
        )
        cursor = first.next
        for _ in range(18):
            cursor = store.list_conversations(limit=50, after=cursor).next
        figures["page 20"] = median_ms(lambda: store.list_conversations(limit=50, after=cursor))
        if scan:
            assert old_scan(store) == size
            figures["old full scan"] = median_ms(lambda: old_scan(store), runs=3)
    with closing(sqlite3.connect(path)) as conn:
        sql = (
            "SELECT id, title, created_at, last_active, parent_id, source, events "
            "FROM convstore_listing ORDER BY last_active DESC, id DESC LIMIT 50"
        )
        figures["raw SELECT baseline"] = median_ms(lambda: conn.execute(sql).fetchall())
        (events,) = conn.execute("SELECT max(rowid) FROM stored_events").fetchone()
        figures["events in log"] = float(events)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for size in sizes:
            path = Path(tmp) / f"listing-{size}.db"
            log(f"filling {size:,} conversations x {args.events} events ...")
            seconds = fill(path, size, args.events)
            log(f"  filled in {seconds:.1f} s ({path.stat().st_size / 1e6:,.0f} MB)")
            figures = measure(path, size, scan=size == min(sizes))
            print(f"\n{size:,} conversations, {int(figures.pop('events in log')):,} events")  # noqa: T201
            for name, value in figures.items():
                print(f"  {name:<22} {value:8.2f} ms")  # noqa: T201
            base = figures["raw SELECT baseline"]
            print(f"  first page / baseline  {figures['first page'] / base:8.1f} x")  # noqa: T201
            path.unlink()


if __name__ == "__main__":
    main()
