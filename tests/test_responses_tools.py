"""Responses API tool items (hosted and caller-run) into blocks: every item type of the
``openai`` SDK's unions is converted or refused, fixtures are checked against the SDK types,
hosted items keep the provider's item byte for byte, and a recorded history reads back."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem, ResponseStreamEvent
from pydantic import JsonValue, TypeAdapter, ValidationError

import convstore
from convstore.convert.responses import (
    ITEM_KEYS,
    ITEM_TYPES,
    REFUSED_ITEMS,
    history_from_responses,
    item_blocks,
)
from convstore.convert.responses_tools import CALLER_KEYS
from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.recording.openai import ResponseStreamRecorder, record_responses_items
from tests import responses_items as items
from tests.sdk import rejections, request_body, request_problems

OUTPUT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def _literal(annotation: object) -> str:
    """The one string of a ``Literal[...]`` inside ``Required``/``Optional`` wrappers."""
    args = typing.get_args(annotation)
    while args and not isinstance(args[0], str):
        args = typing.get_args(args[0])
    return str(args[0])


def sdk_input_keys() -> dict[str, set[str]]:
    """Every input item type of ``ResponseInputItemParam`` and the keys it may have."""
    found: dict[str, set[str]] = {}
    for arm in typing.get_args(ResponseInputItemParam):
        hints = typing.get_type_hints(arm, include_extras=True)
        found.setdefault(_literal(hints["type"]), set()).update(hints)
    return found


def sdk_output_keys() -> dict[str, set[str]]:
    """Every output item type of ``ResponseOutputItem`` and the keys it may have."""
    found: dict[str, set[str]] = {}
    for arm in typing.get_args(typing.get_args(ResponseOutputItem)[0]):
        kind = _literal(arm.model_fields["type"].annotation)
        keys = {field.alias or name for name, field in arm.model_fields.items()}
        found.setdefault(kind, set()).update(keys)
    return found


def test_every_sdk_item_type_is_converted_or_refused() -> None:
    """The item types of the SDK's input and output unions are exactly the converted ones
    and the refused ones: a type a newer SDK adds fails here rather than slipping through."""
    sdk = set(sdk_input_keys()) | set(sdk_output_keys())
    assert sdk == set(ITEM_TYPES) | set(REFUSED_ITEMS)
    assert not set(ITEM_TYPES) & set(REFUSED_ITEMS)


@pytest.mark.parametrize("kind", REFUSED_ITEMS)
def test_a_refused_item_type_is_named_in_one_line(kind: str) -> None:
    """Each refused type is refused naming itself and its position."""
    with pytest.raises(convstore.InvalidInput, match=rf"^item 0: item type '{kind}'") as refused:
        history_from_responses([{"type": kind, "id": "x"}])
    assert "\n" not in str(refused.value)


def test_checked_keys_are_the_sdk_keys() -> None:
    """Every item type whose keys are checked accepts exactly the keys the SDK gives it (a
    valid item is never refused for a key; a key the SDK does not know is)."""
    sdk = sdk_input_keys()
    for kind, known in sdk_output_keys().items():
        sdk.setdefault(kind, set()).update(known)
    for kind, keys in {**ITEM_KEYS, **CALLER_KEYS}.items():
        extra = {"end_turn"} if kind == "message" else set()  # older output messages
        assert set(keys) == sdk[kind] | extra, kind


@pytest.mark.parametrize("item", items.EVERY_ITEM, ids=lambda item: f"{item['type']}-{item['id']}")
def test_fixtures_are_valid_sdk_items(item: dict[str, Any]) -> None:
    """Each synthetic item is a valid SDK input item (no key or value the input type
    refuses) or output item, and most are both (a custom tool's output has a ``status`` as
    an output item only)."""
    try:
        as_output = OUTPUT_ADAPTER.validate_python(item).type == item["type"]
    except ValidationError:
        as_output = False
    as_input = request_problems(item, ResponseInputItemParam) == []
    assert as_output or as_input
    assert (as_output and as_input) or item["type"] == "custom_tool_call_output"


@pytest.mark.parametrize("item", items.HOSTED_ITEMS, ids=lambda item: item["id"])
def test_a_hosted_item_is_a_hosted_call_and_result_keeping_the_item(item: dict[str, Any]) -> None:
    """A provider-run item is a hosted call whose provider_data is the item byte for byte
    (an image's base64 result excepted: it is the image part), then its result, both on the
    assistant's side; the same from the SDK's parsed object."""
    for given in (item, OUTPUT_ADAPTER.validate_python(item)):  # a dict, and the SDK's object
        side, (use, result) = item_blocks(given)
        assert side == "assistant"
        assert isinstance(use, HostedToolUseBlock)
        assert isinstance(result, HostedToolResultBlock)
        assert result.tool_use_id == use.id == item["id"]
        whole = given if isinstance(given, dict) else given.model_dump(exclude_unset=True)
        kept = {k: v for k, v in whole.items() if not (k == "result" and "revised_prompt" in whole)}
        assert json.dumps(use.provider_data) == json.dumps(kept)


def hosted(item: dict[str, Any]) -> tuple[HostedToolUseBlock, HostedToolResultBlock]:
    """The hosted call and result one provider-run item converts to."""
    side, (use, result) = item_blocks(item)
    assert side == "assistant"
    assert isinstance(use, HostedToolUseBlock)
    assert isinstance(result, HostedToolResultBlock)
    return use, result


def test_what_each_hosted_item_reads_as() -> None:
    """Names, inputs, servers and readable outcomes of the hosted items."""
    use, result = hosted(items.WEB_SEARCH)
    assert (use.name, use.input) == ("web_search", {"type": "search", "query": "convstore"})
    assert result.content == (
        "status: completed\nsource: https://a.example/one\nsource: https://b.example/two"
    )
    use, result = hosted(items.FILE_SEARCH)
    assert (use.name, use.input) == ("file_search", {"queries": ["refund policy"]})
    assert result.content == (
        "status: completed\nresult: policy.md (file-1, score 0.91): Refunds within 30 days."
    )
    use, result = hosted(items.CODE_INTERPRETER)
    assert (use.name, use.input) == ("code_interpreter", {"code": "print(2 + 2)"})
    assert result.content[:2] == [TextBlock(text="status: completed"), TextBlock(text="4")]
    assert isinstance(result.content[2], ImageBlock)
    use, result = hosted(items.IMAGE_GENERATION)
    assert use.name == "image_generation"
    assert isinstance(use.input, dict)
    assert use.input["revised_prompt"] == "A tiny orange square."
    assert result.content == [ImageBlock(media_type="image/png", data=items.PNG)]
    use, result = hosted(items.MCP_CALL)
    assert (use.name, use.server, use.input) == (
        "ask_question",
        "deepwiki",
        {"repo": "a/b", "question": "What?"},
    )
    assert (result.content, result.is_error) == ("It stores conversations.", False)
    _, result = hosted(items.MCP_CALL_FAILED)
    assert result.is_error
    assert json.loads(str(result.content))["message"] == "unavailable"
    use, result = hosted(items.MCP_LIST_TOOLS)
    assert (use.name, use.server) == ("mcp_list_tools", "deepwiki")
    assert result.content == "ask_question: Ask about a repo.\nread_wiki"


def test_mcp_approvals_program_and_tool_search() -> None:
    """An approval request is a hosted call awaiting its decision, the response the user's
    text; a program and a server-run tool search are hosted calls whose results come as
    their own items, each kept whole."""
    side, (request,) = item_blocks(items.MCP_APPROVAL_REQUEST)
    assert side == "assistant"
    assert isinstance(request, HostedToolUseBlock)
    assert (request.id, request.name, request.server) == ("mcpr_1", "ask_question", "deepwiki")
    side, (decision,) = item_blocks(items.MCP_APPROVAL_RESPONSE)
    assert (side, decision) == (
        "user",
        TextBlock(text="[MCP approval: approved request mcpr_1 (read only)]"),
    )
    history = history_from_responses(
        [items.PROGRAM, items.PROGRAM_OUTPUT, items.TOOL_SEARCH_CALL, items.TOOL_SEARCH_OUTPUT]
    )
    (message,) = history.messages
    program, output, search, found = message.blocks
    assert isinstance(program, HostedToolUseBlock)
    assert isinstance(output, HostedToolResultBlock)
    assert (program.id, output.tool_use_id, output.content) == (
        "call_prog",
        "call_prog",
        "a.txt b.txt",
    )
    assert output.provider_data == items.PROGRAM_OUTPUT
    assert isinstance(search, HostedToolUseBlock)
    assert isinstance(found, HostedToolResultBlock)
    assert (search.name, found.content) == ("tool_search", "function get_weather")
    client = {**items.TOOL_SEARCH_CALL, "execution": "client"}
    assert isinstance(item_blocks(client)[1][0], ToolUseBlock)
    # The caller's own search: its output is every tool definition it returned, whole.
    side, (returned,) = item_blocks({**items.TOOL_SEARCH_OUTPUT, "execution": "client"})
    assert side == "results"
    assert isinstance(returned, ToolResultBlock)
    assert isinstance(returned.content, str)
    assert json.loads(returned.content) == items.TOOL_SEARCH_OUTPUT["tools"]


def test_caller_run_items_are_tool_rounds() -> None:
    """Caller-run calls are tool uses and their outputs tool results in the user's message;
    a screenshot is an image, a failed patch or a non-zero exit an error."""
    history = history_from_responses(
        [
            {"role": "user", "content": "Go."},
            *[item for pair in items.CALLER_ROUNDS for item in pair],
        ]
    )
    roles = [m.role for m in history.messages]
    assert roles == ["user", *["assistant", "user"] * len(items.CALLER_ROUNDS)]
    calls = [m.blocks[0] for m in history.messages[1::2]]
    outputs = [m.blocks[0] for m in history.messages[2::2]]
    assert [(c.name, c.input) for c in calls if isinstance(c, ToolUseBlock)] == [
        ("computer", {"action": items.COMPUTER_CALL["action"]}),
        ("local_shell", items.LOCAL_SHELL_CALL["action"]),
        ("shell", items.SHELL_CALL["action"]),
        ("apply_patch", items.APPLY_PATCH_CALL["operation"]),
        ("sql", "SELECT 1"),
    ]
    results = [o for o in outputs if isinstance(o, ToolResultBlock)]
    assert len(results) == len(outputs)
    screenshot, local, shell, patch, custom = results
    assert screenshot.content == [ImageBlock(media_type="image/png", data=items.PNG)]
    assert local.tool_use_id == "call_ls"
    assert (shell.content, shell.is_error) == (
        "exit code 0\n/work\n\nexit code 1\nstderr: nope",
        True,
    )
    assert patch.is_error
    assert custom.content == [
        TextBlock(text="one row"),
        DocumentBlock(file_id="file-9", name="rows.csv"),
    ]


def test_output_text_annotations_and_function_output_files_are_kept() -> None:
    """An ``output_text``'s annotations ride on its text verbatim; an ``input_file`` in a
    function output is a document part."""
    citation: dict[str, JsonValue] = {
        "type": "url_citation",
        "start_index": 0,
        "end_index": 4,
        "title": "A",
        "url": "https://a.example/one",
    }
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Cited.", "annotations": [citation]}],
    }
    output = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "input_file", "file_id": "file-2", "filename": "a.pdf"}],
    }
    assert request_problems(message, ResponseInputItemParam) == []
    assert request_problems(output, ResponseInputItemParam) == []
    (_, (text,)) = item_blocks(OUTPUT_ADAPTER.validate_python(message))
    assert text == TextBlock(text="Cited.", annotations=[citation])
    (_, (result,)) = item_blocks(output)
    assert result == ToolResultBlock(
        tool_use_id="c", content=[DocumentBlock(file_id="file-2", name="a.pdf")]
    )


def test_a_recorded_history_of_every_item_reads_back_whole(tmp_path: Path) -> None:
    """Every tool item recorded in a real store reads back as the blocks converted, the
    providers' items byte for byte."""
    given = [{"role": "user", "content": "Do it all."}, *items.EVERY_ITEM]
    expected = history_from_responses(given).messages
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        record_responses_items(store, conv, given)
        stored = store.messages(conv)
    assert [m.role for m in stored] == [m.role for m in expected]
    for message, want in zip(stored, expected, strict=True):
        got = tuple(b.block for b in message.blocks)
        assert [b.model_dump_json() for b in got] == [b.model_dump_json() for b in want.blocks]


def _done(item: dict[str, Any], index: int) -> dict[str, Any]:
    event = {"type": "response.output_item.done", "item": item, "output_index": index}
    return {**event, "sequence_number": index}


def test_a_stream_records_hosted_items_and_annotated_text_as_they_finish(tmp_path: Path) -> None:
    """A Responses stream (events checked against the SDK's event types) records each done
    item as the blocks its item converts to, in one assistant message; a stream broken off
    mid-text keeps the text so far with its annotations."""
    citation: dict[str, JsonValue] = {
        "type": "url_citation",
        "start_index": 0,
        "end_index": 3,
        "title": "A",
        "url": "https://a.example/one",
    }
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "Yes.", "annotations": [citation]}],
    }
    events = [
        {"type": "response.in_progress", "sequence_number": 0},
        _done(items.WEB_SEARCH, 1),
        _done(message, 2),
    ]
    for event in events[1:]:
        EVENT_ADAPTER.validate_python(event)
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        with ResponseStreamRecorder(store, conv) as recorder:
            for event in events:
                recorder.feed(event)
        (stored,) = store.messages(conv)
        assert stored.status == "ended"
        blocks = tuple(b.block for b in stored.blocks)
        assert blocks == (*item_blocks(items.WEB_SEARCH)[1], *item_blocks(message)[1])
        broken = [
            {"type": "response.output_text.delta", "delta": "Par", "item_id": "m"},
            {"type": "response.output_text.annotation.added", "annotation": citation},
            {"type": "response.output_text.delta", "delta": "is", "item_id": "m"},
        ]
        cut = ResponseStreamRecorder(store, conv)
        for step in broken:
            cut.feed(step)
        cut.interrupt("connection reset")
        last = store.messages(conv)[-1]
        assert last.status == "interrupted"
        assert [b.block for b in last.blocks] == [TextBlock(text="Paris", annotations=[citation])]
        with pytest.raises(convstore.InvalidInput, match="not a Responses stream event"):
            ResponseStreamRecorder(store, conv).feed({"type": "message_start"})


