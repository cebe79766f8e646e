"""The replay engine's fold, pure: folded in pieces and rendered between them (as a store's
cached fold is extended by each append), it renders exactly what a from-scratch replay renders,
in every mode (tests/test_replay_store.py does the same through real stores).
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
def test_a_state_folded_in_pieces_renders_like_a_fresh_replay_after_each(
    events: list[Event], data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=4)))
    state = ReplayState()
    done = 0
    for cut in [*cuts, len(events)]:
        fold_into(state, events[done:cut])
        done = cut
        check(state, events[:done])


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
