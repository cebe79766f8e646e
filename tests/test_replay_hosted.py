"""Replay, pressure and live rounds of what issue 22 added: calls the provider ran (hosted) and
their results, text carrying cited sources, and documents inside a tool's output.

Every request is checked by the real SDK types (tests/sdk.py); the round is tests/hosted.py's,
recorded through the domain's commands. The engine renders it from a state folded fresh and
from stored rows read back; rows written before these kinds existed decode as they did.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any
from uuid import UUID

import pytest

from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import Event
from convstore.engine.live import live_request
from convstore.engine.model import folded
from convstore.engine.plan import SHAPES, ReplayOptions, Shape, replay
from convstore.engine.pressure import PDF_PAGE_TOKENS, measure
from convstore.engine.render import plan
from convstore.engine.tokenizer import count_tokens
from tests import hosted
from tests.replay_oracle import replay as oracle_replay
from tests.sdk import rejections, request_body
from tests.strategies import TINY_IMAGES, TINY_PDF, HistoryBuilder

PDF_SIZE = len(base64.b64decode(TINY_PDF))
REPORT_UNREAD = (
    "[Document not read: report.pdf (application/pdf, {size:,} bytes) was here, but {why}.]"
)


def accepted(shape: Shape, fragment: dict[str, Any]) -> dict[str, Any]:
    """``fragment``, once the SDK's request type has accepted it as a request body."""
    problems = rejections(shape, request_body(shape, fragment))
    assert problems == [], "\n".join(problems[:10])
    return fragment


def round_events(messages: int = len(hosted.ROUND)) -> tuple[list[Event], list[UUID]]:
    """The hosted round's first ``messages`` messages as events, and their ids."""
    builder = HistoryBuilder(UUID(int=22), "hosted round")
    ids = [builder.message(role, blocks) for role, blocks in hosted.ROUND[:messages]]
    return builder.events, ids


def texts(message: dict[str, Any]) -> list[Any]:
    """A wire message's content as texts, and ``("document", source)`` for a native PDF."""
    content = message["content"]
    if isinstance(content, str):
        return [content]
    out: list[Any] = []
    for part in content:
        match part["type"]:
            case "text":
                out.append(part["text"])
            case "document":
                out.append(("document", part["source"]["data"], part.get("title")))
            case "file":
                data = part["file"]["file_data"].removeprefix("data:application/pdf;base64,")
                out.append(("document", data, part["file"]["filename"]))
            case other:
                pytest.fail(f"unexpected part {other}")
    return out


@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_hosted_round_replays_as_prose_the_sdks_accept(shape: Shape, vision: bool) -> None:
    """Hosted calls and results are prose in the assistant's message, the one that never got
    a result is marked, the cited sources follow the text; the PDF inside the caller's tool
    result is sent natively when the model can see, else its marker stands there."""
    events, _ = round_events()
    out = accepted(shape, replay(events, shape=shape, vision=vision))
    assert out == oracle_replay(events, shape=shape, vision=vision)
    got = [(m["role"], texts(m)) for m in out["messages"]]
    head = "Result (read_report): The report:"
    if vision:
        result = [head, ("document", TINY_PDF, "report.pdf")]
    else:
        why = "this model cannot see documents"
        result = [f"{head}\n{REPORT_UNREAD.format(size=PDF_SIZE, why=why)}"]
    assert got == [
        ("user", ["What is PEP 750? Then read my report."]),
        ("assistant", [hosted.ASSISTANT_TEXT]),
        ("user", result),
        ("assistant", ["Done."]),
    ]
    assert "provider_data" not in json.dumps(out)
    assert "encrypted" not in json.dumps(out)  # the provider's own payload is never sent


