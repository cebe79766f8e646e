"""``append``: durable single-event appends on SQLite against raw ``sqlite3`` inserts.

Each convstore append is interleaved with the baseline's insert of the same row (see
:func:`bench.common.paired_stream`); the rows are the store's own, byte for byte. Also the
growth of the time per append over the conversation, drift-corrected, and a tmpfs control.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from pathlib import Path

from bench.common import (
    Context,
    StoredRow,
    corrected_growth,
    growth,
    log,
    median,
    paired_stream,
    raw_sqlite_inserter,
    remove_db,
    sqlite_settings_of_store,
    store_rows,
    workdir,
)
from bench.report import Row, verdict
from bench.workload import EVENTS_PER_MESSAGE, stream_conversation
from convstore import open_store

TARGET_APPEND_RATIO = 0.6  # convstore appends/s >= 0.6 x raw sqlite3
TARGET_GROWTH = 1.2  # last 10% of appends cost <= 1.2 x the first 10%

FULL = {100: 7, 1_000: 5, 10_000: 3}  # messages -> repeats
QUICK = {100: 3, 1_000: 1}
TMPFS_REPS_FULL = 3
TMPFS_REPS_QUICK = 2


def run(ctx: Context) -> None:
    log("append: durable single-event appends, SQLite")
    # Warm the process (imports, pydantic, sqlite) before timing anything.
    warm = ctx.dir / "warm.db"
    with open_store(warm) as store:
        stream_conversation(store, 3)
        journal, sync = sqlite_settings_of_store(store)
    remove_db(warm)
    ctx.report.settings.append(
        f"SQLite append: convstore's connection reports journal_mode={journal}, "
        f"synchronous={sync} (2 = FULL); the raw baseline sets and asserts WAL + FULL; "
        "baseline = BEGIN; INSERT; COMMIT per row into a table of the same shape "
        "(same PRIMARY KEY, rowid table), filled with the store's own rows read back"
    )
    sizes = ctx.pick(FULL, QUICK)
    for n_messages, reps in sizes.items():
        _measure_size(ctx, n_messages, reps, is_largest=n_messages == max(sizes))
    _tmpfs_control(ctx, max(sizes), ctx.pick(TMPFS_REPS_FULL, TMPFS_REPS_QUICK))


def _measure_size(ctx: Context, n_messages: int, reps: int, *, is_largest: bool) -> None:
    appends = n_messages * EVENTS_PER_MESSAGE + 1
    rows: list[StoredRow] | None = None
    c_rate: list[float] = []
    b_rate: list[float] = []
    ratios: list[float] = []
    c_growth: list[float] = []
    b_growth: list[float] = []
    g_ratios: list[float] = []
    excess: list[tuple[float, float]] = []
    last: tuple[Path, uuid.UUID] | None = None
    for r in range(reps):
        path, conv, c_d, b_d = _repeat(ctx.dir, n_messages, r, rows)
        rows = store_rows(path)
        assert len(rows) == appends
        if last is not None:
            remove_db(last[0])
        last = (path, conv)
        got_c, got_b = appends / sum(c_d), appends / sum(b_d)
        c_rate.append(got_c)
        b_rate.append(got_b)
        ratios.append(got_c / got_b)
        c_growth.append(growth(c_d))
        b_growth.append(growth(b_d))
        w = max(1, appends // 10)
        g_ratios.append(corrected_growth(c_d, b_d))
        excess.append(
            (
                (sum(c_d[:w]) - sum(b_d[:w])) / w * 1e6,
                (sum(c_d[-w:]) - sum(b_d[-w:])) / w * 1e6,
            )
        )
        log(
            f"    {n_messages:,} msgs rep {r + 1}/{reps}: convstore {got_c:,.0f}/s, "
            f"raw {got_b:,.0f}/s, growth {c_growth[-1]:.2f}x / raw {b_growth[-1]:.2f}x"
        )
    assert last is not None
    ctx.fixtures[n_messages] = last
    size = f"{n_messages:,} msgs ({appends:,} appends)"
    ratio = median(ratios)
    ctx.add(
        Row(
            "append, SQLite (appends/s)",
            size,
            reps,
            median(c_rate),
            median(b_rate),
            "/s",
            ratio,
            "higher",
            f">= {TARGET_APPEND_RATIO}x",
            verdict(ratio >= TARGET_APPEND_RATIO),
            samples={"convstore": c_rate, "baseline": b_rate, "ratios": ratios},
        )
    )
    g = median(g_ratios)
    first_x = median([e[0] for e in excess])
    last_x = median([e[1] for e in excess])
    ctx.add(
        Row(
            "append growth: last 10% / first 10% time per append",
            size,
            reps,
            median(c_growth),
            median(b_growth),
            "x",
            g,
            "lower",
            f"<= {TARGET_GROWTH}x" if is_largest else "",
            verdict(g <= TARGET_GROWTH) if is_largest else "",
            note=(
                "the convstore/baseline columns are each side's own last/first ratio; "
                "ratio = convstore's ratio with the disk's drift taken out, "
                "(c_last - (raw_last - raw_first)) / c_first, from the interleaved raw "
                f"run; convstore's time per append minus raw's: {first_x:,.0f} us in the "
                f"first 10%, {last_x:,.0f} us in the last 10%"
            ),
            samples={
                "convstore": c_growth,
                "baseline": b_growth,
                "ratios": g_ratios,
                "excess_us": excess,
            },
        )
    )


def _repeat(
    directory: Path, n_messages: int, r: int, rows: list[StoredRow] | None
) -> tuple[Path, uuid.UUID, list[float], list[float]]:
    """One interleaved convstore + raw run in ``directory``; the raw file is removed."""
    path = directory / f"append-{n_messages}-{r}.db"
    raw_path = directory / f"raw-{n_messages}-{r}.db"
    raw_conn, raw_insert = raw_sqlite_inserter(raw_path)
    with open_store(path) as store, contextlib.closing(sqlite3.connect(path)) as rd:

        def read_row(conv: uuid.UUID, version: int) -> StoredRow:
            found: StoredRow = rd.execute(
                "SELECT originator_id, originator_version, topic, state FROM "
                "stored_events WHERE originator_id = ? AND originator_version = ?",
                (conv.hex, version),
            ).fetchone()
            return found

        conv, c_d, b_d = paired_stream(
            store, n_messages, raw_insert, read_row, rows if r % 2 else None
        )
    raw_conn.close()
    expected = rows if r % 2 else store_rows(path)
    assert store_rows(raw_path) == expected, "the baseline stored other payloads"
    remove_db(raw_path)
    return path, conv, c_d, b_d


def _tmpfs_control(ctx: Context, n_messages: int, reps: int) -> None:
    """The same interleaved run on tmpfs, where fsync does not wait for a disk."""
    shm = Path("/dev/shm")  # noqa: S108 - a private temporary directory inside it
    if not shm.is_dir():
        ctx.report.skipped.append("append tmpfs control: no /dev/shm")
        return
    appends = n_messages * EVENTS_PER_MESSAGE + 1
    c_g: list[float] = []
    b_g: list[float] = []
    c_us: list[float] = []
    b_us: list[float] = []
    rows: list[StoredRow] | None = None
    with workdir(str(shm)) as tmp:
        for r in range(reps):
            path, _, c_d, b_d = _repeat(tmp, n_messages, r, rows)
            rows = store_rows(path)
            remove_db(path)
            c_g.append(growth(c_d))
            b_g.append(growth(b_d))
            c_us.append(sum(c_d) / appends * 1e6)
            b_us.append(sum(b_d) / appends * 1e6)
    ctx.add(
        Row(
            "append growth on tmpfs (no disk wait): last 10% / first 10%",
            f"{n_messages:,} msgs ({appends:,} appends)",
            reps,
            median(c_g),
            median(b_g),
            "x",
            median(c_g),
            "lower",
            note=(
                "control, not a target: convstore's own cost per append as the conversation "
                f"grows; time per append there: convstore {median(c_us):,.0f} us, raw "
                f"{median(b_us):,.0f} us"
            ),
            samples={"convstore": c_g, "baseline": b_g, "convstore_us": c_us, "raw_us": b_us},
        )
    )
