"""Replay in real stores: equal to a from-scratch fold in every mode, with appends interleaved
from another store on the same file or schema, a warm replay extending its cached fold, and an
erasure leaving nothing of the conversation in what earlier versions kept beside the log.

"Another store" stands for another process or host: it shares only the database. Each reader
is opened with a cache budget (or none) so both ways a replay starts are exercised: from the
in-process cache, and from the log alone.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import ConversationNotFound, Store, open_store
from convstore.domain.events import Event
from convstore.engine.plan import SHAPES, replay
from convstore.infrastructure.common.tables import RETIRED_HEADS, RETIRED_MESSAGES
from tests.conftest import POSTGRES_URL
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

FORMAT2 = Path(__file__).parent / "fixtures" / "format2" / "store.db"
"""A store convstore 0.3.0 wrote, its replay model tables included."""


def expected(events: list[Event], mode: dict[str, Any]) -> dict[str, Any]:
    return replay(events, **mode)


@contextmanager
def stores(location: str, budgets: list[int]) -> Iterator[list[Store]]:
    with ExitStack() as stack:
        yield [stack.enter_context(open_store(location, replay_cache_bytes=b)) for b in budgets]


def check_interleaved(location: str, events: list[Event], cuts: list[int]) -> None:
    """Write ``events`` in pieces through one store; after each piece, replay it through
    readers with a cache, without one, and opened afresh, in every mode."""
    with stores(location, [0, 10**8, 10**8]) as (writer, uncached, cached):
        done = 0
        for cut in [*cuts, len(events)]:
            if cut > done:
                writer._save(events[done:cut])
            done = max(done, cut)
            if not done:
                continue
            conversation = events[0].originator_id
            for mode in MODES:
                want = expected(events[:done], mode)
                assert uncached.replay(conversation, **mode) == want, mode
                assert cached.replay(conversation, **mode) == want, mode
            with open_store(location, replay_cache_bytes=0) as fresh:
                assert fresh.replay(conversation) == expected(events[:done], MODES[0])


@SETTINGS
@given(histories(max_messages=8), st.data())
def test_replay_equals_a_fresh_fold_with_appends_interleaved_on_sqlite(
    tmp_path_factory: pytest.TempPathFactory, events: list[Event], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=4)))
    location = str(tmp_path_factory.mktemp("interleaved") / "s.db")
    check_interleaved(location, events, cuts)


@SETTINGS
@given(histories(max_messages=8), st.data())
def test_replay_equals_a_fresh_fold_with_appends_interleaved_on_postgres(
    make_postgres_url: Callable[[], str], events: list[Event], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), max_size=3)))
    check_interleaved(make_postgres_url(), events, cuts)


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


def test_a_warm_replay_extends_its_cached_fold_with_the_events_appended_since(
    tmp_path: Path,
) -> None:
    """The state a replay folded is the one the next replay extends (not folded again), and
    it then holds every event: the append's included, whoever made it."""
    with stores(str(tmp_path / "s.db"), [10**8, 0]) as (store, other):
        conv = store.new_conversation()
        record(store, conv, 5)
        store.replay(conv)
        cached = store._replays._entries[conv].state
        assert cached is not None
        before = cached.version
        record(other, conv, 1, start=5)
        assert store.replay(conv) == replay(store.events(conv))
        assert store._replays._entries[conv].state is cached
        assert cached.version == len(store.events(conv)) > before


def test_a_cached_fold_of_a_conversation_another_store_erased_is_dropped(
    tmp_path: Path,
) -> None:
    """After another store's erasure the event at the cached fold's version is gone: the
    fold is dropped, and the log (now empty of it) says the conversation is not found."""
    location = str(tmp_path / "s.db")
    with stores(location, [10**8, 0]) as (store, other):
        conv = store.new_conversation()
        record(store, conv, 3)
        store.replay(conv)
        other.erase(conv, reason="test")
        with pytest.raises(ConversationNotFound):
            store.replay(conv)
        assert conv not in store._replays._entries


def _retired_texts(location: Path, conversation: str) -> list[str]:
    """The message texts 0.3.0 kept of ``conversation`` in its model rows (the sealed ones,
    stored as their content behind two code letters)."""
    with sqlite3.connect(location) as conn:
        rows = conn.execute(
            f"SELECT plan FROM {RETIRED_MESSAGES} WHERE originator_id = ?",  # noqa: S608
            (conversation,),
        ).fetchall()
    return [plan[2:] for (plan,) in rows if isinstance(plan, str) and not plan.startswith("[")]


