"""Test helpers: record a converted :class:`History` into a store, and count tool blocks."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from uuid import UUID

from convstore.convert.history import History
from convstore.store import Store


def record_history(store: Store, history: History) -> UUID:
    """Record every message and compaction of ``history`` in a new conversation."""
    conv = store.new_conversation(history.title)
    ids: list[UUID] = []
    for message in history.messages:
        interrupted = message.status == "interrupted"
        ids.append(
            store.append_message(
                conv,
                message.role,
                message.blocks,
                leave_open=interrupted or message.status == "open",
            )
        )
        if interrupted:
            store.interrupt_message(conv, ids[-1], message.reason)
    for compaction in history.compactions:
        store.compact(conv, compaction.summary, through=ids[compaction.through])
    return conv


def source_tool_blocks(text: str) -> Counter[str]:
    """``tool_use`` and ``tool_result`` blocks in a transcript's message lines, by type."""
    found: Counter[str] = Counter()
    for raw in text.splitlines():
        try:
            line: Any = json.loads(raw)
        except ValueError:
            continue
        message = line.get("message") if isinstance(line, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and all(isinstance(b, dict) for b in content):
            found.update(b["type"] for b in content if b.get("type") in ("tool_use", "tool_result"))
    return found


def prose_tool_blocks(request: dict[str, Any]) -> Counter[str]:
    """Tool calls and results a replayed request shows as prose, by block type."""
    text = json.dumps(request, ensure_ascii=False)
    return Counter(
        {
            "tool_use": text.count("Tool use: "),
            "tool_result": text.count("Result (") + text.count("Error ("),
        }
    )
