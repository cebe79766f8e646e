"""Routing conversations over several stores: stable, balanced, and minimal on growth."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from convstore import InvalidInput, ShardedStores, open_store, shard_for


def test_routing_is_stable_and_balanced() -> None:
    """The same key always goes to the same shard, and 4,000 ids spread evenly over 4 shards."""
    shards = [f"shard-{n}" for n in range(4)]
    ids = [UUID(int=n) for n in range(4000)]
    assert [shard_for(i, shards) for i in ids] == [
        shard_for(i, list(reversed(shards))) for i in ids
    ]
    counts = Counter(shard_for(i, shards) for i in ids)
    assert set(counts) == set(shards)
    assert all(800 < count < 1200 for count in counts.values())


def test_adding_a_shard_moves_only_what_the_new_shard_wins() -> None:
    """Growing from 4 to 5 shards moves about a fifth of the keys, all of them to the new one."""
    old = [f"shard-{n}" for n in range(4)]
    new = [*old, "shard-4"]
    keys = [f"tenant-{n}" for n in range(3000)]
    moved = [k for k in keys if shard_for(k, old) != shard_for(k, new)]
    assert all(shard_for(k, new) == "shard-4" for k in moved)
    assert 0.12 < len(moved) / len(keys) < 0.28


def test_routing_needs_shards() -> None:
    """No shards, or duplicated shards, is a usage error."""
    with pytest.raises(InvalidInput):
        shard_for("x", [])
    with pytest.raises(InvalidInput):
        ShardedStores(["a.db", "a.db"])


def test_sharded_sqlite_stores_find_their_conversations(tmp_path: Path) -> None:
    """Conversations land on the shard their id routes to, and each shard lists only its own."""
    shards = [str(tmp_path / f"s{n}.db") for n in range(3)]
    with ShardedStores(shards) as stores:
        ids = [stores.new_conversation(title=f"c{n}") for n in range(30)]
        for conversation in ids:
            store = stores.store_for(conversation)
            store.append_message(conversation, "user", [{"type": "text", "text": "hi"}])
            assert store.replay(conversation)["messages"][0]["content"] == "hi"
        tenant = stores.new_conversation(key="acme")
        assert stores.store_for("acme").events(tenant)
    for shard in shards:
        with open_store(shard) as store:
            listed = {c.id for c in store.conversations()}
        expected = {i for i in ids if shard_for(i, shards) == shard}
        if shard_for("acme", shards) == shard:
            expected.add(tenant)
        assert listed == expected


def test_sharded_postgres_schemas(make_postgres_url: Callable[[], str]) -> None:
    """Two schemas of one PostgreSQL database serve as two shards."""
    shards = [make_postgres_url(), make_postgres_url()]
    with ShardedStores(shards) as stores:
        ids = [stores.new_conversation() for _ in range(8)]
        for conversation in ids:
            assert stores.store_for(conversation).events(conversation)
        used = {shard_for(i, shards) for i in ids}
    assert used <= set(shards)


def test_a_conversation_id_cannot_be_started_twice(tmp_path: Path) -> None:
    """Starting a conversation with an id already in the store is refused, not crashed."""
    with open_store(tmp_path / "s.db") as store:
        conversation = uuid4()
        store.new_conversation(conversation_id=conversation)
        with pytest.raises(InvalidInput, match="already exists"):
            store.new_conversation(conversation_id=conversation)
