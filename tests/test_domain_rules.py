"""The domain's rules on their own: the Conversation aggregate and block parsing, with no store,
no backend and no projection in the way."""

from __future__ import annotations

import base64
from typing import Any
from uuid import uuid4

import pytest

from convstore.app.demo import tiny_png
from convstore.domain.blocks import TextBlock, ToolResultBlock, ToolUseBlock
from convstore.domain.conversation import Conversation
from convstore.domain.errors import InvalidBlock, InvalidInput, MessageClosed, MessageNotFound
from convstore.domain.events import BlockAppended, BlockRecorded, MessageEnded, MessageStarted
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_block

TEXT = TextBlock(text="hello")


def started() -> Conversation:
    """A conversation that has been started (its first event folded in)."""
    conv_id = uuid4()
    conversation = Conversation(id=conv_id)
    conversation.apply(Conversation.start(conv_id, "t"))
    return conversation


def fold(conversation: Conversation, *events: object) -> None:
    for event in events:
        conversation.apply(event)  # type: ignore[arg-type]


# -- Conversation ------------------------------------------------------------------------------


def test_a_whole_message_is_started_blocks_and_ended_with_consecutive_versions() -> None:
    """record_message decides started, one event per block and ended, versions in a row."""
    conversation = started()
    events = conversation.record_message("user", [TEXT, TextBlock(text="again")])
    assert [type(e) for e in events] == [MessageStarted, BlockAppended, BlockAppended, MessageEnded]
    assert [e.originator_version for e in events] == [2, 3, 4, 5]
    assert len({e.timestamp for e in events}) == 1
    fold(conversation, *events)
    assert conversation.version == 5


def test_deciding_does_not_change_the_state_until_the_event_is_applied() -> None:
    """A command only returns an event: the state moves when that event is folded in."""
    conversation = started()
    event = conversation.start_message("assistant")
    assert conversation.version == 1
    assert event.message_id not in conversation.messages
    conversation.apply(event)
    assert conversation.messages[event.message_id].role == "assistant"


def test_a_closed_message_takes_no_more_blocks_and_cannot_close_again() -> None:
    """After end (or interrupt) a message refuses blocks, end and interrupt."""
    conversation = started()
    opened = conversation.start_message("assistant")
    fold(conversation, opened)
    fold(conversation, conversation.end_message(opened.message_id))
    with pytest.raises(MessageClosed):
        conversation.append_block(opened.message_id, TEXT)
    with pytest.raises(MessageClosed):
        conversation.end_message(opened.message_id)
    with pytest.raises(MessageClosed):
        conversation.interrupt_message(opened.message_id, "late")


def test_an_unknown_message_is_not_found() -> None:
    """Blocks, ends, compactions and rewinds naming a message never started are refused."""
    conversation = started()
    unknown = uuid4()
    for command in (
        lambda: conversation.append_block(unknown, TEXT),
        lambda: conversation.end_message(unknown),
        lambda: conversation.compact("s", through=unknown),
        lambda: conversation.rewind(unknown),
    ):
        with pytest.raises(MessageNotFound):
            command()


def test_a_blank_summary_is_refused() -> None:
    """compact refuses a summary of only whitespace."""
    conversation = started()
    fold(conversation, *conversation.record_message("user", [TEXT]))
    message = next(iter(conversation.messages))
    with pytest.raises(InvalidInput, match="blank"):
        conversation.compact("  \n", through=message)
    assert conversation.compact("done", through=message).through == message


def test_rewind_withdraws_later_messages_which_then_take_nothing() -> None:
    """After rewind(to=first) the second message is withdrawn and refuses new blocks."""
    conversation = started()
    fold(conversation, *conversation.record_message("user", [TEXT]))
    first = next(iter(conversation.messages))
    second = conversation.start_message("assistant")
    fold(conversation, second)
    fold(conversation, conversation.rewind(first))
    assert conversation.messages[second.message_id].withdrawn
    assert not conversation.messages[first].withdrawn
    with pytest.raises(MessageClosed, match="withdrawn"):
        conversation.append_block(second.message_id, TEXT)


