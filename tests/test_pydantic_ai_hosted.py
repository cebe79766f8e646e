"""Pydantic AI's native (provider-run) tools, citations and model-generated files, through
both doors: the history importer (``ModelMessagesTypeAdapter`` JSON) and the adapter that
records a run driven by pydantic-ai's own ``Agent`` and ``FunctionModel`` (issue 22)."""

from __future__ import annotations

import base64
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    BinaryContent,
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    DocumentUrl,
    FilePart,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
    WebCitationSource,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from convstore import InvalidInput, open_store
from convstore.app.demo import tiny_png
from convstore.convert.pydantic_ai import PENDING_PARTS, REQUEST_PARTS, RESPONSE_PARTS
from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
)
from convstore.integrations.pydantic_ai import convert_messages, record_messages
from convstore.store.importing import read_histories

FIXTURE = Path(__file__).parent / "fixtures" / "import" / "pydantic-ai-hosted.json"
PNG = base64.b64encode(tiny_png()).decode()
PDF = b"%PDF-1.4\n1 0 obj << /Type /Page >> endobj\n%%EOF\n"


def _part_kinds(union: object) -> set[str]:
    """The ``part_kind`` of every member of one of pydantic-ai's part unions."""
    [inner, *_] = typing.get_args(union)
    kinds = set()
    for member in typing.get_args(inner):
        cls = (
            typing.get_args(member)[0] if typing.get_origin(member) is typing.Annotated else member
        )
        fields = {field.name: field.default for field in dataclasses.fields(cls)}
        kinds.add(str(fields["part_kind"]))
    return kinds


def test_every_part_kind_of_pydantic_ai_is_read_or_refused_by_name() -> None:
    """The part kinds are taken from pydantic-ai's own ``ModelRequestPart`` and
    ``ModelResponsePart`` unions: a kind a new release adds fails here until the importer
    reads it or refuses it by name."""
    request, response = _part_kinds(ModelRequestPart), _part_kinds(ModelResponsePart)
    assert {"builtin-tool-call", "builtin-tool-return", "file"} <= response
    assert request - set(REQUEST_PARTS) - set(PENDING_PARTS) == set()
    assert response - set(RESPONSE_PARTS) - set(PENDING_PARTS) == set()
    for kind in sorted(request | response):
        if kind in PENDING_PARTS:
            side = "response" if kind in response else "request"
            data = json.dumps([{"kind": side, "parts": [{"part_kind": kind}]}])
            with pytest.raises(InvalidInput, match=f"a '{kind}' part cannot be recorded"):
                read_histories("pydantic-ai", data)


def test_the_fixture_is_what_pydantic_ai_reads_and_writes() -> None:
    """The fixture is pydantic-ai's own JSON: it loads and dumps back to the same data."""
    text = FIXTURE.read_text()
    messages = ModelMessagesTypeAdapter.validate_json(text)
    assert json.loads(ModelMessagesTypeAdapter.dump_json(messages)) == json.loads(text)


