"""`convstore vacuum`: after it, erased text is in none of the store's files.

On PostgreSQL the test reads the server's own relation files (every table, TOAST table and
index of the store's schema, each with its segments and free-space and visibility maps), so
it needs to run on the server's machine as a user who may read its data directory (root
here); elsewhere it skips.
"""

from __future__ import annotations

import base64
import os
import re
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from convstore import Store
from tests.cli.support import CONVSTORE
from tests.conftest import one_error_line

ERASED = 30
KEPT = 5

RELATIONS = """
WITH own AS (
    SELECT c.oid, c.reltoastrelid FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(schema)s
), toast AS (
    SELECT reltoastrelid AS oid FROM own WHERE reltoastrelid <> 0
)
SELECT pg_relation_filepath(oid) FROM own
UNION SELECT pg_relation_filepath(oid) FROM toast
UNION SELECT pg_relation_filepath(i.indexrelid) FROM pg_index i JOIN toast ON i.indrelid = toast.oid
"""
"""The file of every relation of the schema: tables, sequences, indexes, TOAST tables and
their indexes (a composite type has none: NULL)."""


def _secret(n: int) -> str:
    return f"erased-secret-{n:03d}-q7x"


def _record(store: Store, n: int, secret: str) -> UUID:
    conv = store.new_conversation(title=f"{secret} title")
    store.set_labels(conv, {"customer": f"{secret} label"})
    noise = base64.b64encode(os.urandom(1500)).decode()  # incompressible: stored as is
    big = f"{secret} {noise[:1000]} {secret} {noise[1000:]} {secret}"
    store.append_message(conv, "user", [{"type": "text", "text": f"{secret} question {n}"}])
    store.append_message(
        conv,
        "assistant",
        [
            {"type": "text", "text": big},
            {"type": "tool_use", "id": f"c{n}", "name": "lookup", "input": {"q": secret}},
        ],
    )
    store.append_message(
        conv, "user", [{"type": "tool_result", "tool_use_id": f"c{n}", "content": secret}]
    )
    store.replay(conv)  # the replay model's tables hold it too
    return conv


def _cli(location: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONVSTORE), "--db", location, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _fill(location: str) -> tuple[list[UUID], list[UUID]]:
    with convstore.open_store(location) as store:
        erased = [_record(store, n, _secret(n)) for n in range(ERASED)]
        kept = [_record(store, n, f"kept-{n:03d}") for n in range(KEPT)]
        for conv in erased:
            store.erase(conv, reason="test")
    return erased, kept


def _leaked(files: list[Path]) -> set[int]:
    found: set[int] = set()
    for path in files:
        data = path.read_bytes()
        found |= {int(m) for m in re.findall(rb"erased-secret-(\d{3})-q7x", data)}
    return found


