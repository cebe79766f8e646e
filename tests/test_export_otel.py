"""`export --format otel`: a conversation as OpenTelemetry GenAI semantic-convention messages,
checked against JSON schemas restating the pinned version's message format (tests/fixtures/)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, assert_never
from uuid import UUID

import pytest
from hypothesis import given, settings
from jsonschema import Draft202012Validator

import convstore
from convstore.app.demo import tiny_png
from convstore.domain.blocks import (
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
from convstore.domain.events import Event, MessageMeta
from convstore.projections.messages import collect_history
from convstore.projections.prose import REDACTED_REASONING
from convstore.views.otel import OTEL_SCHEMA_URL, OTEL_SEMCONV_VERSION, otel_document
from tests.strategies import HistoryBuilder, histories
from tests.test_export import HOSTED_ROUND, every_kind

CONVSTORE = Path(sys.executable).parent / "convstore"
PNG = base64.b64encode(tiny_png()).decode()
SCHEMAS = Path(__file__).parent / "fixtures" / "otel-genai-schemas"

# The schemas' part list ends in ``generic`` (any object with a string ``type``), so a whole
# document validating says little about a part: each part is also held to the definition its
# type names (the schemas name each part's definition by its ``type``).
PART_TYPES = {
    "text",
    "reasoning",
    "tool_call",
    "tool_call_response",
    "server_tool_call",
    "server_tool_call_response",
    "blob",
    "uri",
    "file",
}


@cache
def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"gen-ai-{name}.json").read_text())
    return loaded


@cache
def validator(name: str, definition: str | None = None) -> Draft202012Validator:
    """The schema ``name``'s validator, or of one of its definitions."""
    pinned = schema(name)
    Draft202012Validator.check_schema(pinned)
    if definition is None:
        return Draft202012Validator(pinned)
    return Draft202012Validator({"$defs": pinned["$defs"], "$ref": f"#/$defs/{definition}"})


def check_part(part: dict[str, Any], name: str = "input-messages") -> None:
    assert part["type"] in PART_TYPES, part["type"]
    validator(name, part["type"]).validate(part)
    response = part.get("response")
    if part["type"] == "server_tool_call_response":
        response = part["server_tool_call_response"]["response"]
    if isinstance(response, list):
        for inner in response:
            assert inner["type"] in {"text", "blob", "uri", "file"}
            check_part(inner, name)


def check_document(document: dict[str, Any]) -> None:
    """The document's message attributes validate against the schemas, part by part."""
    assert document["schema_url"] == OTEL_SCHEMA_URL
    for attribute, name in (
        ("gen_ai.input.messages", "input-messages"),
        ("gen_ai.output.messages", "output-messages"),
    ):
        validator(name).validate(document[attribute])
        for message in document[attribute]:
            for part in message["parts"]:
                check_part(part, name)


def rendered(events: list[Event]) -> dict[str, Any]:
    """The pure renderer's document, through JSON (so it must be plain JSON)."""
    document: dict[str, Any] = json.loads(json.dumps(otel_document(events)))
    return document


