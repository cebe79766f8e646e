"""The store contract against the real PostgreSQL server, plus what only URLs can get wrong."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from convstore import InvalidInput, Store, StoreError, open_store
from convstore.infrastructure.postgres import PostgresSettings, redact
from tests.contract import StoreContract


class TestPostgresStore(StoreContract):
    """Every contract test, against one fresh schema per test."""

    @pytest.fixture(autouse=True)
    def _database(self, postgres_url: str) -> None:
        self.url = postgres_url

    def open_store(self) -> Store:
        return open_store(self.url)


def test_schemas_keep_stores_apart(make_postgres_url: Callable[[], str]) -> None:
    """Two schemas in one database are two stores: neither lists the other's conversations."""
    with open_store(make_postgres_url()) as first, open_store(make_postgres_url()) as second:
        conv = first.new_conversation(title="mine")
        assert [c.id for c in first.conversations()] == [conv]
        assert second.conversations() == []


def test_unreachable_server_is_a_store_error_without_the_password() -> None:
    """A server that refuses connections fails with one line that masks the password."""
    with pytest.raises(StoreError) as caught:
        open_store("postgresql://someone:hunter2@127.0.0.1:1/test?connect_timeout=2")
    message = str(caught.value)
    assert "hunter2" not in message
    assert "someone:***@127.0.0.1:1" in message
    assert "\n" not in message


def test_url_options_are_parsed_and_checked() -> None:
    """Pool size, timeouts and schema come from the URL; unknown options are refused."""
    settings = PostgresSettings.from_url(
        "postgresql://u:p%40ss@db.example:6543/app?schema=tenant_a&pool_size=20&lock_timeout=3"
    )
    assert (settings.host, settings.port, settings.user, settings.password) == (
        "db.example",
        6543,
        "u",
        "p@ss",
    )
    assert (settings.dbname, settings.schema, settings.pool_size, settings.lock_timeout) == (
        "app",
        "tenant_a",
        20,
        3,
    )
    with pytest.raises(InvalidInput, match="bad URL option poolsize"):
        PostgresSettings.from_url("postgresql://u:secret@h/db?poolsize=3")
    with pytest.raises(InvalidInput, match="names no database"):
        PostgresSettings.from_url("postgresql://u:secret@h")


def test_redact_masks_only_the_password() -> None:
    """redact keeps user, host, port, path and query, and hides the password."""
    assert redact("postgresql://u:pw@h:5/db?schema=s") == "postgresql://u:***@h:5/db?schema=s"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


def test_a_store_made_before_the_listing_index_gets_it_on_open(postgres_url: str) -> None:
    """Dropping the listing tables (an older store) and reopening refills them exactly."""
    import psycopg  # noqa: PLC0415 - the PostgreSQL extra, present wherever this test runs

    with open_store(postgres_url) as store:
        conv = store.new_conversation(title="kept")
        store.set_labels(conv, {"k": "v"})
        store.append_message(conv, "user", [{"type": "text", "text": "hi"}])
        before = store.conversations()
    server, _, schema = postgres_url.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".convstore_listing, "{schema}".convstore_labels')
    with open_store(postgres_url) as store:
        assert store.conversations() == before
        assert store.list_conversations(labels={"k": "v"}).conversations == before
