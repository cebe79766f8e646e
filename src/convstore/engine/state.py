"""The replay engine's state: each stored message's plan, folded from the log.

The one replay engine folds a conversation's events into a :class:`ReplayState`
(:func:`convstore.engine.model.fold`) and renders it (:mod:`convstore.engine.render`). The
state keeps what does not depend on the caller's options: per stored message, its role, how it
closed, and each block's prose (a *part*), plus the conversation's compactions and rewinds.
What the options change is worked out at render time from those facts: which messages a rewind
withdrew, the compaction window (``full``), which tool results microcompact clears
(``keep_tool_results``), which calls no result answered, and how images show (``vision``).

A state is folded event by event (:func:`convstore.engine.model.fold`), so a
state at version ``V`` plus the events after ``V`` equals a state folded from scratch: the
store keeps states in memory between replays and extends them with the events appended since.
Nothing of a state is stored: since format 3 every block event carries what its prose needs,
so a fresh process folds the conversation's rows, read once in version order
(docs/design/replay-model.md says why the stored copy went).

Parts are JSON arrays, kept decoded as lists (cheap to read back in bulk):

- ``["x", text]`` a text block (its prose: the text, then the line naming the sources its
  annotations cite, when they cite any); ``["g", text]`` reasoning (its prose,
  ``[Reasoning]: …``);
- ``["u", text, call_id]`` a tool call; ``["U", text, call_id]`` a hosted one (a call the
  provider ran itself: ``text`` says so), which the rules treat as a call (a later message
  with no result for it marks it unanswered);
- ``["r", head, cleared, content, tool_use_id]`` a tool result: ``head`` is ``Result (name): ``
  or ``Error (name): ``, ``cleared`` the marker that replaces the output when microcompact
  clears it, ``content`` the output text, or a list of pieces: text (a text part with its
  sources line, a text document's prose, an unsendable document's marker), an image
  reference, or ``["d", ref, index]`` for a PDF a vision replay may send (``ref`` as in a
  ``d`` part below, ``index`` its place in the result's content); ``["R", …]`` the same for
  the result of a hosted call (microcompact clears either; only the pressure kind differs).
  A stored ``r`` part written before documents could sit in results holds no ``["d", …]``
  piece, and decodes as it always did;
- ``["i", ref]`` an image, where a reference is ``[version, index, media_type, url, blind,
  seen]``: the event holding the image (``index`` into a tool result's content, or ``None``),
  and the markers shown to a model that cannot see (``blind``) and to one that can, when the
  message's role cannot carry images (``seen``, ``None`` for a user message). Image data is
  never copied: a vision replay that shows an image reads it from the log by its version.
- ``["t", text]`` a document's prose: a text document's head and text, or the marker of one
  with no native form (a file id, a binary that is not a PDF); like text and reasoning it
  lets a closed message seal;
- ``["d", ref]`` a PDF a vision replay may send natively, where ``ref`` is ``[version,
  media_type, url, name, blind, seen, by_url]``: the event holding it, and the markers sent
  to a model that cannot see (``blind``), when the message's role cannot carry documents
  (``seen``, ``None`` for a user message) and, for a PDF given by URL, to a shape that takes
  none by URL (``by_url``). Like an image's, its data is read back from the log.
  ``images`` is set by either: the message holds something a vision replay shows natively.

This module imports nothing of the domain's models at run time (the fold, which reads events,
is :mod:`convstore.engine.model`; the render, :mod:`convstore.engine.render`, imports none
either).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from convstore.projections.wording import (
    BLANK_MESSAGE,
    BLOCK_SEPARATOR,
    NOTHING_RECORDED,
    PART_SEPARATOR,
    interruption_marker,
)

if TYPE_CHECKING:
    from convstore.domain.blocks import DocumentBlock, ImageBlock
    from convstore.domain.conversation import MessageStatus
    from convstore.domain.events import Role


class RenderOptions(Protocol):
    """What replay varies on besides the shape (:class:`convstore.ReplayOptions` is one)."""

    @property
    def vision(self) -> bool: ...
    @property
    def full(self) -> bool: ...
    @property
    def keep_tool_results(self) -> int | None: ...


PartData: TypeAlias = list[Any]
"""One block's prose as a JSON array (see the module's docstring)."""

ImageLoader: TypeAlias = "Callable[[int, int | None], ImageBlock | DocumentBlock]"
"""Reads the image recorded at a version (``index`` into a tool result's content, or ``None``
for an image block, or a document block) back from the log."""

MESSAGE_OVERHEAD = 240
"""Bytes a message's plan costs in memory beyond its text (objects, lists, the id)."""

CALL_CODES = frozenset({"u", "U"})
"""The codes of a call's part: the caller's tool (``u``), one the provider ran (``U``)."""
RESULT_CODES = frozenset({"r", "R"})
"""The codes of a result's part: the caller's tool (``r``), one the provider ran (``R``)."""