def export_otel(location: str, conv: UUID) -> dict[str, Any]:
    """``convstore export CONV --format otel``, run as the real command."""
    done = subprocess.run(
        [str(CONVSTORE), "--db", location, "export", str(conv), "--format", "otel"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    document: dict[str, Any] = json.loads(done.stdout)
    return document


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location on each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "otel.db")
    make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
    return make()


def test_the_pinned_schemas_reject_what_the_export_must_not_write() -> None:
    """The schemas hold what the conventions require: they refuse an output message without
    its finish_reason and a tool call part without its name."""
    output = Draft202012Validator(schema("output-messages"))
    assert not output.is_valid([{"role": "assistant", "parts": []}])
    bad_call = {"type": "tool_call", "id": "c1", "arguments": {}}
    with pytest.raises(Exception, match="'name' is a required property"):
        check_part(bad_call)


def test_otel_export_keeps_every_kind_as_typed_parts(location: str) -> None:
    """Through the real command on both backends: tool calls with their ids and arguments
    (raw text too), results linked by id with their error flag and images, reasoning (a
    redacted one as the marker), images as blob and uri parts, the compaction, the
    interrupted message and the open one marked, all valid against the schemas."""
    with convstore.open_store(location) as store:
        conv = every_kind(store)
        stored = [message.message_id for message in collect_history(store.events(conv)).messages]
    document = export_otel(location, conv)
    check_document(document)
    assert document["gen_ai.conversation.id"] == str(conv)
    inputs = document["gen_ai.input.messages"]
    [output] = document["gen_ai.output.messages"]
    # The last message (an assistant message never ended) is the output.
    assert [m["convstore"]["message_id"] for m in [*inputs, output]] == [str(i) for i in stored]
    assert output == {
        "role": "assistant",
        "parts": [],
        "convstore": {"message_id": str(stored[-1]), "status": "open", "withdrawn": False},
        "finish_reason": "error",
    }
    system, user, assistant, results, cut = inputs
    assert system["role"] == "system"
    assert system["parts"] == [{"type": "text", "content": "Be brief."}]
    assert user["parts"][1:] == [
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": PNG},
        {"type": "uri", "modality": "image", "uri": "https://example.com/a b.png"},
        {"type": "text", "content": "notes", "convstore": {"document": True, "name": "n.txt"}},
    ]
    assert assistant["parts"] == [
        {"type": "reasoning", "content": "line one\nline two"},
        {"type": "reasoning", "content": REDACTED_REASONING, "convstore": {"redacted": True}},
        {"type": "tool_call", "id": "c1", "name": "run", "arguments": {"cmd": "echo ```"}},
        {"type": "tool_call", "id": "c2", "name": "raw", "arguments": "{not json"},
        {
            "type": "server_tool_call",
            "id": "srvtoolu_1",
            "name": "web_search",
            "server_tool_call": {"type": "web_search", "arguments": {"query": "walrus"}},
        },
        {
            "type": "server_tool_call_response",
            "id": "srvtoolu_1",
            "server_tool_call_response": {
                "type": "web_search",
                "response": [
                    {"type": "text", "content": "Walruses (Wikipedia)"},
                    {
                        "type": "text",
                        "content": "Walruses live in the Arctic.",
                        "convstore": {"document": True, "name": "walrus.txt"},
                    },
                ],
            },
            "convstore": {"is_error": False, "name": "web_search"},
        },
        {
            "type": "server_tool_call",
            "id": "mcptoolu_1",
            "name": "search_docs",
            "server_tool_call": {"type": "mcp", "arguments": {"q": "tusks"}, "server": "docs"},
        },
        {
            "type": "server_tool_call_response",
            "id": "mcptoolu_1",
            "server_tool_call_response": {"type": "search_docs", "response": "denied"},
            "convstore": {"is_error": True, "name": "search_docs"},
        },
        {
            "type": "text",
            "content": "Walruses live in the Arctic.",
            "convstore": {"annotations": HOSTED_ROUND[-1]["annotations"]},
        },
    ]
    assert "EqAB" not in json.dumps(document)  # provider_data stays in the log (jsonl export)
    assert results["role"] == "user"
    assert results["parts"] == [
        {
            "type": "tool_call_response",
            "id": "c1",
            "response": "ok",
            "convstore": {"is_error": False, "name": "run"},
        },
        {
            "type": "tool_call_response",
            "id": "c2",
            "response": [
                {"type": "text", "content": "bad"},
                {"type": "blob", "modality": "image", "mime_type": "image/png", "content": PNG},
                {
                    "type": "text",
                    "content": "the log",
                    "convstore": {"document": True, "name": "run.log"},
                },
            ],
            "convstore": {"is_error": True, "name": "raw"},
        },
        {
            "type": "tool_call_response",
            "id": "zz",
            "response": "orphan",
            "convstore": {"is_error": False, "name": "unknown"},  # as the store resolved it
        },
    ]
    assert cut["parts"] == [{"type": "text", "content": "Let me"}]
    assert cut["convstore"]["status"] == "interrupted"
    assert cut["convstore"]["interrupt_reason"] == "user pressed stop"
    assert document["convstore.compactions"] == [
        {"through": str(stored[1]), "summary": "The user showed two images."}
    ]


def test_otel_output_is_the_last_assistant_turn_with_its_finish_reason(tmp_path: Path) -> None:
    """A finished tool round: the final answer is the output, with the recorded stop reason
    in the conventions' words and the model it came from; the earlier tool call's turn is
    input. A conversation ending on the user's message has no output."""
    with convstore.open_store(tmp_path / "o.db") as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "Weather in Paris?"}])
        call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
        store.append_message(conv, "assistant", [call])
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rainy"}
        store.append_message(conv, "user", [result])
        answer = [{"type": "text", "text": "Rainy."}]
        meta = {"model": "claude-x", "stop_reason": "end_turn", "provider_message_id": "msg_9"}
        store.append_message(conv, "assistant", answer, meta=meta)
        document = rendered(store.events(conv))
        asked = store.new_conversation()
        store.append_message(asked, "user", [{"type": "text", "text": "hello?"}])
        unanswered = rendered(store.events(asked))
    check_document(document)
    [output] = document["gen_ai.output.messages"]
    assert output["parts"] == [{"type": "text", "content": "Rainy."}]
    assert output["finish_reason"] == "stop"
    assert document["gen_ai.response.finish_reasons"] == ["stop"]
    assert document["gen_ai.response.model"] == "claude-x"
    assert document["gen_ai.response.id"] == "msg_9"
    _, turn, _ = document["gen_ai.input.messages"]
    assert "finish_reason" not in turn  # input messages have no such field
    assert turn["parts"][0]["id"] == "toolu_1"
    check_document(unanswered)
    assert unanswered["gen_ai.output.messages"] == []
    assert "gen_ai.response.finish_reasons" not in unanswered
    assert len(unanswered["gen_ai.input.messages"]) == 1


