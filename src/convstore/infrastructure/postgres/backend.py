"""The PostgreSQL backend: a store is one schema of a database, named by a ``postgresql://``
URL, shared by many hosts (see :class:`convstore.ports.backend.Backend`).

Importing this module imports no driver: psycopg is needed only once a store is opened.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from uuid import UUID

from convstore.domain.errors import ConvstoreError, InvalidInput, StoreError
from convstore.infrastructure.common.locations import data_directory, redact
from convstore.infrastructure.common.mapper import COMPRESS_FROM
from convstore.infrastructure.postgres.factory import PostgresSettings
from convstore.ports.backend import Opening, StoreUpgrade
from convstore.ports.extras import missing_extra
from convstore.ports.records import failure_detail

T = TypeVar("T")

WRITER_THREADS = 4
"""Writer threads per PostgreSQL store unless told otherwise: the server takes writes to
different conversations at once."""


class PostgresBackend:
    """Stores in PostgreSQL schemas: several writer threads, nothing to wait for after an
    erasure (the server owns its write-ahead log), the audit file in the data directory."""

    name = "PostgreSQL"
    writer_threads = WRITER_THREADS
    compress_from = COMPRESS_FROM

    def show(self, location: str) -> str:
        return redact(location)

    @contextmanager
    def opening(self, location: str, *, create: bool, make_directory: bool) -> Iterator[Opening]:
        """Hold the schema's setup lock while the store opens; a schema that holds no store is
        made one only with ``create`` (``make_directory`` has nothing to say here)."""
        settings = PostgresSettings.from_url(location)
        shown = redact(location)
        if importlib.util.find_spec("psycopg") is None:
            msg = missing_extra("a PostgreSQL store", "postgres", "'psycopg[binary]' psycopg-pool")
            raise InvalidInput(msg)
        try:
            with settings.setup_lock(create=create, shown=shown) as marker:
                yield Opening(
                    settings.env(), shown, settings.password, marker.format, marker.identity
                )
        except ConvstoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - any driver failure is reported as one line
            msg = f"cannot reach the store at {shown}: {failure_detail(exc, settings.password)}"
            raise StoreError(msg) from None

    def create_filled(
        self, location: str, fill: Callable[[Opening], T], *, make_directory: bool
    ) -> tuple[T, str]:
        msg = f"only a SQLite file is made whole from the start, not {redact(location)}"
        raise InvalidInput(msg)

    def after_erase(self, empty_log: Callable[[], bool], conversation: UUID | None) -> None:
        """Nothing: the rows are deleted in the erasing transaction, and the server owns its
        write-ahead log (:meth:`convstore.Store.vacuum` rewrites the tables' pages)."""

    def upgrade_files(self, location: str, *, backup: bool) -> StoreUpgrade | None:
        """Not yet: a dump loaded into a new store does the same by hand."""
        return None

    def store_file(self, location: str) -> Path | None:
        return None

    def storage_problems(self, location: str) -> list[str]:
        """None of its own: the server checks its pages as it reads them (and checksums them
        where the cluster was made with them), and every read of the log reads every row."""
        return []

    def default_audit_file(self, location: str) -> Path:
        """In the data directory, named after the server, database and schema, so every host
        keeps its own, and ending in a digest of the whole location (``location`` is the URL
        without the password): the readable part alone would fold ``schema=ten_a`` and
        ``schema=ten__a`` (and any other runs of punctuation) into one name."""
        slug = re.sub(r"[^A-Za-z0-9]+", "-", location.split("://", 1)[1]).strip("-")[:120]
        digest = hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return data_directory() / f"audit-{slug}-{digest}.db"
