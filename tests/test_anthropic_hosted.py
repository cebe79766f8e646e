"""Anthropic blocks of tools the provider ran (server tools, MCP), citations, container uploads
and tool-result documents: what each becomes, kept whole through a real store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from anthropic.types import ContentBlock, ContentBlockParam
from anthropic.types.beta import BetaContentBlock, BetaContentBlockParam, BetaMessage
from click.testing import CliRunner

import convstore
from convstore.cli import cli
from convstore.convert.anthropic import block_from_anthropic, history_from_messages
from convstore.convert.anthropic_hosted import SERVER_RESULT_TYPES
from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    TextBlock,
    ToolResultBlock,
)
from convstore.recording.anthropic import record_message
from tests import anthropic_blocks as fx
from tests.formats import BLOCK_EVENTS
from tests.sdk import rejections, request_body, request_problems

BETA_ONLY = {"advice", "advice_redacted", "mcp_use", "mcp_result", "mcp_error"}


@pytest.mark.parametrize("name", sorted(fx.ALL_BLOCKS))
def test_every_fixture_is_a_real_sdk_shape(name: str) -> None:
    """Each fixture fits the SDK's content block union with no unknown key (the beta union,
    and the stable one for blocks it has), and one stray key makes it fail."""
    block = fx.ALL_BLOCKS[name]
    assert request_problems(block, BetaContentBlockParam, name) == []
    if name not in BETA_ONLY:
        assert request_problems(block, ContentBlockParam, name) == []
    assert request_problems({**block, "stray": 1}, BetaContentBlockParam, name) != []


def _type_literals(union: object) -> set[str]:
    """The ``type`` values of an ``Annotated[Union[...], …]`` of SDK models."""
    members = get_args(get_args(union)[0]) if get_args(union) else ()
    found: set[str] = set()
    for member in members:
        annotation = member.model_fields["type"].annotation
        assert get_origin(annotation) is Literal
        found.update(get_args(annotation))
    return found


def test_the_server_result_types_are_the_sdks() -> None:
    """The server ``*_tool_result`` types accepted are exactly those in the SDK's response block
    unions (beta and stable), so a result the SDK gains is a failing test, not a silent gap."""
    server = {t for t in _type_literals(BetaContentBlock) if t.endswith("_tool_result")}
    assert set(SERVER_RESULT_TYPES) == server - {"mcp_tool_result"}
    stable = {t for t in _type_literals(ContentBlock) if t.endswith("_tool_result")}
    assert stable <= set(SERVER_RESULT_TYPES)


def test_a_server_call_keeps_id_name_input_and_only_what_else_it_holds() -> None:
    """server_tool_use becomes a hosted call; the block is kept verbatim only when it holds a
    field the hosted call has none for (a ``caller``)."""
    assert block_from_anthropic(fx.SEARCH) == HostedToolUseBlock(
        id="srvtoolu_01", name="web_search", input={"query": "convstore event sourcing"}
    )
    fetch = block_from_anthropic(fx.FETCH)
    assert isinstance(fetch, HostedToolUseBlock)
    assert fetch.provider_data == dict(fx.FETCH)
    assert block_from_anthropic(fx.MCP_USE) == HostedToolUseBlock(
        id="mcptoolu_01", name="echo", input={"text": "ping"}, server="example-mcp"
    )


READABLE: dict[str, tuple[str | list[Any], bool]] = {
    "web_search": (
        "Event Sourcing (https://example.com/es), page age: April 30, 2025\n"
        "Stores (https://example.com/stores)",
        False,
    ),
    "web_search_error": ("max_uses_exceeded", True),
    "web_fetch": (
        [
            TextBlock(text="Fetched https://example.com/page (retrieved 2025-08-25T10:30:02Z)"),
            DocumentBlock(text="The page's text.", media_type="text/plain", name="A page"),
        ],
        False,
    ),
    "web_fetch_error": ("url_not_accessible", True),
    "code_run": (
        [
            TextBlock(text="stdout:\n4\n\nreturn code: 0"),
            DocumentBlock(file_id="file_011CNha8iCJcU1wXNR6q4V8w"),
        ],
        False,
    ),
    "code_encrypted": (
        [
            TextBlock(
                text="stdout:\n[encrypted by the provider]\nstderr:\nwarning: x\n\nreturn code: 1"
            )
        ],
        False,
    ),
    "code_error": ("unavailable", True),
    "bash_run": (
        [
            TextBlock(text="stderr:\nls: cannot access 'x'\n\nreturn code: 2"),
            DocumentBlock(file_id="file_bash_1"),
        ],
        False,
    ),
    "bash_error": ("output_file_too_large", True),
    "editor_view": ("print('hi')\n", False),
    "editor_create": ("File created.", False),
    "editor_replace": ("Replaced: @@ -1,1 +1,1 @@\n-print('hi')\n+print('hello')", False),
    "editor_error": ("file_not_found: no such file: a.py", True),
    "tools_found": ("Tools found: get_weather, get_time", False),
    "tools_error": ("too_many_requests", True),
    "advice": ("Check the index first.", False),
    "advice_redacted": ("[encrypted by the provider]", False),
}


@pytest.mark.parametrize("name", sorted(fx.SERVER_RESULTS))
def test_each_server_result_reads_and_keeps_the_block_verbatim(name: str) -> None:
    """Every server result becomes a hosted result with readable content (an error with
    is_error and its code) and the whole original block as provider_data."""
    original = fx.SERVER_RESULTS[name]
    block = block_from_anthropic(original)
    assert isinstance(block, HostedToolResultBlock)
    content, is_error = READABLE[name]
    assert (block.content, block.is_error) == (content, is_error)
    assert block.tool_use_id == original["tool_use_id"]
    assert json.dumps(block.provider_data) == json.dumps(original)


def test_mcp_results_citations_uploads_and_rich_tool_results() -> None:
    """An MCP result is a hosted result of its text; citations of every location type stay on
    their text verbatim; a container upload is a document by file id; a tool_result's documents
    are documents, a search_result its text, a tool_reference a line."""
    assert block_from_anthropic(fx.MCP_RESULT) == HostedToolResultBlock(
        tool_use_id="mcptoolu_01", content=[TextBlock(text="pong")]
    )
    assert block_from_anthropic(fx.MCP_ERROR) == HostedToolResultBlock(
        tool_use_id="mcptoolu_01", content="server unreachable", is_error=True
    )
    cited = block_from_anthropic(fx.CITED)
    assert isinstance(cited, TextBlock)
    assert cited.annotations == fx.CITED["citations"]
    assert block_from_anthropic(fx.UPLOAD) == DocumentBlock(file_id="file_upload_1")
    result = block_from_anthropic(fx.RICH_RESULT)
    assert isinstance(result, ToolResultBlock)
    assert result.content == [
        TextBlock(text="Found:"),
        DocumentBlock(text="notes", media_type="text/plain", name="notes.txt"),
        DocumentBlock(file_id="file_doc_1"),
        TextBlock(
            text="[Search result: Guide (https://docs.example.com/guide)]\nUse the index.\nThen X."
        ),
        TextBlock(text="[Tool reference: get_weather]"),
    ]


def _response(content: list[Any]) -> dict[str, Any]:
    return {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 20},
    }


ASSISTANT_SIDE = [
    fx.SEARCH,
    fx.SEARCH_RESULTS,
    fx.FETCH,
    fx.FETCHED,
    fx.MCP_USE,
    fx.MCP_RESULT,
    fx.UPLOAD,
    fx.CITED,
]


def test_a_response_round_trips_through_a_store_byte_for_byte(tmp_path: Path) -> None:
    """A response holding searches, a fetch, an MCP round, an upload and cited text converts
    the same as the SDK's typed BetaMessage (whose dump orders keys its own way) and as the
    JSON body; recorded into a SQLite file and read back after reopening, each provider_data
    is byte-identical to its block in the body, and hosted results take their call's name."""
    typed = BetaMessage.model_validate(_response(ASSISTANT_SIDE))
    from_dicts = history_from_messages(_response(ASSISTANT_SIDE)).messages[0].blocks
    [turn] = history_from_messages(typed).messages
    assert turn.blocks == from_dicts
    location = tmp_path / "s.db"
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, turn.role, from_dicts)
    with convstore.open_store(location) as store:
        landed = [e for e in store.events(conv) if isinstance(e, BLOCK_EVENTS)]
    assert tuple(e.block for e in landed) == from_dicts
    kept = {1: fx.SEARCH_RESULTS, 2: fx.FETCH, 3: fx.FETCHED}
    for index, original in kept.items():
        block = landed[index].block
        assert isinstance(block, HostedToolUseBlock | HostedToolResultBlock)
        assert json.dumps(block.provider_data) == json.dumps(original)
    assert [e.tool_name for e in landed if isinstance(e.block, HostedToolResultBlock)] == [
        "web_search",
        "web_fetch",
        "echo",
    ]