def test_native_tools_citations_and_files_become_hosted_blocks_annotations_and_files() -> None:
    """Web search, a failed code execution, a remote MCP call, image generation: each call and
    return is a hosted block in the assistant message, the provider's fields in
    ``provider_data``; citations are the text's annotations; generated files are an image and
    a document."""
    [history] = read_histories("pydantic-ai", FIXTURE.read_text())
    shape = [(m.role, [b.type for b in m.blocks]) for m in history.messages]
    assert shape == [
        ("user", ["text"]),
        (
            "assistant",
            ["hosted_tool_use", "hosted_tool_result", "text"]
            + ["hosted_tool_use", "hosted_tool_result"] * 2,
        ),
        ("user", ["text"]),
        ("assistant", ["hosted_tool_use", "image", "hosted_tool_result", "document", "text"]),
    ]
    search, found, answer, run, failed, mcp, answered = history.messages[1].blocks
    assert search == HostedToolUseBlock(
        id="srvtoolu_01",
        name="web_search",
        input={"query": "capital of France"},
        provider_data={"provider_name": "anthropic"},
    )
    assert isinstance(found, HostedToolResultBlock)
    assert found.tool_use_id == "srvtoolu_01"
    [readable] = json.loads(str(found.content))
    assert readable["url"] == "https://en.wikipedia.org/wiki/Paris"
    assert "encrypted_content" not in readable  # opaque to any model: kept, never sent
    kept: Any = found.provider_data
    assert kept["provider_details"] == {"type": "web_search_tool_result"}
    [verbatim] = kept["content"]
    assert verbatim == {**readable, "encrypted_content": verbatim["encrypted_content"]}
    assert answer == TextBlock(
        text="The capital of France is Paris.",
        annotations=[
            {
                "type": "web_citation",
                "url": "https://en.wikipedia.org/wiki/Paris",
                "title": "Paris - Wikipedia",
                "excerpts": ["Paris is the capital of France."],
                "anchor": {"start": 0, "end": 31, "kind": "content"},
                "citation": 0,
            }
        ],
    )
    assert isinstance(run, HostedToolUseBlock)
    assert isinstance(failed, HostedToolResultBlock)
    assert (failed.is_error, failed.provider_data) == (
        True,
        {"provider_name": "anthropic", "outcome": "failed"},
    )
    assert mcp == HostedToolUseBlock(
        id="mcptoolu_03",
        name="ask_question",
        server="deepwiki",
        input={
            "action": "call_tool",
            "tool_name": "ask_question",
            "tool_args": {"repo": "pydantic/pydantic-ai", "question": "What is a native tool?"},
        },
        provider_data={
            "tool_name": "mcp_server:deepwiki",
            "tool_kind": "mcp_server",
            "provider_name": "anthropic",
        },
    )
    assert isinstance(answered, HostedToolResultBlock)
    assert (answered.name, answered.content) == (
        "mcp_server:deepwiki",
        "A tool the provider runs itself.",
    )
    call, image, status, document, _ = history.messages[3].blocks
    assert isinstance(call, HostedToolUseBlock)
    assert call.provider_data == {"id": "ig_04", "provider_name": "openai"}
    assert image == ImageBlock(media_type="image/png", data=PNG)
    assert isinstance(status, HostedToolResultBlock)
    assert document == DocumentBlock(
        media_type="application/pdf", data=base64.b64encode(PDF).decode()
    )


def _dump(messages: list[ModelMessage]) -> str:
    return ModelMessagesTypeAdapter.dump_json(messages).decode()


def test_a_tool_return_keeps_its_documents_and_a_document_citation_its_title() -> None:
    """A tool's return may carry documents now (a PDF by bytes, a document by URL), and a
    citation of a document (no URL) keeps its id and title."""
    text = _dump(
        [
            ModelRequest(parts=[UserPromptPart("read it")]),
            ModelResponse(parts=[ToolCallPart("fetch", {}, tool_call_id="c1")]),
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        "fetch",
                        [
                            BinaryContent(PDF, media_type="application/pdf"),
                            DocumentUrl(url="https://example.com/a.pdf"),
                        ],
                        "c1",
                    )
                ]
            ),
            ModelResponse(
                parts=[
                    TextPart(
                        "It says hello.",
                        citations=[
                            Citation(
                                sources=[
                                    DocumentCitationSource(document_id="file_1", title="a.pdf")
                                ]
                            )
                        ],
                    )
                ]
            ),
        ]
    )
    [history] = read_histories("pydantic-ai", text)
    [result] = history.messages[2].blocks
    assert isinstance(result, ToolResultBlock)
    assert isinstance(result.content, list)
    assert [type(part).__name__ for part in result.content] == ["DocumentBlock", "DocumentBlock"]
    [text_block] = history.messages[3].blocks
    assert isinstance(text_block, TextBlock)
    assert text_block.annotations == [
        {
            "type": "document_citation",
            "document_id": "file_1",
            "title": "a.pdf",
            "excerpts": [],
            "citation": 0,
        }
    ]


