"""Stores never meet in an audit read model: default names are one-to-one, and every reader
checks the read model's store identity (random, written once in ``convstore_store``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from uuid import UUID, uuid5

import pytest
from click.testing import CliRunner

import convstore
from convstore import InvalidInput, Store
from convstore.cli import cli
from convstore.infrastructure.audit_file import default_audit_file
from convstore.projector import catch_up, open_audit, rebuild
from tests.conftest import one_error_line

pytest.importorskip("starlette", reason="the web extra (Starlette) is not installed")
from starlette.testclient import TestClient

from convstore.cli.serve import HostGuard, allowed_hosts, snapshot
from convstore.web.app import create_app

SHARED = uuid5(UUID(int=0), "user-42")
"""A conversation id both tenants hold (as ``conversation_for("user-42")`` gives in any store)."""

BACKENDS = ["sqlite", "postgres"]


def _two_locations(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    if backend == "sqlite":
        return str(tmp_path / "a" / "s.db"), str(tmp_path / "b" / "s.db")
    make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
    return make(), make()


def _record(store: Store, text: str) -> None:
    store.new_conversation(title=f"{text} title", conversation_id=SHARED)
    store.append_message(SHARED, "user", [{"type": "text", "text": f"{text} body"}])


def _client(store: Store, audit: Path) -> TestClient:
    app = HostGuard(create_app(store, audit=audit), allowed_hosts("127.0.0.1", ()), "serve")
    return TestClient(app, base_url="http://127.0.0.1:8002")


def test_default_audit_names_are_one_to_one() -> None:
    """Schemas ``ten_a`` and ``ten__a`` (and ``x`` beside ``x.db``) get files of their own;
    ``convstore.db`` keeps ``convstore.audit.db``."""
    base = "postgresql://app@db:5432/agents?schema="
    names = {default_audit_file(base + schema) for schema in ("ten_a", "ten__a", "ten-a", "ten$a")}
    assert len(names) == 4
    sqlite = [default_audit_file(f"/srv/{name}") for name in ("x", "x.db", "x.audit", "x-audit")]
    assert len(set(sqlite)) == 4
    assert default_audit_file("/srv/convstore.db") == Path("/srv/convstore.audit.db")


def test_every_store_has_an_identity_of_its_own(tmp_path: Path, postgres_url: str) -> None:
    """Random per store, kept across opens, on both backends."""
    identities = []
    for location in (str(tmp_path / "one.db"), str(tmp_path / "two.db"), postgres_url):
        with convstore.open_store(location) as store:
            first = store.identity
        with convstore.open_store(location) as store:
            assert store.identity == first
        identities.append(first)
    assert len(set(identities)) == 3
    assert all(len(identity) == 32 for identity in identities)


def test_an_older_sqlite_store_gets_an_identity_on_first_open(tmp_path: Path) -> None:
    """A store whose marker has no ``id`` row (made before identities) is given one."""
    db = tmp_path / "old.db"
    with convstore.open_store(db):
        pass
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM convstore_store WHERE key = 'id'")
    conn.close()
    with convstore.open_store(db) as store:
        given = store.identity
    with convstore.open_store(db) as store:
        assert store.identity == given != ""


@pytest.mark.parametrize("backend", BACKENDS)
def test_serve_never_searches_another_stores_read_model_swapped_in(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Tenant A's running serve, after tenant B's read model lands at its path (a rebuild's
    rename), shows none of B's text under the id both hold: checked on every request."""
    first, second = _two_locations(backend, tmp_path, request)
    for location in (first, second):
        if "://" not in location:
            Path(location).parent.mkdir()
    path = tmp_path / "shared.audit.db"
    with convstore.open_store(first) as a, convstore.open_store(second) as b:
        _record(a, "aardvark")
        _record(b, "bandicoot")
        rebuild(a, path)
        client = _client(a, path)
        assert "aardvark" in client.get("/?q=aardvark").text
        other = tmp_path / "b.audit.db"
        rebuild(b, other)
        other.replace(path)  # what B's rebuild does when both find the same file
        found = client.get("/?q=bandicoot").text
        assert str(SHARED) not in found
        assert "<mark>bandicoot</mark>" not in found
        assert "bandicoot title" not in found
        assert "built from another store" in found
        listing = client.get("/").text
        assert "built from another store" in listing
        page = client.get(f"/c/{SHARED}").text
        assert "aardvark" in page
        assert "bandicoot" not in page


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_read_model_of_an_earlier_store_at_the_same_location_is_refused(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A store made again at the same location (file deleted, schema dropped) is another
    store: `project` and `audit` refuse the old read model in one line and leave it alone."""
    location = (
        str(tmp_path / "s.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    )
    audit = tmp_path / "kept.audit.db"
    with convstore.open_store(location) as store:
        _record(store, "aardvark")
        db = open_audit(store, audit)
        try:
            catch_up(store, db)
        finally:
            db.close()
    _remove_store(location)
    with convstore.open_store(location) as store:
        _record(store, "bandicoot")
        with pytest.raises(InvalidInput, match="built from another store"):
            open_audit(store, audit)
    before = audit.read_bytes()
    runner = CliRunner()
    for argv in (["project"], ["audit", "search", "aardvark"], ["rebuild"]):
        result = runner.invoke(cli, ["--db", location, "--audit", str(audit), *argv])
        one_error_line(result.exit_code, result.stdout, result.stderr, "another store")
    assert audit.read_bytes() == before


def _remove_store(location: str) -> None:
    if "://" not in location:
        for suffix in ("", "-wal", "-shm"):
            Path(location + suffix).unlink(missing_ok=True)
        return
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    schema = location.rsplit("schema=", 1)[1]
    with psycopg.connect(location.split("?", 1)[0], autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def test_audit_serve_refuses_a_snapshot_of_another_stores_read_model(tmp_path: Path) -> None:
    """`audit serve` serves a snapshot: it is checked once made (it never changes after)."""
    with convstore.open_store(tmp_path / "a.db") as a, convstore.open_store(tmp_path / "b.db") as b:
        _record(a, "aardvark")
        rebuild(a, tmp_path / "a.audit.db")
        with snapshot(tmp_path / "a.audit.db", a.identity) as copy:
            assert copy.exists()
        with (
            pytest.raises(InvalidInput, match="another store's audit read model"),
            snapshot(tmp_path / "a.audit.db", b.identity),
        ):
            pass
