"""``postgres``: appends and a warm replay on PostgreSQL against raw ``psycopg``.

The store lives in the run's schema ``bench_<random>``; the baseline inserts the same rows, one
autocommit ``INSERT … RETURNING notification_id`` each, into ``raw_events`` (the shape of
``convstore_events``), interleaved append by append as on SQLite. The replay baseline selects
the conversation's rows from ``convstore_events`` and parses each state.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from bench.common import (
    Context,
    PgContext,
    StoredRow,
    log,
    median,
    paired_stream,
    paired_times,
    state_json,
)
from bench.report import Row
from bench.workload import EVENTS_PER_MESSAGE, stream_conversation
from convstore import Store, open_store

if TYPE_CHECKING:
    import psycopg

FULL_APPEND = {1_000: 3}  # messages -> repeats
QUICK_APPEND = {100: 3}
FULL_REPLAY_REPS = 7
QUICK_REPLAY_REPS = 5


def run(ctx: Context) -> None:
    log("postgres: append and replay vs raw psycopg")
    pg = ctx.pg_context()
    if pg is None:
        ctx.skip("postgres", ctx.pg.reason if ctx.pg else "?")
        return
    import psycopg  # noqa: PLC0415 - optional: only the PostgreSQL benchmarks need it

    ctx.report.settings.append(
        f"PostgreSQL: schema {pg.schema} (dropped afterwards); baseline table "
        f"{pg.schema}.raw_events has convstore_events' shape (uuid, bigint, text, bytea, "
        "bigserial notification_id, same primary key and unique index); baseline inserts "
        "one row per autocommit statement (INSERT ... RETURNING notification_id); "
        f"server synchronous_commit={pg.sync_commit}, fsync={pg.fsync}"
    )
    store = open_store(pg.store_url)
    raw = psycopg.connect(pg.base_url, autocommit=True)
    try:
        stream_conversation(store, 3)  # warm
        raw.execute("SELECT 1")
        last_conv = _appends(ctx, pg, store, raw)
        _replay(ctx, pg, store, raw, last_conv)
    finally:
        raw.close()
        store.close()


def _select_conversation(pg: PgContext) -> str:
    return (
        f'SELECT originator_version, topic, state FROM "{pg.schema}".convstore_events '  # noqa: S608
        "WHERE originator_id = %s ORDER BY originator_version"
    )


def _appends(
    ctx: Context, pg: PgContext, store: Store, raw: psycopg.Connection[tuple[Any, ...]]
) -> uuid.UUID:
    """The interleaved append rows; returns the last conversation recorded."""
    insert = (
        f'INSERT INTO "{pg.schema}".raw_events '  # noqa: S608
        "(originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s) "
        "RETURNING notification_id"
    )
    select = _select_conversation(pg)
    select_one = (
        f'SELECT originator_id, originator_version, topic, state FROM "{pg.schema}".'  # noqa: S608
        "convstore_events WHERE originator_id = %s AND originator_version = %s"
    )
    last_conv: uuid.UUID | None = None
    cur = raw.cursor()
    for n_messages, reps in ctx.pick(FULL_APPEND, QUICK_APPEND).items():
        appends = n_messages * EVENTS_PER_MESSAGE + 1
        rows: list[StoredRow] | None = None
        c_rate: list[float] = []
        b_rate: list[float] = []
        ratios: list[float] = []
        for r in range(reps):
            oid = uuid.uuid4()  # the baseline's stream id for this repeat

            def raw_insert(row: StoredRow, oid: uuid.UUID = oid) -> None:
                cur.execute(insert, (oid, row[1], row[2], row[3]))
                cur.fetchone()

            def read_row(conv: uuid.UUID, version: int) -> StoredRow:
                found = raw.execute(select_one, (conv, version)).fetchone()
                assert found is not None
                return (found[0], found[1], found[2], bytes(found[3]))

            conv, c_d, b_d = paired_stream(
                store, n_messages, raw_insert, read_row, rows if r % 2 else None
            )
            rows = [(conv, v, t, bytes(st)) for v, t, st in raw.execute(select, (conv,))]
            assert len(rows) == appends
            last_conv = conv
            got_c, got_b = appends / sum(c_d), appends / sum(b_d)
            c_rate.append(got_c)
            b_rate.append(got_b)
            ratios.append(got_c / got_b)
            log(
                f"    {n_messages:,} msgs rep {r + 1}/{reps}: convstore "
                f"{got_c:,.0f}/s, raw {got_b:,.0f}/s"
            )
        ctx.add(
            Row(
                "append, PostgreSQL (appends/s)",
                f"{n_messages:,} msgs ({appends:,} appends)",
                reps,
                median(c_rate),
                median(b_rate),
                "/s",
                median(ratios),
                "higher",
                samples={"convstore": c_rate, "baseline": b_rate, "ratios": ratios},
            )
        )
    assert last_conv is not None
    return last_conv


def _replay(
    ctx: Context,
    pg: PgContext,
    store: Store,
    raw: psycopg.Connection[tuple[Any, ...]],
    conv: uuid.UUID,
) -> None:
    n_messages = max(ctx.pick(FULL_APPEND, QUICK_APPEND))
    reps = ctx.pick(FULL_REPLAY_REPS, QUICK_REPLAY_REPS)
    select = _select_conversation(pg)

    def raw_pg_read() -> int:
        return len([json.loads(state_json(bytes(s))) for _, _, s in raw.execute(select, (conv,))])

    store.replay(conv)
    raw_pg_read()
    c_t, b_t, ratios = paired_times(
        reps, lambda: store.replay(conv, shape="openai", vision=False), raw_pg_read
    )
    ctx.add(
        Row(
            "replay, PostgreSQL, warm (time)",
            f"{n_messages:,} msgs",
            reps,
            median(c_t),
            median(b_t),
            "ms",
            median(ratios),
            "lower",
            note="baseline = SELECT the same rows from convstore_events + json.loads",
            samples={"convstore_ms": c_t, "baseline_ms": b_t, "ratios": ratios},
        )
    )
