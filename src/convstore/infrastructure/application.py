"""The eventsourcing application that owns convstore's event log."""

from __future__ import annotations

import os
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.utils import Environment, EnvType

from convstore.infrastructure.mapper import PydanticMapper

APPLICATION_NAME = "convstore"
"""Pinned: PostgreSQL table names (``convstore_events``) and setting prefixes follow it."""

ENV_PREFIX = APPLICATION_NAME.upper() + "_"


class EventLog(Application[UUID]):
    """All conversations' events, one stream per conversation, one notification log."""

    name = APPLICATION_NAME

    def construct_env(self, name: str, env: EnvType | None = None) -> Environment:
        """Settings from the caller, plus only ``CONVSTORE_``-prefixed process variables.

        eventsourcing would otherwise read unprefixed variables (``CIPHER_KEY``,
        ``PERSISTENCE_MODULE`` …) that may belong to another application in the same process.
        The caller's settings win over the environment's.
        """
        settings = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
        settings.update({ENV_PREFIX + key: value for key, value in (env or {}).items()})
        return Environment(name, settings)

    def construct_mapper(self) -> PydanticMapper:
        return PydanticMapper(
            transcoder=self.factory.transcoder(),
            compressor=self.factory.compressor(),
            cipher=self.factory.cipher(),
        )

    @property
    def pydantic_mapper(self) -> PydanticMapper:
        """The mapper, typed as the one this application constructs."""
        assert isinstance(self.mapper, PydanticMapper)
        return self.mapper
