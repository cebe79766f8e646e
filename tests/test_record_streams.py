"""What the stream recorders write in each store format (docs/design/format-3.md).

In a store of format 3 a streamed message is its start and its block events, and the block
the recorder knows is the last closes the message (``append_block(..., last=True)``): a Chat
Completion's last block is completed by the stream's end, so no end event follows it. Where the
stream says a message is over only after its last block was written (an Anthropic
``message_stop``, a Responses ``response.completed``), the end stays an event of its own, as a
block is never held back. A store of format 2 gets the events 0.3.0 wrote. Either way the
replay is the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import convstore
from convstore.domain.blocks import Block
from convstore.domain.events import BlockRecorded, Event
from convstore.recording.anthropic import AsyncMessageStreamRecorder, MessageStreamRecorder
from convstore.recording.openai import (
    AsyncChatStreamRecorder,
    AsyncResponseStreamRecorder,
    ChatStreamRecorder,
    ResponseStreamRecorder,
)
from tests import responses_items as items
from tests.conftest import format2_store_file
from tests.test_chat_stream import STREAM, WANTED, chunk
from tests.test_record_anthropic import EXPECTED, _stream
from tests.test_responses_tools import EVENT_ADAPTER, _done

RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "gpt-5",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}
MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Yes.", "annotations": []}],
}
RESPONSE_EVENTS = [
    EVENT_ADAPTER.validate_python(event)
    for event in (
        {"type": "response.in_progress", "sequence_number": 0, "response": RESPONSE},
        _done(items.WEB_SEARCH, 1),
        _done(MESSAGE, 2),
        {
            "type": "response.completed",
            "sequence_number": 3,
            "response": {**RESPONSE, "status": "completed", "output": [items.WEB_SEARCH, MESSAGE]},
        },
    )
]


def _location(tmp_path: Path, store_format: int, request: pytest.FixtureRequest) -> str:
    """A SQLite store of ``store_format``, or (``0``) a PostgreSQL one (format 3)."""
    if store_format == 0:
        make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
        return make()
    path = tmp_path / f"format{store_format}.db"
    if store_format == 2:
        format2_store_file(path)
    return str(path)


FORMATS = [
    pytest.param(3, id="sqlite-format3"),
    pytest.param(2, id="sqlite-format2"),
    pytest.param(0, id="postgres"),
]


def _kinds(events: list[Event]) -> list[str]:
    """Each event's type after the conversation's start, a closing block marked ``+``."""
    return [e.type + ("+" if isinstance(e, BlockRecorded) and e.closes else "") for e in events[1:]]


def _expected(store_format: int, blocks: int, end: str | None) -> list[str]:
    """A streamed message's events: its start, its blocks, and ``end`` (the end event's type);
    with ``None`` format 3's last block closes the message, and format 2 ends it as always."""
    if store_format == 2:
        return ["message_started", *["block_appended"] * blocks, end or "message_ended"]
    recorded = ["block_recorded"] * blocks
    if end is None:
        recorded[-1] += "+"
        return ["message_started", *recorded]
    return ["message_started", *recorded, end]


def _record(location: str, run: Callable[[convstore.Store, UUID], None]) -> tuple[Any, ...]:
    """Record with ``run`` into a new conversation (sync), then read back what it wrote."""
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        run(store, conv)
        [message] = store.messages(conv)
        blocks: list[Block] = [r.block for r in message.blocks]
        return (
            store.store_format,
            _kinds(store.events(conv)),
            blocks,
            message.status,
            store.replay(conv),
        )


def _arecord(location: str, run: Callable[[convstore.AsyncStore, UUID], Any]) -> tuple[Any, ...]:
    """:func:`_record` through an :class:`~convstore.AsyncStore`."""

    async def go() -> tuple[Any, ...]:
        async with await convstore.open_async_store(location) as store:
            conv = await store.new_conversation()
            await run(store, conv)
            [message] = await store.messages(conv)
            return (
                store.store.store_format,
                _kinds(await store.events(conv)),
                [r.block for r in message.blocks],
                message.status,
                await store.replay(conv),
            )

    return asyncio.run(go())


