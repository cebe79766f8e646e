"""The NATS JetStream backend: a store is one stream of a JetStream cluster, named by a
``nats://`` URL (see :mod:`convstore.infrastructure.nats.location`), shared by many hosts, each
keeping its read models in a local SQLite replica fed from the stream.

- **The log** is the stream ``NAME`` (file storage, ``replicas`` copies, 3 by default: an
  acknowledged publish is on a quorum), subjects ``NAME.c.<conversation id hex>``, one per
  conversation. Its metadata holds the store's format and identity.
- **Appends** (:mod:`convstore.infrastructure.nats.recorder`): one atomic batch per append,
  conditional per conversation on its newest event's stream sequence
  (``Nats-Expected-Last-Subject-Sequence``), each message with a ``Nats-Msg-Id`` digest so a
  retry is stored once. The stream sequence is the notification id. With ``partitions=P``
  the store is P such streams (``NAME-p0`` …), a conversation in the one its id picks, and
  the replica numbers the events of all of them itself.
- **Read models**: the replica holds the events (each at its stream sequence), heads,
  listing and tombstones, each message applied once in one transaction that
  moves the replica's position; every read brings it up to the stream's newest sequence first.
- **Erase** publishes a tombstone on the conversation's subject, deletes its messages on
  every server (their bytes overwritten) and purges the subject below the tombstone; the
  replica drops the conversation as a SQLite erasure does.

Importing this module imports no client: nats-py is needed only once a store is opened.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from uuid import UUID

from convstore.domain.errors import ConvstoreError, InvalidInput, NoStore, StoreError
from convstore.infrastructure.common.application import STORE_FORMAT, known_format, new_identity
from convstore.infrastructure.common.locations import data_directory, redact
from convstore.infrastructure.common.mapper import COMPRESS_FROM
from convstore.infrastructure.nats.location import NatsLocation, stream_names
from convstore.infrastructure.nats.replica import (
    refuse_other_owner,
    replica_owner,
    skipped_messages,
)
from convstore.infrastructure.sqlite.backend import SQLiteBackend
from convstore.infrastructure.sqlite.recorder import create_private_file
from convstore.ports.backend import Opening, StoreUpgrade
from convstore.ports.extras import missing_extra
from convstore.ports.records import failure_detail

if TYPE_CHECKING:
    from convstore.infrastructure.nats.link import JetStreamLink

T = TypeVar("T")

WRITER_THREADS = 4
"""Writer threads per store unless told: the stream takes writes to many conversations at
once (each waits for its quorum acknowledgement, not for the others)."""

FORMAT_KEY = "convstore_format"
IDENTITY_KEY = "convstore_identity"
PARTITIONS_KEY = "convstore_partitions"
"""The stream's metadata keys holding the store's format, identity and (on each partition's
stream of a partitioned store) its number of partitions."""


class NatsBackend:
    """Stores on JetStream streams, read through a local SQLite replica."""

    name = "NATS JetStream"
    writer_threads = WRITER_THREADS
    compress_from = COMPRESS_FROM

    def show(self, location: str) -> str:
        return redact(location)

    @contextmanager
    def opening(self, location: str, *, create: bool, make_directory: bool) -> Iterator[Opening]:
        """Find (or create, when ``create``) the stream, read its format and identity, and
        make the replica's file if missing (its directory too when ``make_directory`` or it
        is the data directory). An existing replica file that is not this store's (another
        store's, another application's) is refused before anything is written to it."""
        from convstore.infrastructure.nats.factory import nats_env  # noqa: PLC0415 - needs the client

        where = NatsLocation.parse(location)
        shown = redact(location)
        if importlib.util.find_spec("nats") is None:
            msg = missing_extra("a NATS JetStream store", "nats", "nats-py")
            raise InvalidInput(msg)
        try:
            # Whose the replica is, read before the stream is made or the file written.
            owner = replica_owner(where.replica, where.streams)
            store_format, identity = _stream(where, create=create, shown=shown)
            refuse_other_owner(where.replica, owner, where.streams, identity)
            _replica_file(where.replica, make_directory=make_directory)
        except ConvstoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - any client failure is reported as one line
            msg = f"cannot reach the store at {shown}: {failure_detail(exc, where.password)}"
            raise StoreError(msg) from None
        yield Opening(nats_env(where, identity), shown, where.password, store_format, identity)

    def create_filled(
        self, location: str, fill: Callable[[Opening], T], *, make_directory: bool
    ) -> tuple[T, str]:
        """Create the stream, fill it, and delete it again (the replica too) if ``fill``
        raises; an existing stream is refused. Unlike a SQLite file, which is linked into
        place once whole, other hosts may see the stream while it fills."""
        where = NatsLocation.parse(location)
        shown = redact(location)
        try:
            with self.opening(location, create=False, make_directory=make_directory):
                pass
        except NoStore:
            pass
        else:
            msg = f"a store already exists at {shown}"
            raise InvalidInput(msg)
        with self.opening(location, create=True, make_directory=make_directory) as opening:
            try:
                return fill(opening), shown
            except BaseException:
                for stream in where.streams:
                    link = _link(where, stream)
                    try:
                        link.delete_stream()
                    finally:
                        link.close()
                for leftover in (
                    where.replica,
                    *where.replica.parent.glob(f"{where.replica.name}-*"),
                ):
                    leftover.unlink(missing_ok=True)
                raise

    def after_erase(self, empty_log: Callable[[], bool], conversation: UUID | None) -> None:
        """Empty the replica's write-ahead log, as for a SQLite store (the stream was purged
        before the erasure returned)."""
        SQLiteBackend().after_erase(empty_log, conversation)

    def upgrade_files(self, location: str, *, backup: bool) -> StoreUpgrade | None:
        """Not yet: a dump loaded into a new store does the same by hand."""
        return None

    def store_file(self, location: str) -> Path | None:
        """The replica: the audit read model must not be it."""
        return NatsLocation.parse(location).replica

    def storage_problems(self, location: str) -> list[str]:
        """SQLite's check of the replica (the stream's servers check their own files), and
        each message of the streams the replica could not apply."""
        replica = NatsLocation.parse(location).replica
        return [*SQLiteBackend().storage_problems(str(replica)), *skipped_messages(replica)]

    def default_audit_file(self, location: str) -> Path:
        """In the data directory, named after the servers and stream, ending in a digest of
        the whole location (``location`` is the URL without the password)."""
        slug = re.sub(r"[^A-Za-z0-9]+", "-", location.split("://", 1)[1]).strip("-")[:120]
        digest = hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return data_directory() / f"audit-{slug}-{digest}.db"


def _link(where: NatsLocation, stream: str) -> JetStreamLink:
    """A link to one of the store's streams (the client is imported only now)."""
    from convstore.infrastructure.nats.link import JetStreamLink  # noqa: PLC0415

    return JetStreamLink(
        where.servers, stream, user=where.user, password=where.password, timeout=where.timeout
    )


