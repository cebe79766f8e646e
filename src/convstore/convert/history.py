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
from datetime import datetime
from typing import Literal

from convstore.domain.blocks import Block
from convstore.domain.events import MessageMeta, Role

HistoryStatus = Literal["ended", "interrupted", "open"]


@dataclass(frozen=True, slots=True)
class HistoryMessage:
    """One message as it will be recorded: role, blocks in order, and how it closed."""

    role: Role
    blocks: tuple[Block, ...]
    status: HistoryStatus = "ended"
    reason: str | None = None
    """Why an interrupted message was cut short, when the source says."""
    at: datetime | None = None
    """When the source says the message was written (timezone-aware), if it says."""
    meta: MessageMeta | None = None
    """What the source knew about how it was produced: model, usage, stop reason, its ids."""
    where: str | None = field(default=None, compare=False)
    """Where the input holds it, named as the converter's own refusals name places
    (``message 1 (assistant)``, ``items 2 to 4``, ``lines 7 to 9``), so that a rule the store
    applies on recording points the user at the input, not at a count of recorded messages.
    Not part of the message's equality: the same message read from two layouts is equal."""


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
    parent_key: str | None = None
    """For a subagent's history whose parent is not in the input: the parent's :attr:`key`,
    to link it to the conversation an earlier import recorded from that source."""
    skipped: list[Skipped] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    """Lines or items with no conversational content, counted by their type."""
    previous_response_id: str | None = None
    """A Responses body's ``previous_response_id``: the history goes on in a response stored
    by the provider, which the input does not hold."""
