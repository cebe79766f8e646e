"""The replay read model, pure: folded in pieces and stored between them, it renders exactly
what a from-scratch replay renders, in every mode.

The stored copy is simulated as the rows a writer keeps (each changed message's text, and the
head), read back through the codec at each step, so what is checked is the fold plus the
round trip a real store does, without a database (tests/test_replay_store.py has those).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    ImageBlock,
    TextBlock,
    ToolResultBlock,
)
from convstore.domain.events import BlockAppended, Event
from convstore.engine.model import ReplayState
from convstore.engine.model import fold as fold_into
from convstore.engine.plan import SHAPES, ReplayOptions
from convstore.engine.render import render
from tests.replay_oracle import replay
from tests.strategies import HistoryBuilder, histories

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

OPTIONS = [
    ReplayOptions(vision=vision, full=full, keep_tool_results=keep)
    for vision in (False, True)
    for full in (False, True)
    for keep in (None, 0, 1, 2)
]


CONVERSATION = "0" * 32
"""The conversation id the stored copies below are digested under."""


class Stored:
    """What a writer keeps: the version, the head's text, each message's text by position."""

    def __init__(self) -> None:
        self.version = 0
        self.head = ReplayState().encode_head(CONVERSATION)
        self.rows: dict[int, tuple[str, str]] = {}

    def write(self, state: ReplayState) -> None:
        for position in state.dirty:
            message = state.messages[position]
            self.rows[position] = (message.message_id, message.encode())
        self.head = state.encode_head(CONVERSATION)
        self.version = state.version
        state.clean()

    def read(self) -> ReplayState:
        ordered = [self.rows[p] for p in range(len(self.rows))]
        return ReplayState.decode(CONVERSATION, self.version, self.head, ordered)


def loader(events: list[Event]) -> Any:
    by_version = {e.originator_version: e for e in events}

    def load(version: int, index: int | None) -> ImageBlock | DocumentBlock:
        event = by_version[version]
        assert isinstance(event, BlockAppended)
        block = event.block
        if index is None:
            assert isinstance(block, ImageBlock | DocumentBlock)
            return block
        assert isinstance(block, ToolResultBlock | HostedToolResultBlock)
        assert not isinstance(block.content, str)
        part = block.content[index]
        assert isinstance(part, ImageBlock | DocumentBlock)
        return part

    return load


def check(state: ReplayState, events: list[Event]) -> None:
    load = loader(events)
    for options in OPTIONS:
        for shape in SHAPES:
            expected = replay(
                events,
                shape=shape,
                vision=options.vision,
                full=options.full,
                keep_tool_results=options.keep_tool_results,
            )
            assert render(state, options, shape, load) == expected, (options, shape)


@SETTINGS
@given(histories(max_messages=10), st.data())
def test_a_model_folded_in_pieces_and_stored_between_renders_like_a_fresh_replay(
    events: list[Event], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=4)))
    stored = Stored()
    done = 0
    for cut in [*cuts, len(events)]:
        state = stored.read()
        fold_into(state, events[done:cut])
        done = cut
        check(state, events[:done])
        if data.draw(st.booleans()):
            stored.write(state)
        else:
            # Never written: the next reader folds these events again from the log.
            done = stored.version
    final = stored.read()
    fold_into(final, events[stored.version :])
    check(final, events)


@SETTINGS
@given(histories(max_messages=8))
def test_a_rebuilt_model_stores_the_same_text_as_one_caught_up_step_by_step(
    events: list[Event],
) -> None:
    stepwise = Stored()
    for event in events:
        state = stepwise.read()
        fold_into(state, [event])
        stepwise.write(state)
    rebuilt = Stored()
    state = ReplayState()
    fold_into(state, events)
    rebuilt.write(state)
    assert (rebuilt.version, rebuilt.head, rebuilt.rows) == (
        stepwise.version,
        stepwise.head,
        stepwise.rows,
    )


def test_a_gap_in_the_versions_is_refused() -> None:
    builder = HistoryBuilder(uuid4())
    builder.message("user", [TextBlock(text="hi")])
    events = builder.events
    state = ReplayState()
    with pytest.raises(ValueError, match="given the event at version 2"):
        fold_into(state, events[1:])


@SETTINGS
@given(histories(max_messages=10))
def test_the_public_replay_renders_what_the_oracle_renders(events: list[Event]) -> None:
    """``convstore.replay(events, options=…)`` is the engine over a state folded fresh: the
    same request as the oracle in every mode and both shapes."""
    import convstore  # noqa: PLC0415

    for options in OPTIONS:
        for shape in SHAPES:
            each = ReplayOptions(
                shape=shape,
                vision=options.vision,
                full=options.full,
                keep_tool_results=options.keep_tool_results,
            )
            assert convstore.replay(events, options=each) == replay(events, options=each), each
