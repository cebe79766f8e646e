"""The four newer import formats (Codex rollouts, Gemini CLI sessions, Pydantic AI message
history, Vercel AI SDK UIMessages), format detection, and refusals that are never silent.

Every fixture under ``tests/fixtures/import`` is small and synthetic, shaped after the
formats' own source (codex-rs ``RolloutLine`` / ``ResponseItem``, gemini-cli
``chatRecordingService``, ``ModelMessagesTypeAdapter`` output of the installed Pydantic AI,
ai ``UIMessage`` types). Each is detected as exactly one format.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import convstore
from convstore.app.demo import tiny_png
from convstore.cli import cli
from convstore.convert.history import History
from convstore.domain.blocks import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidInput
from convstore.store.importing import IMPORT_FORMATS, ImportFormat, detect_format, read_histories
from convstore.store.verify import Verifier

FIXTURES = Path(__file__).parent / "fixtures" / "import"
CONVSTORE = Path(sys.executable).parent / "convstore"

FIXTURE_FORMATS: dict[str, ImportFormat] = {
    "claude-code.jsonl": "claude-code",
    "openai-chat.json": "openai-chat",
    "anthropic.json": "anthropic",
    "responses.json": "responses",
    "codex-rollout.jsonl": "codex",
    "codex-rollout-legacy.jsonl": "codex",
    "gemini-cli-session.json": "gemini-cli",
    "gemini-cli-session.jsonl": "gemini-cli",
    "pydantic-ai.json": "pydantic-ai",
    "vercel-ai.json": "vercel-ai",
    "codex-rollout-hosted.jsonl": "codex",
    "gemini-cli-hosted.json": "gemini-cli",
    "pydantic-ai-hosted.json": "pydantic-ai",
    "vercel-ai-hosted.json": "vercel-ai",
}

PNG = base64.b64encode(tiny_png()).decode()
UI_MESSAGES = [
    {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
    {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]},
]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def history(fmt: ImportFormat, name: str) -> History:
    [read] = read_histories(fmt, fixture(name))
    return read


def invoke(db: Path, *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=stdin)


def refusal(fmt: ImportFormat, data: object) -> str:
    with pytest.raises(InvalidInput) as caught:
        read_histories(fmt, json.dumps(data))
    text = str(caught.value)
    assert "\n" not in text
    return text


# -- detection --------------------------------------------------------------------------------


def test_every_format_has_a_fixture() -> None:
    assert set(FIXTURE_FORMATS.values()) == set(IMPORT_FORMATS)


@pytest.mark.parametrize(("name", "fmt"), FIXTURE_FORMATS.items())
def test_each_fixture_is_read_by_exactly_its_own_format(name: str, fmt: ImportFormat) -> None:
    """The fixture's format reads it into messages; every other format refuses it."""
    text = fixture(name)
    readers = []
    for candidate in IMPORT_FORMATS:
        try:
            read = read_histories(candidate, text)
        except InvalidInput:
            continue
        if any(h.messages for h in read):
            readers.append(candidate)
    assert readers == [fmt]
    assert detect_format(text) == fmt


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (json.dumps([{"role": "user", "content": "hi"}]), "openai-chat, anthropic, responses"),
        ("{}", "none of the importers reads it"),
        ("not json\n", "none of the importers reads it"),
    ],
)
def test_ambiguous_or_unknown_input_is_refused_naming_the_candidates(
    content: str, named: str
) -> None:
    with pytest.raises(InvalidInput, match=named) as caught:
        detect_format(content)
    assert "--format" in str(caught.value)
    assert "\n" not in str(caught.value)


# -- silent emptiness -----------------------------------------------------------------------


def test_a_ui_message_array_given_as_openai_chat_is_refused_naming_parts(tmp_path: Path) -> None:
    """It used to import, exit 0, as messages of no blocks."""
    db = tmp_path / "s.db"
    result = invoke(db, "import", "--format", "openai-chat", stdin=json.dumps(UI_MESSAGES))
    assert result.exit_code == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert "message 0 (user): keys 'id', 'parts' are not part of this format" in line
    assert not db.exists()


