"""Recording what the Anthropic Messages API returns, as it returns it.

Store helpers over :mod:`convstore.convert.anthropic`, each for a :class:`~convstore.Store`
and (prefixed ``a``, or ``Async`` for a class) for asyncio, on an
:class:`~convstore.AsyncStore` or a ``Store`` (through :func:`convstore.store.aio.as_async`):

- :func:`record_message` records a response ``Message`` as one assistant message;
- :func:`record_messages` records a request body or a list of ``MessageParam``;
- :class:`MessageStreamRecorder` / :class:`AsyncMessageStreamRecorder` consume the raw
  stream events and append each content block as soon as its ``content_block_stop`` arrives.

Every message is all or nothing: it is converted and checked whole before its one write, so
a refused block leaves the store as it was. A stream is checked event by event: an unknown
event or block type is refused when it arrives, before anything of it is written (blocks
that already landed stay, as they would if the process had died there).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from convstore.convert.anthropic import (
    block_from_anthropic,
    history_from_messages,
    message_from_response,
)
from convstore.convert.anthropic_hosted import SERVER_RESULT_TYPES
from convstore.convert.anthropic_parts import plain
from convstore.convert.parts import arguments_text
from convstore.domain.blocks import Block
from convstore.domain.errors import InvalidInput
from convstore.store.aio import AsyncStore, as_async

if TYPE_CHECKING:
    from convstore.store import Store

CALL_TYPES: tuple[str, ...] = ("tool_use", "server_tool_use", "mcp_tool_use")
"""Blocks whose input may stream in as ``input_json_delta`` pieces."""

STREAM_BLOCK_TYPES: tuple[str, ...] = (
    "text",
    "thinking",
    "redacted_thinking",
    *CALL_TYPES,
    "mcp_tool_result",
    "container_upload",
    *SERVER_RESULT_TYPES,
)
"""Content block types a response stream may open (results and uploads arrive whole in
their ``content_block_start``)."""

DELTA_TYPES: tuple[str, ...] = (
    "text_delta",
    "input_json_delta",
    "thinking_delta",
    "signature_delta",
    "citations_delta",
)
"""Delta types the stream recorder applies (each citation is added to its text's
``citations``, kept as the text's annotations)."""

HELPER_EVENT_TYPES: frozenset[str] = frozenset(
    {"text", "input_json", "citation", "thinking", "signature"}
)
"""Events the SDK's ``MessageStream`` adds beside the raw ones; they repeat a raw delta, so
the recorder passes over them."""

INTERRUPTING_STOP_REASONS: frozenset[str] = frozenset({"max_tokens"})
"""Stop reasons that mean the model was cut off: the message is recorded as interrupted."""


@dataclass(frozen=True, slots=True)
class StreamStep:
    """One write the stream asks for: open the message, append a block, or close it."""

    action: Literal["start", "block", "end", "interrupt"]
    block: Block | None = None
    reason: str | None = None


@dataclass(slots=True)
class _OpenBlock:
    data: dict[str, Any]
    parts: list[str] = field(default_factory=list)
    """Text, thinking or partial JSON received so far."""


@dataclass(slots=True)
class MessageStreamAssembler:
    """Turns raw ``RawMessageStreamEvent`` values into writes, with no I/O."""

    open: bool = False
    blocks: dict[int, _OpenBlock] = field(default_factory=dict)
    stop_reason: str | None = None
    events: int = 0

    def feed(self, event: object) -> list[StreamStep]:
        """The writes ``event`` completes (often none); raises :class:`InvalidInput` for an
        event or block this recorder does not know, naming it and its position."""
        data = plain(event)
        where = f"stream event {self.events}"
        self.events += 1
        if not isinstance(data, Mapping):
            msg = f"{where}: expected an event object, got {type(data).__name__}"
            raise InvalidInput(msg)
        kind = data.get("type")
        match kind:
            case "message_start":
                if self.open:
                    msg = f"{where}: message_start while a message is still open"
                    raise InvalidInput(msg)
                self.open, self.blocks, self.stop_reason = True, {}, None
                return [StreamStep("start")]
            case "content_block_start":
                self._require_open(where, kind)
                return self._start_block(data, where)
            case "content_block_delta":
                self._require_open(where, kind)
                self._delta(data, where)
                return []
            case "content_block_stop":
                self._require_open(where, kind)
                return [StreamStep("block", self._finish_block(data, where))]
            case "message_delta":
                delta = data.get("delta")
                if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                    self.stop_reason = delta["stop_reason"]
                return []
            case "message_stop":
                # The end is a write of its own, even in a store of format 3 (where a block
                # can carry it, ``append_block(..., last=True)``): the stream says a message
                # is over only here, after the last content_block_stop, and each block is
                # written as soon as it stops, not held back to learn whether it was the last.
                self._require_open(where, kind)
                self.open = False
                if self.stop_reason in INTERRUPTING_STOP_REASONS:
                    return [StreamStep("interrupt", reason=f"stopped at {self.stop_reason}")]
                return [StreamStep("end")]
            case "ping":
                return []
            case "error":
                if not self.open:
                    return []
                self.open = False
                error = data.get("error")
                detail = error.get("type") if isinstance(error, Mapping) else None
                return [StreamStep("interrupt", reason=f"stream error: {detail or 'unknown'}")]
            case str() if kind in HELPER_EVENT_TYPES:
                return []
            case _:
                msg = f"{where}: unsupported Anthropic stream event type {kind!r}"
                raise InvalidInput(msg)

    def _require_open(self, where: str, kind: str) -> None:
        if not self.open:
            msg = f"{where}: {kind} before message_start"
            raise InvalidInput(msg)

    def _index(self, data: Mapping[str, Any], where: str) -> int:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            msg = f"{where}: {data.get('type')} needs an integer index"
            raise InvalidInput(msg)
        return index

    def _start_block(self, data: Mapping[str, Any], where: str) -> list[StreamStep]:
        index = self._index(data, where)
        block = data.get("content_block")
        kind = block.get("type") if isinstance(block, Mapping) else None
        if not isinstance(block, Mapping) or kind not in STREAM_BLOCK_TYPES:
            msg = (
                f"{where}, content block {index}: unsupported Anthropic content block type "
                f"{kind!r} (accepted in a stream: {', '.join(STREAM_BLOCK_TYPES)})"
            )
            raise InvalidInput(msg)
        self.blocks[index] = _OpenBlock(dict(block))
        return []

    def _delta(self, data: Mapping[str, Any], where: str) -> None:
        index = self._index(data, where)
        block = self.blocks.get(index)
        if block is None:
            msg = f"{where}: delta for content block {index}, which was not started"
            raise InvalidInput(msg)
        delta = data.get("delta")
        if not isinstance(delta, Mapping):
            delta = {}
        kind = delta.get("type")
        match kind:
            case "text_delta":
                block.parts.append(str(delta.get("text", "")))
            case "thinking_delta":
                block.parts.append(str(delta.get("thinking", "")))
            case "input_json_delta":
                block.parts.append(str(delta.get("partial_json", "")))
            case "signature_delta":
                previous = block.data.get("signature") or ""
                block.data["signature"] = previous + str(delta.get("signature", ""))
            case "citations_delta":
                citations = block.data.get("citations") or []
                block.data["citations"] = [*citations, plain(delta.get("citation"))]
            case _:
                msg = (
                    f"{where}, content block {index}: unsupported delta type {kind!r} "
                    f"(accepted: {', '.join(DELTA_TYPES)})"
                )
                raise InvalidInput(msg)

    def _finish_block(self, data: Mapping[str, Any], where: str) -> Block:
        index = self._index(data, where)
        block = self.blocks.pop(index, None)
        if block is None:
            msg = f"{where}: content_block_stop for block {index}, which was not started"
            raise InvalidInput(msg)
        final = block.data
        streamed = "".join(block.parts)
        match final.get("type"):
            case "text":
                final["text"] = str(final.get("text") or "") + streamed
            case "thinking":
                final["thinking"] = str(final.get("thinking") or "") + streamed
            case str() as kind if kind in CALL_TYPES and block.parts:
                final["input"] = arguments_text(streamed)
            case _:
                pass
        return block_from_anthropic(final, f"{where}, content block {index}")


class MessageStreamRecorder:
    """Records a streamed response into a :class:`~convstore.Store` block by block.

    Feed it every event of ``client.messages.create(..., stream=True)`` (or of a
    ``messages.stream(...)`` helper: its extra text/thinking events are passed over). The
    message's end is recorded at ``message_stop``, after its last block (see
    :meth:`MessageStreamAssembler.feed`).
    """

    def __init__(self, store: Store, conversation: UUID | str) -> None:
        self.store = store
        self.conversation = conversation
        self.message_id: UUID | None = None
        """The message being (or last) recorded."""
        self._assembler = MessageStreamAssembler()

    def record(self, event: object) -> None:
        """Apply one stream event: a write happens at message_start, each
        content_block_stop, and message_stop."""
        for step in self._assembler.feed(event):
            match step.action:
                case "start":
                    self.message_id = self.store.start_message(self.conversation, "assistant")
                case "block":
                    assert self.message_id is not None
                    assert step.block is not None
                    self.store.append_block(self.conversation, self.message_id, step.block)
                case "end":
                    assert self.message_id is not None
                    self.store.end_message(self.conversation, self.message_id)
                case "interrupt":
                    assert self.message_id is not None
                    self.store.interrupt_message(self.conversation, self.message_id, step.reason)

    def record_all(self, events: Iterable[object]) -> UUID | None:
        """Record every event of a stream; returns the message id."""
        for event in events:
            self.record(event)
        return self.message_id


class AsyncMessageStreamRecorder:
    """:class:`MessageStreamRecorder` for asyncio, on an :class:`~convstore.AsyncStore` or a
    :class:`~convstore.Store`."""

    def __init__(self, store: Store | AsyncStore, conversation: UUID | str) -> None:
        self.store = as_async(store)
        self.conversation = conversation
        self.message_id: UUID | None = None
        self._assembler = MessageStreamAssembler()

    async def record(self, event: object) -> None:
        """Apply one stream event (see :meth:`MessageStreamRecorder.record`)."""
        for step in self._assembler.feed(event):
            match step.action:
                case "start":
                    self.message_id = await self.store.start_message(self.conversation, "assistant")
                case "block":
                    assert self.message_id is not None
                    assert step.block is not None
                    await self.store.append_block(self.conversation, self.message_id, step.block)
                case "end":
                    assert self.message_id is not None
                    await self.store.end_message(self.conversation, self.message_id)
                case "interrupt":
                    assert self.message_id is not None
                    await self.store.interrupt_message(
                        self.conversation, self.message_id, step.reason
                    )

    async def record_all(self, events: AsyncIterable[object]) -> UUID | None:
        """Record every event of an async stream; returns the message id."""
        async for event in events:
            await self.record(event)
        return self.message_id


def record_message(store: Store, conversation: UUID | str, message: object) -> UUID:
    """Record a response ``Message`` (dict or SDK object) as one assistant message."""
    turn = message_from_response(message)
    return store.append_message(conversation, turn.role, turn.blocks)


def record_messages(store: Store, conversation: UUID | str, data: object) -> list[UUID]:
    """Record a request body (system first) or a ``MessageParam`` list, one write per
    message. Everything is converted first, so a refused block records nothing at all."""
    history = history_from_messages(data)
    return [store.append_message(conversation, m.role, m.blocks) for m in history.messages]


async def arecord_message(
    store: Store | AsyncStore, conversation: UUID | str, message: object
) -> UUID:
    """:func:`record_message` for asyncio."""
    turn = message_from_response(message)
    return await as_async(store).append_message(conversation, turn.role, turn.blocks)


async def arecord_messages(
    store: Store | AsyncStore, conversation: UUID | str, data: object
) -> list[UUID]:
    """:func:`record_messages` for asyncio."""
    history = history_from_messages(data)
    twin = as_async(store)
    return [await twin.append_message(conversation, m.role, m.blocks) for m in history.messages]
