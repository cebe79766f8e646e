"""The eventsourcing application that owns convstore's event log."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.application import Application

from convstore.infrastructure.mapper import PydanticMapper

APPLICATION_NAME = "convstore"
"""Pinned: PostgreSQL table names and environment prefixes follow it."""


class EventLog(Application[UUID]):
    """All conversations' events, one stream per conversation, one notification log."""

    name = APPLICATION_NAME

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
