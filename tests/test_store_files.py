"""What a SQLite store path means: one file, made all at once, owner-only, and convstore's.

A location is never read as a SQLite URI (``file:…``, ``:memory:``, ``?mode=memory``); a first
open killed at any moment leaves a store that opens; a dangling symbolic link is followed and
the file made owner-only; another application's database is refused and left byte-for-byte;
a store made before stores were marked still opens, and is marked.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from uuid import UUID

import pytest
from click.testing import CliRunner
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from convstore import InvalidInput, open_store
from convstore.app.bootstrap import fill_new_store
from convstore.cli import cli
from convstore.infrastructure.sqlite.files import PAGE_SIZE
from convstore.infrastructure.sqlite.recorder import create_private_file

TEXT = {"type": "text", "text": "hello"}


@pytest.fixture(autouse=True)
def _in_an_empty_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test runs in an empty working directory (the environment is isolated by
    tests/conftest.py)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, so file modes do not depend on how the tests were started."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _write_and_read_back(location: str | Path) -> UUID:
    with open_store(location) as store:
        conv = store.new_conversation(title="kept")
        store.append_message(conv, "user", [TEXT])
    with open_store(location, create=False) as store:
        assert [c.id for c in store.conversations()] == [conv]
    return conv


# -- item 3: a path is one file -------------------------------------------------------------------


@pytest.mark.parametrize(
    "location", ["file:x.db", "file:m.db?mode=memory&cache=shared", "FILE:y.db", ":memory:"]
)
def test_sqlite_uris_are_refused_and_create_nothing(location: str) -> None:
    """A file: URI or :memory: is refused with one line (API and CLI, exit 2); no file appears."""
    with pytest.raises(InvalidInput, match="give the file's path"):
        open_store(location)
    result = CliRunner().invoke(cli, ["--db", location, "new"])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1
    assert _files(Path.cwd()) == []


def test_a_relative_path_holding_a_colon_is_that_one_file() -> None:
    """./file:x.db names a file called 'file:x.db', written there and nowhere else."""
    _write_and_read_back("./file:x.db")
    assert [name for name in _files(Path.cwd()) if not name.endswith(("-wal", "-shm"))] == [
        "file:x.db"
    ]


def test_uri_parameters_in_a_path_are_just_characters(tmp_path: Path) -> None:
    """A path holding mode=memory, ?, # and % is one durable file in WAL mode, read back."""
    directory = tmp_path / "mode=memory&cache=shared"
    directory.mkdir()
    db = directory / "s.db?mode=memory#frag%20"
    _write_and_read_back(db)
    assert [n for n in _files(directory) if not n.endswith(("-wal", "-shm"))] == [db.name]
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # The conversation's start and its message: one block, one event (a new store, format 3).
        assert conn.execute("SELECT count(*) FROM stored_events").fetchone()[0] == 2


# -- item 6: SIGKILL during the first open --------------------------------------------------------

_FIRST_OPEN = """
import sys
from convstore import open_store
print("ready", flush=True)
with open_store(sys.argv[1]) as store:
    store.new_conversation()
"""


