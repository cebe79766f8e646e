"""Replay as a read model: each stored message's plan, folded once and caught up event by event.

:func:`convstore.projections.replay.plan` folds the whole log on every call. This module keeps
what does not depend on the caller's options: per stored message, its role, how it closed,
and each block's prose (a *part*), plus the conversation's compactions and rewinds. What the
options change is worked out at render time from those facts: which messages a rewind
withdrew, the compaction window (``full``), which tool results microcompact clears
(``keep_tool_results``), which calls no result answered, and how images show (``vision``).
:func:`render` then gives exactly what ``render(plan(events, options), shape)`` gives.

A state is folded event by event (:meth:`ReplayState.fold`), so a state at version ``V`` plus
the events after ``V`` equals a state folded from scratch. Its messages and its head encode to
deterministic text (:meth:`MessagePlan.encode`, :meth:`ReplayState.encode_head`), so a stored
copy can be thrown away and rebuilt identical. A message that is closed and holds only text and
reasoning can never change again: it is kept as its content alone (two code letters, then the
text as is), which a fresh process reads without decoding anything.

Parts are JSON arrays, kept decoded as lists (cheap to read back in bulk):

- ``["x", text]`` a text block; ``["g", text]`` reasoning (its prose, ``[Reasoning]: …``);
- ``["u", text, call_id]`` a tool call;
- ``["r", head, cleared, content, tool_use_id]`` a tool result: ``head`` is ``Result (name): ``
  or ``Error (name): ``, ``cleared`` the marker that replaces the output when microcompact
  clears it, ``content`` the output text, or a list of pieces (text, or image references);
- ``["i", ref]`` an image, where a reference is ``[version, index, media_type, url, blind,
  seen]``: the event holding the image (``index`` into a tool result's content, or ``None``),
  and the markers shown to a model that cannot see (``blind``) and to one that can, when the
  message's role cannot carry images (``seen``, ``None`` for a user message). Image data is
  never copied: a vision replay that shows an image reads it from the log by its version.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable, Iterable, Sequence
from json.scanner import make_scanner
from typing import Any, TypeAlias, assert_never

from convstore.domain.blocks import (
    Block,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.conversation import MessageStatus
from convstore.domain.events import (
    ROLES,
    BlockAppended,
    Compacted,
    ConversationRenamed,
    ConversationStarted,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    LabelsRemoved,
    LabelsSet,
    MessageEnded,
    MessageInterrupted,
    MessageMetaRecorded,
    MessageStarted,
    RewindUndone,
    Rewound,
    Role,
)
from convstore.projections.prose import (
    BLOCK_SEPARATOR,
    PART_SEPARATOR,
    Image,
    Segment,
    Text,
    cleared_marker,
    image_marker,
    reasoning_text,
    tool_input_json,
)
from convstore.projections.replay import (
    BLANK_MESSAGE,
    CANNOT_SEE,
    NO_RESULT,
    NOTHING_RECORDED,
    SUMMARY_HEAD,
    JSONDict,
    Part,
    PlannedMessage,
    ReplayOptions,
    Shape,
    anthropic_content,
    interruption_marker,
    openai_message,
)

PartData: TypeAlias = list[Any]
"""One block's prose as a JSON array (see the module's docstring)."""

ImageLoader: TypeAlias = Callable[[int, int | None], ImageBlock]
"""Reads the image recorded at a version (``index`` into a tool result's content, or ``None``
for an image block) back from the log."""

MESSAGE_OVERHEAD = 240
"""Bytes a message's plan costs in memory beyond its text (objects, lists, the id)."""

_ROLE_CODES: dict[Role, str] = {role: role[0] for role in ROLES}
_ROLES_BY_CODE: dict[str, Role] = {code: role for role, code in _ROLE_CODES.items()}
_STATUS_CODES: dict[MessageStatus, str] = {
    status: status[0] for status in typing.get_args(MessageStatus) if status != "open"
}
_STATUSES_BY_CODE: dict[str, MessageStatus] = {code: s for s, code in _STATUS_CODES.items()}
assert len(_ROLES_BY_CODE) == len(ROLES), "role codes must differ"
assert len(_STATUSES_BY_CODE) == len(_STATUS_CODES), "status codes must differ"