def test_microcompact_clears_hosted_results_like_any_other() -> None:
    """``keep_tool_results`` counts hosted results with the caller's, oldest cleared first:
    keeping one keeps only the caller's (the newest), and the hosted ones read as cleared."""
    events, _ = round_events()
    out = replay(events, shape="openai", keep_tool_results=1)
    assistant = out["messages"][1]["content"]
    search_size = len(f"{hosted.TITLE} ({hosted.PEP})".encode())
    assert (
        "Result (web_search, run by the provider): "
        f"[Output cleared to save context: {search_size} bytes]"
    ) in assistant
    assert (
        "Error (web_fetch, run by the provider): [Output cleared to save context: 18 bytes]"
        in assistant
    )
    assert hosted.SEARCH_USE in assistant  # the calls stay
    assert out["messages"][2]["content"].startswith("Result (read_report): The report:")
    cleared = replay(events, shape="openai", keep_tool_results=0)["messages"][2]["content"]
    assert cleared == (
        f"Result (read_report): [Output cleared to save context: {len('The report:') + PDF_SIZE}"
        " bytes]"
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_pressure_names_the_hosted_kinds_and_counts_a_pdf_in_a_result_by_its_pages(
    shape: Shape,
) -> None:
    """The per-kind report has the two hosted kinds, each the tokens of its prose; the PDF
    inside the tool result is 2,250 tokens a page when sent, its marker's text when not."""
    events, _ = round_events()
    state, load = folded(events)
    uses = [
        hosted.SEARCH_USE,
        'Tool use (run by the provider): web_fetch({"url":"https://intranet.example/x"})',
        hosted.MCP_USE,
    ]
    results = [hosted.SEARCH_RESULT_TEXT, hosted.FETCH_ERROR_TEXT]
    for vision in (False, True):
        planned = plan(state, ReplayOptions(shape=shape, vision=vision), load)
        pressure = measure(planned, shape, count_tokens)
        assert pressure.by_kind["hosted_tool_use"] == sum(map(count_tokens, uses))
        assert pressure.by_kind["hosted_tool_result"] == sum(map(count_tokens, results))
        assert pressure.by_kind["text"] == sum(
            map(
                count_tokens,
                [
                    "What is PEP 750? Then read my report.",
                    "Let me look that up.",
                    hosted.CITED,
                    "Done.",
                ],
            )
        )
        head = count_tokens("Result (read_report): The report:")
        if vision:
            assert pressure.by_kind["tool_result"] == head + PDF_PAGE_TOKENS
        else:
            marker = REPORT_UNREAD.format(size=PDF_SIZE, why="this model cannot see documents")
            assert pressure.by_kind["tool_result"] == count_tokens(
                f"Result (read_report): The report:\n{marker}"
            )
        assert sum(pressure.by_kind.values()) == pressure.total


def _live(shape: Shape, vision: bool) -> dict[str, Any]:
    events, ids = round_events(3)
    return accepted(
        shape, live_request(events, ids[1], options=ReplayOptions(shape=shape, vision=vision))
    )


@pytest.mark.parametrize("vision", [False, True])
def test_a_live_openai_round_keeps_hosted_calls_out_of_tool_calls(vision: bool) -> None:
    """Only the caller's call is a ``tool_call``; the provider's calls and results cross as
    prose with the turn's text; the PDF in the tool message is its marker (tool messages
    carry text only)."""
    out = _live("openai", vision)
    assistant, tool = out["messages"][1:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_04"]
    prose = hosted.ASSISTANT_TEXT.replace(f"\n\n{hosted.NO_RESULT}", "").removesuffix(
        '\n\nTool use: read_report({"path":"report.pdf"})'
    )
    assert assistant["content"] == prose
    why = "tool messages cannot carry documents" if vision else "this model cannot see documents"
    marker = REPORT_UNREAD.format(size=PDF_SIZE, why=why)
    assert tool == {"role": "tool", "tool_call_id": "toolu_04", "content": f"The report:\n{marker}"}


@pytest.mark.parametrize("vision", [False, True])
def test_a_live_anthropic_round_sends_no_server_tool_blocks(vision: bool) -> None:
    """The assistant's hosted blocks are text blocks, never ``server_tool_use`` or a search
    result block; the PDF inside the tool_result is a ``document`` when the model can see."""
    out = _live("anthropic", vision)
    assistant, answers = out["messages"][1:]
    kinds = [b["type"] for b in assistant["content"]]
    assert kinds == ["text"] * 7 + ["tool_use"]
    assert [b["text"] for b in assistant["content"][:7]] == [
        "Let me look that up.",
        hosted.SEARCH_USE,
        hosted.SEARCH_RESULT_TEXT,
        'Tool use (run by the provider): web_fetch({"url":"https://intranet.example/x"})',
        hosted.FETCH_ERROR_TEXT,
        hosted.MCP_USE,
        hosted.CITED,
    ]
    (answer,) = answers["content"]
    if vision:
        pdf = {"type": "base64", "media_type": "application/pdf", "data": TINY_PDF}
        assert answer["content"] == [
            {"type": "text", "text": "The report:"},
            {"type": "document", "source": pdf, "title": "report.pdf"},
        ]
    else:
        marker = REPORT_UNREAD.format(size=PDF_SIZE, why="this model cannot see documents")
        assert answer["content"] == [
            {"type": "text", "text": "The report:"},
            {"type": "text", "text": marker},
        ]


PNG = TINY_IMAGES["image/png"][0]

MARKER = re.compile(r"\[(?:Image not shown|Document not read): [^\]]*\]")


def _markers(message: dict[str, Any]) -> list[str]:
    """The image and document markers a wire message's text holds, in order."""
    content = message["content"]
    if isinstance(content, str):
        return MARKER.findall(content)
    return [m for part in content if part["type"] == "text" for m in MARKER.findall(part["text"])]


@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_live_round_says_why_as_history_does(shape: Shape, vision: bool) -> None:
    """An image, a PDF, and a PDF inside a hosted result, all in the live assistant message:
    the round's markers are the ones replay of the same message as history writes, giving the
    reason the model is not shown them (an assistant message cannot carry them, or the model
    cannot see), never "cannot see documents" to a model that can."""
    builder = HistoryBuilder(UUID(int=5))
    builder.message("user", [TextBlock(text="Chart the report.")])
    turn = builder.message(
        "assistant",
        [
            TextBlock(text="Here is what I made."),
            ImageBlock(media_type="image/png", data=PNG),
            DocumentBlock(media_type="application/pdf", data=TINY_PDF, name="own.pdf"),
            HostedToolUseBlock(id="srvtoolu_9", name="code_execution", input={"code": "plot()"}),
            HostedToolResultBlock(
                tool_use_id="srvtoolu_9", content=[TextBlock(text="made:"), hosted.REPORT]
            ),
            ToolUseBlock(id="toolu_9", name="save", input={}),
        ],
    )
    builder.message("user", [ToolResultBlock(tool_use_id="toolu_9", content="saved")])
    options = ReplayOptions(shape=shape, vision=vision)
    live = accepted(shape, live_request(builder.events, turn, options=options))
    history = replay(builder.events, options=options)
    assistant = live["messages"][-2]
    assert assistant["role"] == "assistant"
    as_history = next(m for m in history["messages"] if m["role"] == "assistant")
    image, document = (
        ("assistant messages cannot carry images", "assistant messages cannot carry documents")
        if vision
        else ("this model cannot see images", "this model cannot see documents")
    )
    expected = [
        f"[Image not shown: an image/png image ({len(base64.b64decode(PNG)):,} bytes) "
        f"was here, but {image}.]",
        f"[Document not read: own.pdf (application/pdf, {PDF_SIZE:,} bytes) was here, "
        f"but {document}.]",
        REPORT_UNREAD.format(size=PDF_SIZE, why=document),
    ]
    assert _markers(as_history) == expected
    assert _markers(assistant) == expected


# -- stored rows written before hosted kinds existed ---------------------------------------------
