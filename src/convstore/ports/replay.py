"""What the replay reader asks of the tables a backend keeps its replay model in.

Each backend's tables (:class:`~convstore.backends.sqlite.replay_tables.SQLiteReplayTables`,
:class:`~convstore.backends.postgres.replay_tables.PostgresReplayTables`) implement
:class:`ReplayTables`; :class:`~convstore.backends.common.replay_tables.ReplayReader` uses
them without asking which it has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias
from uuid import UUID

from convstore.domain.events import Event
from convstore.engine.state import ReplayState

ReplayModel: TypeAlias = bool | Literal["on_read"]
"""How a store keeps the replay model (``open_store(replay_model=...)``): ``True``, its writer
keeps it current in each append where the backend can (SQLite), else its readers do;
``"on_read"``, its readers do; ``False``, it keeps none."""

Execute = Callable[[str, Sequence[Any]], Any]
"""How tables run one statement inside a transaction they were handed (an append's, an
erasure's): the statement's text and its parameters."""


class ReplayKeeper(Protocol):
    """Keeps the stored model current from inside each append's transaction."""

    def __call__(
        self,
        execute: Execute,
        conversation: UUID,
        before: int,
        events: Sequence[Event],
        *,
        empty: bool,
        missed: Callable[[int], Sequence[Event]],
    ) -> None:
        """Fold an append's ``events`` (following version ``before``) into the stored model
        with ``execute``, the append's transaction; ``empty``: the conversation held nothing
        replay shows at ``before``; ``missed``: the conversation's events after a version, up
        to ``before``, read in that transaction. Never raises for the model's sake."""

    def forget(self, conversation: UUID) -> None:
        """Drop what is held of a conversation (it was erased)."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A conversation's stored model, as read."""

    version: int
    head: str
    rows: list[tuple[str, str | bytes]]


class ReplayTables(Protocol):
    """Where the replay model is kept."""

    key: bytes
    """The chain key (``CONVSTORE_CHAIN_KEY``, or ``b""``): each stored head's digest is a MAC
    under it (see :func:`convstore.engine.state.head_digest`)."""

    keeper: ReplayKeeper | None
    """What keeps the model current inside each append (``None``: readers keep it)."""

    def read(self, conversation: UUID) -> Stored | None:
        """The stored model of a conversation, or ``None`` when there is none."""

    def write(self, conversation: UUID, state: ReplayState, since: int | None) -> bool:
        """Store ``state``, whose messages changed since version ``since`` are marked dirty
        (``None``: replace whatever is stored, which did not match the log); whether the
        store now holds it or a newer one (``False``: the conversation was erased, or the
        store was busy)."""

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
