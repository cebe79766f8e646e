"""Which file the audit commands may write: never the store, never a file that is not theirs.

Every command that opens, writes or replaces the audit read model (project, rebuild, audit *,
verify) is pointed at the store however spelled and at files that are not this store's read
model; each must refuse in one line (exit 2) and leave every file as it was. Also here: the
audit file is created owner-only even through a dangling symlink, a rebuild on a full disk
leaves no temporary file behind, and projectors starting together on a new file all succeed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from convstore import InvalidInput, StoreError, open_store
from convstore.app.demo import record_demo
from convstore.app.projector import open_audit, rebuild
from convstore.audit.file import check_audit_path
from convstore.cli import cli
from tests.conftest import one_error_line
from tests.test_audit import assert_same_read_model

COMMANDS = [
    ["project"],
    ["rebuild"],
    ["audit", "stats"],
    ["audit", "tools"],
    ["audit", "sql", "SELECT 1"],
    ["audit", "--stale", "stats"],
    ["verify", "--json"],
]
"""Every command that opens the audit file. ``verify`` reports a refused path as a problem
(exit 1, in its list) rather than as bad input; the others exit 2."""


@pytest.fixture(autouse=True)
def _in_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test runs in its tmp_path (the environment is isolated by tests/conftest.py)."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, so file modes do not depend on how the tests were started."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _demo_store(path: Path) -> None:
    with open_store(path) as store:
        record_demo(store)


def events(db: Path) -> list[tuple[object, ...]]:
    """Every stored event row of the store at ``db``: its whole content."""
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()


def tables(db: Path) -> list[str]:
    with closing(sqlite3.connect(db)) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM sqlite_master ORDER BY name")]


def assert_refused(result: Result, *fragments: str) -> None:
    """Exit 2, nothing on stdout, exactly one ``error:`` line naming the reason.

    ``verify`` instead lists the refusal as its one problem and exits 1.
    """
    if result.exit_code == 1 and "audit read model: refusing to use" in result.stdout:
        [problem] = json.loads(result.stdout)
        assert problem["problem"].startswith("audit read model: refusing to use"), problem
        for fragment in fragments:
            assert fragment in problem["problem"], (fragment, problem)
        assert result.stderr.startswith("error: 1 problem(s)"), result.stderr
        return
    line = one_error_line(result.exit_code, result.stdout, result.stderr, *fragments)
    assert line.startswith("error: refusing to use"), line


SPELLINGS: dict[str, Callable[[Path], str]] = {
    "relative": lambda root: "s.db",
    "absolute": lambda root: str(root / "s.db"),
    "dotted": lambda root: str(root / "sub" / ".." / "s.db"),
    "symlink": lambda root: "link.db",
    "hard link": lambda root: "hard.db",
    "the -wal file": lambda root: "s.db-wal",
}


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_the_store_is_never_taken_for_the_audit_file(
    tmp_path: Path, command: list[str], spelling: str
) -> None:
    """--audit naming the store, however spelled, is refused by every command; the log stays."""
    db = tmp_path / "s.db"
    _demo_store(db)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.db").symlink_to("s.db")
    os.link(db, tmp_path / "hard.db")
    before, names = events(db), tables(db)
    audit = SPELLINGS[spelling](tmp_path)
    result = CliRunner().invoke(cli, ["--db", "s.db", "--audit", audit, *command])
    assert_refused(result, "is the store itself" if spelling != "the -wal file" else "s.db-wal")
    assert events(db) == before
    assert tables(db) == names
    assert not list(tmp_path.glob("*.rebuild-*"))


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_the_store_named_by_the_environment_is_refused(
    tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CONVSTORE_AUDIT_DB naming the store is refused the same way."""
    db = tmp_path / "s.db"
    _demo_store(db)
    before = events(db)
    monkeypatch.setenv("CONVSTORE_AUDIT_DB", str(db))
    assert_refused(CliRunner().invoke(cli, ["--db", str(db), *command]), "is the store itself")
    assert events(db) == before
    assert "conversations" not in tables(db)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_files_that_are_not_this_stores_read_model_are_left_alone(
    tmp_path: Path, command: list[str]
) -> None:
    """A text file, another store, another store's read model: refused, byte for byte intact."""
    db, other, other_audit = tmp_path / "s.db", tmp_path / "other.db", tmp_path / "other.audit.db"
    _demo_store(db)
    _demo_store(other)
    assert CliRunner().invoke(cli, ["--db", str(other), "project"]).exit_code == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    plain = tmp_path / "plain.db"
    with closing(sqlite3.connect(plain)) as conn:
        conn.execute("CREATE TABLE things (x)")
    cases = {
        notes: "not a SQLite file",
        other: "not a convstore audit read model",
        plain: "not a convstore audit read model",
        other_audit: "was built from",
    }
    for path, reason in cases.items():
        before = path.read_bytes()
        result = CliRunner().invoke(cli, ["--db", str(db), "--audit", str(path), *command])
        assert_refused(result, reason, str(path.name))
        assert path.read_bytes() == before, path
    assert not list(tmp_path.glob("*.rebuild-*"))


