"""Storage faults on real SQLite files: a locked database, a full disk, a read-only filesystem,
a missing directory and a damaged file.

For each: a clear error (``StoreError``, or exit 1 with one ``error:`` line from the CLI),
nothing half-written (``verify`` finds no problem, every message whole or absent, the stored
rows unchanged by the failed call), and the store usable once the fault is gone.

The full disk and the read-only filesystem are real: a small tmpfs mounted for the test (and
remounted read-only). Mounting needs root; without it those tests skip and say so.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

import convstore.infrastructure.sqlite.backend as sqlite_opening
import convstore.infrastructure.sqlite.recorder as sqlite_backend
from convstore import InvalidInput, StoreError, open_store
from convstore.cli import cli
from convstore.store.verify import Verifier
from tests.formats import events_of

TEXT = {"type": "text", "text": "hello"}
LOCK_TIMEOUT_SECONDS = 1


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def short_lock_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stores opened in this test wait 1 s (not 10 s) for another connection's write lock.

    Setting ``DEFAULT_LOCK_TIMEOUT_SECONDS`` has no effect (see the xfail below), so this
    passes the timeout through ``sqlite_env``'s own ``lock_timeout`` parameter instead.
    """
    real = sqlite_backend.sqlite_env

    def env(path: Path, lock_timeout: int = LOCK_TIMEOUT_SECONDS) -> dict[str, str]:
        return real(path, lock_timeout=lock_timeout)

    monkeypatch.setattr(sqlite_opening, "sqlite_env", env)


def dump(db: Path) -> list[Any]:
    """Every stored event row, in insertion order: the store's whole content."""
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()


def invoke(db: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=stdin)


