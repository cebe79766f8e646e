"""The store contract on the embedded default: a real SQLite file."""

from __future__ import annotations

from pathlib import Path

import pytest

from convstore import Store, open_store
from tests.contract import StoreContract


class TestSQLiteStore(StoreContract):
    """Every contract test, against one SQLite file per test."""

    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "store.db"

    def open_store(self) -> Store:
        return open_store(self.path)
