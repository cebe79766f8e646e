"""`audit sql` within bounds: no value past 64 MiB, no result past its row and byte budgets.

The queries that once ran for seconds and took gigabytes run here in a real ``convstore``
process whose address space is capped (``RLIMIT_AS``): each must stop with one clear line
(exit 2) well inside that cap, rather than exhaust it.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from convstore import open_store
from convstore.app.demo import record_demo
from convstore.cli import cli
from convstore.domain.errors import InvalidInput
from convstore.infrastructure.common.readonly import read_only_query
from tests.conftest import one_error_line

SCRIPT = Path(sys.executable).parent / "convstore"

MEMORY_CAP = 1536 * 1024 * 1024
"""Address space for the capped process: room for Python and a 256 MiB result, not 2 GB."""

HUGE_VALUE = "SELECT length(printf('%.*c', 900000000, 'x')) AS n"
HUGE_BLOB = "SELECT length(zeroblob(900000000)) AS n"
MEGABYTE_ROWS = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 3000) "
    "SELECT i, printf('%.*c', 1000000, 'x') AS big FROM n"
)


@pytest.fixture
def projected(tmp_path: Path) -> tuple[Path, Path]:
    """A demo store and its caught-up read model."""
    db, audit = tmp_path / "s.db", tmp_path / "a.db"
    with open_store(db) as store:
        record_demo(store)
    assert (
        CliRunner().invoke(cli, ["--db", str(db), "--audit", str(audit), "project"]).exit_code == 0
    )
    return db, audit


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def capped_sql(db: Path, audit: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`convstore audit sql ARGS` in a process that may not map more than MEMORY_CAP."""
    argv = [str(SCRIPT), "--db", str(db), "--audit", str(audit), "audit", "sql", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=120, preexec_fn=_cap_memory
    )


def assert_one_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    line = one_error_line(result.returncode, result.stdout, result.stderr, *fragments)
    assert line.startswith("error: audit sql: "), line


@pytest.mark.slow
def test_a_query_building_a_huge_value_stops_at_the_size_limit(
    projected: tuple[Path, Path],
) -> None:
    """A 900 MB value is never built: a blob is refused in one line, printf gives NULL."""
    result = capped_sql(*projected, "--time-limit", "0.1", HUGE_BLOB)
    assert_one_line(result, "67,108,864 bytes", "size limit")
    # SQLite's printf() answers NULL, not an error, past the length limit: bounded all the same.
    result = capped_sql(*projected, "--time-limit", "0.1", "--json", HUGE_VALUE)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"n": None}]


@pytest.mark.slow
def test_a_result_of_3000_megabyte_rows_stops_at_the_byte_budget(
    projected: tuple[Path, Path],
) -> None:
    """3,000 rows of 1 MB stop at --max-bytes (256 MiB by default) instead of exhausting memory."""
    result = capped_sql(*projected, MEGABYTE_ROWS)
    assert_one_line(result, "passed 268,435,456 bytes", "--max-bytes")
    smaller = capped_sql(*projected, "--max-bytes", "10000000", MEGABYTE_ROWS)
    assert_one_line(smaller, "passed 10,000,000 bytes")


def test_max_rows_caps_the_result_and_a_result_within_it_is_whole(
    projected: tuple[Path, Path],
) -> None:
    """One row over --max-rows is an error; exactly --max-rows rows print in full."""
    db, audit = projected
    query = (
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n LIMIT 300) SELECT i FROM n"
    )
    base = ["--db", str(db), "--audit", str(audit), "audit", "--stale", "sql"]
    over = CliRunner().invoke(cli, [*base, "--max-rows", "299", query])
    assert over.exit_code == 2, over.output
    assert over.stderr.splitlines() == [
        "error: audit sql: the result has more than 299 rows (add a LIMIT, or raise --max-rows)"
    ]
    within = CliRunner().invoke(cli, [*base, "--max-rows", "300", "--json", query])
    assert within.exit_code == 0, within.stderr
    assert within.stdout.count('"i":') == 300


def test_read_only_query_bounds_values_rows_and_bytes(projected: tuple[Path, Path]) -> None:
    """The library call enforces the same three bounds, each as InvalidInput."""
    _, audit = projected
    with pytest.raises(InvalidInput, match="size limit"):
        read_only_query(audit, "SELECT zeroblob(100000000)")
    with pytest.raises(InvalidInput, match="more than 2 rows"):
        read_only_query(audit, "SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3", max_rows=2)
    with pytest.raises(InvalidInput, match="--max-bytes"):
        read_only_query(audit, "SELECT printf('%.*c', 5000, 'x')", max_bytes=4096)
    columns, rows = read_only_query(audit, "SELECT printf('%.*c', 5000, 'x') AS x", max_bytes=8192)
    assert columns == ["x"]
    assert rows == [("x" * 5000,)]
