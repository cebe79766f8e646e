"""The store contract on the embedded default: a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from convstore import Store, open_store
from tests.conftest import format2_store_file
from tests.contract import StoreContract


class TestSQLiteStore(StoreContract):
    """Every contract test, against one SQLite file per test."""

    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "store.db"

    def open_store(self) -> Store:
        return open_store(self.path)


class TestSQLiteFormat2Store(StoreContract):
    """Every contract test, against a SQLite store of format 2 (one convstore 0.3.x made,
    which this version keeps writing in that form: a message as its start, its blocks and
    its end)."""

    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = format2_store_file(tmp_path / "store.db")

    def open_store(self) -> Store:
        store = open_store(self.path)
        assert store.store_format == 2
        return store
