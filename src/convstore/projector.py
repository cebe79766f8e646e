"""Keeping read models in step with the log: catch up, follow, rebuild and swap.

The audit read model lives in its own SQLite file. By default it sits beside a SQLite store
(``convstore.db`` → ``convstore.audit.db``); a PostgreSQL store's goes in the data directory,
named after the server, database and schema, so every host keeps a local one.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

from convstore.infrastructure.audit_db import AuditDatabase, ProjectionConflict
from convstore.infrastructure.memory import paused_gc
from convstore.infrastructure.postgres import is_postgres_url
from convstore.infrastructure.sqlite import default_path
from convstore.store import Store

BATCH_SIZE = 500
"""Events applied per read-model transaction."""

REBUILD_BATCH_SIZE = 5000
"""Events per transaction when rebuilding into a fresh file nobody reads yet."""

AUDIT_ENV_VAR = "CONVSTORE_AUDIT_DB"

ProgressCallback = Callable[[int], None]


def default_audit_path(store: Store) -> Path:
    """Where a store's audit read model lives unless ``--audit`` / ``$CONVSTORE_AUDIT_DB`` say."""
    if is_postgres_url(store.location):
        slug = re.sub(r"[^A-Za-z0-9]+", "-", store.location.split("://", 1)[1]).strip("-")
        return default_path().parent / f"audit-{slug}.db"
    path = Path(store.location)
    return path.with_name(path.stem + ".audit.db")


def audit_path(store: Store, given: str | os.PathLike[str] | None = None) -> Path:
    """The audit file: as given, else ``$CONVSTORE_AUDIT_DB``, else the default."""
    chosen = given or os.environ.get(AUDIT_ENV_VAR)
    path = Path(chosen) if chosen else default_audit_path(store)
    if not chosen:
        path.parent.mkdir(parents=True, exist_ok=True)
    return path


def open_audit(store: Store, path: Path) -> AuditDatabase:
    """The audit read model at ``path`` for ``store``, created empty if missing."""
    return AuditDatabase(path, source=store.location)


def catch_up(
    store: Store,
    audit: AuditDatabase,
    *,
    batch_size: int = BATCH_SIZE,
    progress: ProgressCallback | None = None,
) -> int:
    """Apply every event the read model has not seen yet; returns how many were applied."""
    applied = 0
    position = audit.position()
    while True:
        try:
            with paused_gc():
                batch = store.notifications(position, batch_size)
                if not batch:
                    return applied
                position = audit.apply(batch, after=position)
        except ProjectionConflict:
            position = audit.position()  # another projector got there; carry on from its work
            continue
        applied += len(batch)
        if progress is not None:
            progress(len(batch))


@dataclass(frozen=True, slots=True)
class RebuildReport:
    """What a rebuild did."""

    events: int
    seconds: float

    @property
    def rate(self) -> float:
        """Events per second."""
        return self.events / self.seconds if self.seconds > 0 else float(self.events)


def rebuild(
    store: Store,
    path: Path,
    *,
    batch_size: int = REBUILD_BATCH_SIZE,
    progress: ProgressCallback | None = None,
) -> RebuildReport:
    """Build the read model from the start of the log into a fresh file, then swap it in.

    The swap is one atomic rename, so a reader opens either the old file or the finished new
    one, never a half-built view. A follower notices the swap and reopens. The fresh file is
    written without a journal or per-batch fsync (a crash leaves only a stray temporary file)
    and is flushed to disk once, before the rename.
    """
    started = time.perf_counter()
    fresh = path.with_name(f"{path.name}.rebuild-{os.getpid()}-{uuid4().hex[:8]}")
    fresh.unlink(missing_ok=True)
    audit = AuditDatabase(fresh, source=store.location, bulk=True)
    try:
        events = catch_up(store, audit, batch_size=batch_size, progress=progress)
        audit.finish_bulk()
    except BaseException:
        audit.close()
        fresh.unlink(missing_ok=True)
        raise
    audit.close()
    _fsync(fresh)
    fresh.replace(path)
    _fsync(path.parent)
    return RebuildReport(events=events, seconds=time.perf_counter() - started)


def _fsync(path: Path) -> None:
    """Flush a file (or a directory's entries) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def follow(
    store: Store,
    path: Path,
    *,
    interval: float = 1.0,
    on_catch_up: ProgressCallback | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> int:
    """Keep the read model at ``path`` caught up until ``should_stop`` (or Ctrl-C).

    Returns the number of events applied. When a rebuild swaps a new file in, the follower
    reopens it and carries on from the new file's position.
    """
    applied = 0
    audit = open_audit(store, path)
    inode = path.stat().st_ino
    try:
        while not should_stop():
            current = path.stat().st_ino if path.exists() else None
            if current != inode:  # swapped by a rebuild, or deleted: (re)open
                audit.close()
                audit = open_audit(store, path)
                inode = path.stat().st_ino
            count = catch_up(store, audit)
            applied += count
            if on_catch_up is not None and count:
                on_catch_up(count)
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        audit.close()
    return applied