@pytest.mark.parametrize(
    ("stop_reason", "calls", "finish", "expected"),
    [
        (None, True, "end", "tool_call"),
        (None, False, "end", "stop"),
        (None, False, "interrupt", "error"),
        (None, False, "leave_open", "error"),
        ("max_tokens", False, "end", "length"),
        ("tool_calls", True, "end", "tool_call"),
        ("refusal", False, "end", "content_filter"),
        ("a_new_reason", False, "end", "a_new_reason"),
    ],
)
def test_finish_reason_is_the_recorded_one_in_the_conventions_words(
    stop_reason: str | None, calls: bool, finish: str, expected: str
) -> None:
    """A recorded stop reason is mapped (an unknown one kept as recorded); without one, the
    message's end and its tool calls decide."""
    builder = HistoryBuilder(UUID(int=1))
    builder.message("user", [TextBlock(text="go")])
    blocks: list[Block] = [TextBlock(text="ok")]
    if calls:
        blocks.append(ToolUseBlock(id="c1", name="run", input={}))
    meta = None if stop_reason is None else MessageMeta(stop_reason=stop_reason)
    if finish == "end":
        builder.record(builder.state.record_message("assistant", blocks, meta=meta))
    else:
        turn = builder.start("assistant")
        for block in blocks:
            builder.append(turn, block)
        if finish == "interrupt":
            builder.interrupt(turn, "stopped")
    document = rendered(builder.events)
    check_document(document)
    [output] = document["gen_ai.output.messages"]
    assert output["finish_reason"] == expected
    assert document["gen_ai.response.finish_reasons"] == [expected]


def test_otel_marks_messages_a_rewind_withdrew(tmp_path: Path) -> None:
    """As in the Markdown transcript, a withdrawn message is shown, marked as withdrawn."""
    with convstore.open_store(tmp_path / "r.db") as store:
        conv = store.new_conversation()
        kept = store.append_message(conv, "user", [{"type": "text", "text": "keep"}])
        store.append_message(conv, "assistant", [{"type": "text", "text": "take back"}])
        store.rewind(conv, to=kept)
        document = rendered(store.events(conv))
    [user] = document["gen_ai.input.messages"]
    [taken] = document["gen_ai.output.messages"]
    assert user["convstore"]["withdrawn"] is False
    assert taken["convstore"]["withdrawn"] is True
    assert taken["parts"] == [{"type": "text", "content": "take back"}]