def assert_one_error_line(result: Result, code: int, *fragments: str) -> str:
    """Exit ``code``, nothing on stdout, exactly one ``error:`` line on stderr."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def assert_one_line(error: BaseException, *fragments: str) -> None:
    text = str(error)
    assert "\n" not in text, text
    for fragment in fragments:
        assert fragment in text, (fragment, text)


def log_problems(db: Path) -> list[str]:
    """What the verifier finds wrong with the log at ``db``, read through a fresh store."""
    verifier = Verifier()
    with open_store(db, create=False) as store:
        verifier.check_all(store.scan())
    return [p.problem for p in verifier.problems]


@contextmanager
def exclusive_lock(db: Path) -> Iterator[sqlite3.Connection]:
    """Hold SQLite's write lock on ``db`` from another connection (``BEGIN EXCLUSIVE``)."""
    connection = sqlite3.connect(db, isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        yield connection
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False, timeout=30)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a small tmpfs of the given size under tmp_path (root only); unmounts after."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"tmpfs{len(mounted)}"
        where.mkdir()
        done = _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where))
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        if subprocess.run(["umount", str(where)], check=False, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


# -- a locked database -------------------------------------------------------------------------


def test_the_lock_timeout_constant_is_honoured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Setting DEFAULT_LOCK_TIMEOUT_SECONDS changes how long a store waits for a lock."""
    monkeypatch.setattr(sqlite_backend, "DEFAULT_LOCK_TIMEOUT_SECONDS", LOCK_TIMEOUT_SECONDS)
    env = sqlite_backend.sqlite_env(tmp_path / "s.db")
    assert env["SQLITE_LOCK_TIMEOUT"] == str(LOCK_TIMEOUT_SECONDS)


@pytest.mark.usefixtures("short_lock_timeout")
def test_a_locked_database_fails_in_one_line_and_the_store_recovers(tmp_path: Path) -> None:
    """Writes wait for another connection's lock, then raise StoreError; nothing is written."""
    db = tmp_path / "locked.db"
    with open_store(db) as store:
        conv = store.new_conversation(title="locked")
        msg = store.start_message(conv, "assistant")
        store.append_block(conv, msg, TEXT)
        before, replay_before = dump(db), store.replay(conv)
        with exclusive_lock(db):
            started = time.monotonic()
            with pytest.raises(StoreError) as caught:
                store.append_block(conv, msg, {"type": "text", "text": "second"})
            assert time.monotonic() - started >= LOCK_TIMEOUT_SECONDS * 0.9  # it waited first
            assert_one_line(caught.value, "database is locked", str(db))
            with pytest.raises(StoreError, match="database is locked"):
                store.append_message(conv, "user", [TEXT, TEXT])
            assert store.replay(conv) == replay_before  # WAL: readers are not blocked
        assert dump(db) == before
        # The same store works again, at the next version and the next block index.
        assert store.append_block(conv, msg, {"type": "text", "text": "second"}) == 1
        store.end_message(conv, msg)
        [message] = store.messages(conv)
        assert [b.block.model_dump()["text"] for b in message.blocks] == ["hello", "second"]
        versions = [e.originator_version for e in store.events(conv)]
        assert versions == list(range(1, len(versions) + 1))
    assert log_problems(db) == []


@pytest.mark.usefixtures("short_lock_timeout")
def test_a_locked_database_through_the_cli(tmp_path: Path) -> None:
    """The CLI waits, then exits 1 with one line naming the lock; the log is unchanged."""
    db = tmp_path / "locked.db"
    conv = invoke(db, "new").stdout.strip()
    before = dump(db)
    with exclusive_lock(db):
        result = invoke(db, "append", conv, "--role", "user", stdin='[{"type":"text","text":"x"}]')
        assert_one_error_line(result, 1, "database is locked", str(db))
        result = invoke(db, "new", "--title", "t")
        assert_one_error_line(result, 1, "database is locked")
    assert dump(db) == before
    result = invoke(db, "append", conv, "--role", "user", stdin='[{"type":"text","text":"x"}]')
    assert result.exit_code == 0, result.stderr
    with open_store(db) as store:
        assert len(dump(db)) == len(before) + events_of(store)
    assert invoke(db, "verify").exit_code == 0


# -- a full disk ---------------------------------------------------------------------------------


def _filler(n: int, part: int) -> dict[str, str]:
    return {"type": "text", "text": f"message {n} part {part} " + "x" * 6000}


def test_a_full_disk_fails_in_one_line_writes_nothing_half_and_recovers(
    tmpfs: Callable[[str], Path],
) -> None:
    """On a full filesystem appends fail whole (StoreError / exit 1); freeing space heals it."""
    disk = tmpfs("1m")
    db = disk / "full.db"
    ballast = disk / "ballast"
    with open_store(db) as store:
        conv = store.new_conversation(title="disk full")
        streaming = store.start_message(conv, "assistant")
        store.append_block(conv, streaming, TEXT)
        # Ballast that leaves room for a few messages (each writes its 8 KB pages whole to
        # the write-ahead log): freeing it leaves room for SQLite to checkpoint the log into
        # the database file as well.
        ballast.write_bytes(b"\0" * 384 * 1024)
        whole = 0  # whole two-block messages, until the disk says no
        with pytest.raises(StoreError) as caught:  # noqa: PT012 - fill until the disk says no
            for whole in range(200):
                store.append_message(conv, "user", [_filler(whole, 0), _filler(whole, 1)])
        assert_one_line(caught.value, "disk is full", str(db))
        assert whole > 0
        streamed = 0  # then single blocks into the open message, to fill the last pages
        with pytest.raises(StoreError, match="disk is full"):  # noqa: PT012
            for streamed in range(200):
                store.append_block(conv, streaming, _filler(-1, streamed))
        before = dump(db)
        blocks = json.dumps([_filler(whole, 0), _filler(whole, 1)])
        result = invoke(db, "append", str(conv), "--role", "user", stdin=blocks)
        assert_one_error_line(result, 1, "disk is full", str(db))
        assert dump(db) == before
        # Every message is whole (both blocks) or absent; the open one kept what landed.
        messages = store.messages(conv)
        assert messages[0].message_id == streaming
        assert messages[0].status == "open"
        streamed_texts = [_filler(-1, n)["text"] for n in range(streamed)]
        assert [b.block.model_dump()["text"] for b in messages[0].blocks] == [
            "hello",
            *streamed_texts,
        ]
        for n, message in enumerate(messages[1:]):
            assert message.status == "ended"
            assert [b.block.model_dump()["text"] for b in message.blocks] == [
                _filler(n, 0)["text"],
                _filler(n, 1)["text"],
            ]
        assert len(messages) == whole + 1
        assert log_problems(db) == []
        ballast.unlink()  # space again: the same store carries on
        store.append_block(conv, streaming, {"type": "text", "text": "after"})
        store.end_message(conv, streaming)
        store.append_message(conv, "user", [_filler(whole, 0), _filler(whole, 1)])
        assert len(store.messages(conv)) == whole + 2
    assert log_problems(db) == []
    result = invoke(db, "append", str(conv), "--role", "user", stdin=json.dumps([TEXT]))
    assert result.exit_code == 0, result.stderr


# -- a read-only filesystem ----------------------------------------------------------------------


def test_a_read_only_filesystem_fails_in_one_line_and_changes_nothing(
    tmpfs: Callable[[str], Path],
) -> None:
    """A store on a read-only mount: StoreError / exit 1 in one line; writable again, it works."""
    disk = tmpfs("1m")
    db = disk / "ro.db"
    with open_store(db) as store:
        conv = store.new_conversation(title="read-only")
        store.append_message(conv, "user", [TEXT])
    before, files = dump(db), sorted(p.name for p in disk.iterdir())
    assert _mount("-o", "remount,ro", str(disk)).returncode == 0
    try:
        with pytest.raises(StoreError) as caught:
            open_store(db)
        assert_one_line(caught.value, str(db))
        result = invoke(db, "append", str(conv), "--role", "user", stdin=json.dumps([TEXT]))
        assert_one_error_line(result, 1, str(db))
        # Rough edge (reported): reading fails as well, since WAL mode needs the -shm file.
        assert_one_error_line(invoke(db, "replay", str(conv)), 1, str(db))
        assert_one_error_line(invoke(db, "verify"), 1, str(db))
    finally:
        assert _mount("-o", "remount,rw", str(disk)).returncode == 0
    assert sorted(p.name for p in disk.iterdir()) == files
    assert dump(db) == before
    with open_store(db) as store:
        store.append_message(conv, "user", [TEXT])
        assert len(store.messages(conv)) == 2
    assert log_problems(db) == []


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root ignores file modes, so a chmod 0444 store is still writable; the read-only "
    "case is covered as root by the read-only tmpfs test above",
)
def test_a_read_only_store_file_fails_in_one_line(tmp_path: Path) -> None:
    """A store file without write permission: appends fail in one line and change nothing."""
    db = tmp_path / "ro.db"
    with open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [TEXT])
    before = dump(db)
    db.chmod(0o444)
    try:
        result = invoke(db, "append", str(conv), "--role", "user", stdin=json.dumps([TEXT]))
        assert_one_error_line(result, 1, str(db))
    finally:
        db.chmod(0o600)
    assert dump(db) == before
    assert log_problems(db) == []


