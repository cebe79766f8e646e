"""The one family of errors convstore raises.

Two branches keep "you called it wrong" apart from "the store failed": the CLI maps
:class:`InvalidInput` (and its subclasses) to exit status 2 and :class:`StoreError` to 1.
:class:`OutputError` (exit 1 too) is the output failing, not the store::

    ConvstoreError
        InvalidInput: InvalidBlock, MessageClosed, NotFound
            NotFound: ConversationNotFound (ConversationErased), NoStore, MessageNotFound
        StoreError: ConcurrencyError (VersionConflict)
        OutputError
"""

from __future__ import annotations

from datetime import datetime


class ConvstoreError(Exception):
    """Root of every error convstore raises on purpose."""


class InvalidInput(ConvstoreError):
    """The input or the call is wrong; nothing was written."""


class InvalidBlock(InvalidInput):
    """A block's JSON is malformed or breaks a block rule."""


class NotFound(InvalidInput):
    """A conversation or message named by the caller does not exist."""


class ConversationNotFound(NotFound):
    """No conversation with that id exists in the store."""


class ConversationErased(ConversationNotFound):
    """The conversation was erased: its events are gone for good and it takes no more."""


class ConversationActive(InvalidInput):
    """An erase given ``idle_since`` found an event at or after it; nothing was erased."""

    def __init__(self, message: str, last_active: datetime | None = None) -> None:
        super().__init__(message)
        self.last_active = last_active
        """When its newest event was recorded, as the erasing transaction found it."""


class NoStore(NotFound):
    """Nothing has been recorded at that location yet."""


class MessageNotFound(NotFound):
    """No message with that id exists in the conversation."""


class MessageClosed(InvalidInput):
    """The message was already ended or interrupted, so it takes no more blocks."""


class StoreError(ConvstoreError):
    """The storage backend failed; the operation was not recorded."""


class ConcurrencyError(StoreError):
    """Other writers kept winning the race for a conversation until retries ran out."""


class OutputError(ConvstoreError):
    """Writing the output (a file, a pipe, a device) failed part-way; it is not whole."""


class VersionConflict(ConcurrencyError):
    """The conversation moved past the version a conditional write expected; nothing was
    written (read it again and decide again)."""
