"""Ad-hoc SQL over a read model that cannot change anything, attach files or load code.

Three locks, each enough on its own for writes: the file is opened read-only (``mode=ro``),
``PRAGMA query_only`` is on, and an authorizer refuses every action but reading. The
authorizer also refuses ``ATTACH``, ``load_extension()`` and pragmas outside a small
read-only list.

Resources are bounded too: a progress handler stops a query past its time limit; SQLite
refuses to build any string or blob over :data:`MAX_VALUE_BYTES` (so one call such as
``printf('%.*c', 900000000, 'x')`` fails at once instead of allocating gigabytes in a single
step no progress handler sees); and rows are fetched in pages, stopping with a clear error
as soon as the result passes its row or byte budget.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from convstore.domain.errors import InvalidInput, NoStore

DEFAULT_TIME_LIMIT_SECONDS = 30.0
DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

MAX_VALUE_BYTES = 64 * 1024 * 1024
"""The largest string or blob a query may build or read: twice the largest block."""

_PROGRESS_OPCODES = 1000
"""Virtual-machine steps between checks of the time limit."""

_FETCH_PAGE = 256

_ALLOWED_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_PRAGMA,
    }
)
_ALLOWED_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "foreign_key_list",
        "data_version",
    }
)
_REFUSED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
)


def _authorize(action: int, arg1: str | None, arg2: str | None, *_: str | None) -> int:
    if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
        # SQLite asks this while connecting an FTS5 table (blocks_fts) and nothing is written:
        # the connection is read-only and query_only, which refuse any real update anyway.
        return sqlite3.SQLITE_OK
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() not in _ALLOWED_PRAGMAS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _REFUSED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _size(value: object) -> int:
    """Roughly how many bytes a result value holds."""
    if isinstance(value, str | bytes):
        return len(value) + 16
    return 16


def read_only_query(
    path: Path,
    sql: str,
    params: dict[str, Any] | None = None,
    *,
    time_limit: float = DEFAULT_TIME_LIMIT_SECONDS,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only statement; returns its column names and rows.

    Raises :class:`InvalidInput` (having changed nothing) for anything that is not a read,
    for SQL errors, for queries that run past ``time_limit`` seconds or build a value over
    :data:`MAX_VALUE_BYTES`, and for results of more than ``max_rows`` rows or about
    ``max_bytes`` bytes.
    """
    if not path.exists():
        msg = f"no audit database at {path} (run `convstore project` first)"
        raise NoStore(msg)
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_authorize)
        deadline = time.monotonic() + time_limit
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), _PROGRESS_OPCODES)
        rows: list[tuple[Any, ...]] = []
        size = 0
        try:
            cursor = conn.execute(sql, params or {})
            while page := cursor.fetchmany(_FETCH_PAGE):
                rows.extend(page)
                size += sum(_size(value) for row in page for value in row)
                if len(rows) > max_rows:
                    msg = (
                        f"audit sql: the result has more than {max_rows:,} rows "
                        "(add a LIMIT, or raise --max-rows)"
                    )
                    raise InvalidInput(msg)
                if size > max_bytes:
                    msg = (
                        f"audit sql: the result passed {max_bytes:,} bytes after {len(rows):,} "
                        "rows (select fewer columns or rows, or raise --max-bytes)"
                    )
                    raise InvalidInput(msg)
        except sqlite3.DatabaseError as exc:
            detail = str(exc)
            if detail == "interrupted":
                detail = f"stopped after {time_limit:g} s (the time limit)"
            elif "too big" in detail:
                detail = f"a value would exceed {MAX_VALUE_BYTES:,} bytes (the size limit)"
            elif "not authorized" in detail or "readonly" in detail or "denied" in detail:
                detail = "refused: audit sql only reads (no writes, ATTACH or extensions)"
            msg = f"audit sql: {detail}"
            raise InvalidInput(msg) from None
        except sqlite3.ProgrammingError as exc:
            msg = f"audit sql: {exc}"
            raise InvalidInput(msg) from None
        except MemoryError:
            rows.clear()
            msg = "audit sql: out of memory reading the result (select fewer rows or columns)"
            raise InvalidInput(msg) from None
        columns = [d[0] for d in cursor.description or ()]
        return columns, rows
    finally:
        conn.close()
