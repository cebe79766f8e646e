"""The replay engine's one fold: events into a :class:`ReplayState`, one at a time.

The state keeps what does not depend on the caller's options (see
:mod:`convstore.engine.state`; :mod:`convstore.engine.render` renders it). A state at version
``V`` plus the events after ``V`` equals a state folded from scratch, so the same fold extends
a store's cached state with the events appended since (:mod:`convstore.store.replay_cache`)
and answers a replay, a live round or a token count from events alone (:func:`folded`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, assert_never

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
    cleared_marker,
    document_marker,
    document_native,
    document_text,
    image_marker,
    reasoning_text,
    text_prose,
    tool_result_head,
    tool_use_text,
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


def block_part(block: Block, tool_name: str | None, version: int, role: Role) -> PartData:
    """The part a block recorded at ``version`` in a message of ``role`` becomes."""
    match block:
        case TextBlock():
            return ["x", text_prose(block)]
        case ReasoningBlock():
            return ["g", f"[Reasoning]: {reasoning_text(block)}"]
        case ToolUseBlock():
            return ["u", tool_use_text(block), block.id]
        case HostedToolUseBlock():
            return ["U", tool_use_text(block), block.id]
        case ToolResultBlock() | HostedToolResultBlock():
            return _result_part(block, tool_name, version, role)
        case ImageBlock():
            return ["i", _image_ref(block, version, None, role)]
        case DocumentBlock():
            return _document_part(block, version, role)
        case _:
            assert_never(block)


def fold(state: ReplayState, events: Iterable[Event]) -> None:
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


def _add(state: ReplayState, message: MessagePlan, event: BlockAppended | BlockRecorded) -> None:
    """A block's part added to its message."""
    before = message.size
    message.add(block_part(event.block, event.tool_name, event.originator_version, message.role))
    state.size += message.size - before


def _apply(state: ReplayState, event: Event) -> None:
    match event:
        case MessageStarted():
            _open(state, event.message_id.hex, event.role)
        case BlockAppended():
            _add(state, _message(state, event.message_id.hex), event)
        case BlockRecorded():
            key = event.message_id.hex
            if event.index == 0 and key not in state.positions:
                _open(state, key, event.role)
            message = _message(state, key)
            _add(state, message, event)
            if event.closes:
                message.close("ended")
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
