"""A history read from another system's format, before it is recorded.

Every importer (Claude Code transcripts, Chat Completions and Messages request bodies,
Responses API item lists, Codex rollouts, Gemini CLI sessions, Pydantic AI message history,
Vercel AI SDK UIMessages) turns its input into :class:`History` values: messages of checked
convstore blocks, compactions, and an account of what was skipped. Recording a history is the
store's job; reading one does no I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from convstore.domain.blocks import Block
from convstore.domain.events import Role

HistoryStatus = Literal["ended", "interrupted", "open"]


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One message as it will be recorded: role, blocks in order, and how it closed."""

    role: Role
    blocks: tuple[Block, ...]
    status: HistoryStatus = "ended"
    reason: str | None = None
    """Why an interrupted message was cut short, when the source says."""


@dataclass(frozen=True, slots=True)
class HistoryCompaction:
    """A compaction the source recorded: ``summary`` replaces messages up to ``through``."""

    summary: str
    through: int
    """Index (in :attr:`History.messages`) of the last message the summary replaces."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A part of the input that was left out, and why."""

    reason: str
    line: int | None = None
    """1-based line number, for line-oriented inputs."""


@dataclass(slots=True)
class History:
    """One conversation read from a source, ready to be recorded as a whole."""

    messages: list[HistoryMessage] = field(default_factory=list)
    compactions: list[HistoryCompaction] = field(default_factory=list)
    title: str | None = None
    key: str | None = None
    """A stable name for the source (a session or agent id), used to refuse a second import
    of the same history; ``None`` when only the input's bytes identify it."""
    parent: int | None = None
    """For a subagent's history: the index of its parent in the same import's list."""
    skipped: list[Skipped] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    """Lines or items with no conversational content, counted by their type."""