@pytest.mark.parametrize(
    ("block", "named"),
    [
        (
            {"type": "memory_tool_result", "tool_use_id": "s", "content": {}},
            "response, block 1: unsupported Anthropic content block type 'memory_tool_result'",
        ),
        (
            {**fx.FETCHED, "content": {"type": "web_fetch_result_v2", "url": "u"}},
            "response, block 1: unsupported result content type 'web_fetch_result_v2'",
        ),
        (
            {**fx.UPLOAD, "size": 3},
            r"response, block 1 \(container_upload\): key 'size' is not part of this format",
        ),
        (
            {"type": "web_search_tool_result", "tool_use_id": "s", "content": [{"type": "x"}]},
            "response, block 1, result 0: expected a 'web_search_result', not 'x'",
        ),
    ],
)
def test_an_unknown_shape_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, block: dict[str, Any], named: str
) -> None:
    """An unknown server result type, an unknown result content type or an unknown key is
    refused naming it and where; the response records nothing."""
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        before = len(store.events(conv))
        with pytest.raises(convstore.InvalidInput, match=named) as caught:
            record_message(store, conv, _response([fx.SEARCH, block]))
        assert "\n" not in str(caught.value)
        assert len(store.events(conv)) == before


def _search_round() -> dict[str, Any]:
    """A request body holding a whole web-search round: the question, then the assistant's
    search, its results and the cited answer, then a tool call of the caller's own."""
    own_call = {"type": "tool_use", "id": "toolu_01", "name": "save", "input": {"note": "es"}}
    return {
        "model": "claude-sonnet-4-5",
        "system": "Cite sources.",
        "messages": [
            {"role": "user", "content": "What is event sourcing?"},
            {"role": "assistant", "content": [fx.SEARCH, fx.SEARCH_RESULTS, fx.CITED, own_call]},
        ],
    }