@pytest.mark.parametrize(
    ("fmt", "data", "named"),
    [
        ("anthropic", [{"role": "user", "content": "hi", "parts": []}], "key 'parts'"),
        (
            "responses",
            [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "x": 1}],
            "item 0 (function_call): key 'x'",
        ),
        ("openai-chat", [{"role": "tool", "tool_call_id": "c", "output": "x"}], "key 'output'"),
        (
            "openai-chat",
            [{"role": "assistant", "content": "x", "audio": {"id": "a"}}],
            "audio cannot be recorded",
        ),
    ],
)
def test_the_older_converters_refuse_keys_they_do_not_read(
    fmt: ImportFormat, data: object, named: str
) -> None:
    assert named in refusal(fmt, data)


# -- vercel-ai ------------------------------------------------------------------------------


def test_vercel_ui_messages_keep_text_reasoning_images_and_tool_outcomes() -> None:
    read = history("vercel-ai", "vercel-ai.json")
    roles = [m.role for m in read.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    _, user, calls, results, final = read.messages
    assert isinstance(user.blocks[1], ImageBlock)
    assert user.blocks[1].media_type == "image/png"
    reasoning, paris, rome = calls.blocks
    assert reasoning == ReasoningBlock(text="Two cities: two calls.", signature="sig-1")
    assert paris == ToolUseBlock(id="call_1", name="weather", input={"city": "Paris"})
    assert rome == ToolUseBlock(id="call_2", name="mcp_weather", input={"city": "Rome"})
    assert results.blocks == (
        ToolResultBlock(tool_use_id="call_1", name="weather", content='{"tempC": 18}'),
        ToolResultBlock(
            tool_use_id="call_2", name="mcp_weather", content="service unavailable", is_error=True
        ),
    )
    assert final.blocks == (
        TextBlock(text="Paris is 18C; Rome is unavailable."),
        ToolUseBlock(id="call_3", name="weather", input={"city": "Rome"}),
    )
    assert read.ignored == {"step-start": 2}


def _ui(part: dict[str, Any], role: str = "assistant") -> list[dict[str, Any]]:
    return [{"id": "m", "role": role, "parts": [{"type": "text", "text": "x"}, part]}]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (_ui({"type": "custom", "kind": "x"}), "'custom' part"),
        (_ui({"type": "source-url", "sourceId": "s", "url": "https://a", "x": 1}), "key 'x'"),
        (
            _ui({"type": "file", "mediaType": "audio/wav", "url": "data:a;base64,AA=="}),
            "media type 'audio/wav'",
        ),
        (_ui({"type": "data-weather", "data": {}}), "'data-weather' part"),
        (_ui({"type": "reasoning-file", "mediaType": "image/png", "url": "x"}), "reasoning-file"),
        (
            _ui(
                {
                    "type": "tool-web_search",
                    "toolCallId": "c",
                    "state": "output-ready",
                    "input": {},
                    "providerExecuted": True,
                }
            ),
            "tool state 'output-ready'",
        ),
        (_ui({"type": "text", "text": "x", "extra": 1}), "key 'extra'"),
        ([{"id": "m", "role": "user", "parts": []}], "has no parts"),
        ([{"id": "m", "role": "user", "content": "hi", "parts": []}], "key 'content'"),
        (_ui({"type": "tool-x", "toolCallId": "c", "state": "x", "input": {}}), "tool state"),
    ],
)
def test_vercel_parts_without_a_block_kind_are_refused_naming_them(
    data: object, named: str
) -> None:
    text = refusal("vercel-ai", data)
    assert named in text
    if "' part" in named:
        assert "message 0 (" in text
        assert "part 1" in text


# -- pydantic-ai ----------------------------------------------------------------------------


def test_the_pydantic_ai_fixture_is_what_model_messages_type_adapter_reads() -> None:
    messages = pytest.importorskip("pydantic_ai.messages")
    parsed = messages.ModelMessagesTypeAdapter.validate_json(fixture("pydantic-ai.json"))
    assert [m.kind for m in parsed] == ["request", "response"] * 3