@pytest.fixture
def postgres_files(postgres_url: str) -> Iterator[tuple[str, object]]:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(postgres_url.split("?", 1)[0], autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
        assert row is not None
        if not os.access(row[0], os.R_OK | os.X_OK):
            pytest.skip(f"the server's data directory {row[0]} is not readable here")
        yield postgres_url, conn


def _relation_files(conn: object, schema: str) -> list[Path]:
    """Every file of every relation of ``schema``, once dirty buffers are written out."""
    execute = conn.execute  # type: ignore[attr-defined]
    execute("CHECKPOINT")
    data = Path(execute("SHOW data_directory").fetchone()[0])
    files = []
    for (relative,) in execute(RELATIONS, {"schema": schema}).fetchall():
        if relative is None:
            continue
        base = data / relative
        pattern = re.compile(rf"{re.escape(base.name)}(\.\d+)?(_fsm|_vm|_init)?(\.\d+)?")
        files += [p for p in base.parent.iterdir() if pattern.fullmatch(p.name)]
    assert files
    return files


def test_vacuum_on_postgres_leaves_no_erased_text_in_any_relation_file(
    postgres_files: tuple[str, object],
) -> None:
    """After erase and a plain VACUUM the text is still in the pages; after `convstore
    vacuum` no file of any table, TOAST table or index of the schema holds any of it, and
    the kept conversations read as before."""
    location, conn = postgres_files
    schema = location.rsplit("schema=", 1)[1]
    _erased, kept = _fill(location)
    execute = conn.execute  # type: ignore[attr-defined]
    tables = execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall()
    for (table,) in tables:
        execute(f'VACUUM "{schema}"."{table}"')
    assert len(_leaked(_relation_files(conn, schema))) > ERASED // 2  # plain VACUUM: kept

    done = _cli(location, "vacuum")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "vacuum: rewriting convstore_events" in done.stderr
    assert _leaked(_relation_files(conn, schema)) == set()
    with convstore.open_store(location) as store:
        for n, conv in enumerate(kept):
            assert store.conversation_info(conv).title == f"kept-{n:03d} title"
            assert len(store.messages(conv)) == 3


def test_vacuum_on_sqlite_leaves_no_free_pages_and_an_empty_wal(tmp_path: Path) -> None:
    """On SQLite: no erased text, no free page, and an empty write-ahead log afterwards."""
    db = tmp_path / "s.db"
    _erased, kept = _fill(str(db))
    done = _cli(str(db), "vacuum")
    assert done.returncode == 0, done.stderr
    assert "vacuum: rewriting s.db" in done.stderr
    wal = db.with_name("s.db-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert _leaked([db]) == set()
    with convstore.open_store(db) as store:
        assert [len(store.messages(conv)) for conv in kept] == [3] * KEPT


def test_vacuum_of_a_missing_store_is_one_line(tmp_path: Path) -> None:
    """Nothing to vacuum: one error line, and no store file left behind."""
    done = _cli(str(tmp_path / "none.db"), "vacuum")
    one_error_line(done.returncode, done.stdout, done.stderr, "no store at")
    assert not (tmp_path / "none.db").exists()


def test_vacuum_waits_for_a_lock_at_most_the_lock_timeout(postgres_url: str) -> None:
    """A session holding a table past the URL's lock_timeout makes vacuum fail in one line
    naming the table; once it is gone, vacuum goes through."""
    psycopg = pytest.importorskip("psycopg")
    location = f"{postgres_url}&lock_timeout=1"
    schema = postgres_url.rsplit("schema=", 1)[1]
    with convstore.open_store(location) as store:
        _record(store, 0, "kept-000")
    with psycopg.connect(postgres_url.split("?", 1)[0]) as holder:
        holder.execute(f'LOCK TABLE "{schema}".convstore_listing IN ACCESS SHARE MODE')
        done = _cli(location, "vacuum")
        for _ in range(10):
            # Another test's transaction on the shared server, open past the 1 s timeout,
            # stops vacuum before it reaches the locks (as it must): try again when it ends.
            if "begun before it" not in done.stderr:
                break
            done = _cli(location, "vacuum")
        holder.rollback()
    assert (done.returncode, done.stdout) == (1, "")
    *progress, last = done.stderr.splitlines()
    assert all(line.startswith("vacuum: rewriting ") for line in progress)  # the tables done
    assert last.startswith("error: ")
    assert "convstore_listing stayed locked" in last
    assert _cli(location, "vacuum").returncode == 0


def test_vacuum_waits_for_older_transactions_that_can_still_see_erased_rows(
    postgres_files: tuple[str, object],
) -> None:
    """A rewrite keeps every row an open snapshot may see, so a transaction begun before
    vacuum that outlives the lock timeout makes it fail in one line naming that session, with
    nothing rewritten; once the transaction ends, vacuum leaves no erased text behind."""
    psycopg = pytest.importorskip("psycopg")
    postgres_url, conn = postgres_files
    location = f"{postgres_url}&lock_timeout=1"
    schema = location.split("schema=", 1)[1].split("&", 1)[0]
    _fill(location)
    with psycopg.connect(postgres_url.split("?", 1)[0]) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")  # the snapshot is taken and held until rollback
        pid = holder.info.backend_pid
        done = _cli(location, "vacuum")
        one_error_line(done.returncode, done.stdout, done.stderr, f"session {pid}", code=1)
        assert "nothing was rewritten" in done.stderr
        assert len(_leaked(_relation_files(conn, schema))) == ERASED  # all still there
        holder.rollback()
    assert _cli(location, "vacuum").returncode == 0
    assert _leaked(_relation_files(conn, schema)) == set()