def test_every_item_replays_as_prose_the_sdks_accept(tmp_path: Path) -> None:
    """Recorded, every tool item replays in both shapes as requests the SDKs accept: hosted
    calls say the provider ran them (with their MCP server), caller-run rounds read as
    tool rounds, and cited text names its sources."""
    given = [{"role": "user", "content": "Do it all."}, *items.EVERY_ITEM]
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        record_responses_items(store, conv, given)
        for shape in ("openai", "anthropic"):
            fragment = store.replay(conv, shape=shape)
            assert rejections(shape, request_body(shape, fragment)) == []
        texts = [m["content"] for m in store.replay(conv)["messages"]]
    hosted_turn = texts[1]
    assert hosted_turn.startswith(
        'Tool use (run by the provider): web_search({"type":"search","query":"convstore"})\n\n'
        "Result (web_search, run by the provider): status: completed\n"
        "source: https://a.example/one\nsource: https://b.example/two"
    )
    assert (
        'Tool use (run by the provider, MCP server deepwiki): ask_question({"repo":"a/b",'
        in hosted_turn
    )
    assert "Error (ask_question, run by the provider): " in hosted_turn
    assert "[MCP approval: approved request mcpr_1 (read only)]" in texts
    assert 'Tool use: computer({"action":' in "\n".join(texts)
    assert "Error (shell): exit code 0" in "\n".join(texts)
