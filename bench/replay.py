"""``replay``: a warm process's ``Store.replay`` against a raw read of the same rows.

The store stays open and has replayed once; the baseline keeps one ``sqlite3`` connection open
and selects the conversation's states in version order, ``json.loads``-ing each. Also the
linearity of replay: its time per message at the larger size over the smaller.
"""

from __future__ import annotations

import sqlite3

from bench.common import Context, event_count, log, median, paired_times, raw_read
from bench.report import Row, verdict
from convstore import open_store

TARGET_REPLAY_RATIO = 2.0  # replay of 10,000 messages <= 2 x raw read
TARGET_LINEAR = 1.25  # "linear": per-message replay time at 10k <= 1.25 x that at 1k (our bound)

FULL = {1_000: 15, 10_000: 7}  # messages -> repeats
QUICK = {100: 9, 1_000: 5}


def run(ctx: Context) -> None:
    log("replay: warm-process Store.replay(conv, shape='openai', vision=False), SQLite")
    sizes = ctx.pick(FULL, QUICK)
    per_message: dict[int, tuple[float, float]] = {}
    for n_messages, reps in sizes.items():
        path, conv = ctx.fixture(n_messages)
        conn = sqlite3.connect(path)
        with open_store(path, create=False) as store:
            result = store.replay(conv, shape="openai", vision=False)  # warm
            assert len(result["messages"]) == n_messages
            raw_read(conn, conv.hex)
            c_t, b_t, ratios = paired_times(
                reps,
                lambda: store.replay(conv, shape="openai", vision=False),  # noqa: B023
                lambda: raw_read(conn, conv.hex),  # noqa: B023
            )
        conn.close()
        per_message[n_messages] = (median(c_t) / n_messages, median(b_t) / n_messages)
        ratio = median(ratios)
        is_target = n_messages == 10_000
        ctx.add(
            Row(
                "replay, SQLite, warm (time)",
                f"{n_messages:,} msgs ({event_count(path, conv):,} events)",
                reps,
                median(c_t),
                median(b_t),
                "ms",
                ratio,
                "lower",
                f"<= {TARGET_REPLAY_RATIO}x" if is_target else "",
                verdict(ratio <= TARGET_REPLAY_RATIO) if is_target else "",
                samples={"convstore_ms": c_t, "baseline_ms": b_t, "ratios": ratios},
            )
        )
    small, big = min(sizes), max(sizes)
    c_lin = per_message[big][0] / per_message[small][0]
    b_lin = per_message[big][1] / per_message[small][1]
    is_target = (small, big) == (1_000, 10_000)
    ctx.add(
        Row(
            f"replay linearity, time per message at {big:,} / at {small:,}",
            f"{small:,} -> {big:,} msgs",
            min(sizes.values()),
            c_lin,
            b_lin,
            "x",
            c_lin,
            "lower",
            f"<= {TARGET_LINEAR}x" if is_target else "",
            verdict(c_lin <= TARGET_LINEAR) if is_target else "",
            note=(
                f"per message: convstore {per_message[small][0] * 1000:.1f} us at {small:,}, "
                f"{per_message[big][0] * 1000:.1f} us at {big:,}; raw "
                f"{per_message[small][1] * 1000:.1f} / {per_message[big][1] * 1000:.1f} us"
            ),
        )
    )
