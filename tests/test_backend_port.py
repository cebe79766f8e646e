"""A backend is one object behind one port, chosen in one place.

Everything that differs between backends sits behind :class:`convstore.ports.backend.Backend`,
and the registry in :mod:`convstore.infrastructure` is the only module that turns a location into
one. These tests hold that: no module but the registry (and the backends' own folders) reads a
location to tell backends apart, and a backend added by one registry line, here a toy that
keeps its stores in SQLite files under a ``toy://`` URL, passes the whole store contract.
"""

from __future__ import annotations

import ast
import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, TypeVar
from uuid import UUID

import pytest

from convstore import InvalidInput, Store, open_async_store, open_store
from convstore.audit.file import default_audit_file, store_file_of
from convstore.infrastructure import BACKENDS, backend_for
from convstore.infrastructure.common.mapper import COMPACT, COMPACT_LZ4
from convstore.infrastructure.postgres.backend import PostgresBackend
from convstore.infrastructure.sqlite.backend import SQLiteBackend
from convstore.ports.backend import Backend, Opening, StoreUpgrade
from tests.contract import StoreContract

T = TypeVar("T")

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "convstore"

CHOOSERS = {"is_postgres_url", "url_scheme", "SCHEMES", "BACKENDS", "FILE_BACKEND"}
"""The names a module would use to tell one backend's locations from another's."""

BACKEND_CLASSES = {"SQLiteBackend", "PostgresBackend", "NatsBackend"}


def _choices(file: Path, root: Path = PACKAGE) -> list[str]:
    """Each use in ``file`` of a name that tells backends apart by location, or that names a
    backend's class."""
    found = []
    for node in ast.walk(ast.parse(file.read_text(), filename=str(file))):
        if isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.alias):
            name = node.name
        else:
            continue
        if name in CHOOSERS | BACKEND_CLASSES:
            found.append(f"{file.relative_to(root)}: {name}")
    return sorted(found)


def _outside_the_backends() -> list[Path]:
    """Every module but the registry and the backends' own folders (``infrastructure/common/``,
    which every backend shares, is outside too)."""
    own = {"sqlite", "postgres", "nats"}
    return [
        f
        for f in sorted(PACKAGE.rglob("*.py"))
        if f.relative_to(PACKAGE) != Path("infrastructure/__init__.py")
        and not (f.relative_to(PACKAGE).parts[:1] == ("infrastructure",) and f.parent.name in own)
    ]


def test_only_the_registry_chooses_a_backend_by_location() -> None:
    choices = [found for f in _outside_the_backends() for found in _choices(f)]
    assert choices == []


def test_the_choice_finder_finds_choices(tmp_path: Path) -> None:
    """The check above is not vacuous: it reports each way of telling backends apart."""
    file = tmp_path / "choosing.py"
    file.write_text(
        "from convstore.infrastructure.postgres.factory import is_postgres_url\n"
        "threads = 4 if is_postgres_url(location) else 1\n"
        "kind = factory.url_scheme(location)\n"
        "backend = SQLiteBackend()\n"
    )
    assert _choices(file, tmp_path) == [
        "choosing.py: SQLiteBackend",
        "choosing.py: is_postgres_url",
        "choosing.py: is_postgres_url",
        "choosing.py: url_scheme",
    ]


def test_each_location_gets_its_backend() -> None:
    assert isinstance(backend_for("/srv/agents.db"), SQLiteBackend)
    assert isinstance(backend_for("agents"), SQLiteBackend)
    for url in ("postgresql://a@h/d", "POSTGRES://a@h/d", "postgresql+psycopg://a@h/d"):
        assert isinstance(backend_for(url), PostgresBackend)
    assert backend_for("/a.db") is backend_for("/b.db")  # one object per process
    with pytest.raises(InvalidInput, match="unknown store URL scheme 'mysql'"):
        backend_for("mysql://root:hunter2@h/d")
    with pytest.raises(InvalidInput, match="looks like a PostgreSQL URL") as caught:
        backend_for("postgresql:/app:hunter2@db/agents")
    assert "hunter2" not in str(caught.value)