# -- a missing directory, a damaged file -----------------------------------------------------------


def test_a_missing_directory_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    """A store path in a directory that does not exist: StoreError / exit 1, nothing made."""
    db = tmp_path / "missing" / "store.db"
    with pytest.raises(StoreError) as caught:
        open_store(db)
    assert_one_line(caught.value, "does not exist", str(db.parent))
    assert_one_error_line(invoke(db, "new"), 1, "does not exist")
    # Commands that only read or extend a store say there is none (bad input: exit 2).
    result = invoke(
        db, "append", "0b8e7c0e-3d6f-4c1a-9a51-5e2f1c9d7a10", "-r", "user", stdin=json.dumps([TEXT])
    )
    assert_one_error_line(result, 2, "no store at")
    assert not db.parent.exists()


def test_a_damaged_store_file_fails_in_one_line(tmp_path: Path) -> None:
    """A store whose pages were overwritten: reads and verify exit 1 with one line each."""
    db = tmp_path / "damaged.db"
    with open_store(db) as store:
        conv = store.new_conversation()
        for n in range(30):
            store.append_message(conv, "user", [{"type": "text", "text": f"{n} " + "y" * 3000}])
    # The events' pages and the listing's, wherever the schema has put them.
    damage(db, "stored_events", "sqlite_autoindex_stored_events_1", "convstore_listing")
    for args in (["replay", str(conv)], ["log", str(conv)], ["verify"], ["list"]):
        assert_one_error_line(invoke(db, *args), 1, "malformed")
    with pytest.raises(StoreError, match="malformed"), open_store(db) as store:
        store.events(UUID(str(conv)))


def damage(db: Path, *names: str) -> None:
    """Overwrite every page of the named tables and indexes of ``db`` with junk."""
    with closing(sqlite3.connect(db)) as connection:
        size = connection.execute("PRAGMA page_size").fetchone()[0]
        rows = connection.execute("SELECT name, pageno FROM dbstat").fetchall()
    pages = [page for name, page in rows if name in names]
    assert pages
    with db.open("r+b") as handle:
        for page in pages:
            handle.seek((page - 1) * size)
            handle.write(b"\xde\xad\xbe\xef" * (size // 4))


def test_damage_no_read_of_the_log_touches_is_found_by_verify(tmp_path: Path) -> None:
    """Pages of an index that replay never reads (the listing's parent index, its labels)
    overwritten: replay still answers from the intact log, and verify reports the damage
    (SQLite's quick check of every page) instead of saying the store is sound."""
    db = tmp_path / "damaged.db"
    with open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "intact"}])
    damage(db, "convstore_listing_parent", "convstore_labels")
    assert "intact" in invoke(db, "replay", str(conv)).stdout
    result = invoke(db, "verify")
    assert result.exit_code == 1, result.stdout
    assert "storage: SQLite's quick_check" in result.stdout
    assert result.stderr.strip().startswith("error: ")
    with open_store(db) as store:
        assert store.storage_problems()


# -- secrets and file modes ------------------------------------------------------------------------

PASSWORD = "s3cret-Pa55"  # noqa: S105 - a test password, shown nowhere