def test_the_import_command_records_a_web_search_round_that_replays_as_prose(
    tmp_path: Path,
) -> None:
    """``convstore import --format anthropic`` takes a body with a web-search round (exit 0)
    and ``convstore replay`` shows the search and its results as run by the provider, with
    the answer's sources; both SDKs accept the replayed request."""
    body = tmp_path / "round.json"
    body.write_text(json.dumps(_search_round()), encoding="utf-8")
    db = tmp_path / "s.db"
    runner = CliRunner()
    imported = runner.invoke(cli, ["--db", str(db), "import", "--format", "anthropic", str(body)])
    assert imported.exit_code == 0, imported.stderr
    with convstore.open_store(db) as store:
        [conversation] = store.conversations()
    shown = runner.invoke(cli, ["--db", str(db), "replay", str(conversation.id)])
    assert shown.exit_code == 0, shown.stderr
    assistant = json.loads(shown.stdout)["messages"][-1]["content"]
    assert 'Tool use (run by the provider): web_search({"query":"convstore event sourcing"})' in (
        assistant
    )
    assert (
        "Result (web_search, run by the provider): Event Sourcing (https://example.com/es), "
        "page age: April 30, 2025\nStores (https://example.com/stores)"
    ) in assistant
    [sources] = [line for line in assistant.splitlines() if line.startswith("[Sources: ")]
    assert "Event Sourcing (https://example.com/es)" in sources
    assert fx.ENCRYPTED not in shown.stdout
    with convstore.open_store(db) as store:
        for shape in ("openai", "anthropic"):
            replayed = store.replay(conversation.id, shape=shape)
            assert rejections(shape, request_body(shape, replayed)) == []


def test_a_live_round_sends_hosted_blocks_as_prose_never_as_server_blocks(
    tmp_path: Path,
) -> None:
    """The live request for the caller's own tool call carries the provider's search as text:
    no server_tool_use or web_search_tool_result goes back, and the SDK accepts the request."""
    with convstore.open_store(tmp_path / "s.db") as store:
        report = store.import_histories([history_from_messages(_search_round())])
        conv = report.conversations[0].id
        turn = store.messages(conv)[-1].message_id
        result = {"type": "tool_result", "tool_use_id": "toolu_01", "content": "saved"}
        store.append_message(conv, "user", [result])
        live = store.live_request(conv, turn, shape="anthropic")
    sent = json.dumps(live)
    assert "server_tool_use" not in sent
    assert "web_search_tool_result" not in sent
    assert fx.ENCRYPTED not in sent
    kinds = [part["type"] for part in live["messages"][-2]["content"]]
    assert kinds == ["text", "text", "text", "tool_use"]
    assert rejections("anthropic", request_body("anthropic", live)) == []
