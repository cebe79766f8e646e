"""The one family of errors convstore raises.

Two branches keep "you called it wrong" apart from "the store failed": the CLI maps
:class:`InvalidInput` (and its subclasses) to exit status 2 and :class:`StoreError` to 1.
"""

from __future__ import annotations


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


class VersionConflict(ConcurrencyError):
    """The conversation moved past the version a conditional write expected; nothing was
    written (read it again and decide again)."""