def test_choosing_a_postgres_backend_imports_no_driver() -> None:
    """The registry holds names, not modules: choosing (and asking the backend for its
    audit file) loads the backend, never psycopg, so the driver stays an optional extra."""
    code = (
        "import sys\n"
        "from convstore.infrastructure import backend_for\n"
        "backend = backend_for('postgresql://app@db/agents')\n"
        "backend.default_audit_file('postgresql://app@db/agents')\n"
        "print(backend.name, sorted(m for m in ('psycopg', 'psycopg_pool') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "PostgreSQL []"


# -- a backend added by one line ------------------------------------------------------------


PREFIX = "toy://"


class ToyBackend:
    """Keeps a ``toy://PATH`` store in the SQLite file at PATH, through the SQLite backend,
    and counts what it is asked, so the tests can see the store went through it."""

    name = "Toy"
    writer_threads = 3
    compress_from = 4096
    erasures: ClassVar[list[UUID | None]] = []

    def __init__(self) -> None:
        self._sqlite = SQLiteBackend()

    def show(self, location: str) -> str:
        return location

    @contextmanager
    def opening(self, location: str, *, create: bool, make_directory: bool) -> Iterator[Opening]:
        path = location.removeprefix(PREFIX)
        with self._sqlite.opening(path, create=create, make_directory=make_directory) as inner:
            yield Opening(inner.env, PREFIX + inner.shown, "", inner.store_format, inner.identity)

    def create_filled(
        self, location: str, fill: Callable[[Opening], T], *, make_directory: bool
    ) -> tuple[T, str]:
        result, shown = self._sqlite.create_filled(
            location.removeprefix(PREFIX), fill, make_directory=make_directory
        )
        return result, PREFIX + shown

    def after_erase(self, empty_log: Callable[[], bool], conversation: UUID | None) -> None:
        ToyBackend.erasures.append(conversation)
        self._sqlite.after_erase(empty_log, conversation)

    def store_file(self, location: str) -> Path | None:
        return Path(location.removeprefix(PREFIX))

    def upgrade_files(self, location: str, *, backup: bool) -> StoreUpgrade | None:
        return None

    def default_audit_file(self, location: str) -> Path:
        return self._sqlite.default_audit_file(location.removeprefix(PREFIX))

    def storage_problems(self, location: str) -> list[str]:
        return self._sqlite.storage_problems(location.removeprefix(PREFIX))


TOY: Backend = ToyBackend()  # mypy checks the toy against the port


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one line a new backend adds to the registry."""
    monkeypatch.setitem(BACKENDS, "toy", f"{__name__}:ToyBackend")


@pytest.mark.usefixtures("toy")
class TestToyBackend(StoreContract):
    """Every contract test, against a store opened through the toy backend."""

    @pytest.fixture(autouse=True)
    def _database(self, tmp_path: Path) -> None:
        self.path = tmp_path / "store.db"

    def open_store(self) -> Store:
        store = open_store(PREFIX + str(self.path))
        assert isinstance(store.backend, ToyBackend)
        return store


@pytest.mark.usefixtures("toy")
def test_the_toy_backend_is_asked_for_everything(tmp_path: Path) -> None:
    location = PREFIX + str(tmp_path / "store.db")
    with pytest.raises(InvalidInput, match="unknown store URL scheme 'toys'"):
        open_store("toys://" + str(tmp_path / "store.db"))
    with open_store(location) as store:
        assert store.location == PREFIX + str((tmp_path / "store.db").resolve())
        conv = store.new_conversation(title="toy")
        store.append_message(conv, "user", [{"type": "text", "text": "hello"}])
        assert store.replay(conv)["messages"] == [{"role": "user", "content": "hello"}]
        ToyBackend.erasures.clear()
        store.erase(conv, reason="test")
        assert ToyBackend.erasures == [conv]
        store.vacuum()
    assert (tmp_path / "store.db").is_file()
    assert store_file_of(location) == tmp_path / "store.db"
    assert default_audit_file(location) == tmp_path / "store.audit.db"

    async def writers() -> int:
        async with await open_async_store(location) as astore:
            return astore._writes._max_workers  # the pool the backend sized

    assert asyncio.run(writers()) == ToyBackend.writer_threads


@pytest.mark.usefixtures("toy")
def test_the_backend_decides_from_what_size_event_bodies_are_compressed(tmp_path: Path) -> None:
    """A 1 KB text block's event is compressed in a SQLite store (from 512 bytes) and not in
    the toy's (from 4 KB): the threshold is the backend's, read through the port."""
    text = " ".join(f"step {i} checks the parser against its fixture" for i in range(24))
    assert 512 < len(text) < 4096
    firsts = {}
    for name, location in (
        ("sqlite", str(tmp_path / "a.db")),
        ("toy", PREFIX + str(tmp_path / "b.db")),
    ):
        with open_store(location) as store:
            conv = store.new_conversation()
            store.append_message(conv, "user", [{"type": "text", "text": text}])
            assert store.replay(conv)["messages"] == [{"role": "user", "content": text}]
        with sqlite3.connect(location.removeprefix(PREFIX)) as conn:
            [(state,)] = conn.execute(
                "SELECT state FROM stored_events WHERE originator_id = ? "
                "AND originator_version = 2",  # the block's event (a new store: format 3)
                (conv.hex,),
            ).fetchall()
        firsts[name] = state[0]
    assert firsts == {"sqlite": COMPACT_LZ4, "toy": COMPACT}