def test_pydantic_ai_history_keeps_instructions_images_calls_and_retries() -> None:
    read = history("pydantic-ai", "pydantic-ai.json")
    roles = [m.role for m in read.messages]
    assert roles == ["system", "system", *["user", "assistant"] * 3]
    assert read.messages[0].blocks == (TextBlock(text="Answer in Celsius."),)
    image_url, binary = read.messages[2].blocks[1:]
    assert isinstance(image_url, ImageBlock)
    assert image_url.url == "https://example.com/map.png"
    assert isinstance(binary, ImageBlock)
    assert binary.media_type == "image/png"
    assert binary.data is not None
    assert "+" in binary.data  # URL-safe base64 turned into the standard alphabet
    thinking, _, paris, rome = read.messages[3].blocks
    assert thinking == ReasoningBlock(text="Call the tool.", signature="sig-1")
    assert paris == ToolUseBlock(id="call_1", name="weather", input={"city": "Paris"})
    assert rome == ToolUseBlock(id="call_2", name="weather", input={"city": "Rome"})
    returned, retried = read.messages[4].blocks
    assert returned == ToolResultBlock(
        tool_use_id="call_1", name="weather", content='{"tempC": 18}'
    )
    assert isinstance(retried, ToolResultBlock)
    assert retried.is_error
    assert retried.content == "city 'Rome' is not supported"


def test_a_pydantic_ai_tool_returning_an_image_keeps_it_as_a_result_part() -> None:
    """Written by Pydantic AI itself: a multimodal return keeps its text and image; any other
    non-string return is its JSON."""
    messages = pytest.importorskip("pydantic_ai.messages")
    png = base64.b64decode(PNG)
    history_json = messages.ModelMessagesTypeAdapter.dump_json(
        [
            messages.ModelRequest(parts=[messages.UserPromptPart("shot")]),
            messages.ModelResponse(parts=[messages.ToolCallPart("snap", {}, tool_call_id="c1")]),
            messages.ModelRequest(
                parts=[
                    messages.ToolReturnPart(
                        "snap", ["here", messages.BinaryContent(png, media_type="image/png")], "c1"
                    ),
                    messages.ToolReturnPart("nums", [1, 2], "c2"),
                ]
            ),
        ]
    )
    [read] = read_histories("pydantic-ai", history_json.decode())
    image, numbers = read.messages[2].blocks
    assert image == ToolResultBlock(
        tool_use_id="c1",
        name="snap",
        content=[TextBlock(text="here"), ImageBlock(media_type="image/png", data=PNG)],
    )
    assert numbers == ToolResultBlock(tool_use_id="c2", name="nums", content="[1, 2]")


def _pyd(part: dict[str, Any], kind: str = "response") -> list[dict[str, Any]]:
    return [{"kind": kind, "parts": [part]}]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (
            _pyd({"part_kind": "compaction", "content": "x"}),
            "message 0 (response) part 0: a 'compaction' part cannot be recorded yet",
        ),
        (
            _pyd(
                {"part_kind": "user-prompt", "content": [{"kind": "audio-url", "url": "x"}]},
                "request",
            ),
            "content 0: user content of kind 'audio-url'",
        ),
        (_pyd({"part_kind": "text", "content": "x", "novel": 1}), "key 'novel'"),
        ([{"kind": "request", "parts": [], "novel": 1}], "message 0 (request): key 'novel'"),
        ([{"kind": "event", "parts": []}], "message kind 'event'"),
    ],
)
def test_pydantic_ai_parts_without_a_block_kind_are_refused_naming_them(
    data: object, named: str
) -> None:
    assert named in refusal("pydantic-ai", data)


# -- codex ----------------------------------------------------------------------------------


