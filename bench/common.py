"""What every benchmark of ``bench/run.py`` shares, besides the workload (:mod:`bench.workload`).

Timing and pairing (paired interleaved appends, alternating order, growth ratios, medians),
SQLite helpers (the store's rows, the raw ``sqlite3`` inserter and reader, checkpoints, file
sizes, copies), temporary directories and fixture stores, the PostgreSQL schema each run creates
and drops, and :class:`Context`, the state a run hands to each benchmark.
"""

from __future__ import annotations

import compileall
import contextlib
import datetime as dt
import functools
import inspect
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import lz4.block

import convstore
from bench.report import Report, Row, fmt_value
from bench.workload import (
    BLOCKS_PER_MESSAGE,
    EVENTS_PER_MESSAGE,
    block_of,
    record_messages,
    role_of,
)
from convstore import Store, open_store

T = TypeVar("T")

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

CREATE_SQLITE_TABLE = (
    "CREATE TABLE IF NOT EXISTS stored_events (originator_id TEXT, originator_version INTEGER, "
    "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
)

StoredRow = tuple[Any, ...]
"""(originator_id, originator_version, topic, state) of one stored event."""

pc = time.perf_counter


def log(message: str) -> None:
    """Progress, on stderr (the table goes to stdout)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def median(values: list[float]) -> float:
    return statistics.median(values)


def alternate(r: int) -> list[str]:
    """Which side goes first in repeat ``r``: convstore on even repeats, the baseline on odd."""
    return ["convstore", "baseline"] if r % 2 == 0 else ["baseline", "convstore"]


# -- SQLite helpers -------------------------------------------------------------------------


def store_rows(path: Path) -> list[StoredRow]:
    """The store's own rows, exactly as recorded."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY rowid"
        ).fetchall()


def sqlite_settings_of_store(store: Store) -> tuple[str, int]:
    """journal_mode and synchronous as seen on the store's own connection (private API)."""
    recorder: Any = store._log.recorder  # the private recorder: the settings it runs with
    with recorder.datastore.transaction(commit=False) as cur:
        cur.execute("PRAGMA journal_mode")
        journal = str(cur.fetchone()[0])
        cur.execute("PRAGMA synchronous")
        sync = int(cur.fetchone()[0])
    return journal, sync


def raw_sqlite_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(CREATE_SQLITE_TABLE)
    return conn


def raw_sqlite_inserter(path: Path) -> tuple[sqlite3.Connection, Callable[[StoredRow], None]]:
    """A connection to a fresh baseline file and a function inserting one row per transaction."""
    conn = raw_sqlite_connect(path)
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    assert (journal, sync) == ("wal", 2), (journal, sync)
    statement = "INSERT INTO stored_events VALUES (?,?,?,?)"
    execute = conn.execute

    def insert(row: StoredRow) -> None:
        execute("BEGIN")
        execute(statement, row)
        execute("COMMIT")

    return conn, insert


def state_json(state: bytes) -> bytes:
    """A stored state's JSON as a plain reader parses it, without convstore or pydantic: the
    state itself in the earlier full-JSON form, else a compact state's body after its binary
    header (inflated when compressed: tag 3 LZ4, tag 2 zlib; see
    ``convstore.infrastructure.common.mapper``)."""
    if state[:1] == b"{":
        return state
    kind, tag = state[1], state[0]
    at = 18 + (8 if kind & 0x20 else 4) + (8 if kind & 0x40 else 0) + (16 if kind & 0x80 else 0)
    if tag == 1:
        body = state[at:]
    else:
        body = lz4.block.decompress(state[at:]) if tag == 3 else zlib.decompress(state[at:])
    return b"{" + body[1:] if body[:1] == b"," else b"{}"


STATE_JSON_CODE = inspect.getsource(state_json)
""":func:`state_json`'s source, for the baselines run as ``python -c`` (with ``zlib`` and
``lz4.block`` imported)."""


def raw_read(conn: sqlite3.Connection, conv_hex: str) -> list[Any]:
    """The baseline of a replay: a conversation's stored states, each parsed."""
    return [
        json.loads(state_json(state))
        for (state,) in conn.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? ORDER BY originator_version",
            (conv_hex,),
        )
    ]