def exception_texts(error: BaseException | None) -> list[str]:
    """The text of an exception and of every exception chained to it."""
    texts = []
    while error is not None:
        texts += [str(error), repr(error)]
        error = error.__cause__ or error.__context__
    return texts


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://user:{PASSWORD}@127.0.0.1:1/db",
        f"postgres://user:{PASSWORD}@127.0.0.1:1/db?connect_timeout=2&schema=x",
        f"postgresql://user:{PASSWORD}@127.0.0.1:1/db?bogus=1",
        f"postgresql://user:{PASSWORD}@127.0.0.1:1/",
    ],
    ids=["refused", "refused with options", "bad option", "no database"],
)
def test_an_unreachable_or_bad_postgres_url_never_shows_its_password(url: str) -> None:
    """Neither the exception (nor its chain) nor the CLI's one stderr line holds the password."""
    with pytest.raises((StoreError, InvalidInput)) as caught:
        open_store(url)
    assert all(PASSWORD not in text for text in exception_texts(caught.value))
    assert "***" in str(caught.value)
    for args in (["new"], ["list"], ["verify"], ["replay", "0b8e7c0e-3d6f-4c1a-9a51-5e2f1c9d7a10"]):
        result = CliRunner().invoke(cli, ["--db", url, *args])
        assert result.exit_code in (1, 2), (args, result.output)
        assert PASSWORD not in result.output
        assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://user:{PASSWORD}/x@127.0.0.1:5432/db",
        f"postgresql://user:{PASSWORD}?x@127.0.0.1:5432/db",
        f"postgresql://user:{PASSWORD}#x@127.0.0.1:5432/db",
    ],
    ids=["slash", "question mark", "hash"],
)
def test_a_malformed_url_never_shows_its_password(url: str) -> None:
    """A URL whose password was not percent-encoded is refused without showing the password."""
    with pytest.raises((StoreError, InvalidInput)) as caught:
        open_store(url)
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize("port", ["abc", "99999"])
def test_a_url_with_a_bad_port_is_bad_input(port: str) -> None:
    """A postgresql:// URL whose port is not a valid number is refused as bad input (exit 2)."""
    url = f"postgresql://user:{PASSWORD}@127.0.0.1:{port}/db"
    result = CliRunner().invoke(cli, ["--db", url, "new"])
    assert result.exit_code == 2, result.stderr
    assert PASSWORD not in result.output


def test_a_reachable_postgres_store_never_shows_its_password(
    make_postgres_url: Callable[[], str], tmp_path: Path
) -> None:
    """With a password in a good URL, Store.location and every command's output mask it."""
    plain = make_postgres_url()
    assert "://postgres@" in plain, plain
    url = plain.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)  # trust auth ignores it
    with open_store(url) as store:
        assert PASSWORD not in store.location
        assert store.location == plain.replace("://postgres@", "://postgres:***@", 1)
        conv = store.new_conversation(title="secret-free")
        store.append_message(conv, "user", [TEXT])
    audit = tmp_path / "pg.audit.db"
    outputs = []
    for args in (
        ["demo", "--json"],
        ["list"],
        ["--audit", str(audit), "project"],
        ["--audit", str(audit), "verify"],
        ["replay", "0b8e7c0e-3d6f-4c1a-9a51-5e2f1c9d7a10"],  # not found: an error line
        ["append", str(conv), "-r", "user", "-"],
    ):
        result = CliRunner().invoke(cli, ["--db", url, *args], input="not json")
        outputs.append(result.output)
        assert PASSWORD not in result.output, (args, result.output)
    assert "***" in outputs[0]  # the demo names its store, masked
    with closing(sqlite3.connect(audit)) as connection:
        meta = dict(connection.execute("SELECT key, value FROM _meta").fetchall())
    assert PASSWORD not in meta["source"]


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, so file modes do not depend on how the tests were started."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.usefixtures("umask_022")
def test_new_store_files_are_private(tmp_path: Path) -> None:
    """A new store and its -wal and -shm files are created 0600, through the API and the CLI."""
    db = tmp_path / "private.db"
    with open_store(db) as store:
        assert _mode(db) == 0o600
        conv = store.new_conversation()
        store.append_message(conv, "user", [TEXT])
        wal, shm = db.with_name("private.db-wal"), db.with_name("private.db-shm")
        assert wal.exists()
        assert shm.exists()
        assert (_mode(wal), _mode(shm)) == (0o600, 0o600)
    cli_db = tmp_path / "cli.db"
    assert CliRunner().invoke(cli, ["--db", str(cli_db), "new"]).exit_code == 0
    assert _mode(cli_db) == 0o600


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("command", ["project", "rebuild"])
def test_the_audit_file_is_private(tmp_path: Path, command: str) -> None:
    """The audit read model, made by project or rebuild, is created 0600 like the store."""
    db = tmp_path / "store.db"
    with open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "my access_token"}])
    assert CliRunner().invoke(cli, ["--db", str(db), command]).exit_code == 0
    assert _mode(tmp_path / "store.audit.db") == 0o600