def test_an_erasure_leaves_none_of_its_text_in_the_model_rows_of_an_old_store(
    tmp_path: Path,
) -> None:
    """A store 0.3.0 wrote keeps its replay model's tables, which this version never reads
    or writes: erasing a conversation still deletes its rows there, so none of its text is
    left in the file; another conversation's rows are kept (``upgrade`` drops the tables)."""
    location = tmp_path / "old.db"
    shutil.copyfile(FORMAT2, location)
    with sqlite3.connect(location) as conn:
        (erased,) = conn.execute(
            f"SELECT originator_id FROM {RETIRED_MESSAGES} GROUP BY 1 "  # noqa: S608
            "ORDER BY count(*) DESC LIMIT 1"
        ).fetchone()
        (kept,) = conn.execute(
            f"SELECT originator_id FROM {RETIRED_HEADS} WHERE originator_id != ?",  # noqa: S608
            (erased,),
        ).fetchone()
        rest = [row[0] for row in conn.execute("SELECT id FROM convstore_listing")]
    with open_store(location) as store:
        # Only what no other conversation holds too (a fork holds its parent's messages).
        others = repr([store.events(UUID(c)) for c in rest if c != erased])
        texts = [t for t in _retired_texts(location, erased) if len(t) >= 12 and t not in others]
        assert texts
        assert all(t.encode() in location.read_bytes() for t in texts)
        store.replay(UUID(erased))  # replays from the log; the old rows are left as they are
        store.erase(UUID(erased), reason="test")
        assert store.replay(UUID(kept)) == replay(store.events(UUID(kept)))
    with sqlite3.connect(location) as conn:
        for table in (RETIRED_HEADS, RETIRED_MESSAGES):
            query = f"SELECT count(*) FROM {table} WHERE originator_id = ?"  # noqa: S608
            assert conn.execute(query, (erased,)).fetchone()[0] == 0, table
        query = f"SELECT count(*) FROM {RETIRED_HEADS} WHERE originator_id = ?"  # noqa: S608
        assert conn.execute(query, (kept,)).fetchone()[0] == 1
    for path in (location, Path(f"{location}-wal")):
        if path.exists():
            data = path.read_bytes()
            assert not [t for t in texts if t.encode() in data], path


def test_an_erasure_deletes_its_rows_from_the_model_tables_of_an_old_schema(
    postgres_url: str,
) -> None:
    """A PostgreSQL schema an earlier version used holds its model tables: an erasure deletes
    the conversation's rows from them and leaves the others'."""
    with open_store(postgres_url) as store:
        erased, kept = store.new_conversation(), store.new_conversation()
        record(store, erased, 2)
        record(store, kept, 2)
        schema = store._log.store_recorder.datastore.schema  # type: ignore[attr-defined]
        prefix = f'"{schema}".'
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                f"CREATE TABLE {prefix}{RETIRED_HEADS} (originator_id uuid PRIMARY KEY, "
                "version bigint NOT NULL, head text NOT NULL)"
            )
            conn.execute(
                f"CREATE TABLE {prefix}{RETIRED_MESSAGES} (originator_id uuid NOT NULL, "
                "position integer NOT NULL, message_id text NOT NULL, plan text NOT NULL, "
                "PRIMARY KEY (originator_id, position))"
            )
            for conv in (erased, kept):
                conn.execute(
                    f"INSERT INTO {prefix}{RETIRED_HEADS} VALUES (%s, 1, '{{}}')",  # noqa: S608
                    (conv,),
                )
                conn.execute(
                    f"INSERT INTO {prefix}{RETIRED_MESSAGES} VALUES (%s, 0, 'm', 'ue secret')",  # noqa: S608
                    (conv,),
                )
        store.erase(erased, reason="test")
        assert store.replay(kept) == replay(store.events(kept))
        with psycopg.connect(POSTGRES_URL) as conn:
            for table in (RETIRED_HEADS, RETIRED_MESSAGES):
                rows = conn.execute(
                    f"SELECT originator_id FROM {prefix}{table}"  # noqa: S608
                ).fetchall()
                assert [row[0] for row in rows] == [kept], table


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_new_store_makes_no_model_tables(
    backend: str, tmp_path: Path, make_postgres_url: Callable[[], str]
) -> None:
    location = str(tmp_path / "s.db") if backend == "sqlite" else make_postgres_url()
    with open_store(location) as store:
        conv = store.new_conversation()
        record(store, conv, 3)
        assert store.replay(conv) == replay(store.events(conv))
        found = store._log.store_recorder.datastore  # type: ignore[attr-defined]
        with found.transaction(commit=False) as curs:
            if backend == "sqlite":
                curs.execute("SELECT name FROM sqlite_master WHERE name LIKE 'convstore_replay%'")
            else:
                curs.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = %s AND table_name LIKE 'convstore_replay%%'",
                    (found.schema,),
                )
            assert curs.fetchall() == []
