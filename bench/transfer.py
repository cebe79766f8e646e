#!/usr/bin/env python
"""Import and dump/load throughput, each paired with a raw baseline in the same run.

    python bench/transfer.py [--quick] [--dir DIR] [--pg-url URL]

- import: a synthetic Chat Completions body (user text, assistant text + tool calls, tool
  results, repeated) imported into a fresh SQLite store: blocks/s, against a raw ``json.loads``
  of the same file. The converter-plus-record path runs when the openai-chat converter is in
  this build; the record-only path (the same history, already converted) always runs.
- dump: ``Store.dump()`` of a store written to a file, against a raw ``sqlite3`` SELECT of the
  same rows written out as lines: events/s.
- load: ``Store.load()`` of that dump into a fresh SQLite store, against raw ``sqlite3``
  inserts of the same rows into a fresh file with the same table (WAL, synchronous=FULL,
  batches of 1,000 per transaction, as load does): events/s. Plus load into PostgreSQL
  (info only) when the server answers.

Each pair alternates which side runs first; the ratio printed is the median of the repeats'
paired ratios (convstore time / baseline time).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import convstore
from convstore.convert.history import History, HistoryMessage
from convstore.domain.blocks import Block, TextBlock, ToolResultBlock, ToolUseBlock
from convstore.store.transfer import BATCH_SIZE

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # noqa: T201


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def paired(
    repeats: int, ours: Callable[[int], float], baseline: Callable[[int], float]
) -> tuple[float, float, float]:
    """Median of each side's seconds and the median paired ratio; order alternates."""
    mine, theirs, ratios = [], [], []
    for rep in range(repeats):
        if rep % 2:
            b = baseline(rep)
            a = ours(rep)
        else:
            a = ours(rep)
            b = baseline(rep)
        mine.append(a)
        theirs.append(b)
        ratios.append(a / b)
    return statistics.median(mine), statistics.median(theirs), statistics.median(ratios)


# -- import -----------------------------------------------------------------------------------