def test_the_python_api_refuses_the_store_too(tmp_path: Path) -> None:
    """rebuild() and open_audit() refuse the store's own path before touching anything."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        record_demo(store)
        before = events(db)
        with pytest.raises(InvalidInput, match="is the store itself"):
            rebuild(store, db)
        with pytest.raises(InvalidInput, match="is the store itself"):
            open_audit(store, db)
    assert events(db) == before


def test_the_read_model_of_this_store_is_replaced_and_reused(tmp_path: Path) -> None:
    """The store's own read model (even an empty file just created for it) is accepted."""
    db, audit = tmp_path / "s.db", tmp_path / "a.db"
    _demo_store(db)
    audit.touch()
    for command in (["project"], ["rebuild"], ["audit", "stats"], ["verify"], ["rebuild"]):
        result = CliRunner().invoke(cli, ["--db", str(db), "--audit", str(audit), *command])
        assert result.exit_code == 0, (command, result.stderr)


# -- file modes (issue 10, the audit part) ------------------------------------------------------


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.usefixtures("umask_022")
@pytest.mark.parametrize("command", ["project", "rebuild"])
def test_the_audit_file_is_private_through_a_dangling_symlink(tmp_path: Path, command: str) -> None:
    """--audit a dangling symlink: the file made at its target is 0600, the symlink kept."""
    db = tmp_path / "s.db"
    _demo_store(db)
    (tmp_path / "elsewhere").mkdir()
    target = tmp_path / "elsewhere" / "audit.db"
    link = tmp_path / "audit-link.db"
    link.symlink_to(target)
    result = CliRunner().invoke(cli, ["--db", str(db), "--audit", str(link), command])
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink()
    assert _mode(target) == 0o600
    result = CliRunner().invoke(cli, ["--db", str(db), "--audit", str(link), "rebuild"])
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink()
    assert _mode(target) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["audit.db"]


# -- a full disk under rebuild (issue 12) ---------------------------------------------------------


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs under tmp_path (needs root; skips otherwise), unmounted after."""
    where = tmp_path / "disk"
    where.mkdir()
    done = _mount("-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(where))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    yield where
    if subprocess.run(["umount", str(where)], check=False, timeout=30).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], check=False, timeout=30)


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with a ballast file until about ``leave`` bytes are free."""
    ballast = disk / "ballast"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with ballast.open("wb") as handle, suppress(OSError):
        handle.write(b"\0" * max(0, free - leave))
    return ballast


