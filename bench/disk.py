"""``disk``: bytes on disk for N messages: convstore's store against one raw JSON row per
message in a plain SQLite table, and the OpenAI Agents SDK's ``SQLiteSession`` file.

Each file is checkpointed first (the WAL moved into the file and emptied), with no connection
open; a store's bytes are its file plus any file named after it, not the -shm index. The raw
table (:data:`bench.common.RAW_MESSAGES_TABLE`) holds ``{"role", "content": [3 text blocks]}``
per message with an index on (conversation, id); the SDK's session holds the same messages as
Responses input items. The note gives where convstore's bytes go (SQLite's ``dbstat``).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

from bench.common import Context, checkpoint, log, message_of, raw_messages_db, store_files
from bench.report import Row, verdict

TARGET_DISK_RATIO = 1.5  # convstore's bytes <= 1.5 x one raw JSON row per message

FULL = 10_000  # messages
QUICK = 1_000

MB = 1024 * 1024


def where_bytes_go(path: Path) -> str:
    """The largest tables and indexes of a SQLite file, in MB, and its free pages."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        try:
            parts = conn.execute(
                "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 6"
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
    store_path, conv = ctx.fixture(n_messages)
    checkpoint(store_path)
    files = store_files(store_path)
    convstore_bytes = sum(f.stat().st_size for f in files)
    raw_bytes = raw_messages_db(ctx.dir, str(conv), n_messages).stat().st_size
    content = sum(len(json.dumps(message_of(i))) for i in range(n_messages))
    size = f"{n_messages:,} msgs"
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
                f"message); the JSON text alone is {content:,} bytes (convstore / that = "
                f"{convstore_bytes / content:.2f}x, raw table / that = {raw_bytes / content:.2f}x: "
                "a ~3.1 KB row fills most of a 4 KB page); files "
                f"{', '.join(f.name for f in files)}; by table/index (MB): "
                + where_bytes_go(store_path)
            ),
            samples={
                "convstore_bytes": convstore_bytes,
                "baseline_bytes": raw_bytes,
                "json_text_bytes": content,
            },
        )
    )
    try:
        from bench.peer import sdk_session_db  # noqa: PLC0415 - imports the SDK's types only here
    except ImportError:
        ctx.skip("disk, Agents SDK", "the OpenAI Agents SDK is not installed")
        return
    sdk_bytes = sum(f.stat().st_size for f in store_files(sdk_session_db(ctx.dir, n_messages)))
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
                f"{sdk_bytes:,} bytes; SDK / JSON text = {sdk_bytes / content:.2f}x; "
                f"convstore / SDK = {convstore_bytes / sdk_bytes:.2f}x"
            ),
            samples={"sdk_bytes": sdk_bytes, "baseline_bytes": raw_bytes},
        )
    )
