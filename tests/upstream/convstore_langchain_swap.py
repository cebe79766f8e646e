"""A pytest plugin run inside langchain-core's own source tree: its
``RunnableWithMessageHistory`` tests, with convstore's ``ConvstoreChatMessageHistory`` where
they make an ``InMemoryChatMessageHistory``.

``InMemoryChatMessageHistory(messages=[...])`` becomes a ``ConvstoreChatMessageHistory`` of a
session of its own (a fresh id) in one convstore store (a SQLite file, or a schema of the
server ``CONVSTORE_UPSTREAM_POSTGRES`` names), holding those messages. The tests compare
histories with ``==``, which ``InMemoryChatMessageHistory`` (a pydantic model) answers by its
messages: the swapped class compares the messages read back from the store the same way.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from uuid import uuid4

import langchain_core.chat_history
import pytest
from langchain_core.messages import BaseMessage

import convstore
from convstore.integrations.langchain import ConvstoreChatMessageHistory
from convstore.store import Store

_SERVER = os.environ.get("CONVSTORE_UPSTREAM_POSTGRES", "")
_SCHEMA = f"convstore_upstream_{uuid4().hex[:12]}"
_STORE: list[Store] = []


def _store() -> Store:
    if not _STORE:
        scratch = Path(tempfile.mkdtemp(prefix="convstore-upstream-"))
        location = f"{_SERVER}?schema={_SCHEMA}" if _SERVER else str(scratch / "store.db")
        _STORE.append(convstore.open_store(location))
    return _STORE[0]


class SwappedHistory(ConvstoreChatMessageHistory):
    """``InMemoryChatMessageHistory``'s constructor, making a convstore history."""

    def __init__(self, messages: Sequence[BaseMessage] = ()) -> None:
        super().__init__(uuid4().hex, store=_store())
        if messages:
            self.add_messages(messages)

    def __eq__(self, other: object) -> bool:
        """As the pydantic model compares: by the messages."""
        if not isinstance(other, ConvstoreChatMessageHistory):
            return NotImplemented
        return self.messages == other.messages

    __hash__ = None  # type: ignore[assignment] # equal by value, as the model it stands for

    def __repr__(self) -> str:
        return f"SwappedHistory(messages={self.messages!r})"


langchain_core.chat_history.InMemoryChatMessageHistory = SwappedHistory  # type: ignore[misc, assignment]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the store, and drop its PostgreSQL schema."""
    for store in _STORE:
        store.close()
    if _SERVER and _STORE:
        import psycopg  # noqa: PLC0415 - only with a server
        from psycopg import sql  # noqa: PLC0415

        with psycopg.connect(_SERVER, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(_SCHEMA))
            )