def test_a_first_open_killed_at_any_moment_leaves_a_store_that_opens(tmp_path: Path) -> None:
    """SIGKILL at random moments of a store's very first open, 30 times: each path then opens,
    takes a write, and no temporary file is left once it has."""
    rng = random.Random(6)  # noqa: S311 - test timing, not crypto
    for run in range(30):
        db = tmp_path / f"run{run}.db"
        child = subprocess.Popen(
            [sys.executable, "-c", _FIRST_OPEN, str(db)], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        try:
            child.wait(timeout=rng.uniform(0.0, 0.15))
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        child.stdout.close()
        with open_store(db) as store:
            store.new_conversation()
            assert store.conversations()
    assert [name for name in _files(tmp_path) if ".creating-" in name] == []


def test_concurrent_first_opens_share_one_store(tmp_path: Path) -> None:
    """Eight threads opening the same new path at once all write into one store."""
    db = tmp_path / "raced.db"
    made: list[UUID] = []
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            with open_store(db) as store:
                made.append(store.new_conversation())
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with open_store(db, create=False) as store:
        assert sorted(c.id for c in store.conversations()) == sorted(made)
    assert [name for name in _files(tmp_path) if ".creating-" in name] == []


def test_a_store_name_near_the_filesystem_limit_is_created(tmp_path: Path) -> None:
    """A 250-byte file name (NAME_MAX is 255) still leaves room for the temporary file."""
    _write_and_read_back(tmp_path / ("n" * 247 + ".db"))


# -- item 10: owner-only, whatever the path looks like --------------------------------------------


@pytest.mark.usefixtures("umask_022")
def test_a_dangling_symlink_is_followed_and_the_files_are_owner_only(tmp_path: Path) -> None:
    """A store path that is a dangling symlink: the store is made where it points, 0600, with
    its -wal and -shm 0600 too; the link stays a link; the API and the CLI agree."""
    (tmp_path / "real").mkdir()
    for name in ("api", "cli"):
        link, target = tmp_path / f"{name}.db", tmp_path / "real" / f"{name}.db"
        link.symlink_to(target)
        if name == "api":
            with open_store(link) as store:
                assert store.location == str(target)
                conv = store.new_conversation()
                store.append_message(conv, "user", [TEXT])
                wal, shm = Path(f"{target}-wal"), Path(f"{target}-shm")
                assert (_mode(target), _mode(wal), _mode(shm)) == (0o600, 0o600, 0o600)
        else:
            assert CliRunner().invoke(cli, ["--db", str(link), "new"]).exit_code == 0
            assert _mode(target) == 0o600
        assert link.is_symlink()
        assert link.readlink() == target


@pytest.mark.usefixtures("umask_022")
def test_create_private_file_follows_a_dangling_symlink(tmp_path: Path) -> None:
    """create_private_file makes the file a dangling link names, owner-only; a file that exists
    (through a link or not) is left as it is."""
    link, target = tmp_path / "link", tmp_path / "target"
    link.symlink_to(target)
    create_private_file(link)
    assert _mode(target) == 0o600
    target.write_bytes(b"kept")
    target.chmod(0o640)
    create_private_file(link)
    assert (_mode(target), target.read_bytes()) == (0o640, b"kept")


# -- item 14: only convstore's files --------------------------------------------------------------


class Account(Aggregate):
    """Another eventsourcing application's aggregate."""

    @event("Opened")
    def __init__(self, owner: str) -> None:
        self.owner = owner


def _bank(path: Path, accounts: int) -> None:
    """A real eventsourcing application's SQLite file: its default stored_events table."""
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}
    bank: Application[UUID] = Application(env=env)
    for n in range(accounts):
        bank.save(Account(f"owner {n}"))
    bank.close()


@pytest.mark.parametrize("accounts", [3, 0], ids=["with accounts", "empty"])
def test_another_applications_sqlite_file_is_refused_untouched(
    tmp_path: Path, accounts: int
) -> None:
    """An eventsourcing application's database (events or just its tables) is refused by the
    API and the CLI (exit 2, one line), and its file stays byte-for-byte the same."""
    bank = tmp_path / "bank.db"
    _bank(bank, accounts)
    if accounts == 0:
        with closing(sqlite3.connect(bank)) as conn:  # an app that keeps snapshots too
            conn.execute("CREATE TABLE stored_snapshots (x)")
            conn.commit()
    before = bank.read_bytes()
    with pytest.raises(InvalidInput, match="not a convstore store"):
        open_store(bank)
    for args in (["new"], ["list"], ["verify"]):
        result = CliRunner().invoke(cli, ["--db", str(bank), *args])
        assert result.exit_code == 2, (args, result.output)
        assert len(result.stderr.splitlines()) == 1, result.stderr
    assert bank.read_bytes() == before


def test_a_store_made_before_the_marker_opens_and_is_marked(tmp_path: Path) -> None:
    """A store of the previous version (stored_events only, convstore topics) opens with its
    conversations, and gets the marker table on that open: format 1, as its log is written in
    the earlier form, which new events keep to."""
    db = tmp_path / "old.db"
    conv = _write_and_read_back(db)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP TABLE convstore_store")
        conn.commit()
    with open_store(db) as store:
        assert [c.id for c in store.conversations()] == [conv]
        store.append_message(conv, "user", [TEXT])
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute(
            "SELECT key, value FROM convstore_store WHERE key != 'id'"
        ).fetchall() == [("format", "1")]
        (identity,) = conn.execute("SELECT value FROM convstore_store WHERE key = 'id'").fetchone()
        assert identity == store.identity != ""
        newest = conn.execute(
            "SELECT state FROM stored_events WHERE originator_id = ? ORDER BY originator_version",
            (conv.hex,),
        ).fetchall()[-1][0]
    assert newest.startswith(b'{"originator_id":')


@pytest.mark.parametrize("content", ["nothing", "header only"])
def test_a_file_left_empty_by_an_old_killed_open_is_finished(tmp_path: Path, content: str) -> None:
    """The files an earlier version's killed first open left (0 bytes, or a SQLite header with
    no tables) open as new stores instead of being refused forever: an empty one in this
    version's pages, as a new store; one with a header in the size its header gives."""
    db = tmp_path / "half.db"
    db.touch(mode=0o600)
    if content == "header only":
        with closing(sqlite3.connect(db)) as conn:
            conn.execute("PRAGMA page_size = 8192")
            conn.execute("PRAGMA journal_mode=WAL")
        assert db.stat().st_size > 0
    _write_and_read_back(db)
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute(
            "SELECT key, value FROM convstore_store WHERE key != 'id'"
        ).fetchall() == [("format", "3")]
    assert _page_size(db) == (PAGE_SIZE if content == "nothing" else 8192)


