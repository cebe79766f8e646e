"""``disk``: bytes on disk for N messages: convstore's store against one raw JSON row per
message in a plain SQLite table, and the OpenAI Agents SDK's ``SQLiteSession`` file.

Each file is checkpointed first (the WAL moved into the file and emptied), with no connection
open; a store's bytes are its file plus any file named after it, not the -shm index. The raw
table (:data:`bench.baselines.RAW_MESSAGES_TABLE`) holds ``{"role", "content": [blocks]}`` per
message with an index on (conversation, id); the SDK's session holds the same messages as
Responses input items. The note says where convstore's bytes go (SQLite's ``dbstat``).

Two workloads, since the ratio depends on the size of a message: the suite's (three ~1 KB text
blocks, the fixture store), where a ~3.1 KB raw row fills most of a 4 KB page and convstore's
per-event fields are small beside the text; and short messages (one 200-character block),
where the per-event fields (ids, timestamps, the start and end events) dominate.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.baselines import have_agents_sdk, json_text_bytes, raw_messages_db, sdk_session_db
from bench.common import Context, checkpoint, log, store_files
from bench.report import Row, verdict
from bench.workload import SHORT_TEXT_SIZE, Message, message_of, record, short_message_of
from convstore import open_store

TARGET_DISK_RATIO = 1.5  # convstore's bytes <= 1.5 x one raw JSON row per message

FULL = 10_000  # messages
QUICK = 1_000

MB = 1024 * 1024


def where_bytes_go(path: Path) -> str:
    """The largest tables and indexes of a SQLite file, in MB, and its free pages."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        try:
            parts = conn.execute(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 4"
            ).fetchall()
        except sqlite3.OperationalError:  # SQLite built without dbstat
            parts = []
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    shown = ", ".join(f"{name} {size / MB:.2f}" for name, size in parts)
    return f"{shown}; free pages {free * page_size / MB:.2f} MB (page size {page_size})"


def run(ctx: Context) -> None:
    log("disk: bytes of the store for N messages vs one raw JSON row per message")
    n_messages = ctx.pick(FULL, QUICK)
    path, conv = ctx.fixture(n_messages)
    _measure(
        ctx,
        workload="3 x 1 KB text blocks",
        make=message_of,
        n_messages=n_messages,
        store_path=path,
        conv=conv,
    )
    short = ctx.dir / f"short-{n_messages}.db"
    log(f"  recording {n_messages:,} short messages ...")
    with open_store(short) as store:
        short_conv = record(store, (short_message_of(i) for i in range(n_messages)))
    _measure(
        ctx,
        workload=f"1 x {SHORT_TEXT_SIZE}-char text block",
        make=short_message_of,
        n_messages=n_messages,
        store_path=short,
        conv=short_conv,
    )


def _measure(
    ctx: Context,
    *,
    workload: str,
    make: Callable[[int], Message],
    n_messages: int,
    store_path: Path,
    conv: uuid.UUID,
) -> None:
    messages = [make(i) for i in range(n_messages)]
    tag = f"{make.__name__}-{n_messages}"
    checkpoint(store_path)
    files = store_files(store_path)
    convstore_bytes = sum(f.stat().st_size for f in files)
    raw_bytes = raw_messages_db(ctx.dir, str(conv), messages, tag).stat().st_size
    text = json_text_bytes(messages)
    size = f"{n_messages:,} msgs of {workload}"
    ratio = convstore_bytes / raw_bytes
    is_target = n_messages == 10_000
    ctx.add(
        Row(
            "disk: convstore store vs one raw JSON row per message",
            size,
            1,
            convstore_bytes / MB,
            raw_bytes / MB,
            "MB",
            ratio,
            "lower",
            f"<= {TARGET_DISK_RATIO}x" if is_target else "",
            verdict(ratio <= TARGET_DISK_RATIO) if is_target else "",
            note=(
                f"{convstore_bytes:,} vs {raw_bytes:,} bytes "
                f"({convstore_bytes / n_messages:,.0f} vs {raw_bytes / n_messages:,.0f} per "
                f"message); files {', '.join(f.name for f in files)}; by table/index (MB): "
                + where_bytes_go(store_path)
            ),
            samples={
                "convstore_bytes": convstore_bytes,
                "baseline_bytes": raw_bytes,
                "json_text_bytes": text,
            },
        )
    )
    ctx.add(
        Row(
            "disk: convstore store vs the messages' JSON text alone",
            size,
            1,
            convstore_bytes / MB,
            text / MB,
            "MB",
            convstore_bytes / text,
            "lower",
            note=(
                "info: the baseline is the bytes of json.dumps of each message, no database "
                "around them (the raw table above stores "
                f"{raw_bytes / text:.2f}x that)"
            ),
            samples={"convstore_bytes": convstore_bytes, "baseline_bytes": text},
        )
    )
    if not have_agents_sdk():
        ctx.skip("disk, Agents SDK", "the OpenAI Agents SDK is not installed")
        return
    sdk_bytes = sum(f.stat().st_size for f in store_files(sdk_session_db(ctx.dir, messages, tag)))
    ctx.add(
        Row(
            "disk: Agents SDK SQLiteSession file vs one raw JSON row per message",
            size,
            1,
            sdk_bytes / MB,
            raw_bytes / MB,
            "MB",
            sdk_bytes / raw_bytes,
            "lower",
            note=(
                f"peer, not convstore: the convstore column holds the SDK file's size; "
                f"{sdk_bytes:,} bytes; SDK / JSON text = {sdk_bytes / text:.2f}x; "
                f"convstore / SDK = {convstore_bytes / sdk_bytes:.2f}x"
            ),
            samples={"sdk_bytes": sdk_bytes, "baseline_bytes": raw_bytes},
        )
    )
