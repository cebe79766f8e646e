"""The eventsourcing application that owns convstore's event log."""

from __future__ import annotations

import os
from dataclasses import dataclass
from uuid import UUID, uuid4

from eventsourcing.application import Application
from eventsourcing.persistence import ApplicationRecorder
from eventsourcing.utils import Environment, EnvType

from convstore.infrastructure.common.mapper import (
    COMPACT_LZ4,
    COMPACT_ZLIB,
    COMPRESS_FROM,
    PydanticMapper,
)
from convstore.infrastructure.common.tables import BLOCK_EVENTS_FORMAT
from convstore.infrastructure.common.tables import COMPACT_FORMAT as COMPACT_FORMAT  # noqa: PLC0414
from convstore.infrastructure.common.tables import FULL_JSON_FORMAT as FULL_JSON_FORMAT  # noqa: PLC0414
from convstore.infrastructure.common.tables import MARKER_TABLE as MARKER_TABLE  # noqa: PLC0414
from convstore.infrastructure.common.tables import STORE_FORMAT as STORE_FORMAT  # noqa: PLC0414
from convstore.infrastructure.common.tables import STORE_FORMATS as STORE_FORMATS  # noqa: PLC0414
from convstore.ports.recorder import StoreRecorder

APPLICATION_NAME = "convstore"
"""Pinned: PostgreSQL table names (``convstore_events``) and setting prefixes follow it."""

ENV_PREFIX = APPLICATION_NAME.upper() + "_"

IDENTITY_KEY = "id"
"""The marker row holding the store's identity: random, written once (a store made before
identities gets one the first time it is opened for writing)."""


def new_identity() -> str:
    """A fresh store identity: 32 random hex digits."""
    return uuid4().hex


@dataclass(frozen=True, slots=True)
class StoreMarker:
    """What a store's marker table says about it."""

    format: int
    identity: str
    """The store's identity; ``""`` only for a store made before identities that could not be
    given one (a SQLite file opened read-only)."""


READS = (
    "this version reads formats "
    + ", ".join(map(str, STORE_FORMATS[:-1]))
    + f" and {STORE_FORMATS[-1]}"
)
"""How a refusal of any other format ends."""


def known_format(value: object) -> int | None:
    """The format a store's marker value names, when this version reads it."""
    for store_format in STORE_FORMATS:
        if value == str(store_format):
            return store_format
    return None


class EventLog(Application[UUID]):
    """All conversations' events, one stream per conversation, one notification log."""

    name = APPLICATION_NAME

    def __init__(
        self,
        env: EnvType | None = None,
        *,
        store_format: int = STORE_FORMAT,
        compress_from: int = COMPRESS_FROM,
    ) -> None:
        """``store_format`` is the format of the store the settings name, as its marker says:
        it decides the form events are written in. ``compress_from``: event bodies of this
        many bytes or more are compressed (the backend's
        :attr:`~convstore.ports.backend.Backend.compress_from`)."""
        if store_format not in STORE_FORMATS:
            msg = f"store format {store_format!r}: {READS}"
            raise ValueError(msg)
        self.store_format = store_format
        self.compress_from = compress_from
        super().__init__(env)

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        """Settings from the caller, plus only ``CONVSTORE_``-prefixed process variables.

        eventsourcing would otherwise read unprefixed variables (``CIPHER_KEY``,
        ``PERSISTENCE_MODULE`` …) that may belong to another application in the same process.
        The caller's settings win over the environment's.
        """
        settings = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
        settings.update({ENV_PREFIX + key: value for key, value in (env or {}).items()})
        return Environment(name, settings)

    def close(self) -> None:
        """Close every connection, the SQLite writer's included.

        A connection left open on a file keeps SQLite's per-file state in this process alive:
        a store created by building a temporary file and linking it into place would then share
        the unlinked temporary's ``-shm`` with every later connection, and two processes would
        keep two write-ahead indexes of one database.
        """
        self.store_recorder.close_writer()
        super().close()

    def construct_recorder(self) -> ApplicationRecorder:
        """The backend's recorder, which must be one convstore can run on."""
        recorder = super().construct_recorder()
        if not isinstance(recorder, StoreRecorder):
            msg = f"{type(recorder).__name__} is not a convstore recorder (StoreRecorder)"
            raise TypeError(msg)
        self._store_recorder = recorder
        return recorder

    @property
    def store_recorder(self) -> StoreRecorder:
        """The recorder, typed as what convstore asks of it beyond eventsourcing's methods."""
        return self._store_recorder

    def construct_mapper(self) -> PydanticMapper:
        return PydanticMapper(
            transcoder=self.factory.transcoder(),
            compressor=self.factory.compressor(),
            cipher=self.factory.cipher(),
            compact=self.store_format != FULL_JSON_FORMAT,
            compress_from=self.compress_from,
            block_events=self.store_format >= BLOCK_EVENTS_FORMAT,
            packed_tag=COMPACT_LZ4 if self.store_format >= BLOCK_EVENTS_FORMAT else COMPACT_ZLIB,
        )

    @property
    def block_events(self) -> bool:
        """Whether this store records a message as its block events (format 3 on)."""
        return self.store_format >= BLOCK_EVENTS_FORMAT

    @property
    def pydantic_mapper(self) -> PydanticMapper:
        """The mapper, typed as the one this application constructs."""
        assert isinstance(self.mapper, PydanticMapper)
        return self.mapper