def test_a_tool_result_records_the_name_of_its_call() -> None:
    """A result's block event carries the tool name of the call it answers."""
    conversation = started()
    call = ToolUseBlock(id="c1", name="ls", input={})
    fold(conversation, *conversation.record_message("assistant", [call]))
    result = ToolResultBlock(tool_use_id="c1", content="a.txt")
    events = conversation.record_message("user", [result])
    appended = [e for e in events if isinstance(e, BlockAppended)]
    assert [e.tool_name for e in appended] == ["ls"]


def test_a_format3_block_event_equals_the_validated_one_and_refuses_an_unknown_role() -> None:
    """A block event is assembled, not validated again: it equals the event validation would
    build from the same fields, and the one field no parser checked on the way (the role, a
    caller that skipped the store's edge) is refused before anything is decided."""
    conv_id = uuid4()
    conversation = Conversation(id=conv_id, block_events=True)
    conversation.apply(Conversation.start(conv_id, "t"))
    (event,) = conversation.record_message("user", [TEXT])
    assert isinstance(event, BlockRecorded)
    assert event == BlockRecorded.model_validate(event.model_dump())
    assert list(event.__dict__) == list(BlockRecorded.model_fields)
    with pytest.raises(InvalidInput, match="unknown role 'robot'"):
        conversation.record_message("robot", [TEXT])  # type: ignore[arg-type]
    assert conversation.version == 1  # deciding changed nothing


def test_apply_refuses_an_event_out_of_order() -> None:
    """Folding an event whose version does not follow the state's is an error."""
    conversation = started()
    event = conversation.start_message("user")
    fold(conversation, event)
    with pytest.raises(ValueError, match="does not follow"):
        conversation.apply(event)


def test_recheck_accepts_what_the_writer_decided_and_refuses_a_second_start() -> None:
    """recheck passes every event the commands decide, and refuses a conversation started twice."""
    conv_id = uuid4()
    first = Conversation.start(conv_id)
    conversation = Conversation(id=conv_id)
    conversation.recheck(first)
    conversation.apply(first)
    for event in conversation.record_message("user", [TEXT]):
        conversation.recheck(event)
        conversation.apply(event)
    again = Conversation.start(conv_id).model_copy(
        update={"originator_version": conversation.version + 1}
    )
    with pytest.raises(InvalidInput, match="conversation_started"):
        conversation.recheck(again)


# -- parse_block -------------------------------------------------------------------------------


def test_parse_block_reads_each_kind_from_a_mapping() -> None:
    """A dict of each kind becomes its model; a model is checked as its fields and comes
    back equal."""
    png = base64.b64encode(tiny_png(4, 3)).decode()
    kinds: dict[str, dict[str, Any]] = {
        "text": {"type": "text", "text": "hi"},
        "tool_use": {"type": "tool_use", "id": "c", "name": "ls", "input": {}},
        "tool_result": {"type": "tool_result", "tool_use_id": "c", "content": "x"},
        "reasoning": {"type": "reasoning", "text": "think"},
        "image": {"type": "image", "media_type": "image/png", "data": png},
    }
    for kind, value in kinds.items():
        assert parse_block(value).type == kind
    assert parse_block(TEXT) == TEXT


@pytest.mark.parametrize(
    "value",
    [
        {"type": "nope", "text": "x"},
        {"type": "text"},
        {"type": "text", "text": "x", "extra": 1},
        {"type": "tool_use", "id": "c", "name": "ls", "input": {"x": float("nan")}},
    ],
    ids=["unknown-kind", "missing-field", "extra-field", "not-json"],
)
def test_parse_block_refuses_what_is_not_a_block(value: dict[str, Any]) -> None:
    """Unknown kinds, missing or extra fields and values JSON cannot hold are InvalidBlock."""
    with pytest.raises(InvalidBlock):
        parse_block(value)


def test_parse_block_enforces_the_limits() -> None:
    """A block over max_block_bytes, or an image over max_image_bytes, is refused."""
    with pytest.raises(InvalidBlock, match="the limit is 100"):
        parse_block({"type": "text", "text": "x" * 200}, Limits(max_block_bytes=100))
    png = base64.b64encode(tiny_png(40, 30)).decode()
    image = {"type": "image", "media_type": "image/png", "data": png}
    with pytest.raises(InvalidBlock):
        parse_block(image, Limits(max_image_bytes=10))
    assert parse_block(image).type == "image"
