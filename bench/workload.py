"""The workload every benchmark of ``bench/run.py`` records and reads.

One conversation per store; messages alternate ``user`` / ``assistant``, each of three ~1 KB
prose-like text blocks (64 distinct texts), streamed as ``start_message``, 3 x ``append_block``,
``end_message`` (5 events) or recorded with one ``append_message`` (the same events). ``disk``
also uses short messages: one text block of 200 characters each.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable
from typing import Any

from convstore import Store

pc = time.perf_counter

BLOCKS_PER_MESSAGE = 3
"""Streamed message shape: start_message, 3 x append_block, end_message = 5 appends."""
EVENTS_PER_MESSAGE = BLOCKS_PER_MESSAGE + 2
"""Events of a streamed message (its start, its blocks, its end)."""
TEXT_SIZE = 1000
"""Characters per text block (ASCII, so ~1 KB; the stored event JSON is ~1.25 KB)."""

SHORT_TEXT_SIZE = 200
"""Characters of the one text block of a short message."""

Message = dict[str, Any]
"""One message as one JSON object: ``{"role": ..., "content": [blocks]}``."""

_PROSE = (
    "the agent reads file parser returns error because token stream ends before closing "
    "brace so we retry with larger buffer and then run tests again which now pass except "
    "one flaky network case in the integration suite that times out after thirty seconds "
    "when the mock server is slow to start we should add a readiness probe before the first "
    "request and log the port it bound also the config loader ignores environment overrides "
    "for nested keys which explains why staging used the default database url instead of "
    "the one in the secret store i will patch merge logic add a regression test and update "
    "changelog entry describing the fix"
)
_WORDS = _PROSE.split()


def make_texts(count: int = 64, size: int = TEXT_SIZE, seed: int = 7) -> list[str]:
    """Distinct prose-like text blocks of about ``size`` characters."""
    rng = random.Random(seed)  # noqa: S311 - a fixed workload, not cryptography
    texts = []
    for _ in range(count):
        words: list[str] = []
        length = 0
        while length < size:
            word = rng.choice(_WORDS)
            words.append(word)
            length += len(word) + 1
        text = " ".join(words)[:size]
        texts.append(text[0].upper() + text[1:-1] + ".")
    return texts


TEXTS = make_texts()


def role_of(i: int) -> str:
    return "user" if i % 2 == 0 else "assistant"


def block_of(i: int, j: int) -> dict[str, str]:
    return {"type": "text", "text": TEXTS[(i * BLOCKS_PER_MESSAGE + j) % len(TEXTS)]}


def message_of(i: int) -> Message:
    """Message ``i`` of the workload as one JSON object: its role and its blocks."""
    return {"role": role_of(i), "content": [block_of(i, j) for j in range(BLOCKS_PER_MESSAGE)]}


def short_message_of(i: int) -> Message:
    """Message ``i`` of the short workload: one text block of :data:`SHORT_TEXT_SIZE` characters."""
    text = TEXTS[i % len(TEXTS)][:SHORT_TEXT_SIZE]
    return {"role": role_of(i), "content": [{"type": "text", "text": text}]}


def stream_conversation(
    store: Store, n_messages: int, *, title: str = "bench"
) -> tuple[uuid.UUID, float, list[float]]:
    """Stream ``n_messages`` messages through the Store API, one committed event per call.

    Returns the conversation id, the total seconds and each append's seconds.
    """
    durations = [0.0] * (n_messages * EVENTS_PER_MESSAGE + 1)
    k = 1
    started = pc()
    conv = store.new_conversation(title=title)
    durations[0] = pc() - started
    for i in range(n_messages):
        role = role_of(i)
        a = pc()
        msg = store.start_message(conv, role)
        durations[k] = pc() - a
        k += 1
        for j in range(BLOCKS_PER_MESSAGE):
            block = block_of(i, j)
            a = pc()
            store.append_block(conv, msg, block)
            durations[k] = pc() - a
            k += 1
        a = pc()
        store.end_message(conv, msg)
        durations[k] = pc() - a
        k += 1
    return conv, pc() - started, durations


def record(store: Store, messages: Iterable[Message]) -> uuid.UUID:
    """A new conversation of ``messages``, one ``append_message`` (one transaction) each."""
    conv = store.new_conversation(title="bench")
    for message in messages:
        store.append_message(conv, message["role"], message["content"])
    return conv


def record_messages(store: Store, n_messages: int) -> uuid.UUID:
    """A conversation of ``n_messages`` workload messages, one ``append_message`` each.

    The events and their JSON are those of :func:`stream_conversation`.
    """
    return record(store, (message_of(i) for i in range(n_messages)))
