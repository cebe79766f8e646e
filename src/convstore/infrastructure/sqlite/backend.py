"""The SQLite backend: a store is one file, named by its path (see
:class:`convstore.ports.backend.Backend`)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TypeVar
from uuid import UUID

from convstore.domain.errors import ConvstoreError, InvalidInput, NoStore, StoreError
from convstore.infrastructure.common.application import EventLog
from convstore.infrastructure.sqlite.files import (
    PAGE_SIZE,
    claim_store_file,
    create_store_file,
    mark_new_store,
    remove_leftovers,
)
from convstore.infrastructure.sqlite.recorder import (
    file_uri,
    lock_timeout_seconds,
    refuse_sqlite_uri,
    sqlite_env,
)
from convstore.ports.backend import Opening, StoreUpgrade
from convstore.ports.records import failure_detail

T = TypeVar("T")

WAL_WAIT_SECONDS = 5.0
"""How long an erasure keeps trying to empty SQLite's write-ahead log before it fails."""

WAL_RETRY_PAUSE_SECONDS = 0.1
"""The pause between those tries, in which other writers take their turns."""


SQLITE_COMPRESS_FROM = 512
"""Event bodies from 512 bytes are compressed in a SQLite store (2 KB elsewhere,
:data:`~convstore.infrastructure.common.mapper.COMPRESS_FROM`): the host's own disk holds the store
(and, before format 3, its replay model), and a paragraph of reasoning or an answer shrinks to
~55%. On issue 23's agent workload that took 1.3 MB off 10,000 messages (~0.07x of the raw
rows) for ~4% more CPU per append with the standard library's zlib (~26 µs a 600-byte body);
a store of format 3 compresses with LZ4 (~3 µs an agent message's body)."""


