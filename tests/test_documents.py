"""Document blocks: their JSON shape and its checks, their replay (natively where the shape has
a form and the model can see, else a marker saying plainly it was not read), checked against
the providers' SDK request types, and their place in the store's other outputs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import DocumentBlockParam, MessageParam
from openai.types.chat import ChatCompletionUserMessageParam
from openai.types.responses import EasyInputMessageParam

from convstore import InvalidBlock, InvalidInput, Limits, open_store
from convstore.app.export import export_conversation
from convstore.convert.anthropic import history_from_messages
from convstore.convert.claude_code import histories_from_transcript
from convstore.convert.codex import histories_from_rollout
from convstore.convert.gemini_cli import histories_from_session
from convstore.convert.openai_chat import history_from_chat
from convstore.convert.pydantic_ai import history_from_model_messages
from convstore.convert.responses import history_from_responses
from convstore.convert.vercel_ai import history_from_ui_messages
from convstore.domain.blocks import DocumentBlock
from convstore.domain.parsing import parse_block
from convstore.engine.plan import Shape
from convstore.engine.pressure import PDF_PAGE_TOKENS, pdf_pages
from tests.sdk import rejections, request_body, request_problems
from tests.strategies import TINY_PDF

PDF_BLOCK: dict[str, Any] = {
    "type": "document",
    "media_type": "application/pdf",
    "data": TINY_PDF,
    "name": "report.pdf",
}
TEXT_BLOCK: dict[str, Any] = {"type": "document", "text": "line one\nline two", "name": "a.txt"}
URL_BLOCK: dict[str, Any] = {
    "type": "document",
    "media_type": "application/pdf",
    "url": "https://example.com/paper.pdf",
}
FILE_BLOCK: dict[str, Any] = {"type": "document", "file_id": "file-123", "name": "spec.docx"}

PDF_MARKER = "[Document not read: report.pdf (application/pdf, {size} bytes) was here, but {why}.]"
PDF_SIZE = f"{len(base64.b64decode(TINY_PDF)):,}"


@pytest.mark.parametrize("block", [PDF_BLOCK, TEXT_BLOCK, URL_BLOCK, FILE_BLOCK])
def test_each_source_round_trips_exactly(block: dict[str, Any]) -> None:
    parsed = parse_block(block)
    assert isinstance(parsed, DocumentBlock)
    assert parsed.model_dump(exclude_none=True) == block


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"type": "document", "name": "x"}, "exactly one of"),
        ({**TEXT_BLOCK, "file_id": "f"}, "exactly one of"),
        ({"type": "document", "data": TINY_PDF}, "needs its media_type"),
        ({"type": "document", "media_type": "application/pdf", "data": "not base64!"}, "base64"),
        (
            {"type": "document", "media_type": "application/pdf", "data": "aGVsbG8gd29ybGQ="},
            "%PDF-",
        ),
        ({**TEXT_BLOCK, "media_type": "application/pdf"}, "text/ media_type"),
        ({"type": "document", "url": "file:///etc/passwd"}, "http"),
        ({**PDF_BLOCK, "pages": 3}, "pages"),
        ({**PDF_BLOCK, "media_type": "pdf"}, "media_type"),
    ],
)
def test_a_bad_document_is_refused_in_one_line(block: dict[str, Any], words: str) -> None:
    with pytest.raises(InvalidBlock, match=words):
        parse_block(block)


def test_a_document_over_its_limit_is_refused() -> None:
    with pytest.raises(InvalidBlock, match=r"document is .* the limit is 10"):
        parse_block(PDF_BLOCK, Limits(max_document_bytes=10))
    with pytest.raises(InvalidBlock, match=r"document is .* the limit is 5"):
        parse_block(TEXT_BLOCK, Limits(max_document_bytes=5))


def _store_with_documents(path: Path) -> tuple[Any, Any]:
    store = open_store(path)
    conv = store.new_conversation(title="docs")
    store.append_message(
        conv, "user", [{"type": "text", "text": "Summarise these."}, PDF_BLOCK, TEXT_BLOCK]
    )
    store.append_message(conv, "user", [URL_BLOCK, FILE_BLOCK])
    store.append_message(conv, "assistant", [PDF_BLOCK, {"type": "text", "text": "Done."}])
    return store, conv


def _replayed(tmp_path: Path, shape: Shape, vision: bool) -> dict[str, Any]:
    store, conv = _store_with_documents(tmp_path / "s.db")
    with store:
        body: dict[str, Any] = store.replay(conv, shape=shape, vision=vision)
        assert body == store.replay(conv, shape=shape, vision=vision)  # from the stored model
    assert rejections(shape, request_body(shape, body)) == []
    return body


TEXT_PROSE = "[Document a.txt (text/plain)]:\nline one\nline two"
FILE_MARKER = (
    "[Document not read: spec.docx (file, file id file-123) was here, "
    "but it cannot be sent in this shape.]"
)
URL_MARKER = (
    "[Document not read: (application/pdf, at https://example.com/paper.pdf) was here, "
    "but it cannot be sent in this shape.]"
)


def test_anthropic_vision_sends_pdfs_as_document_blocks(tmp_path: Path) -> None:
    body = _replayed(tmp_path, "anthropic", vision=True)
    first, second, third = body["messages"]
    assert first["content"] == [
        {"type": "text", "text": "Summarise these."},
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": TINY_PDF},
            "title": "report.pdf",
        },
        {"type": "text", "text": TEXT_PROSE},
    ]
    assert second["content"] == [
        {"type": "document", "source": {"type": "url", "url": URL_BLOCK["url"]}},
        {"type": "text", "text": FILE_MARKER},
    ]
    why = "assistant messages cannot carry documents"
    marker = PDF_MARKER.format(size=PDF_SIZE, why=why)
    assert third["content"] == [{"type": "text", "text": f"{marker}\n\nDone."}]


def test_openai_vision_sends_a_pdf_as_a_file_part(tmp_path: Path) -> None:
    body = _replayed(tmp_path, "openai", vision=True)
    first, second, _third = body["messages"]
    assert first["content"] == [
        {"type": "text", "text": "Summarise these."},
        {
            "type": "file",
            "file": {
                "file_data": f"data:application/pdf;base64,{TINY_PDF}",
                "filename": "report.pdf",
            },
        },
        {"type": "text", "text": TEXT_PROSE},
    ]
    # Chat Completions takes no document by URL: its marker says so, as text.
    assert second["content"] == [
        {"type": "text", "text": URL_MARKER},
        {"type": "text", "text": FILE_MARKER},
    ]


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_without_vision_a_pdf_is_a_marker_and_text_still_crosses(
    tmp_path: Path, shape: Shape
) -> None:
    body = _replayed(tmp_path, shape, vision=False)
    dumped = json.dumps(body)
    assert '"document"' not in dumped
    assert '"file"' not in dumped
    first = body["messages"][0]["content"]
    text = first if isinstance(first, str) else first[0]["text"]
    marker = PDF_MARKER.format(size=PDF_SIZE, why="this model cannot see documents")
    assert text == f"Summarise these.\n\n{marker}\n\n{TEXT_PROSE}"


def test_pressure_counts_a_native_pdf_by_its_pages(tmp_path: Path) -> None:
    assert pdf_pages(base64.b64decode(TINY_PDF)) == 1
    assert pdf_pages(b"%PDF-1.7 /Type /Page /Type /Page /Type /Pages") == 2
    store, conv = _store_with_documents(tmp_path / "s.db")
    with store:
        seen = store.pressure(conv, shape="anthropic", vision=True)
        blind = store.pressure(conv, shape="anthropic", vision=False)
    # The PDF by data and the PDF by URL (one assumed page) cross natively.
    assert seen.by_kind["document"] > 2 * PDF_PAGE_TOKENS
    assert blind.by_kind["document"] < PDF_PAGE_TOKENS


def test_dump_load_and_every_export_keep_documents(tmp_path: Path) -> None:
    store, conv = _store_with_documents(tmp_path / "s.db")
    with store:
        lines = list(store.dump())
        markdown = export_conversation(store, conv, "markdown").text
        html = export_conversation(store, conv, "html").text
        otel = json.loads(export_conversation(store, conv, "otel").text)
        before = store.replay(conv, shape="anthropic", vision=True)
    assert "**Document** report.pdf (application/pdf" in markdown
    assert "line one\nline two" in markdown
    assert "document spec.docx (file, file id file-123)" in html
    parts = [p for m in otel["gen_ai.input.messages"] for p in m["parts"]]
    assert {"type": "file", "modality": "document", "file_id": "file-123"}.items() <= parts[
        4
    ].items()
    assert parts[1]["type"] == "blob"
    assert parts[1]["content"] == TINY_PDF
    with open_store(tmp_path / "copy.db") as copy:
        copy.load(lines)
        assert copy.replay(conv, shape="anthropic", vision=True) == before


# -- every converter reads documents -----------------------------------------------------------

PDF_DATA_URL = f"data:application/pdf;base64,{TINY_PDF}"
PDF_DOC = DocumentBlock(media_type="application/pdf", data=TINY_PDF, name="report.pdf")


def _only_blocks(history: Any) -> list[Any]:
    return [block for message in history.messages for block in message.blocks]


def test_anthropic_document_blocks_of_every_source_convert() -> None:
    params: list[Any] = [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": TINY_PDF},
            "title": "report.pdf",
            "context": "quarterly",
            "citations": {"enabled": True},
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/p.pdf"}},
        {"type": "document", "source": {"type": "file", "file_id": "file_011"}},
    ]
    for param in params:  # each is the SDK's own request shape, no key outside it
        assert request_problems(param, DocumentBlockParam) == []
    message = {"role": "user", "content": params}
    assert request_problems(message, MessageParam) == []
    history = history_from_messages({"messages": [message]})
    assert _only_blocks(history) == [
        PDF_DOC.model_copy(update={"context": "quarterly"}),  # the citations switch is not kept
        DocumentBlock(text="hi", media_type="text/plain"),
        DocumentBlock(url="https://example.com/p.pdf"),
        DocumentBlock(file_id="file_011"),
    ]


def test_an_anthropic_document_whose_bytes_are_not_a_pdf_is_refused_whole() -> None:
    bad = {"type": "base64", "media_type": "application/pdf", "data": "aGVsbG8="}
    message = {"role": "user", "content": [{"type": "document", "source": bad}]}
    with pytest.raises(InvalidInput, match=r"message 0, block 0: .*%PDF-"):
        history_from_messages({"messages": [message]})


def test_openai_chat_file_parts_convert() -> None:
    message: dict[str, Any] = {
        "role": "user",
        "content": [
            {"type": "text", "text": "read"},
            {"type": "file", "file": {"file_data": PDF_DATA_URL, "filename": "report.pdf"}},
            {"type": "file", "file": {"file_id": "file-abc"}},
            {"type": "file", "file": {"file_data": TINY_PDF, "filename": "bare.pdf"}},
        ],
    }
    assert request_problems(message, ChatCompletionUserMessageParam) == []
    blocks = _only_blocks(history_from_chat([message]))
    assert blocks[1:] == [
        PDF_DOC,
        DocumentBlock(file_id="file-abc"),
        DocumentBlock(media_type="application/pdf", data=TINY_PDF, name="bare.pdf"),
    ]


def test_responses_input_file_items_convert() -> None:
    text_url = "data:text/plain;base64," + base64.b64encode("héllo".encode()).decode()
    item: dict[str, Any] = {
        "role": "user",
        "content": [
            {"type": "input_file", "file_data": PDF_DATA_URL, "filename": "report.pdf"},
            {"type": "input_file", "file_url": "https://example.com/p.pdf"},
            {"type": "input_file", "file_id": "file-xyz"},
            {"type": "input_file", "file_data": text_url, "filename": "n.txt"},
        ],
    }
    assert request_problems(item, EasyInputMessageParam) == []
    assert _only_blocks(history_from_responses([item])) == [
        PDF_DOC,
        DocumentBlock(url="https://example.com/p.pdf"),
        DocumentBlock(file_id="file-xyz"),
        DocumentBlock(media_type="text/plain", text="héllo", name="n.txt"),
    ]


def test_claude_code_user_lines_carrying_documents_convert() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": TINY_PDF}
    content = [{"type": "text", "text": "see"}, {"type": "document", "source": source}]
    line = {
        "type": "user",
        "uuid": "u1",
        "sessionId": "s1",
        "isSidechain": False,
        "message": {"role": "user", "content": content},
    }
    (history,) = histories_from_transcript(json.dumps(line))
    assert _only_blocks(history)[1] == DocumentBlock(media_type="application/pdf", data=TINY_PDF)


def test_pydantic_ai_document_urls_and_binaries_convert() -> None:
    urlsafe = base64.urlsafe_b64encode(base64.b64decode(TINY_PDF)).decode()
    content = [
        {"kind": "document-url", "url": "https://example.com/p.pdf"},
        {"kind": "binary", "data": urlsafe, "media_type": "application/pdf"},
    ]
    messages = [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": content}]}]
    assert _only_blocks(history_from_model_messages(messages)) == [
        DocumentBlock(url="https://example.com/p.pdf"),
        DocumentBlock(media_type="application/pdf", data=TINY_PDF),
    ]


def test_vercel_file_parts_that_are_not_images_convert() -> None:
    part = {"type": "file", "mediaType": "application/pdf", "url": PDF_DATA_URL}
    messages = [{"id": "m", "role": "user", "parts": [{**part, "filename": "report.pdf"}]}]
    assert _only_blocks(history_from_ui_messages(messages)) == [PDF_DOC]


def test_gemini_cli_inline_and_file_data_documents_convert() -> None:
    content = [
        {"inlineData": {"mimeType": "application/pdf", "data": TINY_PDF}},
        {
            "fileData": {
                "mimeType": "application/pdf",
                "fileUri": "https://example.com/p.pdf",
                "displayName": "p.pdf",
            }
        },
    ]
    session = {
        "sessionId": "s",
        "projectHash": "h",
        "startTime": "t",
        "lastUpdated": "t",
        "messages": [{"id": "m", "timestamp": "t", "type": "user", "content": content}],
    }
    (history,) = histories_from_session(json.dumps(session))
    assert _only_blocks(history) == [
        DocumentBlock(media_type="application/pdf", data=TINY_PDF),
        DocumentBlock(media_type="application/pdf", url="https://example.com/p.pdf", name="p.pdf"),
    ]


def test_codex_rollout_input_files_convert() -> None:
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_file", "file_data": PDF_DATA_URL, "filename": "report.pdf"}],
    }
    line = {"timestamp": "t", "type": "response_item", "payload": item}
    (history,) = histories_from_rollout(json.dumps(line) + "\n")
    assert _only_blocks(history) == [PDF_DOC]


def test_the_command_line_replays_and_verifies_a_store_with_documents(tmp_path: Path) -> None:
    """Real subprocesses: the quick replay path renders a stored document's marker exactly as
    the full path does, and verify finds the store and its replay model clean."""
    db = tmp_path / "s.db"
    store, conv = _store_with_documents(db)
    with store:
        expected = store.replay(conv, shape="openai", vision=False)
    script = Path(sys.executable).with_name("convstore")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVSTORE_")}
    for extra in ({}, {"CONVSTORE_DEBUG": "0"}):  # the quick path, then the full one
        done = subprocess.run(
            [script, "--db", db, "replay", str(conv)],
            capture_output=True,
            env={**env, **extra},
            check=True,
        )
        assert json.loads(done.stdout) == expected
    verified = subprocess.run(
        [script, "--db", db, "verify"], capture_output=True, text=True, env=env, check=False
    )
    assert verified.returncode == 0, verified.stderr


def test_the_document_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVSTORE_MAX_DOCUMENT_BYTES", "7")
    limits = Limits.from_env()
    assert limits.max_document_bytes == 7
    with pytest.raises(InvalidBlock, match="the limit is 7"):
        parse_block(PDF_BLOCK, limits)


def test_a_documents_context_is_kept_and_sent_in_every_shape(tmp_path: Path) -> None:
    """Anthropic's document ``context`` is kept on the block and reaches the model everywhere:
    as the Messages API's own field, as text before a Chat Completions file part, and inside
    the marker or the head a model that cannot read it is sent; a document without one is
    stored as before (no ``context`` key)."""
    pdf = {"type": "base64", "media_type": "application/pdf", "data": TINY_PDF}
    text = {"type": "text", "media_type": "text/plain", "data": "body"}
    message = {
        "role": "user",
        "content": [
            {"type": "document", "source": pdf, "title": "r.pdf", "context": "Q3, draft"},
            {"type": "document", "source": text, "context": "from the wiki"},
            {"type": "document", "source": text},
        ],
    }
    with open_store(tmp_path / "s.db") as store:
        conv = store.import_history(history_from_messages({"messages": [message]}))
        events = [json.loads(raw) for raw in store.raw_events(conv)]
        stored = [e for e in events if e.get("block", {}).get("type") == "document"]
        anthropic = store.replay(conv, shape="anthropic", vision=True)["messages"][0]["content"]
        openai = store.replay(conv, shape="openai", vision=True)["messages"][0]["content"]
        blind = store.replay(conv, shape="openai", vision=False)["messages"][0]["content"]
    assert [s["block"].get("context") for s in stored] == ["Q3, draft", "from the wiki", None]
    assert "context" not in stored[2]["block"]
    assert anthropic[0]["type"] == "document"
    assert (anthropic[0]["title"], anthropic[0]["context"]) == ("r.pdf", "Q3, draft")
    assert anthropic[1]["text"].startswith("[Document (text/plain). Its context: from the wiki]:\n")
    assert [p["type"] for p in openai[:2]] == ["text", "file"]
    assert openai[0]["text"] == "[Its context: Q3, draft]"
    assert "was here, but this model cannot see documents. Its context: Q3, draft]" in blind
    assert "[Document (text/plain)]:\nbody" in blind


def test_markdown_and_html_exports_show_a_documents_context(tmp_path: Path) -> None:
    """People reading an export see what the model was told about a document."""
    doc = {"type": "document", "text": "body", "context": "from the wiki"}
    with open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [doc])
        markdown = export_conversation(store, conv, "markdown").text
        html = export_conversation(store, conv, "html").text
    assert "*Its context: from the wiki*" in markdown
    assert "<p class='context'>Its context: from the wiki</p>" in html
