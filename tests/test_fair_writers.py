"""Writers to one conversation take turns: three processes appending to it at once each
complete every append, none losing the version race more than once per append."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import convstore

WRITERS = 3
APPENDS = 150

MOST_ATTEMPTS = 2
"""Attempts one append may take: a first try that lost the race, then one made in turn."""


def _append(location: str, conversation: str, name: str, ready: Any, results: Any) -> None:
    """One writer process: append APPENDS messages as fast as it can, then report the most
    attempts any of them took."""
    with convstore.open_store(location) as store:
        ready.wait()
        try:
            for i in range(APPENDS):
                store.append_message(
                    conversation, "user", [{"type": "text", "text": f"{name}/{i}"}]
                )
        except convstore.StoreError as exc:
            results.put((name, f"failed after {i} appends: {exc}"))
            return
        results.put((name, store._most_attempts))


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store on either backend."""
    if request.param == "sqlite":
        return str(tmp_path / "fair.db")
    make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
    return make()


def test_three_writers_on_one_conversation_each_complete_their_appends(location: str) -> None:
    """Three processes append to one conversation at once: each completes all its appends in
    order, no append took more than a lost first try and one turn, and each writer's first
    append landed while the others were still writing."""
    with convstore.open_store(location) as store:
        conversation = str(store.new_conversation("fair"))
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Barrier(WRITERS)
    results = spawn.Queue()
    names = [f"w{n}" for n in range(WRITERS)]
    workers = [
        spawn.Process(target=_append, args=(location, conversation, name, ready, results))
        for name in names
    ]
    for worker in workers:
        worker.start()
    reported = dict(results.get(timeout=300) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0] * WRITERS
    assert all(isinstance(reported[name], int) for name in names), reported
    assert max(reported.values()) <= MOST_ATTEMPTS, reported
    with convstore.open_store(location) as store:
        texts = [m.blocks[0].block.model_dump()["text"] for m in store.messages(conversation)]
    for name in names:
        assert [t for t in texts if t.startswith(f"{name}/")] == [
            f"{name}/{i}" for i in range(APPENDS)
        ]
    # Each writer got in while the others were still writing: its first append landed
    # before every other writer's last.
    writer_of = [t.split("/")[0] for t in texts]
    firsts = {name: writer_of.index(name) for name in names}
    lasts = {name: len(writer_of) - 1 - writer_of[::-1].index(name) for name in names}
    assert max(firsts.values()) < min(lasts.values()), (firsts, lasts)
