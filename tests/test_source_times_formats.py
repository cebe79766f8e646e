"""Codex rollouts, Gemini CLI sessions and Pydantic AI histories keep their source times, as
Claude Code transcripts do (issue 22: original times): each imported message is at the time its
source wrote, through a real store, and the conversation's start and last activity follow.
Before, every message of these formats was stamped with the moment of the import."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

import convstore
from convstore.store.importing import ImportFormat, read_histories

FIXTURES = Path(__file__).parent / "fixtures" / "import"


def t(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


EXPECTED: dict[str, tuple[ImportFormat, list[tuple[str, str]]]] = {
    "codex-rollout.jsonl": (
        "codex",
        [
            ("system", "2026-01-02T10:00:00"),  # the instructions, at the session header
            ("system", "2026-01-02T10:00:01"),
            ("user", "2026-01-02T10:00:01"),
            ("user", "2026-01-02T10:00:02"),
            ("assistant", "2026-01-02T10:00:03"),  # reasoning, then a call: its first line
            ("user", "2026-01-02T10:00:04"),
            ("assistant", "2026-01-02T10:00:04"),
            ("user", "2026-01-02T10:00:04"),
            ("assistant", "2026-01-02T10:00:05"),
            ("user", "2026-01-02T10:00:05"),
            ("assistant", "2026-01-02T10:00:06"),
            ("user", "2026-01-02T10:00:08"),
            ("assistant", "2026-01-02T10:00:09"),
        ],
    ),
    "gemini-cli-session.json": (
        "gemini-cli",
        [
            ("user", "2026-01-02T10:00:00"),
            ("assistant", "2026-01-02T10:00:02"),
            ("user", "2026-01-02T10:00:02.600"),  # the results, at the latest call's time
            ("user", "2026-01-02T10:00:04"),
            ("assistant", "2026-01-02T10:00:05"),
        ],
    ),
    "pydantic-ai.json": (
        "pydantic-ai",
        [
            ("system", "2026-01-02T10:00:00"),
            ("system", "2026-01-02T10:00:00"),
            ("user", "2026-01-02T10:00:00"),
            ("assistant", "2026-01-02T10:00:01"),
            ("user", "2026-01-02T10:00:02"),
            ("assistant", "2026-01-02T10:00:03"),
            ("user", "2026-01-02T10:00:04"),
            ("assistant", "2026-01-02T10:00:05"),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_imported_messages_are_at_their_source_times(name: str, tmp_path: Path) -> None:
    fmt, expected = EXPECTED[name]
    text = (FIXTURES / name).read_text()
    with convstore.open_store(str(tmp_path / "s.db")) as store:
        report = store.import_histories(read_histories(fmt, text))
        conv = report.conversations[0].id
        messages = store.messages(conv)
        assert [(m.role, m.started_at) for m in messages] == [(r, t(a)) for r, a in expected]
        [info] = [c for c in store.conversations() if c.id == conv]
        assert info.created_at == t(expected[0][1])
        assert info.last_active == max(t(a) for _, a in expected)


def test_the_gemini_jsonl_layout_has_the_same_times(tmp_path: Path) -> None:
    """The append-only layout of the same session gives the same times."""
    times = {}
    for name in ("gemini-cli-session.json", "gemini-cli-session.jsonl"):
        text = (FIXTURES / name).read_text()
        [history] = read_histories("gemini-cli", text)
        times[name] = [m.at for m in history.messages]
    assert times["gemini-cli-session.json"] == times["gemini-cli-session.jsonl"]
    assert None not in times["gemini-cli-session.json"]


def test_an_older_codex_rollout_has_times_only_where_its_lines_do() -> None:
    """The older layout's bare items carry no time: their messages have none (the import's
    moment), and only the header's instructions are at the header's time."""
    [history] = read_histories("codex", (FIXTURES / "codex-rollout-legacy.jsonl").read_text())
    assert [m.at for m in history.messages] == [t("2025-05-20T10:00:00")] + [None] * (
        len(history.messages) - 1
    )