def test_a_codex_rollout_keeps_items_calls_outputs_and_its_compaction() -> None:
    read = history("codex", "codex-rollout.jsonl")
    assert read.key == "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    assert read.messages[0].blocks == (TextBlock(text="You are Codex, a coding agent."),)
    kinds = [(m.role, [b.type for b in m.blocks]) for m in read.messages[1:]]
    assert kinds == [
        ("system", ["text"]),
        ("user", ["text"]),
        ("user", ["text", "image"]),
        ("assistant", ["reasoning", "tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
        ("user", ["text"]),
        ("assistant", ["text"]),
    ]
    reasoning = read.messages[4].blocks[0]
    assert isinstance(reasoning, ReasoningBlock)
    assert reasoning.text == "**Reading the log**"
    assert reasoning.encrypted_content == "gAAAAB-opaque"
    shell = read.messages[6].blocks[0]
    assert isinstance(shell, ToolUseBlock)
    assert (shell.id, shell.name) == ("call_ls_1", "local_shell")
    assert isinstance(shell.input, dict)
    assert shell.input["command"] == ["ls", "include"]
    patch = read.messages[8].blocks[0]
    assert isinstance(patch, ToolUseBlock)
    assert patch.name == "apply_patch"
    assert isinstance(patch.input, str)
    assert patch.input.startswith("*** Begin Patch")
    [compaction] = read.compactions
    assert compaction.through == 10
    assert compaction.summary.startswith("The user asked why")
    assert read.ignored["event_msg:agent_message"] == 1
    assert read.ignored["ghost_snapshot"] == 1
    assert read.ignored["turn_context"] == 1


def test_an_older_codex_rollout_reads_the_same_way() -> None:
    """Before every line was {timestamp, type, payload}: a bare header, bare items, and
    state markers."""
    read = history("codex", "codex-rollout-legacy.jsonl")
    assert read.key == "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
    kinds = [(m.role, [b.type for b in m.blocks]) for m in read.messages]
    assert kinds == [
        ("system", ["text"]),
        ("user", ["text"]),
        ("assistant", ["reasoning", "tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text"]),
    ]
    assert read.messages[0].blocks == (TextBlock(text="Prefer small diffs."),)
    assert read.ignored == {"state": 2}


def _rollout(*payloads: dict[str, Any]) -> str:
    lines = [{"timestamp": "t", "type": "response_item", "payload": p} for p in payloads]
    return "".join(json.dumps(line) + "\n" for line in lines)


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (
            {"type": "web_search_call", "status": "completed", "action": {}, "results": []},
            "line 1 (response_item), item 'web_search_call': key 'results'",
        ),
        (
            {"type": "image_generation_call", "id": "x", "status": "completed", "result": "AAAA"},
            "(image_generation_call) result: image data does not match",
        ),
        ({"type": "holographic_call"}, "item type 'holographic_call'"),
        ({"type": "custom_tool_call", "call_id": "c", "name": "n", "input": "", "x": 1}, "'x'"),
    ],
)
def test_codex_items_without_a_block_kind_are_refused_naming_them(
    payload: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidInput, match="not a valid codex history") as caught:
        read_histories("codex", _rollout(payload))
    assert named in str(caught.value)


def test_an_aborted_codex_turn_marks_its_assistant_message_interrupted() -> None:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    said = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "I"}],
    }
    text = _rollout(user, said) + json.dumps(
        {
            "timestamp": "t",
            "type": "event_msg",
            "payload": {"type": "turn_aborted", "reason": "interrupted"},
        }
    )
    [read] = read_histories("codex", text)
    assert [(m.role, m.status, m.reason) for m in read.messages] == [
        ("user", "ended", None),
        ("assistant", "interrupted", "interrupted"),
    ]


def test_an_encrypted_codex_compaction_is_skipped_and_reported() -> None:
    text = _rollout(
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "compaction", "encrypted_content": "opaque"},
    )
    [read] = read_histories("codex", text)
    assert [s.line for s in read.skipped] == [2]
    assert "encrypted compaction" in read.skipped[0].reason


# -- gemini-cli -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gemini-cli-session.json", "gemini-cli-session.jsonl"])
def test_both_gemini_layouts_give_the_same_conversation(name: str) -> None:
    read = history("gemini-cli", name)
    assert read.title == "Listing files and a picture"
    kinds = [(m.role, [b.type for b in m.blocks]) for m in read.messages]
    assert kinds == [
        ("user", ["text"]),
        ("assistant", ["reasoning", "text", "tool_use", "tool_use"]),
        ("user", ["tool_result", "tool_result"]),
        ("user", ["text", "image"]),
        ("assistant", ["text"]),
    ]
    thought = read.messages[1].blocks[0]
    assert thought == ReasoningBlock(text="Listing files\n\nI should call list_directory.")
    listed, missing = read.messages[2].blocks
    assert listed == ToolResultBlock(
        tool_use_id="list_directory-1-abc", name="list_directory", content="README.md\nsrc/"
    )
    assert isinstance(missing, ToolResultBlock)
    assert missing.is_error
    assert missing.content == '{"error": "File not found: logo.png"}'


