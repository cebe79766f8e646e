"""Claude Code transcripts: every corpus file converts, records and replays every tool round."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import convstore
from convstore.convert.claude_code import histories_from_transcript
from convstore.domain.blocks import (
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
)
from tests import anthropic_blocks as fx
from tests.histories import prose_tool_blocks, record_history, source_tool_blocks
from tests.sdk import rejections, request_body


def _transcripts(corpus_dir: Path) -> list[Path]:
    return sorted((corpus_dir / "claude-code").glob("*.jsonl"))


def test_every_corpus_transcript_records_and_replays_each_tool_round(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Each real transcript converts, records, and replays (both shapes, accepted by the SDKs)
    with exactly as many tool calls and results as the source file holds."""
    files = _transcripts(corpus_dir)
    assert len(files) >= 9
    with convstore.open_store(tmp_path / "s.db") as store:
        for path in files:
            text = path.read_text(encoding="utf-8")
            histories = histories_from_transcript(text)
            shown: Counter[str] = Counter()
            for history in histories:
                conv = record_history(store, history)
                for shape in ("openai", "anthropic"):
                    full = store.replay(conv, shape=shape, vision=True, full=True)
                    assert rejections(shape, request_body(shape, full)) == [], path.name
                    compacted = store.replay(conv, shape=shape, vision=False)
                    assert rejections(shape, request_body(shape, compacted)) == [], path.name
                shown += prose_tool_blocks(store.replay(conv, full=True))
            assert shown == source_tool_blocks(text), path.name


def test_sidechains_become_one_history_per_agent_after_the_main_thread(corpus_dir: Path) -> None:
    """The 5 Task subagents of a captured session become 5 histories linked to the main one."""
    path = corpus_dir / "claude-code/ccviewer-fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    histories = histories_from_transcript(path.read_text(encoding="utf-8"))
    assert len(histories) == 6
    assert histories[0].key == "claude-code:fe5e1c67-53e7-4862-81ae-d0e013e3270b"
    assert histories[0].parent is None
    assert all(h.parent == 0 for h in histories[1:])
    assert all(str(h.key).startswith(f"{histories[0].key}:") for h in histories[1:])
    assert histories[0].title is not None


def test_a_file_of_only_sidechain_lines_puts_its_agent_first(corpus_dir: Path) -> None:
    """A subagent's own transcript file gives that agent's history, keyed by its agentId."""
    path = corpus_dir / "claude-code/spotter-4d5611e5-subagents-agent-a2898e3.jsonl"
    [history] = histories_from_transcript(path.read_text(encoding="utf-8"))
    assert history.key == "claude-code:4d5611e5-241a-462a-8d15-5122611a9569:a2898e3"
    assert history.parent is None
    assert history.ignored == Counter({"progress": 70})


