"""Forks and rewinds racing appending processes leave whole histories (SQLite and PostgreSQL).

A fork is one read and one transaction of a new stream; a rewind and its undo are events that
take the next version like any append. Neither may leave a half state when other processes
write to the same conversation at the same time.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import pytest

from convstore import Store, open_store
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier

WRITERS = 3
MESSAGES = 30


def _append(location: str, conv: str, tag: int) -> int:
    """Append MESSAGES one-block messages to ``conv``; returns how many landed."""
    with open_store(location) as store:
        for number in range(MESSAGES):
            store.append_message(conv, "user", [{"type": "text", "text": f"w{tag}-{number}"}])
    return MESSAGES


def _texts(store: Store, conv: UUID) -> list[str]:
    return [m["content"] for m in store.replay(conv)["messages"]]


def _race(location: str) -> None:
    with open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "start"}])
    forks: list[tuple[UUID, list[str]]] = []
    context = multiprocessing.get_context("spawn")
    with context.Pool(WRITERS) as pool:
        pending = [pool.apply_async(_append, (location, str(conv), n)) for n in range(WRITERS)]
        with open_store(location) as store:
            deadline = time.monotonic() + 120
            while not all(p.ready() for p in pending) and time.monotonic() < deadline:
                visible = [m for m in store.messages(conv) if not m.withdrawn]
                at = visible[-1].message_id
                prefix = _texts(store, conv)[: len(visible)]
                forks.append((store.fork(conv, at=at), prefix))
                store.undo_rewind(conv, store.rewind(conv, to=at))
        assert [p.get(timeout=120) for p in pending] == [MESSAGES] * WRITERS
    with open_store(location) as store:
        texts = _texts(store, conv)
        assert len(texts) == 1 + WRITERS * MESSAGES  # every rewind was undone
        assert sorted(texts[1:]) == sorted(
            f"w{n}-{i}" for n in range(WRITERS) for i in range(MESSAGES)
        )
        assert len(forks) >= 2
        for fork, prefix in forks:
            # The fork holds exactly the parent's history up to its fork point, whatever the
            # writers did meanwhile.
            assert _texts(store, fork) == prefix
        verifier = Verifier(heads=store.heads(), key=chain_key())
        verifier.check_all(store.scan())
        assert verifier.problems == []


@pytest.mark.slow
def test_forks_and_rewinds_racing_appending_processes_on_sqlite(tmp_path: Path) -> None:
    """On one SQLite file: every fork is a whole prefix, every append lands, verify is clean."""
    _race(str(tmp_path / "race.db"))


@pytest.mark.slow
def test_forks_and_rewinds_racing_appending_processes_on_postgres(
    make_postgres_url: Callable[[], str],
) -> None:
    """On one PostgreSQL store: the same."""
    _race(make_postgres_url())