def test_an_erased_conversation_exports_nothing(tmp_path: Path) -> None:
    """An erased conversation is refused as by every other format: exit 2, one line, no output."""
    db = tmp_path / "e.db"
    with convstore.open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "secret"}])
        store.erase(conv, reason="asked")
    lines = {}
    for fmt in ("otel", "markdown"):
        done = subprocess.run(
            [str(CONVSTORE), "--db", str(db), "export", str(conv), "--format", fmt],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 2
        assert done.stdout == ""
        [lines[fmt]] = done.stderr.splitlines()
    assert lines["otel"] == lines["markdown"]
    assert lines["otel"].startswith("error: ")


def test_the_export_help_names_the_pinned_version(tmp_path: Path) -> None:
    """`export --help` says which semantic-conventions release the otel format follows."""
    done = subprocess.run(
        [str(CONVSTORE), "export", "--help"], capture_output=True, text=True, check=True
    )
    assert f"conventions {OTEL_SEMCONV_VERSION}" in " ".join(done.stdout.split())
    assert "--format otel" in done.stdout


@given(histories())
@settings(max_examples=150, deadline=None)
def test_otel_has_one_message_per_stored_message_and_every_block(events: list[Event]) -> None:
    """Over generated histories: the document validates; one message per stored message, in
    order, with its role and status; every block is one part of its kind, in order; every
    tool result links by id to its call; the output is the last message only when it is the
    assistant's."""
    document = rendered(events)
    check_document(document)
    stored = collect_history(events).messages
    messages = [*document["gen_ai.input.messages"], *document["gen_ai.output.messages"]]
    assert len(messages) == len(stored)
    assert len(document["gen_ai.output.messages"]) == int(
        bool(stored) and stored[-1].role == "assistant"
    )
    kinds = {
        "text": "text",
        "reasoning": "reasoning",
        "tool_use": "tool_call",
        "tool_result": "tool_call_response",
        "hosted_tool_use": "server_tool_call",
        "hosted_tool_result": "server_tool_call_response",
    }
    for message, recorded in zip(messages, stored, strict=True):
        assert message["role"] == recorded.role
        assert message["convstore"]["message_id"] == str(recorded.message_id)
        assert message["convstore"]["status"] == recorded.status
        assert message["convstore"]["withdrawn"] == recorded.withdrawn
        assert len(message["parts"]) == len(recorded.blocks)
        for part, block in zip(message["parts"], recorded.blocks, strict=True):
            match block.block:
                case ImageBlock():
                    assert part["type"] == ("blob" if block.block.data else "uri")
                case TextBlock():
                    assert part["content"] == block.block.text
                case ReasoningBlock():
                    assert part["type"] == "reasoning"
                case ToolResultBlock() | HostedToolResultBlock():
                    assert part["id"] == block.block.tool_use_id
                case HostedToolUseBlock():
                    assert part["id"] == block.block.id
                    assert part["server_tool_call"]["arguments"] == block.block.input
                case DocumentBlock():
                    sources = {"data": "blob", "url": "uri", "file_id": "file", "text": "text"}
                    given = block.block.model_dump(exclude_none=True)
                    assert part["type"] in {v for k, v in sources.items() if k in given}
                case ToolUseBlock():
                    assert part["id"] == block.block.id
                    assert part["arguments"] == block.block.input
                case HostedToolUseBlock():
                    assert part["id"] == block.block.id
                case HostedToolResultBlock():
                    assert part["id"] == block.block.tool_use_id
                case _:
                    assert_never(block.block)
            assert part["type"] == kinds.get(block.block.type, part["type"])


def test_real_claude_code_sessions_export_valid_and_linked(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Every Claude Code session of the shared corpus, imported and exported by the real
    commands, validates against the schemas; every result names a call made before it, and
    every call and result of the stored history appears, with its id."""
    files = sorted((corpus_dir / "claude-code").glob("*.jsonl"))
    assert files
    db = tmp_path / "corpus.db"
    for source in files:
        done = subprocess.run(
            [str(CONVSTORE), "--db", str(db), "import", "--format", "claude-code", str(source)],
            capture_output=True,
            text=True,
            check=True,
        )
        for conv in map(UUID, done.stdout.split()):
            document = export_otel(str(db), conv)
            check_document(document)
            parts = [
                part
                for message in [
                    *document["gen_ai.input.messages"],
                    *document["gen_ai.output.messages"],
                ]
                for part in message["parts"]
            ]
            called: set[str] = set()
            for part in parts:
                if part["type"] == "tool_call":
                    called.add(part["id"])
                elif part["type"] == "tool_call_response":
                    assert part["id"] in called, (source.name, part["id"])
            with convstore.open_store(db) as store:
                blocks = [
                    recorded.block
                    for message in collect_history(store.events(conv)).messages
                    for recorded in message.blocks
                ]
            assert len(parts) == len(blocks), source.name


def test_the_docs_page_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python block of docs/export-otel.md runs and its assert holds (opentelemetry-api
    comes with the dev extras, through pydantic-ai)."""
    page = (Path(__file__).parents[1] / "docs" / "export-otel.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/export-otel.md", "exec"), {})  # noqa: S102
