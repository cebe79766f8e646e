"""The replay read model in real stores: equal to a from-scratch fold in every mode, with
appends interleaved from another store on the same file or schema, thrown away and rebuilt
identical, surviving a SIGKILL mid catch-up, and gone with an erasure.

"Another store" stands for another process or host: it shares only the database. Each reader
is opened with a cache budget (or none) so the three ways a replay starts are all exercised:
from the in-process cache, from the stored model, and from the log alone.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import ConversationNotFound, Store, open_store
from convstore.backends.common.replay_tables import HEADS, MESSAGES
from convstore.domain.events import Event
from convstore.engine.model import fold as fold_into
from convstore.engine.plan import SHAPES, replay
from convstore.engine.state import plan_text
from tests.strategies import histories

SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

MODES: list[dict[str, Any]] = [
    {"shape": shape, "vision": vision, "full": full, "keep_tool_results": keep}
    for shape in SHAPES
    for vision in (False, True)
    for full in (False, True)
    for keep in (None, 1)
]


def expected(events: list[Event], mode: dict[str, Any]) -> dict[str, Any]:
    return replay(events, **mode)


def model_rows(store: Store, conversation: UUID) -> tuple[Any, ...]:
    """The stored model of a conversation, as its tables hold it."""
    tables = store._replays.tables
    assert tables is not None
    stored = tables.read(conversation)
    if stored is None:
        return (None,)
    return (stored.version, stored.head, [(m, plan_text(plan)) for m, plan in stored.rows])


@contextmanager
def stores(location: str, budgets: list[int]) -> Iterator[list[Store]]:
    with ExitStack() as stack:
        yield [stack.enter_context(open_store(location, replay_cache_bytes=b)) for b in budgets]


def check_interleaved(location: str, events: list[Event], cuts: list[int], lags: list[int]) -> None:
    """Write ``events`` in pieces through one store; after each piece, replay it through
    readers with a cache, without one, and opened afresh, in every mode."""
    with stores(location, [0, 10**8, 10**8]) as (writer, uncached, cached):
        done = 0
        for step, cut in enumerate([*cuts, len(events)]):
            if cut > done:
                writer._save(events[done:cut])
            done = max(done, cut)
            if not done:
                continue
            for reader in (uncached, cached):
                reader._replays.write_lag = lags[step % len(lags)]
            conversation = events[0].originator_id
            for mode in MODES:
                want = expected(events[:done], mode)
                assert uncached.replay(conversation, **mode) == want, mode
                assert cached.replay(conversation, **mode) == want, mode
            with open_store(location, replay_cache_bytes=0) as fresh:
                assert fresh.replay(conversation) == expected(events[:done], MODES[0])


LAGS = st.lists(st.integers(0, 6), min_size=1, max_size=3)


@SETTINGS
@given(histories(max_messages=8), st.data())
def test_replay_equals_a_fresh_fold_with_appends_interleaved_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=4)))
    location = str(tmp_path_factory.mktemp("interleaved") / "s.db")
    check_interleaved(location, events, cuts, data.draw(LAGS))


@SETTINGS
@given(histories(max_messages=8), st.data())
def test_replay_equals_a_fresh_fold_with_appends_interleaved_on_postgres(
    make_postgres_url: Callable[[], str], events: list[Event], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=3)))
    check_interleaved(make_postgres_url(), events, cuts, data.draw(LAGS))


def record(store: Store, conversation: UUID, messages: int, start: int = 0) -> None:
    for i in range(start, start + messages):
        call = {"type": "tool_use", "id": f"c{i}", "name": "ls", "input": {"i": i}}
        store.append_message(conversation, "assistant", [{"type": "text", "text": f"m{i}"}, call])
        result = {"type": "tool_result", "tool_use_id": f"c{i}", "content": f"out {i} " * 20}
        store.append_message(conversation, "user", [result])


def test_store_operations_fork_rewind_undo_and_compaction_replay_as_a_fresh_fold(
    tmp_path: Path,
) -> None:
    with stores(str(tmp_path / "s.db"), [10**8, 0]) as (store, other):
        store._replays.write_lag = 1
        conv = store.new_conversation()
        record(store, conv, 5)
        messages = store.messages(conv)
        store.replay(conv)
        rewind = store.rewind(conv, to=messages[3].message_id)
        store.replay(conv)
        record(other, conv, 2, start=5)
        store.compact(conv, "earlier work", through=messages[1].message_id)
        store.replay(conv)
        other.undo_rewind(conv, rewind)
        fork = store.fork(conv, at=messages[6].message_id, title="fork")
        record(other, fork, 1, start=9)
        for c in (conv, fork):
            events = store.events(c)
            for mode in MODES:
                assert store.replay(c, **mode) == expected(events, mode), mode
                assert other.replay(c, **mode) == expected(events, mode), mode


def test_the_model_thrown_away_is_rebuilt_identical(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db") as store:
        store._replays.write_lag = 1
        conv = store.new_conversation()
        for step in range(6):
            record(store, conv, 3, start=3 * step)
            store.replay(conv)  # caught up step by step
        stepwise = model_rows(store, conv)
        assert stepwise[0] == len(store.events(conv))
        store._replays.clear()
        assert model_rows(store, conv) == (None,)
        before = store.replay(conv)
        assert model_rows(store, conv) == stepwise
        assert store.replay(conv) == before


def _messages_table_sql(location: Path) -> str:
    with sqlite3.connect(location) as conn:
        row = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (MESSAGES,)
        ).fetchone()
    return str(row[0])


def test_a_model_in_tables_of_the_earlier_shape_is_stored_again_in_the_new_one(
    tmp_path: Path,
) -> None:
    """The message rows moved to a rowid table (long plans no longer spill into overflow
    pages); a model an earlier version stored in a ``WITHOUT ROWID`` table is still read,
    then dropped at the next write and stored again, replaying the same."""
    location = tmp_path / "s.db"
    with open_store(location) as store:
        store._replays.write_lag = 1
        first, second = store.new_conversation(), store.new_conversation()
        record(store, first, 6)
        record(store, second, 4)
        want = {conv: store.replay(conv) for conv in (first, second)}
        stored = model_rows(store, first)
    assert "WITHOUT ROWID" not in _messages_table_sql(location).upper()
    with sqlite3.connect(location) as conn:  # the earlier shape, holding the same rows
        conn.executescript(
            f"ALTER TABLE {MESSAGES} RENAME TO old_rows;"  # noqa: S608 - fixed names
            f"CREATE TABLE {MESSAGES} (originator_id TEXT NOT NULL, position INTEGER NOT NULL, "
            "message_id TEXT NOT NULL, plan TEXT NOT NULL, "
            "PRIMARY KEY (originator_id, position)) WITHOUT ROWID;"
            f"INSERT INTO {MESSAGES} SELECT * FROM old_rows; DROP TABLE old_rows;"
        )
    with open_store(location, replay_cache_bytes=0) as store:
        assert model_rows(store, first) == stored  # read as it is
        store._replays.write_lag = 1
        record(store, first, 1, start=6)
        assert store.replay(first) == replay(store.events(first))
        assert "WITHOUT ROWID" not in _messages_table_sql(location).upper()
        assert model_rows(store, second) == (None,)  # dropped with the old table...
        assert store.replay(second) == want[second]  # ...and folded again from the log
        assert model_rows(store, second)[0] == len(store.events(second))


def test_a_model_the_cache_cannot_hold_is_still_right_and_the_budget_is_kept(
    tmp_path: Path,
) -> None:
    location = tmp_path / "s.db"
    with open_store(location, replay_cache_bytes=20_000) as store:
        convs = [store.new_conversation() for _ in range(4)]
        for conv in convs:
            record(store, conv, 10)
        for _ in range(2):
            for conv in convs:
                assert store.replay(conv) == replay(store.events(conv))
                assert store._replays.cached_bytes <= 20_000


def test_a_damaged_stored_model_is_folded_again_from_the_log(tmp_path: Path) -> None:
    location = tmp_path / "s.db"
    with open_store(location) as store:
        conv = store.new_conversation()
        record(store, conv, 20)
        want = store.replay(conv)
    with sqlite3.connect(location) as conn:
        changed = conn.execute(f"UPDATE {MESSAGES} SET plan = 'not json'").rowcount  # noqa: S608
    assert changed > 0
    with open_store(location, replay_cache_bytes=0) as store:
        assert store.replay(conv) == want


def test_an_erasure_removes_the_model_rows_and_other_stores_see_it(tmp_path: Path) -> None:
    location = tmp_path / "s.db"
    marker = "model-marker-4111111111111111"
    with stores(str(location), [10**8, 10**8]) as (store, other):
        conv = store.new_conversation()
        kept = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": marker}])
        record(store, conv, 20)
        record(store, kept, 20)
        assert marker in other.replay(conv)["messages"][0]["content"]  # cached and stored
        other.replay(kept)
        with sqlite3.connect(location) as conn:
            for table in (HEADS, MESSAGES):
                query = f"SELECT count(*) FROM {table} WHERE originator_id = ?"  # noqa: S608
                assert conn.execute(query, (conv.hex,)).fetchone()[0] > 0
        store.erase(conv, reason="test")
        with sqlite3.connect(location) as conn:
            for table in (HEADS, MESSAGES):
                query = f"SELECT count(*) FROM {table} WHERE originator_id = ?"  # noqa: S608
                assert conn.execute(query, (conv.hex,)).fetchone()[0] == 0
                assert conn.execute(query, (kept.hex,)).fetchone()[0] > 0
        for reader in (store, other):
            with pytest.raises(ConversationNotFound):
                reader.replay(conv)
        assert model_rows(other, conv) == (None,)
        assert other.replay(kept) == replay(store.events(kept))
    for path in (location, Path(f"{location}-wal")):
        if path.exists():
            assert marker.encode() not in path.read_bytes(), path


def test_an_erasure_removes_the_model_rows_on_postgres(postgres_url: str) -> None:
    with stores(postgres_url, [10**8, 0]) as (store, other):
        conv = store.new_conversation()
        record(store, conv, 20)
        other.replay(conv)
        assert model_rows(other, conv)[0] == len(store.events(conv))
        store.erase(conv, reason="test")
        assert model_rows(other, conv) == (None,)
        for reader in (store, other):
            with pytest.raises(ConversationNotFound):
                reader.replay(conv)


def test_a_model_stored_while_a_store_reads_it_on_postgres_is_read_as_one_version(
    postgres_url: str,
) -> None:
    """A store reads a conversation's stored head and its rows as of one moment: a newer model
    committed in between must not give it the old version with the newer rows (it would fold
    the events after the old version onto rows already holding them, and store the result)."""
    import threading  # noqa: PLC0415

    import psycopg  # noqa: PLC0415

    from convstore.engine.model import ReplayState  # noqa: PLC0415

    server, schema = postgres_url.split("?schema=")
    prefix = f'"{schema}".'
    with stores(postgres_url, [0, 0]) as (writer, reader):
        writer._replays.write_lag = 1
        conv = writer.new_conversation()
        record(writer, conv, 2)
        writer.replay(conv)  # the model stored at this version
        tables = reader._replays.tables
        assert tables is not None
        assert model_rows(reader, conv)[0] == len(writer.events(conv))
        record(writer, conv, 2, start=2)
        events = writer.events(conv)
        newer = ReplayState()
        fold_into(newer, events)
        rows = [(m.message_id, m.encode()) for m in newer.messages]
        found: list[Any] = []
        with psycopg.connect(server) as other:
            # Hold the rows back so the read is caught between the head and the rows.
            other.execute(f"LOCK TABLE {prefix}{MESSAGES} IN ACCESS EXCLUSIVE MODE")
            thread = threading.Thread(target=lambda: found.append(tables.read(conv)))
            thread.start()
            with psycopg.connect(server, autocommit=True) as watch:
                waiting = (
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = %s::regclass"
                )
                while watch.execute(waiting, (prefix + MESSAGES,)).fetchone() == (0,):
                    assert thread.is_alive()
                    time.sleep(0.01)
            # Meanwhile another store commits the newer model, as its write does.
            other.execute(
                f"UPDATE {prefix}{HEADS} SET version = %s, head = %s WHERE originator_id = %s",  # noqa: S608
                (newer.version, newer.encode_head(conv.hex), conv),
            )
            other.cursor().executemany(
                f"INSERT INTO {prefix}{MESSAGES} VALUES (%s, %s, %s, %s) "  # noqa: S608
                "ON CONFLICT (originator_id, position) DO UPDATE SET "
                "message_id = excluded.message_id, plan = excluded.plan",
                [(conv, p, message_id, plan) for p, (message_id, plan) in enumerate(rows)],
            )
            other.commit()
        thread.join()
        [stored] = found
        assert (stored.version, stored.head, [tuple(r) for r in stored.rows]) == (
            len(events),
            newer.encode_head(conv.hex),
            rows,
        )
        assert reader.replay(conv) == replay(events)


CHILD = """
import sys
from convstore import open_store
location, conv = sys.argv[1], sys.argv[2]
print("ready", flush=True)
while True:
    with open_store(location, replay_cache_bytes=0) as store:
        store._replays.clear()  # every replay rebuilds and stores the whole model
        store.replay(conv)
        store.append_message(conv, "user", [{"type": "text", "text": "again"}])
