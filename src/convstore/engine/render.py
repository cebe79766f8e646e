"""The replay engine's render: a folded :class:`~convstore.engine.state.ReplayState` and the
caller's options, as what the model is sent.

Everything that computes what the model is sent goes through here: :meth:`Store.replay
<convstore.Store.replay>` (from the stored or cached state), :func:`convstore.replay` (from a
state folded fresh), the history part of a live round, context pressure and
``fit_tool_results``. The state holds what does not depend on the options (see
:mod:`convstore.engine.state`); :func:`plan` makes the decisions that do (the rewinds in
force, the compaction window, which calls no result answered, how many tool results
microcompact clears) once, and then:

- :meth:`Plan.content` is one window message's content as sent: a text, or texts (never
  blank) with the images shown between them;
- :meth:`Plan.parts` is the same content's segments before they are joined, each with the
  kind of block it comes from (what pressure attributes its tokens to);
- :func:`wire` puts the contents in the OpenAI or Anthropic shape.

It imports nothing of the domain's models at run time (an image is built only when a vision
replay shows one), so the command line's quick replay renders stored states without pydantic.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias, assert_never

from convstore.engine.state import (
    CALL_CODES,
    RESULT_CODES,
    ImageLoader,
    MessagePlan,
    RenderOptions,
    ReplayState,
)
from convstore.projections.wording import (
    BLANK_MESSAGE,
    BLOCK_SEPARATOR,
    HISTORY_STARTS,
    NO_RESULT,
    NOTHING_RECORDED,
    PART_SEPARATOR,
    SUMMARY_HEAD,
    interruption_marker,
)

if TYPE_CHECKING:
    from convstore.domain.blocks import ImageBlock
    from convstore.domain.events import Role
    from convstore.engine.options import JSONDict, Shape
    from convstore.projections.prose import Document, Image

Content: TypeAlias = "str | list[str | Image | Document]"
"""A wire message's content: one text, or texts (never blank) and the images shown between."""

Source: TypeAlias = "MessagePlan | str"
"""A window message: a stored message's plan, or a user message replay adds as its text (a
compaction summary, or ``HISTORY_STARTS`` before a history that opens with the assistant)."""

KINDS = {
    "x": "text",
    "g": "reasoning",
    "u": "tool_use",
    "U": "hosted_tool_use",
    "r": "tool_result",
    "R": "hosted_tool_result",
    "i": "image",
    "t": "document",
    "d": "document",
}
"""The block kind each part code stands for (pressure's ``by_kind`` keys; a test holds its
values to the block union's kinds)."""