def test_a_store_of_another_format_is_refused(tmp_path: Path) -> None:
    """A store whose marker names a format this version does not read is refused, unchanged."""
    db = tmp_path / "future.db"
    _write_and_read_back(db)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("UPDATE convstore_store SET value = '4' WHERE key = 'format'")
        conn.commit()
    before = db.read_bytes()
    with pytest.raises(InvalidInput, match="format '4'"):
        open_store(db)
    assert db.read_bytes() == before


# -- item 12: the lock timeout --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["2147484", "86401", "0", "-1", "ten"])
def test_a_lock_timeout_out_of_range_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    """CONVSTORE_LOCK_TIMEOUT past a day (SQLite would wrap 2147484 s to no wait) or below
    1 s is refused in one line (exit 2), before any file is made."""
    monkeypatch.setenv("CONVSTORE_LOCK_TIMEOUT", value)
    db = tmp_path / "t.db"
    with pytest.raises(InvalidInput, match="CONVSTORE_LOCK_TIMEOUT"):
        open_store(db)
    result = CliRunner().invoke(cli, ["--db", str(db), "new"])
    assert result.exit_code == 2, result.output
    assert not db.exists()


def test_a_lock_timeout_of_a_day_is_accepted(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The largest accepted wait, 86400 s, opens a store."""
    monkeypatch.setenv("CONVSTORE_LOCK_TIMEOUT", "86400")
    _write_and_read_back(tmp_path / "t.db")


_OTHER_PROCESS_APPENDS = """
import sys
import convstore
store = convstore.open_store(sys.argv[1])
store.append_message(sys.argv[2], "user", [{"type": "text", "text": "from elsewhere"}])
print(len(store.messages(sys.argv[2])))
"""


def test_a_new_store_shares_one_write_ahead_index_with_other_processes(tmp_path: Path) -> None:
    """The process that created a store (built in a temporary file, then linked into place)
    keeps no connection to the temporary: its writes and another process's meet in one
    ``-shm`` index, so each sees the other's appends and neither loses any."""
    path = tmp_path / "new.db"
    store = open_store(path)
    try:
        conv = store.new_conversation()
        assert (tmp_path / "new.db-shm").exists()
        assert [p.name for p in tmp_path.iterdir() if ".creating-" in p.name] == []
        other = [sys.executable, "-c", _OTHER_PROCESS_APPENDS, str(path), str(conv)]
        assert subprocess.run(other, capture_output=True, text=True, check=True).stdout == "1\n"
        store.append_message(conv, "assistant", [{"type": "text", "text": "here"}])
        assert len(store.messages(conv)) == 2
        assert subprocess.run(other, capture_output=True, text=True, check=True).stdout == "3\n"
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as conn:
        # The start and three one-block messages, one event each (a new store, format 3).
        assert conn.execute("SELECT count(*) FROM stored_events").fetchone() == (4,)


# -- page size ---------------------------------------------------------------------------------


def _page_size(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def test_a_new_store_is_made_in_pages_of_4_kb_whether_opened_or_loaded(tmp_path: Path) -> None:
    """Both ways a store file is made (a first open, a load into a new file) give it
    :data:`PAGE_SIZE` pages, and the store they make is the same."""
    opened = tmp_path / "opened.db"
    conv = _write_and_read_back(opened)
    assert _page_size(opened) == PAGE_SIZE == 4096
    with open_store(opened) as store:
        dumped = list(store.dump())
        expected = store.replay(conv, shape="openai", vision=False)
    loaded = tmp_path / "loaded.db"
    fill_new_store(str(loaded), lambda store: store.load(dumped))
    assert _page_size(loaded) == PAGE_SIZE
    with open_store(loaded, create=False) as store:
        assert store.replay(conv, shape="openai", vision=False) == expected
    result = CliRunner().invoke(cli, ["--db", str(loaded), "verify"])
    assert result.exit_code == 0, result.output


def test_a_store_made_in_8_kb_pages_keeps_them_and_works(tmp_path: Path) -> None:
    """A store an earlier build made in 8 KB pages is written, vacuumed, replayed and verified
    in its own page size: nothing rewrites it into another."""
    db = tmp_path / "old.db"
    conv = _write_and_read_back(db)
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("PRAGMA page_size = 8192")
        conn.execute("VACUUM")
        conn.execute("PRAGMA journal_mode = WAL")
    assert _page_size(db) == 8192
    with open_store(db) as store:
        for n in range(40):
            store.append_message(conv, "assistant", [{"type": "text", "text": f"{n} " * 900}])
        store.vacuum()
        replayed = store.replay(conv, shape="openai", vision=False)["messages"]
        assert [m["content"] for m in replayed[1:]] == [f"{n} " * 900 for n in range(40)]
    result = CliRunner().invoke(cli, ["--db", str(db), "verify"])
    assert result.exit_code == 0, result.output
    assert _page_size(db) == 8192