"""


def test_a_process_killed_mid_catch_up_leaves_a_model_the_next_replay_trusts(
    tmp_path: Path,
) -> None:
    location = tmp_path / "s.db"
    with open_store(location) as store:
        conv = store.new_conversation()
        record(store, conv, 400)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for round_ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(location), str(conv)],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(0.3 + 0.35 * round_)
        child.send_signal(signal.SIGKILL)
        child.wait()
        with open_store(location, replay_cache_bytes=0) as store:
            events = store.events(conv)
            stored = model_rows(store, conv)
            for mode in MODES[:4]:
                assert store.replay(conv, **mode) == expected(events, mode), (round_, mode)
            if stored != (None,):
                # What the killed process left is a whole, earlier model: rebuilt at its
                # version from the log alone, it is the same text.
                from convstore.engine.model import ReplayState  # noqa: PLC0415

                version = stored[0]
                state = ReplayState()
                fold_into(state, events[:version])
                rows = [(m.message_id, m.encode()) for m in state.messages]
                assert (version, state.encode_head(conv.hex), rows) == stored
    with sqlite3.connect(location) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_an_encrypted_store_keeps_no_replay_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cipher the events are encrypted at rest; the model would hold their prose in the
    clear, so none is stored, and replay folds the log (still right)."""
    from eventsourcing.cipher import AESCipher  # noqa: PLC0415

    monkeypatch.setenv("CONVSTORE_CIPHER_TOPIC", "eventsourcing.cipher:AESCipher")
    monkeypatch.setenv("CONVSTORE_CIPHER_KEY", AESCipher.create_key(16))
    location = tmp_path / "s.db"
    marker = "clear-text-marker-7d1f"
    with open_store(location) as store:
        conv = store.new_conversation()
        for _ in range(40):
            store.append_message(conv, "user", [{"type": "text", "text": marker}])
        assert store.replay(conv) == replay(store.events(conv))
        assert store._replays.tables is None
    with sqlite3.connect(location) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not {HEADS, MESSAGES} & tables
    for path in (location, Path(f"{location}-wal")):
        if path.exists():
            assert marker.encode() not in path.read_bytes(), path