_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_SCAN: Callable[[str, int], tuple[Any, int]] = make_scanner(
    json.JSONDecoder()  # type: ignore[arg-type] # typeshed types the C scanner as a class
)


def _hidden_because(role: Role, vision: bool) -> str | None:
    """Why images in a message of ``role`` are not sent natively (as replay says it)."""
    if not vision:
        return CANNOT_SEE
    if role == "user":
        return None
    return f"{role} messages cannot carry images"


def _image_ref(image: ImageBlock, version: int, index: int | None, role: Role) -> list[Any]:
    seen = _hidden_because(role, vision=True)
    return [
        version,
        index,
        image.media_type,
        image.url,
        image_marker(image, CANNOT_SEE),
        None if seen is None else image_marker(image, seen),
    ]


def block_part(block: Block, tool_name: str | None, version: int, role: Role) -> PartData:
    """The part a block recorded at ``version`` in a message of ``role`` becomes."""
    match block:
        case TextBlock():
            return ["x", block.text]
        case ReasoningBlock():
            return ["g", f"[Reasoning]: {reasoning_text(block)}"]
        case ToolUseBlock():
            return ["u", f"Tool use: {block.name}({tool_input_json(block)})", block.id]
        case ToolResultBlock():
            label = "Error" if block.is_error else "Result"
            head = f"{label} ({tool_name or block.name or 'unknown'}): "
            content: str | list[Any]
            if isinstance(block.content, str):
                content = block.content
            else:
                content = [
                    part.text
                    if isinstance(part, TextBlock)
                    else _image_ref(part, version, index, role)
                    for index, part in enumerate(block.content)
                ]
            return ["r", head, cleared_marker(block), content, block.tool_use_id]
        case ImageBlock():
            return ["i", _image_ref(block, version, None, role)]
        case _:
            assert_never(block)


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
        self.status = "open"  # while its parts are added
        for part in parts or ():
            self.add(part)
        self.status = status

    def add(self, part: PartData) -> None:
        """Append one block's part."""
        if self.sealed:
            msg = "a closed message takes no more blocks"
            raise ValueError(msg)
        self.parts.append(part)
        self.plain = None
        code = part[0]
        if code == "x":
            if part[1].strip():
                self.blank = False
            self.size += 2 * len(part[1])
            return
        self.blank = False
        if code != "g":
            self.simple = False
        if code == "g":
            self.size += 2 * len(part[1])
        elif code == "u":
            self.calls.append(part[2])
            self.size += 2 * len(part[1])
        elif code == "r":
            self.answers.append(part[4])
            self.results += 1
            content = part[3]
            if isinstance(content, str):
                self.size += 2 * (len(part[1]) + len(content)) + len(part[2])
            else:
                self.size += 2 * len(part[1]) + len(part[2])
                for piece in content:
                    if isinstance(piece, str):
                        self.size += 2 * len(piece)
                    else:
                        self.images = True
                        self.size += 64 + len(piece[4]) + len(piece[5] or "")
        elif code == "i":
            self.images = True
            self.size += 64 + len(part[1][4]) + len(part[1][5] or "")
        else:
            msg = f"unknown part code {code!r}"
            raise ValueError(msg)

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
        """Whether the message is closed and all text: its content can never change, so it is
        kept (and stored) as that one text, without its parts."""
        return self.status != "open" and self.simple

    def encode(self) -> str:
        """The message's plan as text: deterministic, so a rebuild writes the same.

        A sealed message is its role's and status's codes, then its content as is (no JSON to
        decode when read back); any other is the JSON ``[role, status, reason, parts]``.
        """
        if self.sealed:
            return _ROLE_CODES[self.role] + _STATUS_CODES[self.status] + self.content()
        return _ENCODE([self.role, self.status, self.reason, self.parts])

    @classmethod
    def decode(cls, message_id: str, text: str | bytes) -> MessagePlan:
        """A message read back from :meth:`encode`'s text.

        Decoded with the JSON module's scanner directly (the text has no whitespace around
        it), and a message of text blocks only is taken in without looking at each part: a
        fresh process reads every message of a conversation this way.
        """
        if isinstance(text, bytes):
            text = text.decode()
        if text[:1] != "[":
            message = cls(message_id, _ROLES_BY_CODE[text[0]], _STATUSES_BY_CODE[text[1]])
            message.plain = text[2:]
            message.blank = False
            message.size += 2 * len(message.plain)
            return message
        try:
            (role, status, reason, parts), end = _SCAN(text, 0)
        except StopIteration:
            msg = "a stored replay plan is not JSON"
            raise ValueError(msg) from None
        if end != len(text):
            msg = "a stored replay plan has data after its JSON"
            raise ValueError(msg)
        if not all(part[0] == "x" for part in parts):
            return cls(message_id, role, status, reason, parts)
        message = cls(message_id, role, status, reason)
        message.parts = parts
        texts = [part[1] for part in parts]
        message.blank = not any(t.strip() for t in texts)
        message.size += 2 * sum(map(len, texts))
        return message

    def content(self) -> str:
        """The message's text when nothing is cleared, no call is unanswered and images are
        hidden (the model cannot see)."""
        plain = self.plain
        if plain is None:
            if self.simple:
                texts = [p[1] for p in self.parts]
            else:
                texts = [_blind_text(p) for p in self.parts]
            if self.blank:
                texts.append(BLANK_MESSAGE if self.parts else NOTHING_RECORDED)
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
    if code == "i":
        return str(part[1][4])
    if code != "r":
        return str(part[1])
    content = part[3]
    if isinstance(content, str):
        return str(part[1] + content)
    pieces = [piece if isinstance(piece, str) else piece[4] for piece in content]
    return str(part[1] + PART_SEPARATOR.join(pieces))


