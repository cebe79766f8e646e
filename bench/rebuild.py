"""``rebuild``: the audit read model rebuilt from the start of the log, in events/s.

The baseline is one ``SELECT`` of every stored row in rowid order plus ``json.loads`` of each
state; the target is absolute (convstore's events/s).
"""

from __future__ import annotations

import json
import sqlite3

from bench.common import Context, alternate, log, median, pc, state_json
from bench.report import Row, verdict
from bench.workload import EVENTS_PER_MESSAGE
from convstore import open_store
from convstore.app.projector import rebuild

TARGET_REBUILD_RATE = 25_000  # events/s

FULL = (10_000, 3)  # messages, repeats
QUICK = (1_000, 3)


def run(ctx: Context) -> None:
    log("rebuild: audit projection rebuild vs raw read of the log")
    n_messages, reps = ctx.pick(FULL, QUICK)
    path, _ = ctx.fixture(n_messages)
    events = n_messages * EVENTS_PER_MESSAGE + 1
    audit = ctx.dir / f"audit-{n_messages}.db"
    conn = sqlite3.connect(path)

    def raw_log() -> int:
        rows = conn.execute(
            "SELECT rowid, originator_id, originator_version, topic, state "
            "FROM stored_events ORDER BY rowid"
        ).fetchall()
        decoded = [json.loads(state_json(row[4])) for row in rows]
        return len(decoded)

    c_r: list[float] = []
    b_r: list[float] = []
    ratios: list[float] = []
    with open_store(path, create=False) as store:
        raw_log()
        for r in range(reps):
            got = {}
            for who in alternate(r):
                if who == "convstore":
                    a = pc()
                    report = rebuild(store, audit)
                    got["c"] = report.events / (pc() - a)
                    assert report.events == events
                else:
                    a = pc()
                    count = raw_log()
                    got["b"] = count / (pc() - a)
            c_r.append(got["c"])
            b_r.append(got["b"])
            ratios.append(got["c"] / got["b"])
    conn.close()
    rate = median(c_r)
    ctx.add(
        Row(
            "rebuild audit projection, SQLite (events/s)",
            f"{events:,} events",
            reps,
            rate,
            median(b_r),
            "/s",
            median(ratios),
            "higher",
            f">= {TARGET_REBUILD_RATE:,}/s",
            verdict(rate >= TARGET_REBUILD_RATE),
            note=(
                "target is absolute (convstore events/s); baseline = one SELECT of every "
                "row + json.loads of each state"
            ),
            samples={"convstore": c_r, "baseline": b_r, "ratios": ratios},
        )
    )
