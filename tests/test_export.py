"""Export: one conversation as a request body, a Markdown transcript, or its raw events."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings

import convstore
from convstore import Store
from convstore.app.demo import record_demo, tiny_png
from convstore.app.export import export_conversation
from convstore.cli import cli
from convstore.domain.blocks import BLOCK_CLASSES
from convstore.domain.conversation import Conversation
from convstore.domain.events import Event
from convstore.projections.prose import REDACTED_REASONING
from convstore.views.markdown import fenced, markdown_transcript
from tests.sdk import rejections, request_body
from tests.strategies import histories

PNG = base64.b64encode(tiny_png()).decode()


def invoke(db: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args])


def ok(db: Path, *args: str) -> str:
    result = invoke(db, *args)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


@pytest.fixture
def demo(tmp_path: Path) -> tuple[Path, UUID]:
    """A store holding the demo conversation (every block kind, an image, a killed round)."""
    db = tmp_path / "demo.db"
    with convstore.open_store(db) as store:
        conv = record_demo(store)
    return db, conv


HOSTED_ROUND: list[dict[str, object]] = [
    # What a provider that ran its own tools records (modelled on the Messages API's
    # server_tool_use / web_search_tool_result and mcp_tool_use blocks, and text citations).
    {
        "type": "hosted_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "walrus"},
        "provider_data": {"type": "server_tool_use", "id": "srvtoolu_1"},
    },
    {
        "type": "hosted_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {"type": "text", "text": "Walruses (Wikipedia)"},
            {"type": "document", "text": "Walruses live in the Arctic.", "name": "walrus.txt"},
        ],
        "provider_data": {"type": "web_search_tool_result", "encrypted_content": "EqAB"},
    },
    {
        "type": "hosted_tool_use",
        "id": "mcptoolu_1",
        "name": "search_docs",
        "server": "docs",
        "input": {"q": "tusks"},
    },
    {
        "type": "hosted_tool_result",
        "tool_use_id": "mcptoolu_1",
        "is_error": True,
        "content": "denied",
    },
    {
        "type": "text",
        "text": "Walruses live in the Arctic.",
        "annotations": [
            {
                "type": "web_search_result_location",
                "url": "https://en.wikipedia.org/wiki/Walrus",
                "title": "Walrus",
                "cited_text": "Walruses live in the Arctic.",
                "encrypted_index": "Eo8B",
            },
            {"type": "char_location", "document_title": "Field notes", "cited_text": "Arctic"},
        ],
    },
]


def every_kind(store: Store) -> UUID:
    """A conversation with each block kind and its variants, a compaction and an interruption."""
    conv = store.new_conversation(title="kinds")
    store.append_message(conv, "system", [{"type": "text", "text": "Be brief."}])
    first = store.append_message(
        conv,
        "user",
        [
            {"type": "text", "text": "Look at ```this``` and ````that````."},
            {"type": "image", "media_type": "image/png", "data": PNG},
            {"type": "image", "url": "https://example.com/a b.png"},
            {"type": "document", "text": "notes", "name": "n.txt"},
        ],
    )
    store.append_message(
        conv,
        "assistant",
        [
            {"type": "reasoning", "text": "line one\nline two", "signature": "sig"},
            {"type": "reasoning", "text": "", "encrypted_content": "xyz", "redacted": True},
            {"type": "tool_use", "id": "c1", "name": "run", "input": {"cmd": "echo ```"}},
            {"type": "tool_use", "id": "c2", "name": "raw", "input": "{not json"},
            *HOSTED_ROUND,
        ],
    )
    store.append_message(
        conv,
        "user",
        [
            {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
            {
                "type": "tool_result",
                "tool_use_id": "c2",
                "is_error": True,
                "content": [
                    {"type": "text", "text": "bad"},
                    {"type": "image", "media_type": "image/png", "data": PNG},
                    {"type": "document", "text": "the log", "name": "run.log"},
                ],
            },
            {"type": "tool_result", "tool_use_id": "zz", "content": "orphan"},
        ],
    )
    store.compact(conv, "The user showed two images.", through=first)
    cut = store.start_message(conv, "assistant")
    store.append_block(conv, cut, {"type": "text", "text": "Let me"})
    store.interrupt_message(conv, cut, reason="user pressed stop")
    store.start_message(conv, "assistant")
    return conv


def test_markdown_marks_messages_a_rewind_withdrew(tmp_path: Path) -> None:
    """A withdrawn message stays in the transcript, its heading saying it is not replayed."""
    with convstore.open_store(tmp_path / "r.db") as store:
        conv = store.new_conversation()
        kept = store.append_message(conv, "user", [{"type": "text", "text": "keep"}])
        store.append_message(conv, "assistant", [{"type": "text", "text": "take back"}])
        store.rewind(conv, to=kept)
        text = markdown_transcript(store.events(conv)).text
    assert re.search(r"## 1 · user · \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n", text)
    assert re.search(
        r"## 2 · assistant · withdrawn by a rewind \(not replayed\) · [^\n]+ UTC\n\ntake back", text
    )


# -- the Markdown projection -------------------------------------------------------------------


def test_markdown_and_replay_show_encrypted_only_reasoning_alike(tmp_path: Path) -> None:
    """Reasoning the provider returned only encrypted (a Responses reasoning item with no
    summary, not marked redacted) reads as the same marker in Markdown as in replay."""
    with convstore.open_store(tmp_path / "e.db") as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "q"}])
        secret = {"type": "reasoning", "text": "", "encrypted_content": "gAAAA"}
        store.append_message(conv, "assistant", [secret, {"type": "text", "text": "a"}])
        text = markdown_transcript(store.events(conv)).text
        replayed = store.replay(conv)["messages"][1]["content"]
    assert f"> {REDACTED_REASONING}" in text
    assert replayed.startswith(f"[Reasoning]: {REDACTED_REASONING}")
    assert "gAAAA" not in text


def test_markdown_renders_every_block_kind_and_state(tmp_path: Path) -> None:
    """Each block kind (and variant), the compaction, the interruption and the open message
    appear in the transcript in order."""
    with convstore.open_store(tmp_path / "k.db") as store:
        conv = every_kind(store)
        events = store.events(conv)
    text = markdown_transcript(events).text
    kinds = {str(cls.model_fields["type"].default) for cls in BLOCK_CLASSES}
    shown = {
        "text": "Look at ```this```",
        "image": "*[image: image/png, 73 bytes]*",
        "document": "**Document** n.txt (text/plain, 5 bytes)\n\n```\nnotes\n```",
        "reasoning": "> **Reasoning**\n>\n> line one\n> line two",
        "tool_use": '**Tool use** `run` · call `c1`\n\n````json\n{\n  "cmd": "echo ```"\n}\n````',
        "tool_result": "**Error** `raw` · call `c2`\n\n```\nbad\n```",
        "hosted_tool_use": (
            "**Tool use** `web_search` · call `srvtoolu_1` · run by the provider · provider "
            'data kept\n\n```json\n{\n  "query": "walrus"\n}\n```'
        ),
        "hosted_tool_result": (
            "**Result** `web_search` · call `srvtoolu_1` · run by the provider · provider data "
            "kept\n\n```\nWalruses (Wikipedia)\n```\n\n**Document** walrus.txt"
        ),
    }
    assert set(shown) == kinds
    for kind, expected in shown.items():
        assert expected in text, kind
    assert "![image by URL](<https://example.com/a b.png>)" in text
    assert f"> {REDACTED_REASONING}" in text
    assert "**Tool use** `raw` · call `c2`\n\n```\n{not json\n```" in text
    assert "**Result** `unknown` · call `zz`" in text
    assert "**Document** run.log (text/plain, 7 bytes)\n\n```\nthe log\n```" in text
    assert "`mcptoolu_1` · run by the provider, MCP server docs\n" in text
    assert "**Error** `search_docs` · call `mcptoolu_1` · run by the provider\n" in text
    assert (
        "Walruses live in the Arctic.\n\n"
        "[Sources: Walrus (https://en.wikipedia.org/wiki/Walrus); Field notes]\n"
    ) in text
    assert "EqAB" not in text  # the provider's own payload is kept, not written
    assert text.index("**Compacted.**") < text.index("## 3 · assistant")
    assert text.index("## 2 · user") < text.index("**Compacted.**")
    assert "## 5 · assistant · interrupted" in text
    assert "*[Interrupted: user pressed stop]*" in text
    assert re.search(
        r"## 6 · assistant · never ended · [^\n]+ UTC\n\n\*\(nothing was recorded for this "
        r"message\)\*\n\Z",
        text,
    )
    assert text.startswith("# kinds\n\nconversation `")


def test_markdown_images_become_files_when_there_is_a_place_for_them(tmp_path: Path) -> None:
    """With an image directory, each data image is listed as a file and linked in order."""
    with convstore.open_store(tmp_path / "k.db") as store:
        events = store.events(every_kind(store))
    transcript = markdown_transcript(events, image_dir="out-images")
    assert [image.path for image in transcript.images] == [
        "out-images/image-1.png",
        "out-images/image-2.png",
    ]
    assert all(base64.b64decode(image.data) == tiny_png() for image in transcript.images)
    assert "![image/png, 73 bytes](<out-images/image-2.png>)" in transcript.text
    assert "*[image:" not in transcript.text


@pytest.mark.parametrize("text", ["plain", "a ``` b", "````", "`x`", "```` and ``` and `"])
def test_a_fence_is_never_closed_by_its_content(text: str) -> None:
    """The fence is longer than any backtick run inside, so the content cannot end it."""
    block = fenced(text)
    fence = block.split("\n", 1)[0]
    assert block == f"{fence}\n{text}\n{fence}"
    assert all(len(run) < len(fence) for run in re.findall(r"`+", text))


@settings(max_examples=60, deadline=None)
@given(histories())
def test_markdown_has_one_heading_per_message(events: list[Event]) -> None:
    """For any history, the transcript has exactly one numbered heading per stored message."""
    text = markdown_transcript(events).text
    started = sum(1 for e in events if e.type == "message_started")
    outside_fences = re.sub(r"(`{3,})[^\n]*\n.*?\n\1(?=\n)", "", text, flags=re.DOTALL)
    numbers = re.findall(r"^## (\d+) · ", outside_fences, flags=re.MULTILINE)
    assert numbers == [str(n) for n in range(1, started + 1)]


# -- the command -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "shape", "vision"),
    [("openai-chat", "openai", False), ("anthropic", "anthropic", True)],
)
def test_request_body_exports_are_exactly_replay(
    demo: tuple[Path, UUID], fmt: str, shape: str, vision: bool
) -> None:
    """openai-chat / anthropic give replay's body, which the real SDK request types accept."""
    db, conv = demo
    flag = "--vision" if vision else "--no-vision"
    exported = json.loads(ok(db, "export", str(conv), "--format", fmt, flag))
    replayed = json.loads(ok(db, "replay", str(conv), "--shape", shape, flag))
    assert exported == replayed
    assert "model" not in exported
    provider: Any = shape
    assert rejections(provider, request_body(provider, exported)) == []