class ReplayState:
    """A conversation's replay read model at a version: its messages' plans in start order,
    its compactions and the rewinds in force."""

    __slots__ = ("compactions", "dirty", "messages", "positions", "rewinds", "size", "version")

    def __init__(self) -> None:
        self.version = 0
        self.messages: list[MessagePlan] = []
        self.positions: dict[str, int] = {}
        self.compactions: list[tuple[int, str]] = []
        """(position of the message it runs through, or -1 if unknown; the summary)."""
        self.rewinds: dict[int, tuple[int, int]] = {}
        """Rewinds in force by version: the positions ``[start, end)`` each withdrew."""
        self.dirty: set[int] = set()
        """Positions of the messages changed since :meth:`clean` (what a writer must store)."""
        self.size = 0

    # -- folding ---------------------------------------------------------------------------

    def fold(self, events: Iterable[Event]) -> None:
        """Fold events, which must follow on from :attr:`version` without a gap."""
        for event in events:
            if event.originator_version != self.version + 1:
                msg = (
                    f"replay model at version {self.version} was given the event at version "
                    f"{event.originator_version}"
                )
                raise ValueError(msg)
            self._apply(event)
            self.version = event.originator_version

    def _message(self, message_id: str) -> tuple[int, MessagePlan]:
        position = self.positions[message_id]
        self.dirty.add(position)
        return position, self.messages[position]

    def _apply(self, event: Event) -> None:
        match event:
            case MessageStarted():
                key = event.message_id.hex
                self.positions[key] = len(self.messages)
                self.dirty.add(len(self.messages))
                message = MessagePlan(key, event.role)
                self.messages.append(message)
                self.size += message.size
            case BlockAppended():
                _, message = self._message(event.message_id.hex)
                before = message.size
                message.add(
                    block_part(event.block, event.tool_name, event.originator_version, message.role)
                )
                self.size += message.size - before
            case MessageEnded():
                self._message(event.message_id.hex)[1].close("ended")
            case MessageInterrupted():
                self._message(event.message_id.hex)[1].close("interrupted", event.reason)
            case Compacted():
                through = self.positions.get(event.through.hex, -1)
                self.compactions.append((through, event.summary))
                self.size += 2 * len(event.summary) + 64
            case Rewound():
                count = len(self.messages)
                to = event.to
                if to is None:
                    start = 0
                else:
                    found = self.positions.get(to.hex)
                    start = count if found is None else found + 1
                self.rewinds[event.originator_version] = (start, count)
            case RewindUndone():
                self.rewinds.pop(event.rewind, None)
            case ConversationStarted() | EntriesRecorded() | EntriesDeleted():
                pass
            case ConversationRenamed() | LabelsSet() | LabelsRemoved() | MessageMetaRecorded():
                pass  # never part of replay
            case _:
                assert_never(event)

    # -- storing ---------------------------------------------------------------------------

    def encode_head(self) -> str:
        """What the state holds beside its messages, as deterministic JSON text."""
        rewinds = {str(version): list(span) for version, span in sorted(self.rewinds.items())}
        return _ENCODE({"c": [list(c) for c in self.compactions], "r": rewinds})

    @classmethod
    def decode(
        cls, version: int, head: str | bytes, rows: Iterable[tuple[str, str | bytes]]
    ) -> ReplayState:
        """A state read back: its version, its head's text and (message id, plan text) of each
        message in position order."""
        state = cls()
        state.version = version
        loaded = json.loads(head)
        state.compactions = [(int(p), str(s)) for p, s in loaded["c"]]
        state.rewinds = {int(v): (int(s), int(e)) for v, (s, e) in loaded["r"].items()}
        state.size = sum(2 * len(s) + 64 for _, s in state.compactions)
        decode = MessagePlan.decode
        messages = state.messages
        positions = state.positions
        size = 0
        for message_id, text in rows:
            message = decode(message_id, text)
            positions[message_id] = len(messages)
            messages.append(message)
            size += message.size
        state.size += size
        return state

    def clean(self) -> None:
        """Mark everything stored."""
        self.dirty.clear()