@dataclass(frozen=True, slots=True)
class Plan:
    """The decisions a replay with given options makes over a state: the window it sends and
    what is cleared or marked in it. Cheap to make; the contents are worked out on demand."""

    window: Sequence[Source]
    """The messages replay sends, in order (a summary stands as its text)."""
    unanswered: frozenset[str]
    """Ids of the calls no result answers that the history has moved past."""
    to_clear: int
    """How many of the window's tool results microcompact clears, oldest first."""
    vision: bool
    load: ImageLoader | None

    def cleared_from(self) -> Iterator[int]:
        """Per window message, how many of its own tool results are cleared (its oldest)."""
        seen = 0
        to_clear = self.to_clear
        for source in self.window:
            if isinstance(source, str):
                yield 0
                continue
            yield max(to_clear - seen, 0)
            seen += source.results

    def before(self, message_id: str) -> Plan | None:
        """The plan of the window up to (not including) a stored message, or ``None`` when
        the window does not hold it (compacted away, or withdrawn)."""
        for index, source in enumerate(self.window):
            if not isinstance(source, str) and source.message_id == message_id:
                return replace(self, window=self.window[:index])
        return None

    def content(self, source: Source, cleared_from: int = 0) -> Content:
        """A window message's content as sent, its ``cleared_from`` oldest results cleared."""
        if isinstance(source, str):
            return source
        if (
            (source.images and self.vision)
            or (cleared_from and source.results)
            or (self.unanswered and source.calls and not self.unanswered.isdisjoint(source.calls))
        ):
            return self._joined(source, cleared_from)
        plain = source.plain
        return source.content() if plain is None else plain

    def _joined(self, message: MessagePlan, cleared_from: int) -> Content:
        merged = _merge(self._items(message, cleared_from), BLOCK_SEPARATOR)
        merged = [s for s in merged if not (isinstance(s, str) and not s.strip())]
        only = merged[0] if len(merged) == 1 else None
        return only if isinstance(only, str) else merged

    def parts(
        self, source: Source, cleared_from: int = 0
    ) -> list[tuple[str, str | Image | Document]]:
        """The content's segments before they are joined (blank text kept), each with the kind
        of what it comes from: a block kind, ``summary``, or ``marker`` (a call left
        unanswered, a blank message, an interruption). A message read back sealed from storage
        keeps no blocks: its content is one ``text`` segment."""
        if isinstance(source, str):
            return [("marker" if source == HISTORY_STARTS else "summary", source)]
        if not source.parts and source.plain is not None and not source.blank:
            return [("text", source.plain)]
        kinds: list[str] = []
        items = self._items(source, cleared_from, kinds)
        return list(zip(kinds, items, strict=True))

    def _items(
        self, message: MessagePlan, cleared_from: int, kinds: list[str] | None = None
    ) -> list[str | Image | Document]:
        """The message's segments in order, unjoined; with ``kinds``, the kind of each is
        appended to it."""
        vision, load, unanswered = self.vision, self.load, self.unanswered
        user = message.role == "user"
        items: list[str | Image | Document] = []
        result = 0
        # A blank message's parts are all blank text: its marker alone stands for them.
        for part in () if message.blank else message.parts:
            code = part[0]
            if code in {"x", "g", "t"}:
                items.append(part[1])
            elif code in CALL_CODES:
                items.append(part[1])
                if part[2] in unanswered:
                    items.append(NO_RESULT)
                    if kinds is not None:
                        kinds += (KINDS[code], "marker")
                    continue
            elif code in RESULT_CODES:
                head, content = part[1], part[3]
                if result < cleared_from:
                    segments: list[str | Image | Document] = [head + part[2]]
                elif isinstance(content, str):
                    segments = [head + content]
                else:
                    pieces: list[str | Image | Document] = [head]
                    pieces.extend(_piece(p, vision, user, load) for p in content)
                    segments = _merge(pieces, PART_SEPARATOR, first_joins_bare=True)
                items.extend(segments)
                result += 1
                if kinds is not None:
                    kinds.extend([KINDS[code]] * len(segments))
                continue
            elif code == "i":
                items.append(_image(part[1], vision, user, load))
            elif code == "d":
                items.append(_document(part[1], vision, user, load))
            else:  # pragma: no cover - parts are checked when added
                msg = f"unknown part code {code!r}"
                raise ValueError(msg)
            if kinds is not None:
                kinds.append(KINDS[code])
        if message.blank:
            items.append(BLANK_MESSAGE if message.parts else NOTHING_RECORDED)
            if kinds is not None:
                kinds.append("marker")
        if message.status == "interrupted":
            items.append(interruption_marker(message.reason))
            if kinds is not None:
                kinds.append("marker")
        return items


def plan(state: ReplayState, options: RenderOptions, load: ImageLoader | None = None) -> Plan:
    """The decisions replay with ``options`` makes over ``state`` (``load`` reads back an
    image a vision replay shows)."""
    visible, window = _window(state, options.full)
    unanswered: frozenset[str] = frozenset()
    calling = [i for i, m in enumerate(visible) if m.calls]
    last = len(visible) - 1
    if calling and calling[0] < last:
        answered = {a for m in visible if m.answers for a in m.answers}
        unanswered = frozenset(
            c for i in calling if i < last for c in visible[i].calls if c not in answered
        )
    to_clear = 0
    keep = options.keep_tool_results
    if keep is not None:
        total = sum(m.results for m in window if not isinstance(m, str))
        to_clear = max(total - keep, 0)
    return Plan(_user_first(window), unanswered, to_clear, options.vision, load)


def _user_first(window: Sequence[Source]) -> Sequence[Source]:
    """The window with ``HISTORY_STARTS`` put before its first non-system message when that
    is the assistant's (a summary is a user message, so a compacted window needs none)."""
    for index, source in enumerate(window):
        if isinstance(source, str) or source.role == "user":
            return window
        if source.role == "assistant":
            return [*window[:index], HISTORY_STARTS, *window[index:]]
    return window