def event_count(path: Path, conversation: uuid.UUID) -> int:
    """How many events a store's conversation holds, counted in the file: a fixture's
    messages are one event a block when recorded whole, five when streamed."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM stored_events WHERE originator_id = ?", (conversation.hex,)
        ).fetchone()
    return int(count)


def run_python(code: str, *args: str) -> dict[str, Any]:
    """Run ``code`` in a fresh process of this interpreter; the JSON object it prints."""
    out = subprocess.run(  # noqa: S603 - this interpreter, our own code
        [sys.executable, "-c", code, *args], capture_output=True, check=True, text=True
    ).stdout
    got: dict[str, Any] = json.loads(out)
    return got


def compile_package() -> bool:
    """Write the bytecode of every convstore module beside its source (where it is stale or
    missing), as installing the package from a wheel does; whether all of it compiled.

    Fresh processes then load convstore the way an installed copy loads, and the way the peers'
    installed packages load. Without it a source checkout run with ``PYTHONDONTWRITEBYTECODE``
    set (this machine's sessions set it) compiles every convstore module in every fresh
    process, which took about a third of ``from convstore import open_store`` (issue 23).
    """
    return bool(compileall.compile_dir(Path(convstore.__file__).parent, quiet=1))


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def checkpoint(path: Path) -> None:
    """Move a SQLite file's WAL into the file and empty it (nobody else may hold it open)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()


def store_files(path: Path) -> list[Path]:
    """A SQLite store's files on disk: the file and whatever is named after it (its WAL, any
    side file), but not the -shm index, which SQLite rebuilds."""
    return sorted(
        p for p in path.parent.glob(path.name + "*") if p.is_file() and p.name != path.name + "-shm"
    )


def copy_db(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database, through SQLite's backup API."""
    remove_db(target)
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


@contextlib.contextmanager
def workdir(given: str | None) -> Iterator[Path]:
    """A fresh temporary directory (inside ``given`` if set), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="convstore-bench-", dir=given))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- pairing --------------------------------------------------------------------------------


def paired_stream(
    store: Store,
    n_messages: int,
    raw_insert: Callable[[StoredRow], None],
    read_row: Callable[[uuid.UUID, int], StoredRow],
    previous_rows: list[StoredRow] | None,
) -> tuple[uuid.UUID, list[float], list[float]]:
    """Stream a conversation through the Store API and the same rows through the raw baseline,
    interleaved append by append, so both see the same disk (fsync) conditions.

    Without ``previous_rows`` each convstore append goes first and the baseline inserts the
    row it just recorded (read back untimed); with them (the rows of an earlier repeat, the
    same JSON payloads) the baseline goes first. Returns the conversation and each side's
    per-append seconds.
    """
    count = n_messages * EVENTS_PER_MESSAGE + 1
    c_d = [0.0] * count
    b_d = [0.0] * count
    conv: list[uuid.UUID] = []
    k = 0

    def step(call: Callable[[], T]) -> T:
        nonlocal k
        if previous_rows is not None:
            a = pc()
            raw_insert(previous_rows[k])
            b_d[k] = pc() - a
            a = pc()
            result = call()
            c_d[k] = pc() - a
        else:
            a = pc()
            result = call()
            c_d[k] = pc() - a
            owner = conv[0] if conv else result
            assert isinstance(owner, uuid.UUID)
            row = read_row(owner, k + 1)
            a = pc()
            raw_insert(row)
            b_d[k] = pc() - a
        k += 1
        return result

    conv.append(step(functools.partial(store.new_conversation, title="bench")))
    c = conv[0]
    for i in range(n_messages):
        msg = step(functools.partial(store.start_message, c, role_of(i)))
        for j in range(BLOCKS_PER_MESSAGE):
            step(functools.partial(store.append_block, c, msg, block_of(i, j)))
        step(functools.partial(store.end_message, c, msg))
    assert k == count
    return c, c_d, b_d


def growth(durations: list[float]) -> float:
    """Mean cost of the last 10% of appends over the mean cost of the first 10%."""
    w = max(1, len(durations) // 10)
    return (sum(durations[-w:]) / w) / (sum(durations[:w]) / w)


def corrected_growth(c_d: list[float], b_d: list[float]) -> float:
    """convstore's growth with the disk's drift taken out, using the interleaved baseline.

    The last 10%'s time per append, minus what the raw baseline's time per append changed
    by between the two windows (the disk got slower or faster for both), over the first
    10%'s: (c_last - (b_last - b_first)) / c_first. A constant convstore overhead gives 1.0.
    """
    w = max(1, len(c_d) // 10)
    c_first, c_last = sum(c_d[:w]) / w, sum(c_d[-w:]) / w
    b_first, b_last = sum(b_d[:w]) / w, sum(b_d[-w:]) / w
    return (c_last - (b_last - b_first)) / c_first


def paired_times(
    reps: int,
    convstore: Callable[[], object],
    baseline: Callable[[], object],
    before: Callable[[], object] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    """Time both sides once per repeat, alternating which goes first; ``before`` (untimed)
    starts each repeat.

    Returns convstore's and the baseline's milliseconds and the paired ratios.
    """
    c_t: list[float] = []
    b_t: list[float] = []
    ratios: list[float] = []
    for r in range(reps):
        if before is not None:
            before()
        got: dict[str, float] = {}
        for who in alternate(r):
            call = convstore if who == "convstore" else baseline
            a = pc()
            call()
            got[who] = pc() - a
        c_t.append(got["convstore"] * 1000)
        b_t.append(got["baseline"] * 1000)
        ratios.append(got["convstore"] / got["baseline"])
    return c_t, b_t, ratios


# -- machine and PostgreSQL -----------------------------------------------------------------


def pg_base_url(url: str) -> str:
    return url.split("?", 1)[0]


def machine_info(pg_url: str) -> dict[str, str]:
    pg_version = "unreachable"
    try:
        import psycopg  # noqa: PLC0415 - optional: only the PostgreSQL benchmarks need it

        with psycopg.connect(pg_base_url(pg_url), connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            pg_version = str(row[0]) if row else "?"
    except Exception as exc:  # noqa: BLE001
        pg_version = f"unreachable ({type(exc).__name__})"
    return {
        "nproc": str(os.cpu_count()),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgres": pg_version,
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


@dataclass
class PgContext:
    """A fresh schema ``bench_<random>`` holding the raw baseline table; dropped by :meth:`drop`."""

    ok: bool
    reason: str = ""
    base_url: str = ""
    store_url: str = ""
    schema: str = ""
    sync_commit: str = ""
    fsync: str = ""

    @classmethod
    def create(cls, url: str) -> PgContext:
        try:
            import psycopg  # noqa: PLC0415 - optional: only the PostgreSQL benchmarks need it
        except ImportError:
            return cls(
                ok=False,
                reason="psycopg is not installed (pip install -e '.[postgres]' in the checkout)",
            )
        base = pg_base_url(url)
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        try:
            with psycopg.connect(base, connect_timeout=3, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{schema}"')
                conn.execute(
                    f'CREATE TABLE "{schema}".raw_events (originator_id uuid NOT NULL, '
                    "originator_version bigint NOT NULL, topic text, state bytea, "
                    "notification_id bigserial, PRIMARY KEY (originator_id, originator_version))"
                )
                conn.execute(f'CREATE UNIQUE INDEX ON "{schema}".raw_events (notification_id ASC)')
                sync = conn.execute("SHOW synchronous_commit").fetchone()
                fsync = conn.execute("SHOW fsync").fetchone()
        except Exception as exc:  # noqa: BLE001
            detail = " ".join(str(exc).split())
            return cls(ok=False, reason=f"PostgreSQL at {base} is unreachable: {detail}")
        sep = "&" if "?" in url else "?"
        return cls(
            ok=True,
            base_url=base,
            store_url=f"{url}{sep}schema={schema}",
            schema=schema,
            sync_commit=str(sync[0]) if sync else "?",
            fsync=str(fsync[0]) if fsync else "?",
        )

    def drop(self) -> None:
        import psycopg  # noqa: PLC0415

        try:
            with psycopg.connect(self.base_url, connect_timeout=5, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            log(f"dropped PostgreSQL schema {self.schema}")
        except Exception as exc:  # noqa: BLE001
            log(f"WARNING: could not drop schema {self.schema}: {exc}")


# -- the run's context ----------------------------------------------------------------------


@dataclass
class Context:
    """What a run hands to each benchmark: its mode, directory, report and shared fixtures."""

    quick: bool
    dir: Path
    pg_url: str
    report: Report
    fixtures: dict[int, tuple[Path, uuid.UUID]] = field(default_factory=dict)
    pg: PgContext | None = None

    @property
    def mode(self) -> str:
        return "quick" if self.quick else "full"

    def pick(self, full: T, quick: T) -> T:
        """A benchmark's plan (sizes, repeats) for this run's mode."""
        return quick if self.quick else full

    def add(self, row: Row) -> None:
        self.report.rows.append(row)
        log(
            f"  {row.bench} [{row.size}]: convstore {fmt_value(row.convstore, row.unit)}, "
            f"baseline {fmt_value(row.baseline, row.unit)}"
            + (f", ratio {row.ratio:.2f}x" if row.ratio is not None else "")
            + (f" {row.status}" if row.status else "")
        )

    def skip(self, what: str, reason: str) -> None:
        self.report.skipped.append(f"{what}: {reason}")
        log(f"  SKIPPED: {reason}")

    def fixture(self, n_messages: int) -> tuple[Path, uuid.UUID]:
        """A store holding one conversation of ``n_messages`` streamed-shape messages.

        Reuses the append benchmark's last store of that size; otherwise records one with
        ``append_message`` (one transaction per message, same events and JSON shapes).
        Benchmarks only read it; one that writes works on a copy (:func:`copy_db`).
        """
        if n_messages in self.fixtures:
            return self.fixtures[n_messages]
        path = self.dir / f"fixture-{n_messages}.db"
        log(f"  building a {n_messages:,}-message fixture store ...")
        started = pc()
        with open_store(path) as store:
            conv = record_messages(store, n_messages)
        log(f"  ... built in {pc() - started:.1f} s")
        self.fixtures[n_messages] = (path, conv)
        return path, conv

    def pg_context(self) -> PgContext | None:
        """The run's PostgreSQL schema, created on first use; None when unreachable."""
        if self.pg is None:
            self.pg = PgContext.create(self.pg_url)
        return self.pg if self.pg.ok else None

    def close(self) -> None:
        if self.pg is not None and self.pg.ok:
            self.pg.drop()