def _stream(where: NatsLocation, *, create: bool, shown: str) -> tuple[int, str]:
    """The store's format and identity, from its stream (or each partition's), the streams
    created first if missing; a store made with another number of partitions is refused."""
    found: dict[str, str] | None = None
    for k, stream in enumerate(where.streams):
        link = _link(where, stream)
        made = False
        try:
            metadata = link.stream_metadata()
            if metadata is None and k == 0:
                _refuse_other_partitions(where, shown)
                if not create:
                    msg = f"no store at {shown} (the cluster has no stream {stream})"
                    raise NoStore(msg)
            if metadata is None:
                # A later partition of a store whose creation stopped half-way is made with
                # the first partition's format and identity.
                wanted = {FORMAT_KEY: str(STORE_FORMAT), IDENTITY_KEY: new_identity()}
                if found is not None:
                    wanted = {key: found.get(key, "") for key in (FORMAT_KEY, IDENTITY_KEY)}
                if where.partitions > 1:
                    wanted[PARTITIONS_KEY] = str(where.partitions)
                try:
                    link.create_stream([f"{stream}.c.*"], where.replicas, wanted)
                    made = True
                except Exception:  # another host may have made it meanwhile
                    if link.stream_metadata() is None:
                        raise
                metadata = link.stream_metadata() or {}
        finally:
            link.close()
        if known_format(metadata.get(FORMAT_KEY)) is None or not metadata.get(IDENTITY_KEY):
            msg = f"stream {stream} at {shown} is not a convstore store of a format this reads"
            if made:  # made just now, and its metadata did not stay: a server before 2.10
                msg = (
                    f"the server at {shown} kept no metadata on the stream {stream} it made: "
                    "convstore needs NATS server 2.12 or later"
                )
            raise InvalidInput(msg)
        made_with = int(metadata.get(PARTITIONS_KEY, "1") or "1")
        if made_with != where.partitions:
            msg = _other_partitions(shown, made_with, where.partitions)
            raise InvalidInput(msg)
        if found is None:
            found = metadata
        elif metadata.get(IDENTITY_KEY) != found.get(IDENTITY_KEY):
            msg = f"stream {stream} at {shown} belongs to another store than {where.streams[0]}"
            raise InvalidInput(msg)
    assert found is not None
    store_format = known_format(found.get(FORMAT_KEY))
    assert store_format is not None  # checked on each stream above
    return store_format, found[IDENTITY_KEY]


def _refuse_other_partitions(where: NatsLocation, shown: str) -> None:
    """Before making a store: refuse when the name already holds one with another number of
    partitions (its unpartitioned stream, or its first partition's)."""
    other = where.stream if where.partitions > 1 else stream_names(where.stream, 2)[0]
    link = _link(where, other)
    try:
        metadata = link.stream_metadata()
    finally:
        link.close()
    if metadata is not None and metadata.get(IDENTITY_KEY):
        made_with = int(metadata.get(PARTITIONS_KEY, "1") or "1")
        raise InvalidInput(_other_partitions(shown, made_with, where.partitions))


def _other_partitions(shown: str, made_with: int, asked: int) -> str:
    return (
        f"the store at {shown} was made with {made_with} partition"
        f"{'s' if made_with != 1 else ''}; the URL asks for {asked} (partitions= cannot change)"
    )


def _replica_file(path: Path, *, make_directory: bool) -> None:
    """Make the replica's file (owner-only, WAL) if missing."""
    if path.parent == data_directory() or make_directory:
        path.parent.mkdir(parents=True, exist_ok=True)
    if not path.parent.is_dir():
        msg = f"cannot make the replica {path}: directory {path.parent} does not exist"
        raise StoreError(msg)
    if not path.exists():
        create_private_file(path)
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        finally:
            conn.close()