def test_jsonl_export_is_the_raw_log(demo: tuple[Path, UUID]) -> None:
    """jsonl gives the stored events, one JSON object per line, exactly as `log` does."""
    db, conv = demo
    exported = ok(db, "export", str(conv), "--format", "jsonl")
    assert exported == ok(db, "log", str(conv))
    versions = [json.loads(line)["originator_version"] for line in exported.splitlines()]
    assert versions == list(range(1, len(versions) + 1))


def test_markdown_export_to_a_file_writes_its_images_beside_it(
    demo: tuple[Path, UUID], tmp_path: Path
) -> None:
    """--output FILE writes the transcript and its images in FILE-images/, linked relatively."""
    db, conv = demo
    out = tmp_path / "triage.md"
    result = invoke(db, "export", str(conv), "--format", "markdown", "--output", str(out))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    text = out.read_text()
    links = re.findall(r"!\[[^\]]*\]\(<([^>]+)>\)", text)
    assert links == ["triage-images/image-1.png", "triage-images/image-2.png"]
    for link in links:
        assert (tmp_path / link).read_bytes() == tiny_png()
    stdout = ok(db, "export", str(conv), "--format", "markdown")
    assert "*[image: image/png, 73 bytes]*" in stdout
    assert not list(tmp_path.glob("*-images/*.partial"))


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--format", "markdown"], "not found"),
        (["--format", "yaml"], "'yaml' is not one of"),
        (["--format", "jsonl", "--output", "/nonexistent/dir/x.jsonl"], "does not exist"),
    ],
)
def test_export_refusals_are_one_line_exit_2(
    demo: tuple[Path, UUID], args: list[str], match: str
) -> None:
    """An unknown conversation, format or output directory: exit 2, one line, no file."""
    db, conv = demo
    target = str(uuid4()) if match == "not found" else str(conv)
    result = invoke(db, "export", target, *args)
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert match in line


