"""Keeping read models in step with the log: catch up, follow, rebuild and swap.

The audit read model lives in its own SQLite file. By default it sits beside a SQLite store
(``convstore.db`` → ``convstore.audit.db``); a PostgreSQL store's goes in the data directory,
named after the server, database and schema, so every host keeps a local one.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID, uuid4

from convstore.audit.db import BUSY_TIMEOUT_SECONDS, DERIVED_TABLES, ERASURES, AuditDatabase
from convstore.audit.file import (
    audit_file,
    check_audit_path,
    companions,
    default_audit_file,
    store_file_of,
    swap_in,
)
from convstore.domain.errors import ProjectionConflict, ReadModelBusy, ReadModelMoved
from convstore.infrastructure.common.gc_pause import paused_gc
from convstore.infrastructure.common.readonly import read_only_query
from convstore.store import Store

BATCH_SIZE = 500
"""Events applied per read-model transaction."""

REBUILD_BATCH_SIZE = 5000
"""Events per transaction when rebuilding into a fresh file nobody reads yet."""


ProgressCallback = Callable[[int], None]


def default_audit_path(store: Store) -> Path:
    """Where a store's audit read model lives unless ``--audit`` / ``$CONVSTORE_AUDIT_DB`` say."""
    return default_audit_file(store.location)


def audit_path(store: Store, given: str | os.PathLike[str] | None = None) -> Path:
    """The audit file: as given, else ``$CONVSTORE_AUDIT_DB``, else the default.

    Symlinks are resolved, and the path is checked by :func:`checked_path`: it must not be
    the store, nor an existing file that is not this store's audit read model.
    """
    return audit_file(store.location, given, store_id=store.identity, timeout=BUSY_TIMEOUT_SECONDS)


def checked_path(store: Store, path: Path) -> Path:
    """``path`` resolved, once it may be (re)written as ``store``'s audit read model.

    The one gate for ``project``, ``rebuild``, ``audit …``, ``audit serve`` and ``verify``:
    raises :class:`~convstore.domain.errors.InvalidInput`, touching nothing, for the store itself
    however spelled, or an existing file that is not this store's audit read model.
    """
    store_file = store_file_of(store.location)
    return check_audit_path(
        path,
        store.location,
        store_file=store_file,
        store_id=store.identity,
        timeout=BUSY_TIMEOUT_SECONDS,
    )


def open_audit(store: Store, path: Path) -> AuditDatabase:
    """The audit read model at ``path`` for ``store``, created empty if missing."""
    return AuditDatabase(checked_path(store, path), source=store.location, store_id=store.identity)


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
                # Tombstones are read from where the file stood before the batch was: another
                # forgetter (an `erase`) may move the file's mark past an erasure whose events
                # this batch read just before they were deleted.
                since = audit.erasures_seen()
                batch = store.notifications(position, batch_size)
                if not batch:
                    _forget_erased(store, audit, since)
                    return applied
                position = audit.apply(batch, after=position)
                _forget_erased(store, audit, since)
        except ProjectionConflict:
            position = audit.position()  # another projector got there; carry on from its work
            continue
        except ReadModelMoved:
            audit.reopen()  # a rebuild swapped a new file in: carry on in that one
            position = audit.position()
            continue
        applied += len(batch)
        if progress is not None:
            progress(len(batch))


def _forget_erased(store: Store, audit: AuditDatabase, since: int) -> None:
    """Drop from the read model what it derived from conversations erased since it last
    looked, or since ``since`` (where it stood before the batch just applied was read).
    Run after each batch: an event read before an erasure committed is applied, then
    deleted here, because the tombstones are read after the events."""
    seen = audit.erasures_seen()
    erasures = store.erasures(min(since, seen))
    if erasures:
        audit.forget(erasures, after=seen)


def forget_erased(store: Store, path: Path) -> None:
    """Delete from the audit read model at ``path`` (an existing file) every row of the
    conversations erased since it last looked, without applying new events: what `erase`
    does on its host. Raises :class:`~convstore.domain.errors.ReadModelBusy` when the file
    stays locked, :class:`~convstore.domain.errors.InvalidInput` when it is not this store's
    read model (or needs a rebuild)."""
    audit = open_audit(store, path)
    try:
        while True:
            try:
                _forget_erased(store, audit, audit.erasures_seen())
            except ProjectionConflict:
                continue  # another projector moved the mark: look again from there
            except ReadModelMoved:
                audit.reopen()  # a rebuild swapped a new file in: forget there too
                continue
            return
    finally:
        audit.close()


