"""Codex rollouts, Gemini CLI sessions and Vercel AI UIMessages keep what the provider ran
(hosted tool calls and their results), cited sources and generated files (issue 22).

The fixtures ``tests/fixtures/import/*-hosted.*`` are small and synthetic, shaped after each
format's own types: codex-rs ``ResponseItem`` (``web_search_call`` with its ``action`` and no
``id``, ``image_generation_call``, ``tool_search_call`` / ``tool_search_output`` run by the
server or by Codex), the Gemini API ``Part`` (``executableCode`` / ``codeExecutionResult``,
``inlineData``) as Gemini CLI records it, and ai v5 ``UIMessage`` parts (tool parts with
``providerExecuted``, ``source-url`` / ``source-document``, ``file``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from convstore import open_store
from convstore.app.demo import tiny_png
from convstore.convert.history import History
from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.store.importing import ImportFormat, detect_format, read_histories

FIXTURES = Path(__file__).parent / "fixtures" / "import"
HOSTED_FIXTURES: dict[str, ImportFormat] = {
    "codex-rollout-hosted.jsonl": "codex",
    "gemini-cli-hosted.json": "gemini-cli",
    "pydantic-ai-hosted.json": "pydantic-ai",
    "vercel-ai-hosted.json": "vercel-ai",
}
PNG = base64.b64encode(tiny_png()).decode()


def _read(name: str) -> History:
    [history] = read_histories(HOSTED_FIXTURES[name], (FIXTURES / name).read_text())
    return history


def _shape(history: History) -> list[tuple[str, list[str]]]:
    return [(m.role, [b.type for b in m.blocks]) for m in history.messages]


@pytest.mark.parametrize(("name", "fmt"), HOSTED_FIXTURES.items())
def test_each_hosted_fixture_is_detected_and_recorded_whole(
    tmp_path: Path, name: str, fmt: ImportFormat
) -> None:
    """Detected as its own format, and every block it reads lands in the store as it was
    read, each hosted result's tool name resolved."""
    text = (FIXTURES / name).read_text()
    assert detect_format(text) == fmt
    with open_store(tmp_path / "a.db") as store:
        [history] = read_histories(fmt, text)
        stored = store.messages(store.import_history(history))
        assert [[b.block for b in m.blocks] for m in stored] == [
            list(m.blocks) for m in history.messages
        ]
        hosted = [b for m in stored for b in m.blocks if isinstance(b.block, HostedToolResultBlock)]
        assert hosted
        assert all(b.tool_name not in (None, "unknown") for b in hosted)


# -- codex -----------------------------------------------------------------------------------


