"""Recording what OpenAI models return: the converters of :mod:`~convstore.convert.openai_chat`
and :mod:`~convstore.convert.responses` with a store underneath.

Every function converts its whole input before it writes, so a refused item leaves the store
as it was; each message is then one atomic ``append_message``. The ``a``-prefixed variants
(and :class:`AsyncChatStreamRecorder`) are for asyncio: they take an
:class:`~convstore.AsyncStore` or a :class:`~convstore.Store` (through
:func:`convstore.store.aio.as_async`). The stream recorders append each block as soon as the stream
completes it.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from convstore.convert.chat_stream import ChunkAssembler
from convstore.convert.history import HistoryMessage
from convstore.convert.openai_chat import assistant_blocks, chat_messages, completion_message
from convstore.convert.parts import as_dict
from convstore.convert.responses import response_messages
from convstore.convert.responses_stream import ResponseEventAssembler
from convstore.domain.blocks import Block
from convstore.domain.errors import InvalidInput
from convstore.store.aio import AsyncStore, as_async

if TYPE_CHECKING:
    from convstore.store import Store


def _record(store: Store, conversation: UUID | str, messages: list[HistoryMessage]) -> list[UUID]:
    return [store.append_message(conversation, m.role, m.blocks) for m in messages]


async def _arecord(
    store: Store | AsyncStore, conversation: UUID | str, messages: list[HistoryMessage]
) -> list[UUID]:
    twin = as_async(store)
    return [await twin.append_message(conversation, m.role, m.blocks) for m in messages]


def _assistant(message: object) -> list[HistoryMessage]:
    return [HistoryMessage("assistant", assistant_blocks(completion_message(message)))]


def _tools(messages: Iterable[object]) -> list[HistoryMessage]:
    fields = [as_dict(m, f"tool message {i}") for i, m in enumerate(messages)]
    for index, message in enumerate(fields):
        if message.get("role", "tool") != "tool":
            msg = (
                f"tool message {index}: role {message['role']!r}; only 'tool' messages belong here"
            )
            raise InvalidInput(msg)
    return chat_messages({**m, "role": "tool"} for m in fields)


def record_chat_message(store: Store, conversation: UUID | str, message: object) -> UUID:
    """Record an assistant message (a ``ChatCompletionMessage``, a whole ``ChatCompletion``
    whose first choice is taken, or a dict); returns the message id."""
    return _record(store, conversation, _assistant(message))[0]


async def arecord_chat_message(
    store: Store | AsyncStore, conversation: UUID | str, message: object
) -> UUID:
    """:func:`record_chat_message` for asyncio."""
    return (await _arecord(store, conversation, _assistant(message)))[0]


def record_tool_messages(
    store: Store, conversation: UUID | str, messages: Iterable[object]
) -> UUID | None:
    """Record ``tool`` role messages as ONE user message of tool results (tool names come from
    the calls recorded earlier); returns its id, or ``None`` when there were none."""
    ids = _record(store, conversation, _tools(messages))
    return ids[0] if ids else None


async def arecord_tool_messages(
    store: Store | AsyncStore, conversation: UUID | str, messages: Iterable[object]
) -> UUID | None:
    """:func:`record_tool_messages` for asyncio."""
    ids = await _arecord(store, conversation, _tools(messages))
    return ids[0] if ids else None


def record_chat_messages(
    store: Store, conversation: UUID | str, messages: Iterable[object]
) -> list[UUID]:
    """Record a Chat Completions message list (any roles); returns the new message ids."""
    return _record(store, conversation, chat_messages(messages))


async def arecord_chat_messages(
    store: Store | AsyncStore, conversation: UUID | str, messages: Iterable[object]
) -> list[UUID]:
    """:func:`record_chat_messages` for asyncio."""
    return await _arecord(store, conversation, chat_messages(messages))


def record_responses_items(
    store: Store, conversation: UUID | str, items: Iterable[object]
) -> list[UUID]:
    """Record Responses API items (input items, or a ``Response``'s ``output``); returns the
    new message ids."""
    return _record(store, conversation, response_messages(items))


async def arecord_responses_items(
    store: Store | AsyncStore, conversation: UUID | str, items: Iterable[object]
) -> list[UUID]:
    """:func:`record_responses_items` for asyncio."""
    return await _arecord(store, conversation, response_messages(items))


class _Assembler(Protocol):
    """What a stream recorder folds its stream with (:class:`ChunkAssembler`,
    :class:`ResponseEventAssembler`)."""

    @property
    def cut_short(self) -> str | None: ...
    def feed(self, chunk: object) -> list[Block]: ...
    def finish(self) -> list[Block]: ...
    def pending_text(self) -> list[Block]: ...


class ChatStreamRecorder:
    """Records a streamed assistant message from ``ChatCompletionChunk`` s.

    The message opens at the first chunk; each block is appended as soon as it is complete;
    :meth:`finish` ends the message (or interrupts it when ``finish_reason`` says the output
    was cut short). Used as a context manager, an exception inside interrupts the message
    with the exception as the reason: what landed stays, plus the text in progress.
    """

    def __init__(self, store: Store, conversation: UUID | str) -> None:
        self.store = store
        self.conversation = conversation
        self.message_id: UUID | None = None
        """The message being recorded, once the first chunk arrived."""
        self._assembler: _Assembler = self._new_assembler()

    @staticmethod
    def _new_assembler() -> _Assembler:
        return ChunkAssembler()

    def feed(self, chunk: object) -> None:
        """Take one chunk, appending the blocks it completed."""
        self._append(self._assembler.feed(chunk))

    def finish(self) -> UUID:
        """The stream ended: append the last block and close the message; returns its id.

        A block the stream's end completed (a Chat Completion's last) closes the message
        itself (``last=True``: in a store of format 3 no end event follows it). Where every
        block landed before the stream said it was over (a Responses stream's items each come
        whole, before ``response.completed``), the end is an event of its own: the block was
        written when it was complete, and is not held back to learn whether it is the last."""
        blocks = self._assembler.finish()
        cut = self._assembler.cut_short
        message = self._append(blocks, closes=cut is None)
        if cut is not None:
            self.store.interrupt_message(self.conversation, message, cut)
        elif not blocks:
            self.store.end_message(self.conversation, message)
        return message

    def interrupt(self, reason: str | None = None) -> UUID:
        """The stream broke off: keep what landed (and the text in progress), and record that
        the message was cut short."""
        message = self._append(self._assembler.pending_text())
        self.store.interrupt_message(self.conversation, message, reason)
        return message

    def _append(self, blocks: list[Block], *, closes: bool = False) -> UUID:
        """Append ``blocks`` (opening the message first if needed); with ``closes`` the last
        of them ends the message."""
        if self.message_id is None:
            self.message_id = self.store.start_message(self.conversation, "assistant")
        for position, block in enumerate(blocks, 1):
            last = closes and position == len(blocks)
            self.store.append_block(self.conversation, self.message_id, block, last=last)
        return self.message_id

    def __enter__(self) -> ChatStreamRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.finish()
        else:
            self.interrupt(f"the stream failed: {type(exc).__name__}: {exc}"[:500])


class AsyncChatStreamRecorder:
    """:class:`ChatStreamRecorder` for asyncio (``await feed``, ``async with``), on an
    :class:`~convstore.AsyncStore` or a :class:`~convstore.Store`."""

    def __init__(self, store: Store | AsyncStore, conversation: UUID | str) -> None:
        self.store = as_async(store)
        self.conversation = conversation
        self.message_id: UUID | None = None
        """The message being recorded, once the first chunk arrived."""
        self._assembler: _Assembler = self._new_assembler()

    @staticmethod
    def _new_assembler() -> _Assembler:
        return ChunkAssembler()

    async def feed(self, chunk: object) -> None:
        """Take one chunk, appending the blocks it completed."""
        await self._append(self._assembler.feed(chunk))

    async def finish(self) -> UUID:
        """The stream ended: append the last block and close the message; returns its id
        (see :meth:`ChatStreamRecorder.finish`)."""
        blocks = self._assembler.finish()
        cut = self._assembler.cut_short
        message = await self._append(blocks, closes=cut is None)
        if cut is not None:
            await self.store.interrupt_message(self.conversation, message, cut)
        elif not blocks:
            await self.store.end_message(self.conversation, message)
        return message

    async def interrupt(self, reason: str | None = None) -> UUID:
        """The stream broke off: keep what landed (and the text in progress), and record that
        the message was cut short."""
        message = await self._append(self._assembler.pending_text())
        await self.store.interrupt_message(self.conversation, message, reason)
        return message

    async def _append(self, blocks: list[Block], *, closes: bool = False) -> UUID:
        if self.message_id is None:
            self.message_id = await self.store.start_message(self.conversation, "assistant")
        for position, block in enumerate(blocks, 1):
            last = closes and position == len(blocks)
            await self.store.append_block(self.conversation, self.message_id, block, last=last)
        return self.message_id

    async def __aenter__(self) -> AsyncChatStreamRecorder:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.finish()
        else:
            await self.interrupt(f"the stream failed: {type(exc).__name__}: {exc}"[:500])


class ResponseStreamRecorder(ChatStreamRecorder):
    """Records a streamed Responses API output from its events (``ResponseStreamEvent`` s) as
    one assistant message: each output item is appended when its
    ``response.output_item.done`` arrives, as the blocks :func:`record_responses_items` would
    make of it (hosted tool calls and their results, annotated text, reasoning, calls).
    ``response.incomplete`` / ``response.failed`` interrupt the message with their reason; an
    exception inside the ``with`` keeps what landed plus the text still streaming, with the
    annotations it had so far."""

    @staticmethod
    def _new_assembler() -> _Assembler:
        return ResponseEventAssembler()


class AsyncResponseStreamRecorder(AsyncChatStreamRecorder):
    """:class:`ResponseStreamRecorder` for asyncio."""

    @staticmethod
    def _new_assembler() -> _Assembler:
        return ResponseEventAssembler()
