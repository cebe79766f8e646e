"""Backend specifics live on the recorders, behind one typed protocol.

The store asks its recorder for what convstore needs beyond eventsourcing (states, raw rows,
heads, the listing index, erasure) through :class:`StoreRecorder`, which both backends'
recorders derive from; nothing outside a backend's own folder asks which backend it has.
"""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import pytest

from convstore.infrastructure.common.application import EventLog
from convstore.infrastructure.postgres.recorder import ChainedPostgresRecorder
from convstore.infrastructure.sqlite.recorder import SQLiteWriterRecorder, sqlite_env
from convstore.ports.recorder import StoreRecorder

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "convstore"


def test_both_recorders_are_store_recorders() -> None:
    """Each backend's recorder derives from the protocol (so mypy checks its signatures)."""
    assert StoreRecorder in SQLiteWriterRecorder.__mro__
    assert StoreRecorder in ChainedPostgresRecorder.__mro__


def test_the_event_log_refuses_a_recorder_that_is_not_convstores(tmp_path: Path) -> None:
    """eventsourcing's stock SQLite recorder lacks convstore's methods: refused at opening,
    not at the first erase or listing."""
    path = tmp_path / "stock.db"
    sqlite3.connect(path).close()
    env = sqlite_env(path)
    del env["APPLICATION_RECORDER_TOPIC"]
    with pytest.raises(TypeError, match="SQLiteApplicationRecorder is not a convstore recorder"):
        EventLog(env=env)


def _backend_probes(file: Path, root: Path = PACKAGE) -> list[str]:
    """Each ``getattr``/``hasattr``/``isinstance`` in ``file`` that names a recorder."""
    return [
        f"{file.relative_to(root)}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(file.read_text(), filename=str(file)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"getattr", "hasattr", "isinstance"}
        and "recorder" in ast.unparse(node).lower()
    ]


def test_nothing_outside_the_backends_probes_the_recorder() -> None:
    """No module but a backend's own (``infrastructure/sqlite/``, ``infrastructure/postgres/``,
    ``infrastructure/nats/``) asks what its recorder is: not the store, not the code every backend
    shares. The one check left in common code is the event log's, that the recorder is
    convstore's at all."""
    own = {("infrastructure", "sqlite"), ("infrastructure", "postgres"), ("infrastructure", "nats")}
    files = [
        f for f in sorted(PACKAGE.rglob("*.py")) if f.relative_to(PACKAGE).parts[:2] not in own
    ]
    probes = [probe for f in files for probe in _backend_probes(f)]
    assert probes == ["infrastructure/common/application.py: isinstance(recorder, StoreRecorder)"]


def test_the_probe_finder_finds_probes(tmp_path: Path) -> None:
    """The check above is not vacuous: it reports a getattr on a recorder."""
    file = tmp_path / "probe_example.py"
    file.write_text('close = getattr(log.recorder, "close_writer", None)\n')
    assert _backend_probes(file, tmp_path) == [
        "probe_example.py: getattr(log.recorder, 'close_writer', None)"
    ]
