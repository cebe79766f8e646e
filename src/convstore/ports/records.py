"""What reading the stored log yields: one record per row, and one line per backend failure.

``Store.scan`` produces :class:`Recorded` rows; ``verify``, ``dump`` and the async store
consume them. Both the store and the composition root report a backend exception through
:func:`failure_detail`, so a password never reaches a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from convstore.domain.events import Event


@dataclass(frozen=True, slots=True)
class Recorded:
    """One stored record: its place, and the event it decodes to (or why it does not).

    ``unreadable`` says which column could not be read although the row could be placed;
    ``raw_topic`` and ``state`` are the stored bytes the hash chain covers.
    """

    position: int
    originator_id: UUID | str | None
    originator_version: int | None
    event: Event | None
    error: str | None = None
    topic: str | None = None
    unreadable: str | None = None
    raw_topic: bytes | None = None
    state: bytes | None = None


def failure_detail(exc: BaseException, secret: str = "") -> str:
    """A backend exception's message on one line, with ``secret`` (a password) masked."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return detail.replace(secret, "***") if secret else detail
