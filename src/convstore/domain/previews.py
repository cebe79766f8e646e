"""Text shortened to stand for a conversation: a listing's preview, an imported title."""

from __future__ import annotations

PREVIEW_CHARS = 80
"""How much of an untitled conversation's first user text the listing keeps."""


def preview_of(text: str) -> str:
    """Text as a listing shows it: whitespace runs made one space, a NUL character shown as
    U+FFFD (PostgreSQL's text cannot hold NUL, and every backend's index holds the same
    previews), cut to :data:`PREVIEW_CHARS` characters (an ellipsis marking a cut)."""
    flat = " ".join(text.replace("\x00", "\ufffd").split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1].rstrip() + "…"