class SQLiteBackend:
    """Stores in SQLite files: one writer thread (the file has one write lock), an erasure
    waits for the write-ahead log to empty, the audit file sits beside the store's."""

    name = "SQLite"
    writer_threads = 1
    compress_from = SQLITE_COMPRESS_FROM

    def show(self, location: str) -> str:
        return location

    @contextmanager
    def opening(self, location: str, *, create: bool, make_directory: bool) -> Iterator[Opening]:
        refuse_sqlite_uri(location)
        given = Path(location)
        # The file itself: a symbolic link (even a dangling one) is followed to where it
        # points, and that one file is what is checked, created, opened and shown.
        path = Path(os.path.realpath(given))
        lock_timeout = lock_timeout_seconds()
        if not path.exists():
            if not create:
                msg = f"no store at {given} (nothing has been recorded there yet)"
                raise NoStore(msg)
        elif not path.is_file():
            msg = f"no store at {given}: it is a directory or a device, not a store file"
            raise NoStore(msg)
        elif not create and path.stat().st_size == 0:
            # Reading never writes: an empty file is made a store only by a command that records.
            msg = f"no store at {given} (the file is empty: nothing has been recorded there yet)"
            raise NoStore(msg)
        if not path.exists():
            _check_directory(given, path, make_directory=make_directory)
            remove_leftovers(path)
            _creating(given, lambda: create_store_file(path, _build))
        remove_leftovers(path)
        try:  # made just now (by this process or another), or an existing store
            marker = claim_store_file(path, lock_timeout)
        except (OSError, sqlite3.Error) as exc:
            msg = f"cannot open the store at {given}: {exc}"
            raise StoreError(" ".join(msg.split())) from None
        yield Opening(sqlite_env(path), str(path), "", marker.format, marker.identity)

    def create_filled(
        self, location: str, fill: Callable[[Opening], T], *, make_directory: bool
    ) -> tuple[T, str]:
        refuse_sqlite_uri(location)
        given = Path(location)
        path = Path(os.path.realpath(given))
        _check_directory(given, path, make_directory=make_directory)
        if path.exists():
            msg = f"a store already exists at {given}"
            raise InvalidInput(msg)
        filled: list[T] = []

        def build(temporary: Path) -> None:
            build_store(temporary)
            marker = claim_store_file(temporary, lock_timeout_seconds())
            opening = Opening(
                sqlite_env(temporary), str(temporary), "", marker.format, marker.identity
            )
            filled.append(fill(opening))

        remove_leftovers(path)
        if not _creating(given, lambda: create_store_file(path, build)):
            msg = (
                f"another process made a store at {given} meanwhile: it is kept, nothing was added"
            )
            raise InvalidInput(msg)
        return filled[0], str(path)

    def after_erase(self, empty_log: Callable[[], bool], conversation: UUID | None) -> None:
        """Empty the write-ahead log, trying for :data:`WAL_WAIT_SECONDS` (each try holds
        other writers up for at most a moment): until then the erased rows' old bytes are
        still in it."""
        deadline = time.monotonic() + WAL_WAIT_SECONDS
        while not empty_log():
            if time.monotonic() >= deadline:
                done, again = (
                    ("the store was vacuumed", "vacuum")
                    if conversation is None
                    else (f"conversation {conversation} was erased", "erase")
                )
                msg = (
                    f"{done}, but a reader kept the "
                    f"write-ahead log in use for {WAL_WAIT_SECONDS:g} s, so its old bytes may "
                    f"still be in the store's files: run {again} again once that reader is done"
                )
                raise StoreError(msg)
            time.sleep(WAL_RETRY_PAUSE_SECONDS)

    def store_file(self, location: str) -> Path | None:
        return Path(location)

    def upgrade_files(self, location: str, *, backup: bool) -> StoreUpgrade | None:
        from convstore.infrastructure.sqlite.upgrade import SQLiteUpgrade  # noqa: PLC0415 - rare

        return SQLiteUpgrade(Path(location), backup=backup, build_store=build_store)

    def storage_problems(self, location: str) -> list[str]:
        """SQLite's ``PRAGMA quick_check`` over the whole file, read-only: every page of every
        table and index, so damage where no read of the log looks is found too."""
        try:
            with closing(
                sqlite3.connect(f"{Path(location).resolve().as_uri()}?mode=ro", uri=True)
            ) as connection:
                found = [str(row[0]) for row in connection.execute("PRAGMA quick_check(20)")]
        except sqlite3.DatabaseError as exc:
            return [f"SQLite's quick_check could not finish: {exc}"]
        if found == ["ok"]:
            return []
        return [f"SQLite's quick_check: {line}" for line in found]

    def default_audit_file(self, location: str) -> Path:
        """Beside the store: ``convstore.db`` → ``convstore.audit.db``, a name not ending in
        ``.db`` → ``NAME-audit.db`` (``x`` and ``x.db`` keep apart)."""
        store_file = Path(location)
        name = store_file.name
        if name.endswith(".db") and len(name) > len(".db"):
            return store_file.with_name(name[: -len(".db")] + ".audit.db")
        return store_file.with_name(name + "-audit.db")


def _check_directory(given: Path, path: Path, *, make_directory: bool) -> None:
    if make_directory:
        path.parent.mkdir(parents=True, exist_ok=True)
    if not path.parent.is_dir():
        msg = f"cannot create a store at {given}: directory {path.parent} does not exist"
        raise StoreError(msg)


def _creating(given: Path, create: Callable[[], bool]) -> bool:
    """Run ``create`` (a :func:`create_store_file`), its failures said in one line."""
    try:
        return create()
    except ConvstoreError:
        raise
    except (OSError, sqlite3.Error) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        msg = f"cannot create a store at {given}: {detail}"
        raise StoreError(" ".join(msg.split())) from None


def build_store(temporary: Path) -> None:
    """Make a new store's tables in the file ``temporary`` (not yet in place) and mark it a
    new store of this version's format, as a first open makes one."""
    _build(temporary)
    mark_new_store(temporary)


def _build(temporary: Path) -> None:
    """Make convstore's tables in a new file, exactly as opening a store makes them, in
    pages of :data:`PAGE_SIZE`."""
    try:
        with closing(sqlite3.connect(file_uri(temporary), uri=True, isolation_level=None)) as conn:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode = WAL")  # writes the header: the size is set
        log = EventLog(env=sqlite_env(temporary))
    except Exception as exc:  # noqa: BLE001 - any backend failure is reported as one line
        msg = f"cannot create a store: {failure_detail(exc)}"
        raise StoreError(msg) from None
    log.close()
