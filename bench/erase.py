#!/usr/bin/env python
"""The time and disk effect of erasing a 10,000-message conversation.

    python bench/erase.py [--messages N] [--dir DIR] [--pg-url URL]

A SQLite store holds one conversation of N messages (one text block each: 3 events a message)
beside a small one that is kept. The erase is timed against a baseline in the same run: a raw
``sqlite3`` ``DELETE`` of the same number of rows from a copy of the file, without
``secure_delete`` and without the write-ahead-log truncation. Sizes of the file and its
write-ahead log are printed before and after, with the free pages the erasure left (zeroed;
a ``VACUUM`` returns them to the filesystem, timed too). With ``--pg-url`` the erase is also
timed on PostgreSQL (info only).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from convstore import open_store


def _say(text: str) -> None:
    print(text, flush=True)  # noqa: T201


def _sizes(db: Path) -> str:
    wal = db.with_name(db.name + "-wal")
    wal_size = wal.stat().st_size if wal.exists() else 0
    with sqlite3.connect(db) as conn:
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        page = conn.execute("PRAGMA page_size").fetchone()[0]
    return (
        f"file {db.stat().st_size / 1e6:7.2f} MB, wal {wal_size / 1e6:6.2f} MB, "
        f"free pages {free} ({free * page / 1e6:.2f} MB)"
    )


def _fill(url: str, messages: int) -> tuple[str, str]:
    text = "a line of an agent's answer, long enough to be realistic. " * 8
    with open_store(url) as store:
        conv = store.new_conversation(title="big")
        kept = store.new_conversation(title="kept")
        store.append_message(kept, "user", [{"type": "text", "text": "kept"}])
        for n in range(messages):
            role = "user" if n % 2 == 0 else "assistant"
            store.append_message(conv, role, [{"type": "text", "text": f"{n} {text}"}])
    return str(conv), str(kept)


def _fork(db: Path, conv: str, messages: int) -> None:
    """Time a fork at the last message (a copy of the whole history), then erase the fork and
    vacuum, so the measured erase starts from a file without free pages."""
    with open_store(str(db)) as store:
        last = store.last_event(conv)
        # The last message's end: its end event (format 2) or its closing block (format 3).
        assert last is not None
        assert last.type in {"message_ended", "block_recorded"}
        started = time.perf_counter()
        fork = store.fork(conv, at=last.message_id)
        seconds = time.perf_counter() - started
        _say(f"fork of all {messages:,} messages (a copy): {seconds * 1000:.0f} ms")
        store.erase(fork, reason="bench: the fork")
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--pg-url", default=None)
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="convstore-erase-"))
    db = work / "erase.db"
    started = time.perf_counter()
    conv, _ = _fill(str(db), args.messages)
    _say(f"filled {args.messages:,} messages in {time.perf_counter() - started:.1f} s")
    _fork(db, conv, args.messages)
    copy = work / "baseline.db"
    shutil.copy(db, copy)
    for suffix in ("-wal", "-shm"):
        if db.with_name(db.name + suffix).exists():
            shutil.copy(db.with_name(db.name + suffix), copy.with_name(copy.name + suffix))
    _say(f"before: {_sizes(db)}")

    with open_store(str(db)) as store:
        started = time.perf_counter()
        erased = store.erase(conv, reason="bench")
        erase_seconds = time.perf_counter() - started
    _say(f"after:  {_sizes(db)}")

    with sqlite3.connect(copy, isolation_level=None) as conn:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM stored_events WHERE originator_id = ?", (conv.replace("-", ""),))
        conn.execute("COMMIT")
        raw_seconds = time.perf_counter() - started
    _say(
        f"erase of {erased.events:,} events: {erase_seconds * 1000:.0f} ms; raw DELETE "
        f"baseline {raw_seconds * 1000:.0f} ms; ratio {erase_seconds / raw_seconds:.1f}x"
    )
    with sqlite3.connect(db, isolation_level=None) as conn:
        started = time.perf_counter()
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        vacuum_seconds = time.perf_counter() - started
    _say(f"VACUUM + checkpoint {vacuum_seconds * 1000:.0f} ms; after it: {_sizes(db)}")

    if args.pg_url:
        conv, _ = _fill(args.pg_url, args.messages)
        with open_store(args.pg_url) as store:
            started = time.perf_counter()
            erased = store.erase(conv, reason="bench")
            seconds = time.perf_counter() - started
        _say(f"PostgreSQL: erase of {erased.events:,} events: {seconds * 1000:.0f} ms")


if __name__ == "__main__":
    main()
