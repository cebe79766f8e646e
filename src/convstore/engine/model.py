"""The replay engine's one fold: events into a :class:`ReplayState`, one at a time.

The state keeps what does not depend on the caller's options (see
:mod:`convstore.engine.state`; :mod:`convstore.engine.render` renders it). A state at version
``V`` plus the events after ``V`` equals a state folded from scratch, so the same fold extends
a store's cached state with the events appended since (:mod:`convstore.store.replay_cache`)
and answers a replay, a live round or a token count from events alone (:func:`folded`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, assert_never

from pydantic import BaseModel

from convstore.domain.blocks import (
    AnyToolResult,
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import (
    BlockAppended,
    BlockRecorded,
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
from convstore.engine.state import ImageLoader as ImageLoader  # noqa: PLC0414
from convstore.engine.state import MessagePlan as MessagePlan  # noqa: PLC0414
from convstore.engine.state import PartData as PartData  # noqa: PLC0414
from convstore.engine.state import ReplayState as ReplayState  # noqa: PLC0414
from convstore.projections.prose import (
    Hidden,
    call_prose,
    cleared_marker,
    cleared_of,
    document_marker,
    document_native,
    document_text,
    image_marker,
    prose_of_text,
    result_head,
    shown_reasoning,
    text_bytes,
    text_prose,
    tool_result_head,
)
from convstore.projections.wording import CANNOT_READ, CANNOT_SEE, NOT_NATIVE


def hidden_because(role: str, vision: bool) -> Hidden | None:
    """Why images and PDFs in a message of ``role`` (``tool`` for an OpenAI tool message) are
    not sent natively, as replay says it; ``None`` when they are (a user message to a model
    that can see). A live round says the same as the history it continues."""
    if not vision:
        return CANNOT_SEE, CANNOT_READ
    if role == "user":
        return None
    return f"{role} messages cannot carry images", f"{role} messages cannot carry documents"


def _image_ref(image: ImageBlock, version: int, index: int | None, role: Role) -> list[Any]:
    seen = hidden_because(role, vision=True)
    return [
        version,
        index,
        image.media_type,
        image.url,
        image_marker(image, CANNOT_SEE),
        None if seen is None else image_marker(image, seen[0]),
    ]


def _document_ref(document: DocumentBlock, version: int, role: Role) -> str | list[Any]:
    """A document's prose (a text document's head and text, or the marker of one with no
    native form), or the reference a vision replay may send it by (see the state's module)."""
    if document.text is not None:
        return document_text(document)
    if not document_native(document):
        return document_marker(document, NOT_NATIVE)
    hidden = hidden_because(role, vision=True)
    seen = None if hidden is None else document_marker(document, hidden[1])
    by_url = None if document.url is None else document_marker(document, NOT_NATIVE)
    ref = [
        version,
        document.media_type,
        document.url,
        document.name,
        document_marker(document, CANNOT_READ),
        seen,
        by_url,
    ]
    return ref if document.context is None else [*ref, document.context]


def _document_part(document: DocumentBlock, version: int, role: Role) -> PartData:
    """A document's part: its prose (``t``), or a reference a vision replay may send (``d``)."""
    ref = _document_ref(document, version, role)
    return ["t", ref] if isinstance(ref, str) else ["d", ref]


def _result_part(block: AnyToolResult, tool_name: str | None, version: int, role: Role) -> PartData:
    """A result's part, ``r`` (the caller's tool) or ``R`` (a tool the provider ran): its
    head, the marker microcompact clears it to, its output and the call it answers."""
    content: str | list[Any]
    if isinstance(block.content, str):
        content = block.content
    else:
        content = []
        for index, part in enumerate(block.content):
            match part:
                case TextBlock():
                    content.append(text_prose(part))
                case ImageBlock():
                    content.append(_image_ref(part, version, index, role))
                case DocumentBlock():
                    ref = _document_ref(part, version, role)
                    content.append(ref if isinstance(ref, str) else ["d", ref, index])
                case _:
                    assert_never(part)
    code = "r" if isinstance(block, ToolResultBlock) else "R"
    head = tool_result_head(block, tool_name)
    return [code, head, cleared_marker(block), content, block.tool_use_id]


def _kind(cls: type[BaseModel]) -> str:
    return str(cls.model_fields["type"].default)


_TEXT, _REASONING, _USE, _HOSTED_USE, _RESULT, _HOSTED_RESULT = (
    _kind(cls)
    for cls in (
        TextBlock,
        ReasoningBlock,
        ToolUseBlock,
        HostedToolUseBlock,
        ToolResultBlock,
        HostedToolResultBlock,
    )
)
_STR, _NONE = str, type(None)


def plain_part(fields: dict[str, Any], tool_name: str | None) -> PartData | None:
    """The part of a block whose prose needs nothing but its own fields (text, reasoning, a
    call, a result whose output is text), read from ``fields``: the block as the log stores
    it (its JSON, ``None`` fields left out), or a block model's own ``__dict__``; ``None``
    for any other block, or a field not of its type (the model decides then, see
    :func:`block_part`). A fresh process's first load folds most blocks this way, without a
    model (docs/design/format-3.md, step 9)."""
    kind = fields.get("type")
    get: Callable[..., Any] = fields.get
    if kind == _TEXT:
        text, annotations = get("text"), get("annotations")
        if type(text) is _STR and (annotations is None or type(annotations) is list):
            return ["x", prose_of_text(text, annotations)]
    elif kind in (_USE, _HOSTED_USE):
        call_id, name, tool_input, server = get("id"), get("name"), get("input"), get("server")
        if (
            type(call_id) is _STR
            and type(name) is _STR
            and type(tool_input) in (dict, _STR)
            and type(server) in (_STR, _NONE)
        ):
            hosted = kind == _HOSTED_USE
            prose = call_prose(name, tool_input, hosted=hosted, server=server)
            return ["U" if hosted else "u", prose, call_id]
    elif kind in (_RESULT, _HOSTED_RESULT):
        answers, content, name = get("tool_use_id"), get("content"), get("name")
        is_error = get("is_error", False)
        if (
            type(content) is _STR
            and type(answers) is _STR
            and type(is_error) is bool
            and type(name) in (_STR, _NONE)
        ):
            hosted = kind == _HOSTED_RESULT
            head = result_head(is_error, tool_name or name, hosted=hosted)
            return ["R" if hosted else "r", head, cleared_of(text_bytes(content)), content, answers]
    elif kind == _REASONING:
        text, redacted, encrypted = get("text"), get("redacted", False), get("encrypted_content")
        if type(text) is _STR and type(redacted) is bool and type(encrypted) in (_STR, _NONE):
            return ["g", f"[Reasoning]: {shown_reasoning(text, redacted, encrypted)}"]
    return None


def block_part(block: Block, tool_name: str | None, version: int, role: Role) -> PartData:
    """The part a block recorded at ``version`` in a message of ``role`` becomes."""
    match block:
        case ToolResultBlock() | HostedToolResultBlock() if not isinstance(block.content, str):
            return _result_part(block, tool_name, version, role)
        case (
            TextBlock()
            | ReasoningBlock()
            | ToolUseBlock()
            | HostedToolUseBlock()
            | ToolResultBlock()
            | HostedToolResultBlock()
        ):
            part = plain_part(block.__dict__, tool_name)
            assert part is not None  # a model's fields are of their types
            return part
        case ImageBlock():
            return ["i", _image_ref(block, version, None, role)]
        case DocumentBlock():
            return _document_part(block, version, role)
        case _:
            assert_never(block)


class StoredBlock(NamedTuple):
    """A :class:`~convstore.domain.events.BlockRecorded` as its row holds it, before any model
    is built: what the fold reads of it, and ``event``, which decodes the whole event when the
    fold needs the model (a block :func:`plain_part` does not read). A reader makes one only
    of a row whose fields the fold reads are of their types."""

    originator_version: int
    key: str
    """The message's id as 32 hex digits."""
    role: Role
    block_index: int
    """The block's place in its message."""
    closes: bool
    tool_name: str | None
    block: dict[str, Any]
    """The block's stored JSON, parsed."""
    event: Callable[[], Event]


Folded = Event | StoredBlock
"""What the fold takes: an event, or a block event as its row holds it."""


def fold(state: ReplayState, events: Iterable[Folded]) -> None:
    """Fold events into ``state``; they must follow on from its version without a gap."""
    for event in events:
        if event.originator_version != state.version + 1:
            msg = (
                f"replay state at version {state.version} was given the event at version "
                f"{event.originator_version}"
            )
            raise ValueError(msg)
        _apply(state, event)
        state.version = event.originator_version


def folded(events: Iterable[Event]) -> tuple[ReplayState, ImageLoader]:
    """A conversation's events (read once) folded into a fresh state, and the loader that reads
    the images a vision render shows back from those same events. Unlike :func:`fold` it takes
    the events as given, without checking that their versions follow on from 1."""
    state = ReplayState()
    by_version: dict[int, BlockAppended | BlockRecorded] = {}
    for event in events:
        if isinstance(event, BlockAppended | BlockRecorded):
            by_version[event.originator_version] = event
        _apply(state, event)
        state.version = event.originator_version

    def load(version: int, index: int | None) -> ImageBlock | DocumentBlock:
        block = by_version[version].block
        if index is not None:
            assert isinstance(block, ToolResultBlock | HostedToolResultBlock)
            assert not isinstance(block.content, str)
            block = block.content[index]
        assert isinstance(block, ImageBlock | DocumentBlock)
        return block

    return state, load


def _message(state: ReplayState, message_id: str) -> MessagePlan:
    return state.messages[state.positions[message_id]]


def _open(state: ReplayState, key: str, role: Role) -> None:
    """A message opened (by its start, or by its first block), at the end of the order."""
    state.positions[key] = len(state.messages)
    message = MessagePlan(key, role)
    state.messages.append(message)
    state.size += message.size


def _opened(state: ReplayState, key: str, index: int, role: Role) -> MessagePlan:
    """The message a block recorded at ``index`` belongs to, opened by its first block unless
    a start opened it already."""
    if index == 0 and key not in state.positions:
        _open(state, key, role)
    return _message(state, key)


def _add(state: ReplayState, message: MessagePlan, part: PartData, closes: bool = False) -> None:
    """A block's part added to its message (which ends with it, ``closes``)."""
    before = message.size
    message.add(part)
    if closes:
        message.close("ended")
    state.size += message.size - before


def _part(event: BlockAppended | BlockRecorded, role: Role) -> PartData:
    return block_part(event.block, event.tool_name, event.originator_version, role)


def _apply(state: ReplayState, event: Folded) -> None:
    match event:
        case StoredBlock():
            message = _opened(state, event.key, event.block_index, event.role)
            part = plain_part(event.block, event.tool_name)
            if part is None:
                recorded = event.event()
                assert isinstance(recorded, BlockRecorded)
                part = _part(recorded, message.role)
            _add(state, message, part, event.closes)
        case MessageStarted():
            _open(state, event.message_id.hex, event.role)
        case BlockAppended():
            message = _message(state, event.message_id.hex)
            _add(state, message, _part(event, message.role))
        case BlockRecorded():
            message = _opened(state, event.message_id.hex, event.index, event.role)
            _add(state, message, _part(event, message.role), bool(event.closes))
        case MessageEnded():
            _message(state, event.message_id.hex).close("ended")
        case MessageInterrupted():
            _message(state, event.message_id.hex).close("interrupted", event.reason)
        case Compacted():
            through = state.positions.get(event.through.hex, -1)
            state.compactions.append((through, event.summary))
            state.size += 2 * len(event.summary) + 64
        case Rewound():
            count = len(state.messages)
            to = event.to
            if to is None:
                start = 0
            else:
                found = state.positions.get(to.hex)
                start = count if found is None else found + 1
            state.rewinds[event.originator_version] = (start, count)
        case RewindUndone():
            state.rewinds.pop(event.rewind, None)
        case ConversationStarted() | EntriesRecorded() | EntriesDeleted():
            pass
        case ConversationRenamed() | LabelsSet() | LabelsRemoved() | MessageMetaRecorded():
            pass  # never part of replay
        case _:
            assert_never(event)