def test_the_hand_written_malformed_file_reports_each_bad_line(corpus_dir: Path) -> None:
    """Every malformed line of claude-code-log's edge cases is skipped with its line number."""
    path = corpus_dir / "claude-code/claudecodelog-edge_cases.jsonl"
    [history] = histories_from_transcript(path.read_text(encoding="utf-8"))
    assert [s.line for s in history.skipped] == [10, 11, 13, 14, 15, 16, 18]
    assert history.ignored == Counter({"summary": 1})
    results = [b for m in history.messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert [r.is_error for r in results] == [True]


def test_compaction_thinking_and_images_are_kept(corpus_dir: Path) -> None:
    """A compact boundary becomes a compaction; thinking keeps its signature; a screenshot
    inside a tool result stays an image."""
    compact = corpus_dir / "claude-code/agentlogs-compact.jsonl"
    [history] = histories_from_transcript(compact.read_text(encoding="utf-8"))
    [compaction] = history.compactions
    assert compaction.summary.startswith("This session is being continued")
    assert compaction.through == 3
    images = corpus_dir / "claude-code/agentlogs-images.jsonl"
    [history] = histories_from_transcript(images.read_text(encoding="utf-8"))
    blocks = [b for m in history.messages for b in m.blocks]
    assert all(b.signature for b in blocks if isinstance(b, ReasoningBlock))
    parts = [p for b in blocks if isinstance(b, ToolResultBlock) for p in b.content]
    assert any(isinstance(p, ImageBlock) and p.media_type == "image/png" for p in parts)


def _line(**fields: object) -> str:
    base = {"sessionId": "s1", "isSidechain": False}
    return json.dumps({**base, **fields})


def test_lines_of_one_message_merge_and_an_interruption_marks_it() -> None:
    """Assistant lines sharing message.id make one message; an interruption after it marks
    it interrupted; consecutive tool-result lines merge; an unknown block is reported."""
    call = {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}
    call2 = {"type": "tool_use", "id": "t2", "name": "cat", "input": {"p": 1}}
    text = "\n".join(
        [
            _line(type="user", uuid="u1", message={"role": "user", "content": "go"}),
            _line(type="assistant", uuid="a1", message={"id": "m1", "content": [call]}),
            _line(type="assistant", uuid="a2", message={"id": "m1", "content": [call2]}),
            _line(
                type="user",
                uuid="u2",
                message={"content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            ),
            _line(
                type="user",
                uuid="u3",
                message={"content": [{"type": "tool_result", "tool_use_id": "zz", "content": "x"}]},
            ),
            _line(
                type="assistant",
                uuid="a3",
                message={"id": "m2", "content": [{"type": "compaction", "content": "s"}]},
            ),
            _line(type="assistant", uuid="a4", message={"id": "m3", "content": "Let me"}),
            _line(
                type="user",
                uuid="u4",
                message={"content": [{"type": "text", "text": "[Request interrupted by user]"}]},
            ),
            "{not json",
        ]
    )
    [history] = histories_from_transcript(text)
    roles = [(m.role, len(m.blocks), m.status) for m in history.messages]
    assert roles == [
        ("user", 1, "ended"),
        ("assistant", 2, "ended"),
        ("user", 2, "ended"),
        ("assistant", 1, "interrupted"),
    ]
    assert history.messages[3].blocks == (TextBlock(text="Let me"),)
    assert [(s.line, "'compaction'" in s.reason) for s in history.skipped] == [
        (6, True),
        (9, False),
    ]


def test_a_corrupt_image_in_a_tool_result_keeps_the_result(tmp_path: Path) -> None:
    """An image whose bytes are not its declared type becomes a marker inside its result."""
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [bad], "is_error": True}
    text = _line(type="user", uuid="u1", message={"content": [result]})
    [history] = histories_from_transcript(text)
    [message] = history.messages
    [block] = message.blocks
    assert isinstance(block, ToolResultBlock)
    assert block.is_error
    assert isinstance(block.content, list)
    [part] = block.content
    assert isinstance(part, TextBlock)
    assert part.text.startswith("[Image not kept:")
    assert [s.line for s in history.skipped] == [1]
    with convstore.open_store(tmp_path / "s.db") as store:
        conv = record_history(store, history)
        assert "unknown" in store.replay(conv)["messages"][0]["content"]


@pytest.mark.parametrize("text", ["", "\n\n", "42\n"])
def test_an_empty_or_useless_file_gives_one_empty_history(text: str) -> None:
    """Nothing conversational still gives one (empty) history, so the import can report."""
    [history] = histories_from_transcript(text)
    assert history.messages == []


def test_a_line_nested_too_deeply_to_read_is_skipped_and_reported(tmp_path: Path) -> None:
    """A line nested past what the JSON reader can follow is skipped like any unreadable line:
    the lines around it import, and `import` reports it by number (exit 0, no traceback)."""
    deep = "[" * 100_000 + "]" * 100_000
    first = _line(type="user", uuid="u1", message={"role": "user", "content": "before"})
    last = _line(type="user", uuid="u2", message={"role": "user", "content": "after"})
    text = f"{first}\n{deep}\n{last}\n"
    [history] = histories_from_transcript(text)
    assert [m.blocks for m in history.messages] == [
        (TextBlock(text="before"),),
        (TextBlock(text="after"),),
    ]
    assert [(s.line, s.reason) for s in history.skipped] == [
        (2, "not read: JSON nested too deeply")
    ]
    session = tmp_path / "session.jsonl"
    session.write_text(text)
    db = tmp_path / "s.db"
    script = Path(sys.executable).parent / "convstore"
    proc = subprocess.run(
        [str(script), "--db", str(db), "import", "--format", "claude-code", str(session)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "line 2: not read: JSON nested too deeply" in proc.stderr
    with convstore.open_store(db) as store:
        [conv] = store.conversations()
        replayed = json.dumps(store.replay(conv.id)["messages"])
        assert "before" in replayed
        assert "after" in replayed


def test_hosted_blocks_in_lines_join_their_message_and_keep_the_id_rule() -> None:
    """A web search's call and results (lines sharing message.id) and cited text join one
    assistant message as hosted blocks and annotated text; a later line repeating the hosted
    call's id is left out and reported."""
    text = "\n".join(
        [
            _line(type="user", uuid="u1", message={"role": "user", "content": "search"}),
            _line(type="assistant", uuid="a1", message={"id": "m1", "content": [fx.SEARCH]}),
            _line(
                type="assistant", uuid="a2", message={"id": "m1", "content": [fx.SEARCH_RESULTS]}
            ),
            _line(type="assistant", uuid="a3", message={"id": "m1", "content": [fx.CITED]}),
            _line(type="assistant", uuid="a4", message={"id": "m2", "content": [fx.SEARCH]}),
        ]
    )
    [history] = histories_from_transcript(text)
    assert [m.role for m in history.messages] == ["user", "assistant"]
    call, results, cited = history.messages[1].blocks
    assert isinstance(call, HostedToolUseBlock)
    assert call.name == "web_search"
    assert isinstance(results, HostedToolResultBlock)
    assert results.provider_data == fx.SEARCH_RESULTS
    assert isinstance(cited, TextBlock)
    assert cited.annotations == fx.CITED["citations"]
    assert [(s.line, s.reason) for s in history.skipped] == [
        (5, "hosted_tool_use id 'srvtoolu_01' was already taken; block left out")
    ]