def erased_still_held(store: Store, path: Path) -> list[UUID]:
    """The erased conversations whose rows the audit read model at ``path`` (an existing file)
    still holds, read without changing it: those erased after its last catch-up."""
    _, rows = read_only_query(
        path, "SELECT position FROM _tracking WHERE projection = :name", {"name": ERASURES}
    )
    seen = int(rows[0][0]) if rows else 0
    pending = {str(erasure.id): erasure.id for erasure in store.erasures(seen)}
    if not pending:
        return []
    # Every table is indexed by conversation first: one probe per table and erasure.
    held_by = " OR ".join(
        [
            "EXISTS (SELECT 1 FROM conversations WHERE id = e.value)",
            *(
                f"EXISTS (SELECT 1 FROM {table} WHERE conversation_id = e.value)"  # noqa: S608
                for table in DERIVED_TABLES
            ),
        ]
    )
    _, held = read_only_query(
        path,
        f"SELECT e.value FROM json_each(:ids) AS e WHERE {held_by}",  # noqa: S608 - fixed names
        {"ids": json.dumps(sorted(pending))},
    )
    return [pending[str(value)] for (value,) in held]


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
    one, never a half-built view; it is made under the old file's write lock, so nothing the
    old file left (a hot journal of a killed projector) attaches to the new one
    (:func:`~convstore.audit.file.swap_in`). A follower notices the swap and
    reopens. The fresh file (0600) is written without a journal or per-batch fsync and is
    flushed to disk once, before the rename; it is deleted on any failure, and temporary files
    of rebuilds that were killed are deleted at the start.
    """
    started = time.perf_counter()
    path = checked_path(store, path)
    _remove_leftovers(path)
    fresh = path.with_name(f"{path.name}{REBUILD_INFIX}{os.getpid()}-{uuid4().hex[:8]}")
    try:
        audit = AuditDatabase(fresh, source=store.location, store_id=store.identity, bulk=True)
        try:
            events = catch_up(store, audit, batch_size=batch_size, progress=progress)
            audit.finish_bulk()
        finally:
            audit.close()
        _fsync(fresh)
        swap_in(fresh, path, timeout=BUSY_TIMEOUT_SECONDS)
    except BaseException:
        for leftover in (fresh, *companions(fresh)):
            leftover.unlink(missing_ok=True)
        raise
    _fsync(path.parent)
    return RebuildReport(events=events, seconds=time.perf_counter() - started)


REBUILD_INFIX = ".rebuild-"


def _remove_leftovers(path: Path) -> None:
    """Delete temporary files of earlier rebuilds of ``path`` whose process is gone (killed)."""
    prefix = path.name + REBUILD_INFIX
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*"):
        pid = candidate.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        candidate.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
    on_busy: Callable[[ReadModelBusy], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> int:
    """Keep the read model at ``path`` caught up until ``should_stop`` (or Ctrl-C).

    Returns the number of events applied. When a rebuild swaps a new file in (before or
    during a catch-up), the follower reopens it and carries on from the new file's position.
    When a long query holds the file past the busy timeout, the batch is rolled back,
    ``on_busy`` is told, and the follower tries again at the next poll.
    """
    path = checked_path(store, path)
    applied = 0

    def counted(count: int) -> None:
        nonlocal applied
        applied += count
        if on_catch_up is not None:
            on_catch_up(count)

    audit = open_audit(store, path)
    inode = path.stat().st_ino
    try:
        while not should_stop():
            current = path.stat().st_ino if path.exists() else None
            if current != inode:  # swapped by a rebuild, or deleted: (re)open
                audit.reopen()
                inode = path.stat().st_ino
            try:
                catch_up(store, audit, progress=counted)
            except ReadModelBusy as exc:
                if on_busy is not None:
                    on_busy(exc)
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        audit.close()
    return applied
