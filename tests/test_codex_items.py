"""A Codex rollout's ``response_item``s are Responses API items: each converts to the same
blocks from a rollout as from a Responses body (one conversion, in
``convert/responses_tools.py``), and what Codex writes differently from the API (a web search
with no ``id``, a shell call with only an ``id``, a ``status`` on a custom tool call, a
``name`` on its output) is the only difference.

The shared items are written as codex-rs writes them (only the keys its ``ResponseItem``
has) and each is checked against the ``openai`` SDK's item types, so both readers are given
a real item.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem
from pydantic import TypeAdapter, ValidationError

from convstore import open_store
from convstore.app.export import export_conversation
from convstore.convert.codex import CODEX_KEYS, histories_from_rollout
from convstore.convert.history import HistoryMessage
from convstore.convert.responses import response_messages
from convstore.domain.blocks import (
    HostedToolResultBlock,
    HostedToolUseBlock,
    TextBlock,
    ToolResultBlock,
)
from convstore.domain.errors import InvalidInput
from tests import responses_items as items
from tests.sdk import request_problems
from tests.strategies import TINY_IMAGES

OUTPUT_ADAPTER: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
JPEG = TINY_IMAGES["image/jpeg"][0]

IMAGE_GENERATION = {
    "type": "image_generation_call",
    "id": "ig_1",
    "status": "completed",
    "revised_prompt": "A tiny square.",
    "result": JPEG,  # Codex writes no output_format: the format is read from the bytes
}
IMAGE_GENERATION_FAILED = {"type": "image_generation_call", "id": "ig_2", "status": "failed"}
IMAGE_GENERATION_UNDER_WAY = {  # codex-rs writes its result as "" until there is an image
    "type": "image_generation_call",
    "id": "ig_3",
    "status": "generating",
    "result": "",
}
CLIENT_TOOL_SEARCH = {
    "type": "tool_search_call",
    "call_id": "call_ts_client",
    "execution": "client",
    "status": "completed",
    "arguments": {"query": "rollback", "limit": 1},
}
CLIENT_TOOL_SEARCH_OUTPUT = {
    "type": "tool_search_output",
    "call_id": "call_ts_client",
    "execution": "client",
    "status": "completed",
    "tools": [{"type": "function", "name": "rollback", "parameters": {}, "strict": True}],
}
CUSTOM_TOOL_CALL_OUTPUT = {
    "type": "custom_tool_call_output",
    "call_id": "call_ct",
    "output": [{"type": "input_text", "text": "one row"}],
}
LOCAL_SHELL_OUTPUT = {"type": "function_call_output", "call_id": "call_ls", "output": "a b"}

SHARED: tuple[dict[str, Any], ...] = (
    items.WEB_SEARCH,
    items.WEB_OPEN_PAGE,
    IMAGE_GENERATION,
    IMAGE_GENERATION_FAILED,
    IMAGE_GENERATION_UNDER_WAY,
    items.TOOL_SEARCH_CALL,
    items.TOOL_SEARCH_OUTPUT,
    CLIENT_TOOL_SEARCH,
    CLIENT_TOOL_SEARCH_OUTPUT,
    items.CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    items.LOCAL_SHELL_CALL,
    LOCAL_SHELL_OUTPUT,
)
"""One or more items of every tool item type Codex writes, valid for the SDK and for Codex."""


def _id(item: dict[str, Any]) -> str:
    return f"{item['type']}-{item.get('id') or item.get('call_id')}"


def _rollout(*payloads: dict[str, Any]) -> str:
    lines = [{"timestamp": "t", "type": "response_item", "payload": p} for p in payloads]
    return "".join(json.dumps(line) + "\n" for line in lines)


def _codex(*payloads: dict[str, Any]) -> list[HistoryMessage]:
    [history] = histories_from_rollout(_rollout(*payloads))
    return history.messages


def test_the_shared_items_cover_every_item_type_codex_writes() -> None:
    """Every tool item type whose keys Codex checks has an item here (a new one must too)."""
    assert {item["type"] for item in SHARED} >= set(CODEX_KEYS)


@pytest.mark.parametrize("item", SHARED, ids=_id)
def test_a_shared_item_is_a_real_sdk_item_codex_could_write(item: dict[str, Any]) -> None:
    """Valid as an SDK input or output item, and holding only keys codex-rs writes."""
    try:
        as_output = OUTPUT_ADAPTER.validate_python(item).type == item["type"]
    except ValidationError:
        as_output = False
    assert as_output or request_problems(item, ResponseInputItemParam) == []
    if item["type"] in CODEX_KEYS:
        assert set(item) <= CODEX_KEYS[item["type"]]


@pytest.mark.parametrize("item", SHARED, ids=_id)
def test_an_item_is_the_same_blocks_from_a_rollout_and_from_a_responses_body(
    item: dict[str, Any],
) -> None:
    """Each item alone: the same messages, block for block."""
    expected = response_messages([item])
    assert expected
    assert _codex(item) == expected


def test_a_whole_run_of_items_reads_the_same_from_both() -> None:
    """All of them in order, grouped into messages the same way."""
    assert _codex(*SHARED) == response_messages(SHARED)


def test_a_web_search_without_an_id_is_named_by_its_line_and_kept_as_written() -> None:
    """Codex writes no id: the call and its result take ``web_search_call:line N``, the
    call's provider_data stays the item as written, and the rest is the API's reading."""
    written = {k: v for k, v in items.WEB_OPEN_PAGE.items() if k != "id"}
    [message] = _codex({"type": "reasoning", "summary": []}, written)
    use, result = message.blocks
    [api] = response_messages([{**written, "id": "web_search_call:line 2"}])
    api_use, api_result = api.blocks
    assert isinstance(use, HostedToolUseBlock)
    assert isinstance(api_use, HostedToolUseBlock)
    assert use.provider_data == written
    assert use.model_copy(update={"provider_data": api_use.provider_data}) == api_use
    assert result == api_result
    assert isinstance(result, HostedToolResultBlock)
    assert (result.tool_use_id, result.content) == ("web_search_call:line 2", "status: completed")


def test_codex_only_keys_are_read_as_codex_means_them() -> None:
    """A shell call with only an ``id`` (Chat Completions mode) is called by it; a custom
    tool call's ``status`` is dropped as every caller-run call's is; a custom tool output's
    ``name`` names its result."""
    shell = {k: v for k, v in items.LOCAL_SHELL_CALL.items() if k != "call_id"}
    assert _codex(shell) == response_messages([{**shell, "call_id": shell["id"]}])
    custom = {**items.CUSTOM_TOOL_CALL, "status": "completed"}
    assert _codex(custom) == response_messages([items.CUSTOM_TOOL_CALL])
    named = {**CUSTOM_TOOL_CALL_OUTPUT, "name": "sql"}
    [message] = _codex(named)
    assert message.blocks == (
        ToolResultBlock(tool_use_id="call_ct", name="sql", content=[TextBlock(text="one row")]),
    )


@pytest.mark.parametrize(
    ("item", "named"),
    [
        (
            {**IMAGE_GENERATION, "output_format": "jpeg"},
            "item 'image_generation_call': key 'output_format'",
        ),
        ({**CUSTOM_TOOL_CALL_OUTPUT, "id": "x"}, "item 'custom_tool_call_output': key 'id'"),
    ],
)
def test_a_key_codex_does_not_write_is_refused_naming_it(item: dict[str, Any], named: str) -> None:
    """The API's reading accepts these keys; a rollout holding one is not what Codex writes."""
    assert response_messages([item])
    with pytest.raises(InvalidInput, match=named):
        histories_from_rollout(_rollout(item))


