"""Spreading conversations over several stores: one routing function, many backends.

Past what one PostgreSQL (or one SQLite file) holds, split by tenant or by conversation: give
every shard its own store (another database, or another schema of one database) and route each
conversation with :func:`shard_for`. Rendezvous hashing keeps the choice stable, and adding a
shard moves only the conversations the new shard wins (about 1/n of them), never any between
old shards.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from types import TracebackType
from uuid import UUID, uuid4

from convstore.app.bootstrap import open_store
from convstore.domain.errors import InvalidInput
from convstore.store import Store


def shard_for(key: str | UUID, shards: Sequence[str]) -> str:
    """The shard (a store location) that owns ``key``: a conversation id or a tenant name."""
    if not shards:
        msg = "no shards to route to"
        raise InvalidInput(msg)

    def weight(shard: str) -> bytes:
        return hashlib.sha256(f"{shard}\x00{key}".encode()).digest()

    return max(shards, key=weight)


class ShardedStores:
    """Stores opened on demand, one per shard, with conversations routed by id (or by a key).

    ``new_conversation`` picks the id first, so the conversation lands on the shard that id
    routes to, and every later call finds it with no directory lookup.
    """

    def __init__(self, shards: Sequence[str]) -> None:
        if len(set(shards)) != len(shards) or not shards:
            msg = "shards must be a non-empty list of distinct locations"
            raise InvalidInput(msg)
        self.shards = list(shards)
        self._stores: dict[str, Store] = {}
        self._lock = threading.Lock()

    def store_for(self, key: str | UUID) -> Store:
        """The store of the shard that owns ``key``."""
        shard = shard_for(key, self.shards)
        with self._lock:
            if shard not in self._stores:
                self._stores[shard] = open_store(shard)
            return self._stores[shard]

    def new_conversation(self, title: str | None = None, *, key: str | None = None) -> UUID:
        """Start a conversation on the shard its id routes to (or that ``key`` routes to)."""
        conversation_id = uuid4()
        store = self.store_for(key if key is not None else conversation_id)
        return store.new_conversation(title, conversation_id=conversation_id)

    def close(self) -> None:
        """Close every store opened so far."""
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()

    def __enter__(self) -> ShardedStores:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