@pytest.mark.parametrize("store_format", FORMATS)
def test_a_chat_streams_last_block_closes_its_message(
    tmp_path: Path, request: pytest.FixtureRequest, store_format: int
) -> None:
    """The stream's end completes the last block: in format 3 it closes the message (no end
    event), in format 2 the end follows it as 0.3.0 wrote it; sync and async alike, and the
    replay is the same as format 2's."""

    def sync(store: convstore.Store, conv: UUID) -> None:
        with ChatStreamRecorder(store, conv) as recorder:
            for part in STREAM:
                recorder.feed(part)

    async def run_async(store: convstore.AsyncStore, conv: UUID) -> None:
        async with AsyncChatStreamRecorder(store, conv) as recorder:
            for part in STREAM:
                await recorder.feed(part)

    location = _location(tmp_path, store_format, request)
    wrote = _record(location, sync)
    assert _arecord(location, run_async)[1:] == wrote[1:]
    kept_format, kinds, blocks, status, replayed = wrote
    assert kinds == _expected(kept_format, len(WANTED), None)
    assert blocks == WANTED
    assert status == "ended"
    old = _record(str(format2_store_file(tmp_path / "old.db")), sync)
    assert replayed == old[4]


@pytest.mark.parametrize("store_format", FORMATS)
def test_a_chat_stream_cut_short_closes_with_its_interruption(
    tmp_path: Path, request: pytest.FixtureRequest, store_format: int
) -> None:
    """``finish_reason: length``: the last block does not close the message, the interruption
    (with its reason) does, in either format."""

    def run(store: convstore.Store, conv: UUID) -> None:
        with ChatStreamRecorder(store, conv) as recorder:
            recorder.feed(chunk({"content": "The answer is"}))
            recorder.feed(chunk({}, finish_reason="length"))

    kept_format, kinds, blocks, status, _ = _record(_location(tmp_path, store_format, request), run)
    assert kinds == _expected(kept_format, 1, "message_interrupted")
    assert len(blocks) == 1
    assert status == "interrupted"


@pytest.mark.parametrize("store_format", FORMATS)
def test_a_responses_stream_ends_with_an_event_after_its_items(
    tmp_path: Path, request: pytest.FixtureRequest, store_format: int
) -> None:
    """Each output item is written at its done event; the stream says it is over only after the
    last one, so the end is an event of its own in either format (no block held back)."""

    def sync(store: convstore.Store, conv: UUID) -> None:
        with ResponseStreamRecorder(store, conv) as recorder:
            for event in RESPONSE_EVENTS:
                recorder.feed(event)

    async def run_async(store: convstore.AsyncStore, conv: UUID) -> None:
        async with AsyncResponseStreamRecorder(store, conv) as recorder:
            for event in RESPONSE_EVENTS:
                await recorder.feed(event)

    location = _location(tmp_path, store_format, request)
    wrote = _record(location, sync)
    assert _arecord(location, run_async)[1:] == wrote[1:]
    kept_format, kinds, blocks, status, replayed = wrote
    assert kinds == _expected(kept_format, len(blocks), "message_ended")
    assert len(blocks) == 3  # the search's call and result, then the text
    assert status == "ended"
    assert replayed == _record(str(format2_store_file(tmp_path / "old.db")), sync)[4]


@pytest.mark.parametrize("store_format", FORMATS)
def test_an_anthropic_stream_ends_at_message_stop(
    tmp_path: Path, request: pytest.FixtureRequest, store_format: int
) -> None:
    """Blocks land at each content_block_stop; message_stop, after the last, is the end's own
    event in either format; the replay is format 2's."""

    def sync(store: convstore.Store, conv: UUID) -> None:
        MessageStreamRecorder(store, conv).record_all(_stream())

    async def run_async(store: convstore.AsyncStore, conv: UUID) -> None:
        async def events() -> Any:
            for event in _stream():
                yield event

        await AsyncMessageStreamRecorder(store, conv).record_all(events())

    location = _location(tmp_path, store_format, request)
    wrote = _record(location, sync)
    assert _arecord(location, run_async)[1:] == wrote[1:]
    kept_format, kinds, blocks, status, replayed = wrote
    assert kinds == _expected(kept_format, len(EXPECTED), "message_ended")
    assert blocks == EXPECTED
    assert status == "ended"
    assert replayed == _record(str(format2_store_file(tmp_path / "old.db")), sync)[4]


@pytest.mark.parametrize("store_format", FORMATS)
def test_a_chat_stream_with_no_block_is_a_start_and_an_end(
    tmp_path: Path, request: pytest.FixtureRequest, store_format: int
) -> None:
    """No block is left for the end to ride on: the end is its own event in either format."""

    def run(store: convstore.Store, conv: UUID) -> None:
        recorder = ChatStreamRecorder(store, conv)
        recorder.feed(chunk({"role": "assistant", "content": ""}, finish_reason="stop"))
        recorder.finish()

    _, kinds, blocks, status, _ = _record(_location(tmp_path, store_format, request), run)
    assert kinds == ["message_started", "message_ended"]
    assert (blocks, status) == ([], "ended")