def test_gemini_jsonl_replaces_records_by_id_and_honours_rewinds() -> None:
    """The jsonl holds an unfinished first record of the model's turn (replaced by the
    finished one, in place) and a rewound exchange (left out), as Gemini CLI reads it."""
    read = history("gemini-cli", "gemini-cli-session.jsonl")
    assert read.key == "6a1d3c2f-8b4e-4dae-8c9b-2e3f4a5b6c7d"
    texts = [b.text for m in read.messages for b in m.blocks if isinstance(b, TextBlock)]
    assert not any("rewound" in t for t in texts)
    assert len(read.messages[2].blocks) == 2  # the finished record, with both results


def test_gemini_content_synced_from_history_is_not_recorded_twice() -> None:
    """After Gemini CLI syncs its history back, a model record's content may repeat its
    toolCalls as functionCall parts, and a user record repeat their results as
    functionResponse parts: each call and result is recorded once."""
    call = {"id": "c1", "name": "ls", "args": {}}
    response = {"id": "c1", "name": "ls", "response": {"output": "a.txt"}}
    session = {
        "sessionId": "s-sync",
        "projectHash": "h",
        "startTime": "t",
        "lastUpdated": "t",
        "messages": [
            {"id": "u", "timestamp": "t", "type": "user", "content": [{"text": "ls"}]},
            {
                "id": "g",
                "timestamp": "t",
                "type": "gemini",
                "content": [{"functionCall": call, "thoughtSignature": "sig"}],
                "toolCalls": [
                    {**call, "status": "success", "timestamp": "t"}
                    | {"result": [{"functionResponse": response}]}
                ],
            },
            {
                "id": "r",
                "timestamp": "t",
                "type": "user",
                "content": [{"functionResponse": response}],
            },
            {
                "id": "g2",
                "timestamp": "t",
                "type": "gemini",
                "content": [{"text": "one file"}, {"functionCall": {**call, "id": "c2"}}],
            },
        ],
    }
    [read] = read_histories("gemini-cli", json.dumps(session))
    kinds = [(m.role, [b.type for b in m.blocks]) for m in read.messages]
    assert kinds == [
        ("user", ["text"]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["text", "tool_use"]),
    ]
    assert read.ignored["functionCall part repeating a toolCall"] == 1
    assert read.ignored["functionResponse part repeating a toolCall result"] == 1


def _gemini(record: dict[str, Any]) -> dict[str, Any]:
    base = {"sessionId": "s", "projectHash": "h", "startTime": "t", "lastUpdated": "t"}
    return {**base, "messages": [{"id": "m", "timestamp": "t", **record}]}


@pytest.mark.parametrize(
    ("record", "named"),
    [
        (
            {"type": "gemini", "content": [{"videoMetadata": {"fps": 1}}]},
            "message 0 (gemini) content part 0: part 'videoMetadata'",
        ),
        (
            {"type": "gemini", "content": [{"codeExecutionResult": {"outcome": "OUTCOME_OK"}}]},
            "answers no executableCode before it",
        ),
        (
            {"type": "user", "content": [{"inlineData": {"mimeType": "audio/wav"}}]},
            "inlineData of media type 'audio/wav'",
        ),
        ({"type": "user", "content": "hi", "parts": []}, "key 'parts'"),
        ({"type": "user", "content": []}, "has no content"),
        ({"type": "thought", "content": "x"}, "message type 'thought'"),
    ],
)
def test_gemini_parts_without_a_block_kind_are_refused_naming_them(
    record: dict[str, Any], named: str
) -> None:
    assert named in refusal("gemini-cli", _gemini(record))


# -- the command ----------------------------------------------------------------------------


