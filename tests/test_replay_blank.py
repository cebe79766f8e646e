"""A message whose recorded text is all blank replays as its marker alone, with no blank lines
before it (issue 22: an interrupted assistant ``""`` began with two stray newlines). Real
SQLite files in ``tmp_path``.
"""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

import pytest

from convstore import Store, open_store
from convstore.engine.plan import BLANK_MESSAGE, SHAPES
from tests.replay_oracle import replay as oracle_replay

MARKED = f"{BLANK_MESSAGE}\n\n[Interrupted: stop]"
"""The blank interrupted message as replay sends it now."""


def _record(store: Store) -> tuple[UUID, UUID]:
    """A user turn, an assistant turn whose only text is blank and was interrupted, a user
    turn after it; the conversation and the blank message."""
    conv = store.new_conversation("blank")
    store.append_message(conv, "user", [{"type": "text", "text": "hi"}])
    blank = store.start_message(conv, "assistant")
    store.append_block(conv, blank, {"type": "text", "text": ""})
    store.interrupt_message(conv, blank, "stop")
    store.append_message(conv, "user", [{"type": "text", "text": "again"}])
    return conv, blank


@pytest.mark.parametrize("shape", SHAPES)
def test_a_blank_message_replays_as_its_marker_alone(tmp_path: Path, shape: str) -> None:
    """No blank lines before the marker, in either shape, as the oracle says."""
    with open_store(tmp_path / "s.db") as store:
        conv, _ = _record(store)
        out = store.replay(conv, shape=shape)
        assert out == oracle_replay(store.events(conv), shape=shape)  # type: ignore[arg-type]
    assistant = out["messages"][1]["content"]
    text = assistant if shape == "openai" else assistant[0]["text"]
    assert text == MARKED