def test_codex_hosted_items_become_hosted_blocks_and_a_client_search_a_tool_round() -> None:
    history = _read("codex-rollout-hosted.jsonl")
    assert _shape(history) == [
        ("system", ["text"]),
        ("user", ["text"]),
        (
            "assistant",
            ["reasoning", *["hosted_tool_use", "hosted_tool_result"] * 3, "text"]
            + ["hosted_tool_use", "hosted_tool_result"] * 2
            + ["tool_use"],
        ),
        ("user", ["tool_result"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    blocks = history.messages[2].blocks
    _, search, searched, page, _, find, _, _, draw, drawn, lookup, found, client = blocks
    assert search == HostedToolUseBlock(
        id="web_search_call:line 4",
        name="web_search",
        input={"type": "search", "query": "current Node.js LTS"},
        provider_data={
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "current Node.js LTS"},
        },
    )
    # The rollout keeps no pages: the search's result is its status, as from the API.
    assert searched == HostedToolResultBlock(
        tool_use_id="web_search_call:line 4", content="status: completed"
    )
    assert isinstance(page, HostedToolUseBlock)
    assert (page.id, page.input) == (
        "web_search_call:line 5",
        {"type": "open_page", "url": "https://nodejs.org/en/about/previous-releases"},
    )
    assert isinstance(find, HostedToolUseBlock)
    assert find.id == "ws_0a1b"  # an id the item carries is kept
    assert isinstance(draw, HostedToolUseBlock)
    assert draw.input == {"revised_prompt": "A minimal green hexagon logo"}
    assert draw.provider_data is not None
    assert "result" not in draw.provider_data  # the image is the result's content, once
    assert drawn == HostedToolResultBlock(
        tool_use_id="ig_0c2d", content=[ImageBlock(media_type="image/png", data=PNG)]
    )
    assert isinstance(lookup, HostedToolUseBlock)
    assert lookup.input == {"query": "deploy"}
    assert isinstance(found, HostedToolResultBlock)
    assert found.content == "function deploy_site"
    assert client == ToolUseBlock(
        id="ts_2", name="tool_search", input={"query": "rollback", "limit": 1}
    )
    assert history.messages[3].blocks == (ToolResultBlock(tool_use_id="ts_2", content="[]"),)
    assert history.messages[4].blocks[0] == ToolUseBlock(
        id="sh_1",
        name="local_shell",
        input={
            "type": "exec",
            "command": ["node", "--version"],
            "timeout_ms": 10000,
            "working_directory": None,
            "env": None,
            "user": None,
        },
    )


def _rollout(*payloads: dict[str, Any]) -> str:
    lines = [{"timestamp": "t", "type": "response_item", "payload": p} for p in payloads]
    return "".join(json.dumps(line) + "\n" for line in lines)


def test_a_failed_codex_image_generation_is_an_error_result_with_its_status() -> None:
    [history] = read_histories(
        "codex", _rollout({"type": "image_generation_call", "id": "ig_9", "status": "failed"})
    )
    [message] = history.messages
    _, result = message.blocks
    assert result == HostedToolResultBlock(
        tool_use_id="ig_9", content="status: failed", is_error=True
    )


def test_codex_hosted_ids_are_stable_so_a_second_import_reads_the_same() -> None:
    """A call without an id is named by its line: the same file reads to the same blocks."""
    text = (FIXTURES / "codex-rollout-hosted.jsonl").read_text()
    assert read_histories("codex", text)[0].messages == read_histories("codex", text)[0].messages


# -- gemini cli ------------------------------------------------------------------------------


def test_gemini_code_execution_is_hosted_and_generated_files_are_kept() -> None:
    history = _read("gemini-cli-hosted.json")
    assert _shape(history) == [
        ("user", ["text"]),
        ("assistant", ["text", *["hosted_tool_use", "hosted_tool_result"] * 2, "text"]),
        ("assistant", ["tool_use", "tool_use"]),
        ("user", ["tool_result", "tool_result"]),
        ("assistant", ["text", "image"]),
    ]
    _, run, ran, fail, failed, _ = history.messages[1].blocks
    assert run == HostedToolUseBlock(
        id="g-1:code 1",
        name="code_execution",
        input={
            "language": "PYTHON",
            "code": "import sympy\nprint(sum(sympy.prime(i) for i in range(1, 51)))",
        },
        provider_data={
            "executableCode": {
                "language": "PYTHON",
                "code": "import sympy\nprint(sum(sympy.prime(i) for i in range(1, 51)))",
            }
        },
    )
    assert isinstance(ran, HostedToolResultBlock)
    assert (ran.tool_use_id, ran.name, ran.content, ran.is_error) == (
        "g-1:code 1",
        "code_execution",
        "5117\n",
        False,
    )
    assert isinstance(fail, HostedToolUseBlock)
    assert fail.id == "exec-2"
    assert isinstance(failed, HostedToolResultBlock)
    assert (failed.tool_use_id, failed.is_error) == ("exec-2", True)
    search, read = history.messages[3].blocks
    assert isinstance(search, ToolResultBlock)  # the CLI ran google_web_search: a tool round
    assert "Sources:" in str(search.content)
    assert isinstance(read, ToolResultBlock)
    assert isinstance(read.content, list)
    assert [type(part) for part in read.content] == [TextBlock, DocumentBlock]
    assert history.messages[4].blocks[1] == ImageBlock(media_type="image/png", data=PNG)


# -- vercel ai -------------------------------------------------------------------------------


def test_vercel_provider_executed_tools_are_hosted_and_sources_annotate_their_text() -> None:
    history = _read("vercel-ai-hosted.json")
    assert _shape(history) == [
        ("user", ["text"]),
        (
            "assistant",
            [
                "hosted_tool_use",
                "hosted_tool_result",
                "text",
                "hosted_tool_use",
                "hosted_tool_result",
            ],
        ),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
        ("assistant", ["text", "image", "document"]),
    ]
    search, found, text, run, failed = history.messages[1].blocks
    assert isinstance(search, HostedToolUseBlock)
    assert (search.id, search.name, search.input) == (
        "srvtoolu_01A",
        "web_search",
        {"query": "Rust 1.90 release notes"},
    )
    assert isinstance(found, HostedToolResultBlock)
    [readable] = json.loads(str(found.content))
    assert "encryptedContent" not in readable
    kept: Any = found.provider_data
    assert kept["output"][0]["encryptedContent"] == "EqQBCkYIBxgCIkA..."
    assert kept["callProviderMetadata"] == {"anthropic": {"type": "server_tool_use"}}
    assert isinstance(text, TextBlock)
    assert [a["sourceId"] for a in text.annotations or []] == ["src-1", "src-2"]
    assert isinstance(run, HostedToolUseBlock)
    assert failed == HostedToolResultBlock(
        tool_use_id="srvtoolu_01B",
        name="code_execution",
        content="NameError: name 'plot' is not defined",
        is_error=True,
        provider_data={"state": "output-error", "providerExecuted": True},
    )
    [alone] = history.messages[4].blocks
    assert alone == TextBlock(
        text="",
        annotations=[
            {
                "type": "source-url",
                "sourceId": "src-3",
                "url": "https://releases.rs/",
                "title": "Rust Versions",
            }
        ],
    )


def test_a_hosted_vercel_tool_still_streaming_has_no_result() -> None:
    part = {
        "type": "tool-web_search",
        "toolCallId": "s1",
        "state": "input-available",
        "input": {"query": "x"},
        "providerExecuted": True,
    }
    [history] = read_histories(
        "vercel-ai", json.dumps([{"id": "m", "role": "assistant", "parts": [part]}])
    )
    [message] = history.messages
    [call] = message.blocks
    assert isinstance(call, HostedToolUseBlock)


def test_a_hosted_tool_part_in_a_user_message_is_refused_in_one_line() -> None:
    part = {"type": "tool-x", "toolCallId": "c", "state": "input-available", "input": {}}
    with pytest.raises(InvalidInput, match="belongs in an assistant message") as caught:
        read_histories("vercel-ai", json.dumps([{"id": "m", "role": "user", "parts": [part]}]))
    assert "\n" not in str(caught.value)


# -- replay ------------------------------------------------------------------------------------


def test_imported_hosted_blocks_and_sources_replay_as_prose(tmp_path: Path) -> None:
    """A hosted call and result say the provider ran them; a cited text names its sources."""
    with open_store(tmp_path / "a.db") as store:
        conversation = store.import_history(_read("vercel-ai-hosted.json"))
        messages = store.replay(conversation)["messages"]
        step = messages[1]["content"]
        assert step.startswith(
            'Tool use (run by the provider): web_search({"query":"Rust 1.90 release notes"})'
        )
        assert "Error (code_execution, run by the provider): NameError" in step
        assert (
            "[Sources: Announcing Rust 1.90.0 (https://blog.rust-lang.org/2025/09/18/Rust-1.90.0/);"
            " Release cadence]" in step
        )
        assert "encryptedContent" not in json.dumps(messages)