def test_a_store_opened_without_the_model_neither_reads_nor_writes_it(tmp_path: Path) -> None:
    location = tmp_path / "s.db"
    with open_store(location, replay_model=False) as store:
        conv = store.new_conversation()
        record(store, conv, 20)
        assert store.replay(conv) == replay(store.events(conv))
    with sqlite3.connect(location) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert not {HEADS, MESSAGES} & tables
    with open_store(location) as store:  # another process keeps it
        store.replay(conv)
        record(store, conv, 1, start=20)
    with open_store(location, replay_model=False, replay_cache_bytes=0) as store:
        assert store.replay(conv) == replay(store.events(conv))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_model_dropped_under_a_running_store_is_only_folded_again(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    location = (
        str(tmp_path / "s.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    )
    with stores(location, [0, 0]) as (store, other):
        store._replays.write_lag = 1
        conv = store.new_conversation()
        record(store, conv, 3)
        store.replay(conv)  # the tables exist, and it knows
        other._replays.clear()  # another process drops them
        record(store, conv, 2, start=3)
        assert store.replay(conv) == replay(store.events(conv))
        assert model_rows(store, conv)[0] == len(store.events(conv))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_readers_racing_to_store_the_model_leave_the_rows_of_one_fold(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Three stores replay (and store the model at every lag) while a fourth appends; at the
    end the stored rows are exactly those of a fold of the whole log from scratch."""
    import threading  # noqa: PLC0415

    location = (
        str(tmp_path / "s.db") if backend == "sqlite" else request.getfixturevalue("postgres_url")
    )
    with stores(location, [0, 0, 0, 0]) as (writer, *readers):
        conv = writer.new_conversation()
        record(writer, conv, 2)
        done = threading.Event()
        failures: list[BaseException] = []

        def read(store: Store) -> None:
            store._replays.write_lag = 1
            try:
                while not done.is_set():
                    store.replay(conv)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        threads = [threading.Thread(target=read, args=(r,)) for r in readers]
        for thread in threads:
            thread.start()
        record(writer, conv, 25, start=2)
        done.set()
        for thread in threads:
            thread.join()
        assert failures == []
        readers[0].replay(conv)  # catch up and store the last events
        events = writer.events(conv)
        from convstore.engine.model import ReplayState  # noqa: PLC0415

        state = ReplayState()
        fold_into(state, events)
        rows = [(m.message_id, m.encode()) for m in state.messages]
        assert model_rows(readers[0], conv) == (len(events), state.encode_head(conv.hex), rows)
        for mode in MODES:
            assert readers[1].replay(conv, **mode) == expected(events, mode)