class MessagePlan:
    """One stored message as replay needs it, whatever the options."""

    __slots__ = (
        "answers",
        "blank",
        "calls",
        "images",
        "message_id",
        "parts",
        "plain",
        "reason",
        "results",
        "role",
        "simple",
        "size",
        "status",
    )

    def __init__(
        self,
        message_id: str,
        role: Role,
        status: MessageStatus = "open",
        reason: str | None = None,
        parts: list[PartData] | None = None,
    ) -> None:
        self.message_id = message_id
        """The message's id as 32 hex digits."""
        self.role: Role = role
        self.status: MessageStatus = status
        self.reason = reason
        self.parts: list[PartData] = []
        self.calls: list[str] = []
        self.answers: list[str] = []
        self.results = 0
        self.images = False
        self.blank = True
        self.size = MESSAGE_OVERHEAD
        self.simple = True
        """Whether every part is text or reasoning (its prose is the part's own text)."""
        self.plain: str | None = None
        """The content when nothing is cleared, no call is unanswered and no image shows
        (worked out on first use, dropped when the message changes)."""
        if parts:
            self._take(parts)
        self.status = status

    def add(self, part: PartData) -> None:
        """Append one block's part."""
        if self.sealed:
            msg = "a closed message takes no more blocks"
            raise ValueError(msg)
        self.plain = None
        self._take((part,))

    def _take(self, parts: Iterable[PartData]) -> None:
        """Append parts to a message that is not sealed, in one pass (a fresh process reads
        every stored message's parts this way)."""
        size, blank, simple, images, results = (
            self.size,
            self.blank,
            self.simple,
            self.images,
            self.results,
        )
        kept, calls, answers = self.parts, self.calls, self.answers
        for part in parts:
            code = part[0]
            if code == "x":
                if blank and part[1].strip():
                    blank = False
                size += 2 * len(part[1])
            elif code in {"g", "t"}:
                blank = False
                size += 2 * len(part[1])
            elif code in CALL_CODES:
                blank = simple = False
                calls.append(part[2])
                size += 2 * len(part[1])
            elif code in RESULT_CODES:
                blank = simple = False
                answers.append(part[4])
                results += 1
                content = part[3]
                if isinstance(content, str):
                    size += 2 * (len(part[1]) + len(content)) + len(part[2])
                else:
                    size += 2 * len(part[1]) + len(part[2])
                    for piece in content:
                        if isinstance(piece, str):
                            size += 2 * len(piece)
                            continue
                        images = True
                        if piece[0] == "d":
                            ref = piece[1]
                            size += 64 + len(ref[4]) + len(ref[5] or "") + len(ref[6] or "")
                        else:
                            size += 64 + len(piece[4]) + len(piece[5] or "")
            elif code == "i":
                blank = simple = False
                images = True
                size += 64 + len(part[1][4]) + len(part[1][5] or "")
            elif code == "d":
                blank = simple = False
                images = True
                size += 64 + len(part[1][4]) + len(part[1][5] or "") + len(part[1][6] or "")
            else:
                msg = f"unknown part code {code!r}"
                raise ValueError(msg)
            kept.append(part)
        self.size, self.blank, self.simple, self.images, self.results = (
            size,
            blank,
            simple,
            images,
            results,
        )

    def close(self, status: MessageStatus, reason: str | None = None) -> None:
        """The message ended or was interrupted."""
        if self.sealed:
            msg = "a closed message cannot close again"
            raise ValueError(msg)
        self.status = status
        self.reason = reason
        self.plain = None

    @property
    def sealed(self) -> bool:
        """Whether the message is closed and all text: its content can never change, so
        render takes it as that one text (:meth:`content`, worked out once)."""
        return self.status != "open" and self.simple

    def content(self) -> str:
        """The message's text when nothing is cleared, no call is unanswered and images are
        hidden (the model cannot see)."""
        plain = self.plain
        if plain is None:
            if self.blank:
                # Its texts are all blank: the marker says so, with no blank lines before it.
                texts = [BLANK_MESSAGE if self.parts else NOTHING_RECORDED]
            elif self.simple:
                texts = [p[1] for p in self.parts]
            else:
                texts = [_blind_text(p) for p in self.parts]
            if self.status == "interrupted":
                texts.append(interruption_marker(self.reason))
            plain = BLOCK_SEPARATOR.join(texts)
            if not plain.strip():  # pragma: no cover - a marker is never blank
                plain = ""
            self.plain = plain
        return plain


def _blind_text(part: PartData) -> str:
    """A part's prose for a model that cannot see, uncleared."""
    code = part[0]
    if code in {"i", "d"}:
        return str(part[1][4])
    if code not in RESULT_CODES:
        return str(part[1])
    content = part[3]
    if isinstance(content, str):
        return str(part[1] + content)
    return str(part[1] + PART_SEPARATOR.join(map(_blind_piece, content)))


def _blind_piece(piece: str | list[Any]) -> str:
    """A piece of a result's output for a model that cannot see: its text, or the marker of
    the image or document it refers to."""
    if isinstance(piece, str):
        return piece
    return str(piece[1][4] if piece[0] == "d" else piece[4])


class ReplayState:
    """A conversation folded for replay at a version: its messages' plans in start order,
    its compactions and the rewinds in force."""

    __slots__ = (
        "compactions",
        "messages",
        "positions",
        "rewinds",
        "size",
        "version",
    )

    def __init__(self) -> None:
        self.version = 0
        self.messages: list[MessagePlan] = []
        self.positions: dict[str, int] = {}
        self.compactions: list[tuple[int, str]] = []
        """(position of the message it runs through, or -1 if unknown; the summary)."""
        self.rewinds: dict[int, tuple[int, int]] = {}
        """Rewinds in force by version: the positions ``[start, end)`` each withdrew."""
        self.size = 0
        """About how many bytes the state holds in memory (what the cache budgets)."""