def _window(state: ReplayState, full: bool) -> tuple[list[MessagePlan], Sequence[Source]]:
    """The visible messages, and the replayed window: after a compaction, the system messages
    up to its boundary, its summary, then every message after the boundary."""
    messages = state.messages
    if state.rewinds:
        withdrawn = bytearray(len(messages))
        for start, end in state.rewinds.values():
            withdrawn[start:end] = b"\x01" * (end - start)
        visible = [m for m, gone in zip(messages, withdrawn, strict=True) if not gone]
    else:
        withdrawn = None
        visible = messages
    if full or not state.compactions:
        return visible, visible
    shown = [c for c in state.compactions if c[0] >= 0 and not (withdrawn and withdrawn[c[0]])]
    if not shown:
        return visible, visible
    through, summary = shown[-1]
    boundary = through if withdrawn is None else through - sum(withdrawn[:through])
    kept_system: list[Source] = [m for m in visible[: boundary + 1] if m.role == "system"]
    return visible, [*kept_system, SUMMARY_HEAD + summary, *visible[boundary + 1 :]]


def _merge(
    items: list[str | Image | Document], separator: str, *, first_joins_bare: bool = False
) -> list[str | Image | Document]:
    """Join runs of adjacent texts with ``separator`` (with ``first_joins_bare``, the first
    item, a tool result's head, joins the next text with nothing between)."""
    merged: list[str | Image | Document] = []
    for position, item in enumerate(items):
        if isinstance(item, str) and merged and isinstance(merged[-1], str):
            glue = "" if first_joins_bare and position == 1 else separator
            merged[-1] = merged[-1] + glue + item
        else:
            merged.append(item)
    return merged


def _piece(
    piece: str | list[Any], vision: bool, user: bool, load: ImageLoader | None
) -> str | Image | Document:
    """One piece of a result's output as sent: its text, an image, or a document."""
    if isinstance(piece, str):
        return piece
    if piece[0] == "d":
        return _document(piece[1], vision, user, load, piece[2])
    return _image(piece, vision, user, load)


def _image(
    ref: list[Any], vision: bool, user: bool, load: ImageLoader | None
) -> str | Image | Document:
    if not vision:
        return str(ref[4])
    if not user:
        return str(ref[5])
    from convstore.projections.prose import Image  # noqa: PLC0415 - only to show an image

    version, index, media_type, url = ref[0], ref[1], ref[2], ref[3]
    if url is not None:
        return Image(media_type, None, url)
    if load is None:
        msg = "a vision replay showing a stored image needs an image loader"
        raise ValueError(msg)
    image = load(version, index)
    return Image(image.media_type, image.data, image.url)


def _document(
    ref: list[Any], vision: bool, user: bool, load: ImageLoader | None, index: int | None = None
) -> str | Document:
    """A PDF as sent: natively, or its marker (``index`` into a result's content, or ``None``
    for a document block)."""
    if not vision:
        return str(ref[4])
    if not user:
        return str(ref[5])
    from convstore.projections.prose import Document  # noqa: PLC0415 - only to send one

    version, media_type, url, name = ref[0], ref[1], ref[2], ref[3]
    context = ref[7] if len(ref) > 7 else None
    if url is not None:
        return Document(media_type, None, url, name, str(ref[6]), context)
    if load is None:
        msg = "a vision replay sending a stored document needs a loader"
        raise ValueError(msg)
    document = load(version, index)
    return Document(media_type, document.data, None, name, "", context)


# -- the wire shapes ---------------------------------------------------------------------------


def anthropic_image_source(image: Image | ImageBlock) -> JSONDict:
    """The Messages API ``source`` of an image: by URL, or its base64 data."""
    if image.url is not None:
        return {"type": "url", "url": image.url}
    return {"type": "base64", "media_type": image.media_type, "data": image.data}


def anthropic_document_source(document: Document) -> JSONDict:
    """The Messages API ``source`` of a PDF: by URL, or its base64 data."""
    if document.url is not None:
        return {"type": "url", "url": document.url}
    return {"type": "base64", "media_type": document.media_type, "data": document.data}