def test_export_from_a_missing_store_creates_no_file(tmp_path: Path) -> None:
    """Exporting from a store that does not exist refuses and creates no store file."""
    result = invoke(tmp_path / "none.db", "export", str(uuid4()), "--format", "jsonl")
    assert result.exit_code == 2
    assert not (tmp_path / "none.db").exists()


def test_markdown_heading_uses_the_conversation_title(tmp_path: Path) -> None:
    """The transcript opens with the title and the conversation id."""
    conv = uuid4()
    started = Conversation.start(conv, "A title")
    text = markdown_transcript([started]).text
    assert text.startswith(f"# A title\n\nconversation `{conv}` · started ")


def test_markdown_keeps_a_tool_outputs_text_and_images_in_their_order(tmp_path: Path) -> None:
    """A result of text, image, text reads in that order: the image stands between the two
    texts it was recorded between, each text run in its own fence."""
    png = base64.b64encode(tiny_png()).decode()
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        call = {"type": "tool_use", "id": "c1", "name": "shot", "input": {}}
        store.append_message(conv, "assistant", [call])
        parts = [
            {"type": "text", "text": "before the shot"},
            {"type": "image", "media_type": "image/png", "data": png},
            {"type": "text", "text": "after the shot"},
        ]
        store.append_message(
            conv, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": parts}]
        )
        markdown = export_conversation(store, conv, "markdown").text
    before, image, after = (
        markdown.index("before the shot"),
        markdown.index("[image: image/png"),
        markdown.index("after the shot"),
    )
    assert before < image < after
