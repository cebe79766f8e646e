"""What a user reads of a conversation with hosted calls, documents and image-only results, on
every surface that is not replay: the web list's counts, ``pressure``'s table, the Markdown
transcript and ``convstore show``. Each reads the synthetic hosted round of
:mod:`tests.hosted` (three provider-run calls, one of the caller's, a PDF in its result)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import convstore
from convstore.app.export import export_conversation
from convstore.app.projector import audit_path, catch_up, open_audit
from convstore.domain.blocks import HostedToolResultBlock, HostedToolUseBlock, ImageBlock
from tests.cli.support import ok
from tests.hosted import record_round
from tests.strategies import TINY_PDF

pytest.importorskip("starlette", reason="the web extra (Starlette) is not installed")
from starlette.testclient import TestClient

from convstore.cli.serve import HostGuard, allowed_hosts
from convstore.web.app import create_app

PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP4z8DwHwAFAAIB5ScN4gAA"
    "AABJRU5ErkJggg=="
)


def _listing(store: convstore.Store) -> str:
    app = HostGuard(create_app(store), allowed_hosts("127.0.0.1", ()), "convstore serve")
    return TestClient(app, base_url="http://127.0.0.1:8002").get("/").text


def test_the_web_list_counts_the_calls_the_provider_ran(tmp_path: Path) -> None:
    """The list's tool-call column counts every call, as ``audit tools`` lists them (hosted 1
    or 0), whether read from the conversation or from the audit read model. Before, a
    conversation of three web searches and one call of its own showed 1."""
    with convstore.open_store(str(tmp_path / "s.db")) as store:
        conv = record_round(store)
        messages = store.messages(conv)
        calls = [b for m in messages for b in m.blocks if b.block.type.endswith("tool_use")]
        assert len(calls) == 4
        row = f"<td>{len(messages)}</td><td>4 <span class='meta'>(3 hosted)</span></td>"
        assert row in _listing(store)  # read from the conversation
        audit = open_audit(store, audit_path(store))
        try:
            catch_up(store, audit)
        finally:
            audit.close()
        assert row in _listing(store)  # from the read model


def test_pressure_lines_up_every_kind(tmp_path: Path) -> None:
    """Each kind's count ends in the same column: ``hosted_tool_result`` is longer than the 12
    characters the table was laid out for, and pushed its number out of line."""
    db = tmp_path / "s.db"
    with convstore.open_store(str(db)) as store:
        conv = record_round(store)
    out = ok(db, "pressure", str(conv))
    lines = out.split("largest messages")[0].splitlines()[1:]
    assert any(line.split()[0] == "hosted_tool_result" for line in lines)
    assert len({len(line) for line in lines}) == 1, lines


def test_markdown_writes_no_empty_fence_for_an_image_only_result(tmp_path: Path) -> None:
    """A result whose whole output is an image (a generated image, a screenshot) is its
    image, not an empty code block followed by it."""
    with convstore.open_store(str(tmp_path / "s.db")) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "Draw a walrus."}])
        image = ImageBlock(media_type="image/png", data=PNG)
        store.append_message(
            conv,
            "assistant",
            [
                HostedToolUseBlock(id="ig_1", name="image_generation", input={"prompt": "walrus"}),
                HostedToolResultBlock(tool_use_id="ig_1", content=[image]),
            ],
        )
        text = export_conversation(store, conv, "markdown").text
    assert not re.search(r"```\n\n```", text), text
    assert "**Result** `image_generation` · call `ig_1` · run by the provider\n\n*[image:" in text


def test_show_describes_a_pdf_without_claiming_a_model_did_not_read_it(tmp_path: Path) -> None:
    """``show`` is a transcript for people: a PDF there is named as an image is
    (``[document: report.pdf (application/pdf, N bytes)]``), not replay's marker for a model
    that cannot see documents, which said "Document not read" of a PDF the model was sent."""
    db = tmp_path / "s.db"
    with convstore.open_store(str(db)) as store:
        conv = store.new_conversation()
        pdf = {"type": "document", "media_type": "application/pdf", "data": TINY_PDF}
        store.append_message(conv, "user", [{**pdf, "name": "report.pdf"}])
        record_round_conv = record_round(store)
    out = ok(db, "show", str(conv))
    assert "Document not read" not in out
    assert re.search(r"\[document: report\.pdf \(application/pdf, [\d,]+ bytes\)\]", out), out
    round_out = ok(db, "show", str(record_round_conv))
    assert "Document not read" not in round_out
    assert "[document: " in round_out  # the PDF inside the caller's tool result