CONTEXT = {
    "type": "message",
    "role": "user",
    "content": [
        {"type": "input_text", "text": "<environment_context>cwd /w</environment_context>"}
    ],
}
AGENTS = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "# AGENTS.md instructions for /w\n\nBe kind."}],
}
ASK = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Why\n red?"}]}
SHELL = {"type": "function_call", "call_id": "sh", "name": "shell", "arguments": "{}"}


def _shell_output(output: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": "sh", "output": output}


@pytest.mark.parametrize("typed", [True, False], ids=["user_message event", "older layout"])
def test_a_rollout_is_titled_by_the_users_first_question_not_codex_context(
    typed: bool, tmp_path: Path
) -> None:
    """Codex writes its own context as user messages first: the title is what the user asked
    (from the ``user_message`` event, else the first user text that is not Codex's), so
    ``list`` and the Markdown export's heading name it. Before, the conversation was listed
    by its ``<environment_context>`` and the export was headed "# Conversation"."""
    lines = [
        {
            "type": "session_meta",
            "payload": {"id": f"0199a1b2-0000-7000-8000-00000000000{typed:d}"},
        },
        {"type": "response_item", "payload": CONTEXT},
        {"type": "response_item", "payload": AGENTS},
        {"type": "response_item", "payload": ASK},
    ]
    if typed:
        lines.append(
            {"type": "event_msg", "payload": {"type": "user_message", "message": "Why\n red?"}}
        )
    text = "".join(
        json.dumps({"timestamp": "2026-01-02T10:00:00Z", **line}) + "\n" for line in lines
    )
    [history] = histories_from_rollout(text)
    assert history.title == "Why red?"
    with open_store(tmp_path / "s.db") as store:
        [conv] = store.import_histories([history]).ids
        assert store.conversation_info(conv).shown_title == "Why red?"
        assert export_conversation(store, conv, "markdown").text.startswith("# Why red?\n")


@pytest.mark.parametrize(
    ("output", "error"),
    [
        ('{"output":"boom\\n","metadata":{"exit_code":1,"duration_seconds":0.1}}', True),
        ('{"output":"ok\\n","metadata":{"exit_code":0,"duration_seconds":0.1}}', False),
        ("Exit code: 2\nWall time: 0.1 seconds\nOutput:\nboom", True),
        ("Exit code: 0\nWall time: 0.1 seconds\nOutput:\nok", False),
        ("plain output", False),
        ('{"output":"x","metadata":{"exit_code":true}}', False),
    ],
)
def test_a_shell_call_that_exited_non_zero_is_an_error(
    output: str, error: bool, tmp_path: Path
) -> None:
    """A Codex shell output that reports a non-zero exit code (the older JSON's
    ``metadata.exit_code``, the newer text's ``Exit code:`` line) is an error result, so it
    replays as ``Error (shell): …``. Before, every one replayed as ``Result (shell)``."""
    [history] = histories_from_rollout(_rollout(ASK, SHELL, _shell_output(output)))
    [result] = history.messages[-1].blocks
    assert isinstance(result, ToolResultBlock)
    assert result.is_error is error
    assert result.content == output
    with open_store(tmp_path / "s.db") as store:
        [conv] = store.import_histories([history]).ids
        replayed = store.replay(conv)["messages"][-1]["content"]
        assert replayed.startswith("Error (shell): " if error else "Result (shell): ")
