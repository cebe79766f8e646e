"""What the replay reader asks of the tables a backend keeps its replay model in.

Each backend's tables (:class:`~convstore.backends.sqlite.replay_tables.SQLiteReplayTables`,
:class:`~convstore.backends.postgres.replay_tables.PostgresReplayTables`) implement
:class:`ReplayTables`; :class:`~convstore.backends.common.replay_tables.ReplayReader` uses
them without asking which it has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from convstore.engine.state import ReplayState


@dataclass(frozen=True, slots=True)
class Stored:
    """A conversation's stored model, as read."""

    version: int
    head: str
    rows: list[tuple[str, str]]


class ReplayTables(Protocol):
    """Where the replay model is kept."""

    key: bytes
    """The chain key (``CONVSTORE_CHAIN_KEY``, or ``b""``): each stored head's digest is a MAC
    under it (see :func:`convstore.engine.state.model_digest`)."""

    def read(self, conversation: UUID) -> Stored | None:
        """The stored model of a conversation, or ``None`` when there is none."""

    def write(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        """Store ``state``, whose messages changed since version ``since`` are marked dirty
        (``None``: replace whatever is stored, which did not match the log); whether it was
        written (``False``: a newer one was there, the conversation was erased, or the store
        was busy)."""

    def clear(self) -> None:
        """Throw the whole model away."""

    def forget_schema(self) -> None:
        """Check again, next time, whether the tables exist (after a failure)."""

    def close(self) -> None:
        """Release connections."""


def rows_to_write(state: ReplayState, stored: int, since: int | None) -> list[int] | None:
    """Which messages to write over a stored model at version ``stored``: the dirty ones when
    it is the version ``since`` they are dirty against (or newer, but not ours yet), all of
    them (``None``) when the stored one is older (it was cleared) or is to be replaced."""
    if since is not None and stored >= since:
        return sorted(state.dirty)
    return None


def superseded(state: ReplayState, stored: int, since: int | None) -> bool:
    """Whether a stored model at version ``stored`` is to be left as it is: it is as new as
    ``state``, or newer (one that did not match the log is replaced at the same version)."""
    return stored > state.version or (since is not None and stored == state.version)
