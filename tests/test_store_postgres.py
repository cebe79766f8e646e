"""The store contract against the real PostgreSQL server, plus what only URLs can get wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner

from convstore import InvalidInput, Store, StoreError, open_store
from convstore.cli import cli
from convstore.infrastructure.common.mapper import COMPACT, COMPACT_ZLIB, decode_compact
from convstore.infrastructure.postgres.factory import PostgresSettings, redact
from convstore.ports.chain import genesis, link
from tests.conftest import one_error_line
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


# -- store formats: 2 for a new store, 1 kept for a store 0.2.0 shares --------------------------


def _sql(url: str, statement: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement in the URL's schema on the test server."""
    import psycopg  # noqa: PLC0415 - the PostgreSQL extra, present wherever this test runs
    from psycopg import sql  # noqa: PLC0415

    server, _, schema = url.partition("?schema=")
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cursor = conn.execute(statement.encode(), params)
        return cursor.fetchall() if cursor.description else []


def _states(url: str) -> list[tuple[UUID, int, str, bytes]]:
    return [
        (row[0], row[1], row[2], bytes(row[3]))
        for row in _sql(
            url,
            "SELECT originator_id, originator_version, topic, state FROM convstore_events"
            " ORDER BY notification_id",
        )
    ]


def _rewrite_as_format_1(url: str) -> None:
    """What convstore 0.2.0 would have written: every state the event's full JSON, every head
    the chain over those bytes, the marker format 1."""
    chains: dict[UUID, bytes] = {}
    for originator, version, topic, state in _states(url):
        full = decode_compact(state).model_dump_json().encode()
        _sql(
            url,
            "UPDATE convstore_events SET state = %s"
            " WHERE originator_id = %s AND originator_version = %s",
            (full, originator, version),
        )
        previous = chains.get(originator, genesis(originator))
        chains[originator] = link(previous, version, topic.encode(), full)
    for originator, chain in chains.items():
        _sql(
            url,
            "UPDATE convstore_heads SET chain = %s WHERE originator_id = %s",
            (chain, originator),
        )
    _sql(url, "UPDATE convstore_store SET value = '1' WHERE key = 'format'")


def _verify(url: str) -> list[str]:
    result = CliRunner().invoke(cli, ["--db", url, "verify", "--json"])
    assert result.exit_code in {0, 1}, result.output
    return [p["problem"] for p in json.loads(result.stdout)]


def _turn(store: Store, conv: UUID) -> None:
    store.append_message(conv, "user", [{"type": "text", "text": "after the upgrade"}])
    reply = store.start_message(conv, "assistant")
    store.append_block(conv, reply, {"type": "text", "text": "long words " * 400})
    store.end_message(conv, reply)


def test_a_new_schema_is_format_2_and_a_format_1_one_is_upgraded_on_open(
    make_postgres_url: Callable[[], str],
) -> None:
    """A new store is marked format 3 and holds compact states. A store of format 2 (as 0.3.x
    writes it) made format 1 (as 0.2.0 writes it) is marked format 2 when this version opens
    it, since its writers no longer take the table lock 0.2.0's readers rely on; its old rows
    stay as they were, new ones are compact (and format 2's: a start, blocks, an end), it
    verifies, and it replays what the format-3 store replays."""
    new_url, old_url = make_postgres_url(), make_postgres_url()
    open_store(old_url).close()
    _sql(old_url, "UPDATE convstore_store SET value = '2' WHERE key = 'format'")
    for url, marked in ((new_url, "3"), (old_url, "2")):
        with open_store(url) as store:
            conv = store.new_conversation(conversation_id=UUID(int=7), title="shared")
            store.append_message(conv, "user", [{"type": "text", "text": "before"}])
            assert store._log.pydantic_mapper.compact
        assert _sql(url, "SELECT key, value FROM convstore_store WHERE key = 'format'") == [
            ("format", marked)
        ]
        assert {state[0] for *_, state in _states(url)} == {COMPACT}
    _rewrite_as_format_1(old_url)
    old_rows = _states(old_url)
    assert _verify(old_url) == []
    for url in (new_url, old_url):
        with open_store(url) as store:
            _turn(store, conv)
    assert _sql(old_url, "SELECT value FROM convstore_store WHERE key = 'format'") == [("2",)]
    assert _states(old_url)[: len(old_rows)] == old_rows  # left in the form 0.2.0 wrote
    with open_store(old_url) as old, open_store(new_url) as new:
        assert old._log.pydantic_mapper.compact
        added = _states(old_url)[len(old_rows) :]
        assert len(added) == 6
        assert {state[0] for *_, state in added} <= {COMPACT, COMPACT_ZLIB}
        assert old.replay(conv) == new.replay(conv)
    with open_store(old_url, replay_cache_bytes=0) as folded, open_store(new_url) as new:
        assert folded.replay(conv) == new.replay(conv)
    assert _verify(old_url) == []
    assert _verify(new_url) == []


def test_a_schema_of_an_unknown_format_is_refused_in_one_line(postgres_url: str) -> None:
    """A marker naming format 4 (a newer convstore's) is refused by the API and the CLI in one
    line naming it, and nothing in the schema changes."""
    with open_store(postgres_url) as store:
        store.append_message(store.new_conversation(), "user", [{"type": "text", "text": "x"}])
    _sql(postgres_url, "UPDATE convstore_store SET value = '4' WHERE key = 'format'")
    count = "SELECT count(*) FROM convstore_events"
    rows = _sql(postgres_url, count)
    schema = postgres_url.partition("?schema=")[2]
    with pytest.raises(InvalidInput) as caught:
        open_store(postgres_url)
    assert str(caught.value) == (
        f"schema {schema} holds a convstore store of format '4'; "
        "this version reads formats 1, 2 and 3"
    )
    for args in (["new"], ["list"], ["verify"]):
        result = CliRunner().invoke(cli, ["--db", postgres_url, *args])
        one_error_line(result.exit_code, result.stdout, result.stderr, "format '4'")
    assert _sql(postgres_url, count) == rows
    assert _sql(postgres_url, "SELECT value FROM convstore_store WHERE key = 'format'") == [("4",)]
