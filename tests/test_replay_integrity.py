"""Replay is held to the log: a log row damaged in place makes replay refuse exactly as reading
the log does (from a warm in-process fold, in a fresh store, and on the command line), and
repairing it lets replay answer again. On SQLite and on PostgreSQL, tampered with by plain SQL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from convstore import Store, StoreError, open_store
from convstore.infrastructure.common.log_changes import CHANGES_TABLE
from convstore.infrastructure.postgres.factory import PostgresSettings
from tests.conftest import POSTGRES_URL, one_error_line

SCRIPT = Path(sys.executable).with_name("convstore")


@dataclass(frozen=True)
class Backend:
    """A store location, and plain SQL run on its tables as anyone with access could."""

    location: str
    run: Callable[[str, tuple[Any, ...]], int]
    events: str
    prefix: str
    placeholder: str

    @property
    def is_sqlite(self) -> bool:
        return self.placeholder == "?"

    def sql(self, text: str, *params: Any) -> int:
        """Run ``text`` ({events} names the events' table, ``%s`` the parameters); how
        many rows it changed."""
        named = text.format(events=self.prefix + self.events)
        return self.run(named.replace("%s", self.placeholder), params)


def _sqlite(path: Path) -> Backend:
    import sqlite3  # noqa: PLC0415 - only this backend's helper needs it

    def run(text: str, params: tuple[Any, ...]) -> int:
        with sqlite3.connect(path) as conn:
            return conn.execute(text, params).rowcount

    return Backend(str(path), run, "stored_events", "", "?")


def _postgres(url: str) -> Backend:
    schema = PostgresSettings.from_url(url).schema

    def run(text: str, params: tuple[Any, ...]) -> int:
        with psycopg.connect(POSTGRES_URL) as conn:
            return conn.execute(text.encode(), params).rowcount

    return Backend(url, run, "convstore_events", f'"{schema}".', "%s")


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return _sqlite(tmp_path / "s.db")
    return _postgres(request.getfixturevalue("postgres_url"))


def recorded(store: Store, messages: int = 12) -> UUID:
    """A conversation with tool rounds (``ls`` answering ``a.txt``), replayed once (its fold
    cached in ``store``)."""
    conv = store.new_conversation(title="held to the log")
    store.append_message(conv, "user", [{"type": "text", "text": "List the files."}])
    for n in range(messages):
        call = {"type": "tool_use", "id": f"c{n}", "name": "ls", "input": {"n": n}}
        store.append_message(conv, "assistant", [call])
        result = {"type": "tool_result", "tool_use_id": f"c{n}", "content": f"a{n}.txt"}
        store.append_message(conv, "user", [result])
    store.append_message(conv, "assistant", [{"type": "text", "text": "Sealed text."}])
    store.replay(conv)
    return conv


def damage_event(backend: Backend, conv: UUID, version: int) -> None:
    """Overwrite one stored event's state with bytes that do not decode."""
    key = conv.hex if backend.is_sqlite else conv
    changed = backend.sql(
        "UPDATE {events} SET state = %s WHERE originator_id = %s AND originator_version = %s",
        b"\xff\x00 not an event",
        key,
        version,
    )
    assert changed == 1


def store_error(call: Callable[[], object]) -> str:
    with pytest.raises(StoreError) as caught:
        call()
    return str(caught.value)


def test_a_damaged_early_row_makes_replay_refuse_as_reading_the_log_does(
    backend: Backend,
) -> None:
    """After an early event's row is damaged, replay refuses with the log reader's own error:
    from a warm cache and in a fresh store; repairing the row lets it answer again."""
    with open_store(backend.location) as warm:
        conv = recorded(warm)
        want = warm.replay(conv)
        key = conv.hex if backend.is_sqlite else conv
        [original] = [
            bytes(row[0])
            for row in _select(
                backend,
                "SELECT state FROM {events} WHERE originator_id = %s AND originator_version = 3",
                key,
            )
        ]
        damage_event(backend, conv, 3)
        expected = store_error(lambda: warm.events(conv))
        assert "does not decode" in expected
        assert store_error(lambda: warm.replay(conv)) == expected
        with open_store(backend.location, replay_cache_bytes=0) as cold:
            assert store_error(lambda: cold.replay(conv)) == expected
            assert store_error(lambda: cold.replay(conv, shape="anthropic")) == expected
        backend.sql(
            "UPDATE {events} SET state = %s WHERE originator_id = %s AND originator_version = 3",
            original,
            key,
        )
        assert warm.replay(conv) == want
    with open_store(backend.location, replay_cache_bytes=0) as cold:
        assert cold.replay(conv) == want


@pytest.mark.parametrize(
    ("field", "damaged"),
    [(b'"text":"Sealed text."', b'"text":5'), (b'"role":"assistant"', b'"role":"robot"')],
    ids=["block-field", "event-field"],
)
def test_a_block_row_with_a_field_of_the_wrong_type_is_refused_as_reading_the_log_does(
    backend: Backend, field: bytes, damaged: bytes
) -> None:
    """A first load folds a block's row without building its model: a field it reads that is
    not of its type (the block's text, the message's role) sends the row to the validating
    decoder, which refuses it with the log reader's own error, warm or cold."""
    with open_store(backend.location) as store:
        conv = recorded(store, messages=1)
        version = store.events(conv)[-1].originator_version
        key = conv.hex if backend.is_sqlite else conv
        [(state,)] = _select(
            backend,
            "SELECT state FROM {events} WHERE originator_id = %s AND originator_version = %s",
            key,
            version,
        )
        assert bytes(state).count(field) == 1
        changed = bytes(state).replace(field, damaged)
        assert (
            backend.sql(
                "UPDATE {events} SET state = %s WHERE originator_id = %s "
                "AND originator_version = %s",
                changed,
                key,
                version,
            )
            == 1
        )
        expected = store_error(lambda: store.events(conv))
        assert "does not decode" in expected
        assert store_error(lambda: store.replay(conv)) == expected
    with open_store(backend.location, replay_cache_bytes=0) as cold:
        assert store_error(lambda: cold.replay(conv)) == expected


def _select(backend: Backend, text: str, *params: Any) -> list[tuple[Any, ...]]:
    named = text.format(events=backend.prefix + backend.events).replace("%s", backend.placeholder)
    if backend.is_sqlite:
        import sqlite3  # noqa: PLC0415

        with sqlite3.connect(backend.location) as conn:
            return conn.execute(named, params).fetchall()
    with psycopg.connect(POSTGRES_URL) as conn:
        return conn.execute(named.encode(), params).fetchall()


def test_an_erasure_leaves_no_change_count_behind(backend: Backend) -> None:
    """The triggers count an erasure's deletes too; the erasure removes that count with the
    rest of the conversation, in its own transaction."""
    with open_store(backend.location) as store:
        conv = recorded(store, messages=2)
        store.erase(conv, reason="test")
    key = conv.hex if backend.is_sqlite else conv
    table = backend.prefix + CHANGES_TABLE
    found = _select(backend, f"SELECT count(*) FROM {table} WHERE originator_id = %s", key)  # noqa: S608
    assert found == [(0,)]


# -- the command line, as real processes --------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVSTORE_")}
    return subprocess.run([str(SCRIPT), *args], capture_output=True, env=env, check=False)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> tuple[Backend, UUID]:
    backend = _sqlite(tmp_path / "s.db")
    with open_store(backend.location) as store:
        conv = recorded(store)
    return backend, conv


def test_the_command_line_refuses_a_damaged_early_row_as_show_does(
    sqlite_store: tuple[Backend, UUID],
) -> None:
    """After an early row is damaged in place, ``replay`` prints exactly the error line
    ``show`` prints."""
    backend, conv = sqlite_store
    before = _cli("--db", backend.location, "replay", str(conv))
    assert before.returncode == 0, before.stderr
    assert b"Result (ls): a3.txt" in before.stdout
    damage_event(backend, conv, 3)
    show = _cli("--db", backend.location, "show", str(conv))
    refused = one_error_line(show.returncode, show.stdout, show.stderr, "does not decode", code=1)
    replayed = _cli("--db", backend.location, "replay", str(conv))
    assert one_error_line(replayed.returncode, replayed.stdout, replayed.stderr, code=1) == refused


def test_a_log_truncated_and_reloaded_is_folded_again_on_postgres(postgres_url: str) -> None:
    """A ``TRUNCATE`` fires no row trigger: its own trigger counts it for every conversation,
    so a log reloaded with an early row damaged is refused by the store that had it cached
    and by a fresh one, as reading the log refuses it."""
    backend = _postgres(postgres_url)
    events = backend.prefix + backend.events
    with open_store(postgres_url) as warm:
        conv = recorded(warm)
        warm.replay(conv)
        with psycopg.connect(POSTGRES_URL) as conn:
            conn.execute(f"CREATE TEMPORARY TABLE saved AS SELECT * FROM {events}".encode())  # noqa: S608
            conn.execute(
                b"UPDATE saved SET state = %s WHERE originator_id = %s AND originator_version = 3",
                (b"\xff\x00 not an event", conv),
            )
            conn.execute(f"TRUNCATE {events}".encode())
            conn.execute(f"INSERT INTO {events} SELECT * FROM saved".encode())  # noqa: S608
        expected = store_error(lambda: warm.events(conv))
        assert store_error(lambda: warm.replay(conv)) == expected
        with open_store(postgres_url, replay_cache_bytes=0) as cold:
            assert store_error(lambda: cold.replay(conv)) == expected