def test_an_unknown_citation_source_is_refused_naming_it() -> None:
    part = {"part_kind": "text", "content": "x", "citations": [{"sources": [{"kind": "video"}]}]}
    with pytest.raises(InvalidInput, match="citation source kind 'video'") as caught:
        read_histories("pydantic-ai", json.dumps([{"kind": "response", "parts": [part]}]))
    assert "\n" not in str(caught.value)


# -- the adapter, driven by a real Agent -----------------------------------------------------


def _searching_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that searches the web on its provider's side, cites what it found, and draws."""
    return ModelResponse(
        parts=[
            NativeToolCallPart(
                "web_search",
                {"query": "capital of France"},
                tool_call_id="srvtoolu_1",
                provider_name="anthropic",
            ),
            NativeToolReturnPart(
                "web_search",
                [{"url": "https://en.wikipedia.org/wiki/Paris", "title": "Paris"}],
                tool_call_id="srvtoolu_1",
                provider_name="anthropic",
            ),
            TextPart(
                "Paris.",
                citations=[
                    Citation(
                        sources=[
                            WebCitationSource("https://en.wikipedia.org/wiki/Paris", title="Paris")
                        ],
                        anchor=ContentCitationAnchor(start=0, end=6),
                    )
                ],
            ),
            FilePart(BinaryContent(PDF, media_type="application/pdf")),
        ],
        provider_name="anthropic",
    )


def test_an_agent_run_with_native_tools_is_recorded_as_hosted_blocks(tmp_path: Path) -> None:
    """A real run: the adapter records the native call and return as hosted blocks, the
    citation as an annotation and the generated PDF as a document, the same blocks the
    importer makes of the run's JSON; replay gives them back as prose."""
    result = Agent(FunctionModel(_searching_model)).run_sync("Capital of France?")
    messages = result.all_messages()
    [_, response] = convert_messages(messages)
    [imported] = read_histories("pydantic-ai", _dump(messages))
    assert response.blocks == imported.messages[1].blocks
    call, found, answer, pdf = response.blocks
    assert isinstance(call, HostedToolUseBlock)
    assert (call.name, call.provider_data) == ("web_search", {"provider_name": "anthropic"})
    assert isinstance(found, HostedToolResultBlock)
    assert found.tool_use_id == call.id
    assert isinstance(answer, TextBlock)
    assert answer.annotations is not None
    assert answer.annotations[0]["url"] == "https://en.wikipedia.org/wiki/Paris"
    assert isinstance(pdf, DocumentBlock)
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        record_messages(store, conversation, messages)
        [_, stored] = store.messages(conversation)
        assert [b.block for b in stored.blocks] == list(response.blocks)
        assert [b.tool_name for b in stored.blocks][1] == "web_search"
        prose = store.replay(conversation)["messages"][1]["content"]
        assert prose.startswith(
            'Tool use (run by the provider): web_search({"query":"capital of France"})'
        )
        assert "Result (web_search, run by the provider): " in prose
        assert "Paris.\n[Sources: Paris (https://en.wikipedia.org/wiki/Paris)]" in prose


def test_a_native_call_in_a_message_the_adapter_cannot_keep_leaves_nothing(tmp_path: Path) -> None:
    """A response holding a native call beside a part convstore refuses is refused whole."""
    bad = ModelResponse(
        parts=[
            NativeToolCallPart("web_search", {}, tool_call_id="s1"),
            FilePart(BinaryContent(b"RIFF", media_type="audio/wav")),
        ]
    )
    with open_store(tmp_path / "a.db") as store:
        conversation = store.new_conversation()
        with pytest.raises(InvalidInput, match="audio/wav") as caught:
            record_messages(store, conversation, [bad])
        assert str(caught.value).startswith("message 0 (response): part 1")
        assert store.messages(conversation) == []