def chat_body(rounds: int) -> tuple[dict[str, Any], History, int]:
    """A Chat Completions body, the history it holds, and its block count."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    history = History(messages=[HistoryMessage("system", (TextBlock(text="You are terse."),))])
    blocks = 1
    for n in range(rounds):
        question = f"Round {n}: what does the log say about step {n}? " + "context " * 40
        messages.append({"role": "user", "content": question})
        history.messages.append(HistoryMessage("user", (TextBlock(text=question),)))
        calls: list[dict[str, Any]] = [
            {
                "id": f"call_{n}_{k}",
                "type": "function",
                "function": {"name": "grep", "arguments": json.dumps({"q": f"step {n}", "k": k})},
            }
            for k in range(2)
        ]
        messages.append({"role": "assistant", "content": "Let me look.", "tool_calls": calls})
        turn: list[Block] = [TextBlock(text="Let me look.")]
        turn += [
            ToolUseBlock(id=c["id"], name="grep", input=json.loads(c["function"]["arguments"]))
            for c in calls
        ]
        history.messages.append(HistoryMessage("assistant", tuple(turn)))
        results: list[Block] = []
        for c in calls:
            output = f"log line for {c['id']}: " + "ok " * 80
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": output})
            results.append(ToolResultBlock(tool_use_id=c["id"], content=output))
        history.messages.append(HistoryMessage("user", tuple(results)))
        blocks += 1 + len(turn) + len(results)
    return {"model": "gpt-4o", "messages": messages}, history, blocks


def bench_import(work: Path, rounds: int, repeats: int) -> list[tuple[str, str, str, str]]:
    body, history, blocks = chat_body(rounds)
    path = work / "chat.json"
    path.write_text(json.dumps(body))
    text = path.read_text()
    log(f"import: {blocks:,} blocks, {len(text):,} bytes")

    def raw(_: int) -> float:
        return timed(lambda: json.loads(text))

    def record_only(rep: int) -> float:
        with convstore.open_store(work / f"rec{rep}.db") as store:
            return timed(lambda: store.import_histories([history]))

    rows = []
    a, b, ratio = paired(repeats, record_only, raw)
    rows.append(
        (
            "import, record only (history already converted)",
            f"{blocks / a:,.0f} blocks/s",
            f"{blocks / b:,.0f} blocks/s",
            f"{ratio:.1f}x",
        )
    )
    if importlib.util.find_spec("convstore.convert.openai_chat") is None:
        log("import: the openai-chat converter is not in this build; full path skipped")
        return rows
    from convstore.store.importing import read_histories, sources_for  # noqa: PLC0415

    def full(rep: int) -> float:
        with convstore.open_store(work / f"full{rep}.db") as store:

            def run() -> None:
                data = json.loads(text)
                histories = read_histories("openai-chat", text, data)
                sources = sources_for("openai-chat", histories, text.encode())
                store.import_histories(histories, sources=sources)

            return timed(run)

    a, b, ratio = paired(repeats, full, raw)
    rows.append(
        (
            "import openai-chat file (parse, convert, record)",
            f"{blocks / a:,.0f} blocks/s",
            f"{blocks / b:,.0f} blocks/s",
            f"{ratio:.1f}x",
        )
    )
    return rows


# -- dump and load ----------------------------------------------------------------------------

RAW_TABLE = """CREATE TABLE stored_events (
    originator_id TEXT, originator_version INTEGER, topic TEXT, state BLOB,
    PRIMARY KEY (originator_id, originator_version))"""


def build_store(path: Path, messages: int) -> int:
    with convstore.open_store(path) as store:
        convs = [store.new_conversation(title=f"c{n}") for n in range(10)]
        for n in range(messages):
            role = "user" if n % 2 == 0 else "assistant"
            blocks = [
                {"type": "text", "text": f"message {n} part {k} " + "word " * 60} for k in range(3)
            ]
            store.append_message(convs[n % 10], role, blocks)
        return store.log_position()


def bench_dump_load(
    work: Path, messages: int, repeats: int, pg_url: str | None
) -> list[tuple[str, str, str, str]]:
    source = work / "source.db"
    events = build_store(source, messages)
    log(f"dump/load: {events:,} events")
    with closing(sqlite3.connect(source)) as conn:
        rows = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY rowid"
        ).fetchall()

    def dump(rep: int) -> float:
        out = work / f"dump{rep}.jsonl"
        with convstore.open_store(source) as store, out.open("wb") as handle:
            return timed(lambda: handle.writelines(store.dump()))

    def raw_dump(rep: int) -> float:
        out = work / f"raw{rep}.jsonl"

        def run() -> None:
            with closing(sqlite3.connect(source)) as conn, out.open("wb") as handle:
                cursor = conn.execute(
                    "SELECT originator_id, originator_version, topic, state FROM "
                    "stored_events ORDER BY rowid"
                )
                for oid, version, topic, state in cursor:
                    handle.write(json.dumps([oid, version, topic]).encode() + b"\t" + state + b"\n")

        return timed(run)

    def load(rep: int) -> float:
        dumped = (work / "dump0.jsonl").read_bytes().splitlines(keepends=True)
        with convstore.open_store(work / f"load{rep}.db") as store:
            return timed(lambda: store.load(dumped))

    def raw_load(rep: int) -> float:
        target = work / f"rawload{rep}.db"

        def run() -> None:
            with closing(sqlite3.connect(target, isolation_level=None)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute(RAW_TABLE)
                for start in range(0, len(rows), BATCH_SIZE):
                    conn.execute("BEGIN")
                    conn.executemany(
                        "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
                        rows[start : start + BATCH_SIZE],
                    )
                    conn.execute("COMMIT")

        return timed(run)

    out = []
    a, b, ratio = paired(repeats, dump, raw_dump)
    out.append(
        (
            "dump (SQLite)",
            f"{events / a:,.0f} events/s",
            f"{events / b:,.0f} events/s",
            f"{ratio:.1f}x",
        )
    )
    a, b, ratio = paired(repeats, load, raw_load)
    out.append(
        (
            "load (into SQLite)",
            f"{events / a:,.0f} events/s",
            f"{events / b:,.0f} events/s",
            f"{ratio:.1f}x",
        )
    )
    if pg_url:
        out.extend(_pg_load(work, pg_url, events))
    return out


def _pg_load(work: Path, pg_url: str, events: int) -> list[tuple[str, str, str, str]]:
    try:
        import psycopg  # noqa: PLC0415
        from psycopg import sql  # noqa: PLC0415

        psycopg.connect(pg_url, connect_timeout=3).close()
    except Exception as exc:  # noqa: BLE001 - any failure means: skip this row
        log(f"load into PostgreSQL skipped: {' '.join(str(exc).split())}")
        return []
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    dumped = (work / "dump0.jsonl").read_bytes().splitlines(keepends=True)
    try:
        with convstore.open_store(f"{pg_url}?schema={schema}") as store:
            seconds = timed(lambda: store.load(dumped))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return [("load (into PostgreSQL), info", f"{events / seconds:,.0f} events/s", "-", "-")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer repeats")
    parser.add_argument("--dir", help="where the temporary stores go (default $TMPDIR)")
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL))
    args = parser.parse_args()
    rounds, messages, repeats = (300, 2_000, 3) if args.quick else (2_000, 10_000, 5)
    work = Path(tempfile.mkdtemp(prefix="convstore-transfer-", dir=args.dir))
    try:
        rows = bench_import(work, rounds, repeats)
        rows += bench_dump_load(work, messages, repeats, args.pg_url or None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = ("measure", "convstore", "baseline (same run)", "time ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())  # noqa: T201


if __name__ == "__main__":
    main()