def _openai_part(item: str | Image | Document) -> JSONDict:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    from convstore.projections.prose import Document  # noqa: PLC0415 - loaded with the segment

    if isinstance(item, Document):
        if item.data is None:
            return {"type": "text", "text": item.unsent}  # its context is in the marker
        filename = item.name or "document.pdf"
        data = f"data:{item.media_type};base64,{item.data}"
        return {"type": "file", "file": {"file_data": data, "filename": filename}}
    url = item.url or f"data:{item.media_type};base64,{item.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _openai_parts(item: str | Image | Document) -> list[JSONDict]:
    """An item's Chat Completions parts: a file part has no field for a document's context,
    so a context goes as a text part before it."""
    from convstore.projections.prose import Document, document_context  # noqa: PLC0415

    if isinstance(item, Document) and item.data is not None and item.context is not None:
        return [{"type": "text", "text": f"[{document_context(item.context)}]"}, _openai_part(item)]
    return [_openai_part(item)]


def _anthropic_block(item: str | Image | Document) -> JSONDict:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    from convstore.projections.prose import Document  # noqa: PLC0415 - loaded with the segment

    if isinstance(item, Document):
        return anthropic_document(item)
    return {"type": "image", "source": anthropic_image_source(item)}


def anthropic_document(document: Document) -> JSONDict:
    """The Messages API ``document`` block of a PDF, its name as the title."""
    block: JSONDict = {"type": "document", "source": anthropic_document_source(document)}
    if document.name:
        block["title"] = document.name
    if document.context is not None:
        block["context"] = document.context
    return block


def _texts(content: list[str | Image | Document]) -> str:
    return BLOCK_SEPARATOR.join(s for s in content if isinstance(s, str))


def wire(planned: Plan, shape: Shape) -> JSONDict:
    """The plan's window in the provider's shape: OpenAI Chat Completions messages (content a
    string, or parts when an image shows), or the Messages API's ``system`` and messages."""
    match shape:
        case "openai":
            openai = True
        case "anthropic":
            openai = False
        case _:
            assert_never(shape)
    out: list[JSONDict] = []
    system: list[str] = []
    # Nothing cleared, no call unanswered, no image shown: each message is its plain text.
    plain = not (planned.vision or planned.to_clear or planned.unanswered)
    joined = planned._joined
    to_clear, seen = planned.to_clear, 0
    vision, unanswered = planned.vision, planned.unanswered
    for source in planned.window:
        content: Content
        role: Role
        if isinstance(source, str):
            role, content = "user", source
        elif plain:
            role, content = source.role, source.plain or source.content()
        else:
            role, cleared_from = source.role, max(to_clear - seen, 0)
            seen += source.results
            # The test Plan.content makes, inlined: most messages are their plain text.
            if (
                (vision and source.images)
                or (cleared_from and source.results)
                or (unanswered and source.calls and not unanswered.isdisjoint(source.calls))
            ):
                content = joined(source, cleared_from)
            else:
                content = source.plain or source.content()
        if isinstance(content, str):
            if openai:
                out.append({"role": role, "content": content})
            elif role == "system":
                system.append(content)
            else:
                out.append({"role": role, "content": [{"type": "text", "text": content}]})
        elif openai:
            if any(not isinstance(s, str) for s in content):
                parts = [part for s in content for part in _openai_parts(s)]
                out.append({"role": role, "content": parts})
            else:
                out.append({"role": role, "content": _texts(content)})
        elif role == "system":
            system.append(_texts(content))
        else:
            out.append({"role": role, "content": [_anthropic_block(s) for s in content]})
    if openai:
        return {"messages": out}
    if out and out[-1]["role"] == "assistant":
        # The Messages API refuses a final assistant turn ending in whitespace.
        last = out[-1]["content"][-1]
        last["text"] = last["text"].rstrip()
    joined_system = BLOCK_SEPARATOR.join(system)
    if not joined_system:
        return {"messages": out}  # no system prompt: the key is left out, not sent empty
    return {"system": joined_system, "messages": out}


def render(
    state: ReplayState, options: RenderOptions, shape: Shape, load: ImageLoader | None = None
) -> JSONDict:
    """What replay sends for ``state`` with ``options``, in ``shape``."""
    return wire(plan(state, options, load), shape)