def test_import_without_format_detects_names_and_refuses_a_second_time(tmp_path: Path) -> None:
    """A real subprocess: detected and named on stderr, recorded, a second import refused
    with nothing written."""
    db = tmp_path / "s.db"
    path = str(FIXTURES / "codex-rollout.jsonl")
    first = subprocess.run(
        [CONVSTORE, "--db", db, "import", path], capture_output=True, text=True, check=False
    )
    assert first.returncode == 0, first.stderr
    assert first.stderr.splitlines()[0] == "detected format: codex"
    [conversation_id] = first.stdout.split()
    with convstore.open_store(db) as store:
        [listed] = store.conversations()
        assert str(listed.id) == conversation_id
        assert listed.source == "codex:0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
        before = store.log_position()
    again = subprocess.run(
        [CONVSTORE, "--db", db, "import", path], capture_output=True, text=True, check=False
    )
    assert again.returncode == 2
    assert again.stderr.splitlines()[-1].startswith("error: already imported as conversation")
    with convstore.open_store(db) as store:
        assert store.log_position() == before


@pytest.mark.parametrize(("name", "fmt"), FIXTURE_FORMATS.items())
def test_every_fixture_imports_through_the_command_without_format(
    tmp_path: Path, name: str, fmt: ImportFormat
) -> None:
    db = tmp_path / "s.db"
    result = invoke(db, "import", "--json", str(FIXTURES / name))
    assert result.exit_code == 0, result.stderr
    assert f"detected format: {fmt}" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["format"] == fmt
    assert summary["messages"] > 0
    assert sum(summary["blocks"].values()) >= summary["messages"]
    again = invoke(db, "import", str(FIXTURES / name))
    assert again.exit_code == 2
    assert "already imported as conversation" in again.stderr.splitlines()[-1]
    with convstore.open_store(db) as store:
        verifier = Verifier()
        verifier.check_all(store.scan())
        assert verifier.problems == []
        [conversation] = store.conversations()
        assert store.replay(conversation.id)["messages"]


def test_ambiguous_input_is_refused_by_the_command_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    result = invoke(db, "import", stdin=json.dumps([{"role": "user", "content": "hi"}]))
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert "more than one format (openai-chat, anthropic, responses)" in line
    assert line.endswith("choose one with --format")  # no Python-API words on the command line
    assert not db.exists()


def test_import_help_lists_every_format_and_ends_with_detection_examples() -> None:
    """Its text (before the options, as every command's) ends with examples."""
    result = CliRunner().invoke(cli, ["import", "--help"], terminal_width=200)
    assert result.exit_code == 0
    for fmt in IMPORT_FORMATS:
        assert fmt in result.output
    description = result.output.split("Options:")[0].rstrip().splitlines()
    assert description[-1].strip().startswith("convstore import ~/")
    assert "detected" in result.output


CORPUS_FORMATS: dict[str, ImportFormat] = {
    "claude-code": "claude-code",
    "openai-chat": "openai-chat",
    "anthropic-messages": "anthropic",
    "openai-responses": "responses",
}


def test_every_corpus_file_is_detected_as_its_own_format(corpus_dir: Path) -> None:
    """Real transcripts and request bodies: each is read by exactly the format it is."""
    seen = 0
    for folder, fmt in CORPUS_FORMATS.items():
        for path in sorted((corpus_dir / folder).iterdir()):
            assert detect_format(path.read_text()) == fmt, path.name
            seen += 1
    assert seen > 0


def test_the_import_formats_page_examples_run() -> None:
    page = (Path(__file__).parents[1] / "docs" / "import-formats.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert blocks
    for index, code in enumerate(blocks):
        exec(compile(code, f"import-formats.md python block {index}", "exec"), {})  # noqa: S102


@pytest.mark.parametrize("fmt", IMPORT_FORMATS)
def test_every_other_fixture_given_as_a_format_is_one_line_exit_2(
    tmp_path: Path, fmt: ImportFormat
) -> None:
    """Each format refuses every other format's fixture: one line naming it, nothing made."""
    db = tmp_path / "s.db"
    for name, own in FIXTURE_FORMATS.items():
        if own == fmt:
            continue
        result = invoke(db, "import", "--format", fmt, str(FIXTURES / name))
        assert result.exit_code == 2, (name, result.stdout)
        [line] = result.stderr.splitlines()
        assert line.startswith("error: "), name
        assert fmt in line or "malformed JSON" in line, (name, line)
    assert not db.exists()