@pytest.mark.parametrize("leave", [0, 48 * 1024], ids=["no room at all", "room for a start"])
def test_a_rebuild_on_a_full_disk_leaves_no_temporary_file(
    tmp_path: Path, small_disk: Path, leave: int
) -> None:
    """Each failed rebuild exits 1 in one line and removes its file; with room, it works."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        for _ in range(6):
            record_demo(store)
    audit = small_disk / "a.db"
    ballast = _fill(small_disk, leave)
    argv = ["--db", str(db), "--audit", str(audit), "rebuild"]
    for _ in range(3):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 1, (result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1
        assert "full" in result.stderr, result.stderr
        assert sorted(p.name for p in small_disk.iterdir()) == ["ballast"]
    ballast.unlink()
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == ["a.db"]


def test_a_rebuild_removes_what_a_killed_rebuild_left(tmp_path: Path) -> None:
    """A temporary file of a rebuild whose process is gone is deleted by the next rebuild."""
    db, audit = tmp_path / "s.db", tmp_path / "a.db"
    _demo_store(db)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    stale = tmp_path / f"a.db.rebuild-{int(gone.stdout)}-0badcafe"
    stale.write_bytes(b"half a database")
    alive = tmp_path / f"a.db.rebuild-{os.getpid()}-0badcafe"  # a rebuild still running
    alive.write_bytes(b"in progress")
    with open_store(db) as store:
        rebuild(store, audit)
    assert not stale.exists()
    assert alive.exists()


# -- projectors starting together (issue 12) ------------------------------------------------------


@pytest.mark.slow
def test_projectors_starting_together_on_a_new_file_all_succeed(tmp_path: Path) -> None:
    """Rounds of 6 `project` processes started at once on a fresh path: every one exits 0."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        for _ in range(3):
            record_demo(store)
        expected = tmp_path / "expected.db"
        rebuild(store, expected)
    script = Path(sys.executable).parent / "convstore"
    for round_ in range(4):
        audit = tmp_path / f"round{round_}.db"
        argv = [str(script), "--db", str(db), "--audit", str(audit), "project"]
        children = [
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(6)
        ]
        outcomes = [(child.wait(timeout=120), child.communicate()[1]) for child in children]
        assert all(code == 0 for code, _ in outcomes), outcomes
        assert_same_read_model(audit, expected)


def test_a_store_error_is_raised_for_an_unreadable_directory(tmp_path: Path) -> None:
    """An audit path in a missing directory fails in one line and creates nothing."""
    db = tmp_path / "s.db"
    _demo_store(db)
    with open_store(db) as store, pytest.raises(StoreError, match="does not exist"):
        rebuild(store, tmp_path / "missing" / "a.db")
    assert not (tmp_path / "missing").exists()


def test_a_file_whose_creator_was_killed_mid_commit_is_taken_over(tmp_path: Path) -> None:
    """A new audit file left with a hot journal by a killed creator rolls back to empty: reused."""
    db, audit, half = tmp_path / "s.db", tmp_path / "a.db", tmp_path / "half.db"
    _demo_store(db)
    half.touch()
    writer = sqlite3.connect(half, isolation_level=None)
    try:
        writer.execute("PRAGMA cache_size = 1")  # spill pages into the file before the commit
        writer.execute("BEGIN")
        writer.execute("CREATE TABLE _meta (key, value)")
        writer.execute("CREATE TABLE _tracking (projection, position)")
        for _ in range(500):
            writer.execute("INSERT INTO _meta VALUES ('filler', randomblob(500))")
        # What a SIGKILL at this moment leaves on disk: the half-written file, a hot journal.
        audit.write_bytes(half.read_bytes())
        journal = half.with_name("half.db-journal").read_bytes()
        assert journal[:8] == bytes.fromhex("d9d505f920a163d7")  # hot: SQLite will play it back
        audit.with_name("a.db-journal").write_bytes(journal)
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    result = CliRunner().invoke(cli, ["--db", str(db), "--audit", str(audit), "project"])
    assert result.exit_code == 0, result.stderr
    assert "_meta" in tables(audit)
    assert not audit.with_name("a.db-journal").exists()


def test_checking_the_audit_file_keeps_this_processs_locks_on_it(tmp_path: Path) -> None:
    """Checking an audit file this process already has open (a second store on the same
    file, a rebuild beside a live follower) leaves that connection's locks in place. The
    check used to read the file's header through a Python file object, and closing it
    dropped every POSIX lock the process held on the file: another process could then take
    the write lock under a live reader."""
    db = tmp_path / "store.db"
    _demo_store(db)
    assert CliRunner().invoke(cli, ["--db", str(db), "project"]).exit_code == 0
    audit = tmp_path / "store.audit.db"
    with open_store(db) as store, closing(sqlite3.connect(audit, isolation_level=None)) as held:
        held.execute("PRAGMA journal_mode=DELETE")
        held.execute("BEGIN")
        held.execute("SELECT count(*) FROM sqlite_master").fetchone()  # holds a SHARED lock
        check_audit_path(audit, store.location, store_file=db, store_id=store.identity)
        writer = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0);"
                "c.execute('BEGIN EXCLUSIVE')",
                str(audit),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        held.execute("COMMIT")
    assert "database is locked" in writer.stderr, writer.stderr
