"""What the store and the composition root ask of a backend, as one object.

A backend is chosen once, from the store's location, by :func:`convstore.infrastructure.backend_for`
(the registry: one line per URL scheme). Everything that differs between backends is behind
:class:`Backend`: opening the event log's settings for a location, how many writer threads
suit it, what an erasure must do after it commits, where the audit read model lives by
default, and how the location is shown. Above ``infrastructure/`` nothing asks which backend it
has.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar
from uuid import UUID

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Opening:
    """A store's location made ready to open: the event log's settings and what its marker
    says about it."""

    env: dict[str, str]
    """The eventsourcing settings (``PERSISTENCE_MODULE``, the recorder's topic, …)."""
    shown: str
    """The location as every message and :attr:`convstore.Store.location` show it."""
    secret: str
    """What no message may hold (a password), or ``""``."""
    store_format: int
    """The store's format, as its marker says."""
    identity: str
    """The store's random identity, as its marker says."""


UPGRADED_FROM = "upgraded_from"
"""The marker-table key saying which store (format, identity) a store was upgraded from; each
conversation's old chain head is under ``upgraded_from:<conversation>`` as
``<version> <chain, hex>``."""


class StoreUpgrade(Protocol):
    """One upgrade's files (``convstore upgrade``): :meth:`hold` first, :meth:`close` always."""

    @property
    def backup_location(self) -> str | None:
        """Where the old store is kept once switched (``None``: it is not kept)."""
        ...

    def hold(self, from_format: int) -> None:
        """Clear what killed upgrades left and keep the old store (of ``from_format``) from
        taking appends."""
        ...

    def tombstones(self) -> list[tuple[object, ...]]:
        """The old store's erasure tombstones, as the new store is to keep them."""
        ...

    def build(self, tombstones: list[tuple[object, ...]], marks: dict[str, str]) -> str:
        """Make the new, empty store (format 3) under a temporary name, with ``tombstones``
        and the marker rows ``marks``; its location."""
        ...

    def finish_new(self, mode: int) -> int:
        """Make the filled new store durable (with ``mode``); its size in bytes."""
        ...

    def switch(self, *, linked: Callable[[], None] | None = None) -> None:
        """Put the new store in the old one's place (keeping the old as a backup unless told
        not to); ``linked`` is told once the backup is in place."""
        ...

    def close(self) -> None:
        """Release what :meth:`hold` took and remove an unfinished new store."""
        ...


class Backend(Protocol):
    """One kind of store: SQLite files, PostgreSQL schemas, …"""

    name: str
    """What people call it (``"SQLite"``, ``"PostgreSQL"``), in messages."""

    writer_threads: int
    """How many writer threads an :class:`~convstore.AsyncStore` gives it unless told."""

    compress_from: int
    """Event bodies of this many bytes or more are stored zlib-compressed (when that saves an
    eighth): a trade of append CPU for disk, made per backend
    (:data:`convstore.infrastructure.common.mapper.COMPRESS_FROM`)."""

    def show(self, location: str) -> str:
        """The location with every secret masked, safe to print and log."""
        ...

    def opening(
        self, location: str, *, create: bool, make_directory: bool
    ) -> AbstractContextManager[Opening]:
        """Make the store at ``location`` ready (created if missing and ``create``; with
        ``make_directory`` its directory too) and hold whatever must be held while the event
        log is opened on it; raises :class:`~convstore.StoreError` (one line, no secret)
        when it cannot, :class:`~convstore.NoStore` when it is missing and not ``create``."""
        ...

    def create_filled(
        self, location: str, fill: Callable[[Opening], T], *, make_directory: bool
    ) -> tuple[T, str]:
        """Make a new store at ``location`` holding what ``fill`` writes into the store it is
        given, all at once (none is left if ``fill`` raises); ``fill``'s result and the
        store's location as shown. A backend that cannot refuses with
        :class:`~convstore.InvalidInput`."""
        ...

    def after_erase(self, empty_log: Callable[[], bool], conversation: UUID | None) -> None:
        """What must follow an erasure of ``conversation`` (or a vacuum: ``None``) once it
        has committed, so no deleted byte stays behind; ``empty_log`` is one try at
        :meth:`StoreRecorder.truncate_wal`. Raises :class:`~convstore.StoreError` when that
        could not be done."""
        ...

    def store_file(self, location: str) -> Path | None:
        """The one file that holds the store at ``location`` (its shown form), if any: the
        audit read model must never be it."""
        ...

    def default_audit_file(self, location: str) -> Path:
        """Where the audit read model of the store at ``location`` (its shown form) lives
        unless told; a one-to-one function of the location."""
        ...

    def upgrade_files(self, location: str, *, backup: bool) -> StoreUpgrade | None:
        """What rewrites the store at ``location`` (its shown form) as a new store beside it
        and switches to it, for ``convstore upgrade``; ``None`` when this backend cannot yet
        (the caller says what to do instead)."""
        ...

    def storage_problems(self, location: str) -> list[str]:
        """What the storage engine itself finds wrong with the store at ``location`` (its
        shown form), one line each: damage in parts no read of the log touches (an index, the
        listing). Empty when it finds nothing, or has no such check of its own."""
        ...