# -- rendering ---------------------------------------------------------------------------------


def _merge(items: list[str | Image], separator: str, *, first_joins_bare: bool) -> list[Segment]:
    """:func:`convstore.projections.prose.merge_text` over plain strings and images."""
    merged: list[Segment] = []
    for position, item in enumerate(items):
        previous = merged[-1] if merged else None
        if isinstance(item, str):
            if isinstance(previous, Text):
                glue = "" if first_joins_bare and position == 1 else separator
                merged[-1] = Text(previous.text + glue + item)
            else:
                merged.append(Text(item))
        else:
            merged.append(item)
    return merged


def _image(ref: list[Any], vision: bool, user: bool, load: ImageLoader | None) -> str | Image:
    if not vision:
        return str(ref[4])
    if not user:
        return str(ref[5])
    version, index, media_type, url = ref[0], ref[1], ref[2], ref[3]
    if url is not None:
        return Image(media_type, None, url)
    if load is None:
        msg = "a vision replay showing a stored image needs an image loader"
        raise ValueError(msg)
    image = load(version, index)
    return Image(image.media_type, image.data, image.url)


def _segments(
    message: MessagePlan,
    *,
    vision: bool,
    cleared_from: int,
    unanswered: set[str],
    load: ImageLoader | None,
) -> list[Segment]:
    """The merged segments of a message whose results from ordinal ``cleared_from`` on are
    kept (those before it are cleared)."""
    user = message.role == "user"
    items: list[str | Image] = []
    result = 0
    for part in message.parts:
        code = part[0]
        if code in {"x", "g"}:
            items.append(part[1])
        elif code == "u":
            items.append(part[1])
            if part[2] in unanswered:
                items.append(NO_RESULT)
        elif code == "r":
            head, content = part[1], part[3]
            if result < cleared_from:
                items.append(head + part[2])
            elif isinstance(content, str):
                items.append(head + content)
            else:
                pieces: list[str | Image] = [head]
                pieces.extend(
                    p if isinstance(p, str) else _image(p, vision, user, load) for p in content
                )
                merged = _merge(pieces, PART_SEPARATOR, first_joins_bare=True)
                items.extend(s.text if isinstance(s, Text) else s for s in merged)
            result += 1
        elif code == "i":
            items.append(_image(part[1], vision, user, load))
        else:  # pragma: no cover - parts are checked when added
            msg = f"unknown part code {code!r}"
            raise ValueError(msg)
    if message.blank:
        items.append(BLANK_MESSAGE if message.parts else NOTHING_RECORDED)
    if message.status == "interrupted":
        items.append(interruption_marker(message.reason))
    joined = _merge(items, BLOCK_SEPARATOR, first_joins_bare=False)
    return [s for s in joined if not (isinstance(s, Text) and not s.text.strip())]


