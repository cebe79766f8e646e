"""A pytest plugin run inside the OpenAI Agents SDK's own source tree: its session tests, with
convstore's ``ConvstoreSession`` where they make a ``SQLiteSession``.

``SQLiteSession(session_id, db_path=":memory:", session_settings=None)`` becomes a
``ConvstoreSession`` on a convstore store: one store per ``db_path`` (a file beside it, or
a PostgreSQL schema when ``CONVSTORE_UPSTREAM_POSTGRES`` names a server), a fresh one for
each ``":memory:"`` session, as SQLite gives each its own database. ``close()``, which
``ConvstoreSession`` does not have (it never owns its store), closes nothing.

The tests that assert what convstore does on purpose otherwise, or that reach into
``SQLiteSession``'s own SQLite connection handling, are marked as expected failures (strict:
one that starts passing fails the run) with the reason, in :data:`DIFFERENT`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any
from uuid import uuid4

import agents
import agents.memory
import pytest

import convstore
from convstore.integrations.openai_agents import ConvstoreSession
from convstore.store import Store

_SQLITE_INTERNALS = (
    "reaches into SQLiteSession's own SQLite connections (worker-thread connections, its "
    "write lock, rollback and close of a cached connection, rows corrupted in its table): "
    "ConvstoreSession has none; its store is convstore's"
)
_PROSE = (
    "history comes back as prose on purpose (docs/integrations/openai-agents.md): an "
    "assistant message's content is its text, not output_text parts"
)
_TOOL_ROUND_AS_PROSE = (
    "history comes back as prose on purpose: a tool round is two plain messages "
    "('Tool use: …', 'Result (…): …'), never function_call items, so no output is unmatched"
)
DIFFERENT: dict[str, str] = {
    "test_sqlite_session_close_closes_worker_thread_connections": _SQLITE_INTERNALS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _SQLITE_INTERNALS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        _SQLITE_INTERNALS
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _SQLITE_INTERNALS,
    "test_sqlite_session_closed_rejects_empty_add_items": (
        "a closed SQLiteSession refuses writes; ConvstoreSession has no close of its own "
        "(the store's owner closes the store)"
    ),
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _SQLITE_INTERNALS,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        _SQLITE_INTERNALS
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _SQLITE_INTERNALS,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (_SQLITE_INTERNALS),
    "test_sqlite_session_file_lock_is_shared_across_instances": _SQLITE_INTERNALS,
    "test_sqlite_session_failed_add_items_releases_write_lock": _SQLITE_INTERNALS,
    "test_sqlite_session_failed_clear_session_rolls_back": _SQLITE_INTERNALS,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _SQLITE_INTERNALS,
    "test_sqlite_session_rollback_failure_evicts_connection": _SQLITE_INTERNALS,
    "test_sqlite_session_close_retries_quarantined_connection": _SQLITE_INTERNALS,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        _SQLITE_INTERNALS
    ),
    "test_session_limit_parameter": _PROSE,
    "test_session_limit_larger_than_history": _PROSE,
    "test_session_limit_drops_unmatched_history_function_call_output": _TOOL_ROUND_AS_PROSE,
}
"""Upstream test (function name, every parametrization) -> why it is expected to fail."""

_SCRATCH = Path(tempfile.mkdtemp(prefix="convstore-upstream-"))
_SERVER = os.environ.get("CONVSTORE_UPSTREAM_POSTGRES", "")
_STORES: dict[str, Store] = {}
_OPENED: list[Store] = []
_SCHEMAS: list[str] = []


def _location(db_path: str | Path) -> str:
    if _SERVER:
        _SCHEMAS.append(f"convstore_upstream_{uuid4().hex[:12]}")
        return f"{_SERVER}?schema={_SCHEMAS[-1]}"
    if str(db_path) == ":memory:":
        return str(_SCRATCH / f"{uuid4().hex}.db")
    return f"{db_path}.convstore"


def _store(db_path: str | Path) -> Store:
    key = str(db_path)
    if key == ":memory:" or key not in _STORES:
        store = convstore.open_store(_location(db_path))
        _OPENED.append(store)
        if key == ":memory:":
            return store
        _STORES[key] = store
    return _STORES[key]


class SwappedSession(ConvstoreSession):
    """``SQLiteSession``'s constructor, making a ``ConvstoreSession``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        session_settings: Any = None,
    ) -> None:
        super().__init__(session_id, store=_store(db_path), session_settings=session_settings)

    def close(self) -> None:
        """Nothing to close: the store outlives the session."""


agents.SQLiteSession = SwappedSession  # type: ignore[misc, assignment]
agents.memory.SQLiteSession = SwappedSession  # type: ignore[misc, assignment]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        reason = DIFFERENT.get(name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=reason, strict=True))


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Close the test's stores and drop its PostgreSQL schemas (each store holds a pool of
    connections: kept open, a few dozen tests would use up the server's)."""
    for store in _OPENED:
        store.close()
    _OPENED.clear()
    _STORES.clear()
    if _SCHEMAS:
        import psycopg  # noqa: PLC0415 - only with a server
        from psycopg import sql  # noqa: PLC0415

        with psycopg.connect(_SERVER, autocommit=True) as conn:
            for schema in _SCHEMAS:
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                conn.execute(drop)
        _SCHEMAS.clear()
