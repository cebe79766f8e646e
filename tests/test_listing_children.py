"""A conversation's branches are found through an index on the listing's ``parent_id``, on both
backends: ``Store.children`` and each listed row's count of children read it (the database's
own plan says so), and a store made before the index gains it on opening."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import convstore
from convstore import Store
from convstore.infrastructure.common.listing import PARENT_INDEX, select_page
from convstore.infrastructure.postgres.recorder import POSTGRES
from convstore.infrastructure.sqlite.recorder import SQLITE
from convstore.projections.listing import ListingQuery


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location of each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "children.db")
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(location: str) -> Iterator[Store]:
    with convstore.open_store(location) as opened:
        yield opened


def family(store: Store) -> tuple[UUID, list[UUID]]:
    """A parent with two forks, beside an unrelated conversation."""
    parent = store.new_conversation(title="parent")
    point = store.append_message(parent, "user", [{"type": "text", "text": "hi"}])
    store.new_conversation(title="alone")
    return parent, [store.fork(parent, at=point), store.fork(parent, at=point)]


def plan(location: str, query: ListingQuery) -> str:
    """The database's plan for the listing statement ``query`` makes, as one text."""
    if location.endswith(".db"):
        text, params = select_page(SQLITE, query)
        with sqlite3.connect(location) as conn:
            rows = conn.execute(f"EXPLAIN QUERY PLAN {text}", params).fetchall()
        return "\n".join(str(row[-1]) for row in rows)
    import psycopg  # noqa: PLC0415 - the PostgreSQL extra, present wherever this runs

    server, _, schema = location.partition("?schema=")
    text, params = select_page(POSTGRES, query, f'"{schema}".')
    with psycopg.connect(server) as conn:
        # The tables hold a handful of rows: with sequential scans allowed the planner rightly
        # prefers them. Turned off, it shows which index it can use instead.
        conn.execute("SET enable_seqscan = off")
        found: list[Any] = conn.execute(f"EXPLAIN {text}".encode(), params).fetchall()
    return "\n".join(str(row[0]) for row in found)


def test_children_are_read_through_the_parent_index(store: Store, location: str) -> None:
    """The children query, and the count of children every listed row carries, use the
    ``parent_id`` index; the answers are the forks, oldest first, and their count."""
    parent, forks = family(store)
    assert [child.id for child in store.children(parent)] == forks
    assert store.conversation_info(parent).children == 2
    assert store.conversation_info(forks[0]).children == 0
    children = plan(location, ListingQuery(parent=parent, order="started", limit=1000))
    assert children.count(PARENT_INDEX) == 2, children  # the rows, and each row's count
    listed = plan(location, ListingQuery(limit=50))
    assert PARENT_INDEX in listed, listed  # each listed row's count


def test_a_store_made_before_the_parent_index_gains_it_on_open(location: str) -> None:
    """Dropping the index (a store made before it) and reopening makes it again; the listing
    is unchanged (an index has nothing to refill)."""
    with convstore.open_store(location) as store:
        parent, forks = family(store)
        before = store.conversations()
    if location.endswith(".db"):
        with sqlite3.connect(location) as conn:
            conn.execute(f"DROP INDEX {PARENT_INDEX}")
        assert PARENT_INDEX not in plan(location, ListingQuery(parent=parent))
    else:
        import psycopg  # noqa: PLC0415

        server, _, schema = location.partition("?schema=")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP INDEX "{schema}".{PARENT_INDEX}'.encode())
    with convstore.open_store(location) as store:
        assert store.conversations() == before
        assert [child.id for child in store.children(parent)] == forks
    assert PARENT_INDEX in plan(location, ListingQuery(parent=parent))