def _window(
    state: ReplayState, full: bool
) -> tuple[list[MessagePlan], Sequence[MessagePlan | str]]:
    """The visible messages, and the replayed window (a summary stands as its text)."""
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
    kept_system: list[MessagePlan | str] = [
        m for m in visible[: boundary + 1] if m.role == "system"
    ]
    return visible, [*kept_system, SUMMARY_HEAD + summary, *visible[boundary + 1 :]]


def _decisions(
    visible: list[MessagePlan], window: Sequence[MessagePlan | str], keep: int | None
) -> tuple[set[str], int]:
    """The calls no result answers, made before the last visible message; and how many of the
    window's tool results microcompact clears (the oldest first)."""
    unanswered: set[str] = set()
    calling = [i for i, m in enumerate(visible) if m.calls]
    if calling and calling[0] < len(visible) - 1:
        answered = {a for m in visible if m.answers for a in m.answers}
        last = len(visible) - 1
        unanswered = {c for i in calling if i < last for c in visible[i].calls if c not in answered}
    to_clear = 0
    if keep is not None:
        total = sum(m.results for m in window if not isinstance(m, str))
        to_clear = max(total - keep, 0)
    return unanswered, to_clear


def render(
    state: ReplayState,
    options: ReplayOptions,
    shape: Shape,
    load: ImageLoader | None = None,
) -> JSONDict:
    """Exactly ``render(plan(events, options), shape)`` for the events ``state`` folded."""
    visible, window = _window(state, options.full)
    unanswered, to_clear = _decisions(visible, window, options.keep_tool_results)
    vision = options.vision
    match shape:
        case "openai":
            openai = True
        case "anthropic":
            openai = False
        case _:
            assert_never(shape)
    out: list[JSONDict] = []
    system: list[str] = []
    seen_results = 0
    for message in window:
        content: str | list[Segment]
        role: Role
        if isinstance(message, str):
            role, content = "user", message
        else:
            role = message.role
            cleared_from = max(to_clear - seen_results, 0)
            seen_results += message.results
            if (
                (message.images and vision)
                or (cleared_from and message.results)
                or (unanswered and message.calls and not unanswered.isdisjoint(message.calls))
            ):
                content = _segments(
                    message,
                    vision=vision,
                    cleared_from=cleared_from,
                    unanswered=unanswered,
                    load=load,
                )
            else:
                plain = message.plain
                content = message.content() if plain is None else plain
        if isinstance(content, str):  # one text: built here, as replay's renderer would
            if openai:
                out.append({"role": role, "content": content})
            elif role == "system":
                system.append(content)
            else:
                out.append({"role": role, "content": [{"type": "text", "text": content}]})
            continue
        # Anything else goes through replay's own renderer, as a plan of one part holding the
        # merged segments (merging them again changes nothing).
        planned = PlannedMessage(role, (Part("text", tuple(content)),))
        if openai:
            out.append(openai_message(planned))
        elif role == "system":
            system.append(BLOCK_SEPARATOR.join(s.text for s in content if isinstance(s, Text)))
        else:
            out.append({"role": role, "content": anthropic_content(planned)})
    if openai:
        return {"messages": out}
    if out and out[-1]["role"] == "assistant":
        # The Messages API refuses a final assistant turn ending in whitespace.
        last = out[-1]["content"][-1]
        last["text"] = last["text"].rstrip()
    return {"system": BLOCK_SEPARATOR.join(system), "messages": out}
