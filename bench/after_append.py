"""``after_append``: a warm replay right after one more message, against a raw read of the
whole log.

A copy of the fixture store is opened and replayed once; each repeat then appends one message
(``Store.append_message``, untimed) and times ``Store.replay(conv, shape="openai",
vision=False)`` against the raw read of the conversation's whole log (every stored state,
``json.loads``-ed, on a connection kept open), alternating which goes first. Three rows: the
append made through the same ``Store``; made through a second ``Store`` on the same file (as
another process or host would, so replay must notice a write it did not make); and no append at
all (replay twice in a row).
"""

from __future__ import annotations

import sqlite3

from bench.common import (
    Context,
    copy_db,
    event_count,
    log,
    median,
    paired_times,
    raw_read,
    remove_db,
)
from bench.report import Row, verdict
from bench.workload import BLOCKS_PER_MESSAGE, block_of, role_of
from convstore import Store, open_store

TARGET_AFTER_APPEND = 0.05  # replay after one more append <= 0.05 x a raw read of the whole log

FULL = (10_000, 7)  # messages, repeats per row
QUICK = (1_000, 5)


def run(ctx: Context) -> None:
    log("after_append: warm replay after one more message vs a raw read of the whole log")
    n_messages, reps = ctx.pick(FULL, QUICK)
    source, conv = ctx.fixture(n_messages)
    path = ctx.dir / f"after-append-{n_messages}.db"
    copy_db(source, path)  # the fixture stays as the other benchmarks expect it
    conn = sqlite3.connect(path)
    count = [n_messages]

    def replay(store: Store) -> None:
        got = store.replay(conv, shape="openai", vision=False)
        assert len(got["messages"]) == count[0]

    def append_with(store: Store) -> None:
        i = count[0]
        store.append_message(conv, role_of(i), [block_of(i, j) for j in range(BLOCKS_PER_MESSAGE)])
        count[0] += 1

    with open_store(path, create=False) as store, open_store(path, create=False) as other:
        replay(store)  # warm
        raw_read(conn, conv.hex)
        variants = {
            "after one more append (same Store)": lambda: append_with(store),
            "after one append by another Store on the file": lambda: append_with(other),
            "again, nothing appended": None,
        }
        for name, before in variants.items():
            c_t, b_t, ratios = paired_times(
                reps, lambda: replay(store), lambda: raw_read(conn, conv.hex), before
            )
            ratio = median(ratios)
            is_target = n_messages == 10_000 and before is not None
            ctx.add(
                Row(
                    f"replay, warm, {name}",
                    f"{n_messages:,}+ msgs",
                    reps,
                    median(c_t),
                    median(b_t),
                    "ms",
                    ratio,
                    "lower",
                    f"<= {TARGET_AFTER_APPEND}x" if is_target else "",
                    verdict(ratio <= TARGET_AFTER_APPEND) if is_target else "",
                    note=(
                        "baseline: SELECT every state of the conversation's log "
                        f"({event_count(path, conv):,} events) + json.loads, "
                        "connection kept open; the append itself is not timed"
                    ),
                    samples={"convstore_ms": c_t, "baseline_ms": b_t, "ratios": ratios},
                )
            )
    conn.close()
    remove_db(path)
