"""Replay's decoder (:mod:`convstore.infrastructure.common.trusted_decode`) gives the very
events the validating decoder gives, for every event kind and every block kind, and leaves a fresh
process that only replays without building the event models' validators."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from convstore.domain.blocks import BLOCK_CLASSES, DocumentBlock, ImageBlock
from convstore.domain.events import EVENT_CLASSES, BlockAppended, BlockRecorded, Event
from convstore.engine.model import Folded, ReplayState, fold
from convstore.infrastructure.common.mapper import (
    COMPACT,
    COMPACT_LZ4,
    COMPACT_ZLIB,
    compact_state,
    decode_compact,
)
from convstore.infrastructure.common.trusted_decode import decode_trusted, stored_block
from convstore.projections.format3 import format3_events
from tests.strategies import histories

FIXTURE = Path(__file__).parent / "fixtures" / "format2" / "store.db"


def _same(state: bytes) -> Event:
    """Both decoders' events for ``state``, held equal in every way a caller can see."""
    trusted, validated = decode_trusted(state), decode_compact(state)
    assert type(trusted) is type(validated)
    assert trusted == validated
    assert list(trusted.__dict__) == list(validated.__dict__)  # the same field order
    assert trusted.model_dump_json() == validated.model_dump_json()
    return trusted


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_generated_histories_decode_the_same_in_both_formats(events: list[Event]) -> None:
    """Every event of generated histories (every block kind among them), as format 2 and as
    its format-3 rewrite, compressed or not."""
    for event in [*events, *format3_events(events)]:
        for compress, tag in ((True, COMPACT_LZ4), (True, COMPACT_ZLIB), (False, COMPACT)):
            state = compact_state(event, compress=compress, compress_from=64, packed_tag=tag)
            assert _same(state) == event


def _state(replay: ReplayState) -> tuple[Any, ...]:
    messages = [
        (m.message_id, m.role, m.status, m.reason, m.parts, m.size) for m in replay.messages
    ]
    return messages, replay.compactions, replay.rewinds, replay.size, replay.version


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_a_fold_of_block_rows_is_the_fold_of_their_events(events: list[Event]) -> None:
    """A first load folds a block event's row without a model (``stored_block``): the state
    is the one its events fold to, part for part; only a block whose prose needs more than
    its fields (an image, a document, a result holding parts) asks for the model."""
    log = format3_events(events)
    asked: list[Event] = []

    def asks(event: Event) -> Event:
        asked.append(event)
        return event

    rows: list[Folded] = []
    for n, event in enumerate(log):
        # Every third row as it is, the others compressed by each codec in turn.
        tag = (COMPACT_LZ4, COMPACT_ZLIB, COMPACT)[n % 3]
        state = compact_state(event, compress=tag != COMPACT, compress_from=64, packed_tag=tag)
        stored = stored_block(state, lambda event=event: asks(event))  # type: ignore[misc]
        if stored is None:
            assert not isinstance(event, BlockRecorded)
            rows.append(decode_trusted(state))
            continue
        assert isinstance(event, BlockRecorded)
        assert stored[:6] == (
            event.originator_version,
            event.message_id.hex,
            event.role,
            event.index,
            bool(event.closes),
            event.tool_name,
        )
        rows.append(stored)
    from_rows, from_events = ReplayState(), ReplayState()
    fold(from_rows, rows)
    fold(from_events, log)
    assert _state(from_rows) == _state(from_events)
    for event in asked:
        assert isinstance(event, BlockRecorded)
        block = event.block
        assert isinstance(block, ImageBlock | DocumentBlock) or not isinstance(
            getattr(block, "content", ""), str
        )


def _fixture_states() -> list[bytes]:
    with closing(sqlite3.connect(f"{FIXTURE.as_uri()}?mode=ro", uri=True)) as conn:
        return [bytes(row[0]) for row in conn.execute("SELECT state FROM stored_events")]


def test_every_event_kind_and_block_kind_decodes_the_same() -> None:
    """The store 0.3.0 wrote holds every event kind of its format and every block kind; its
    events and their format-3 rewrite cover every kind of the unions."""
    events = [_same(state) for state in _fixture_states()]
    by_conversation: dict[Any, list[Event]] = {}
    for event in events:
        by_conversation.setdefault(event.originator_id, []).append(event)
    rewritten = [
        _same(compact_state(event))
        for history in by_conversation.values()
        for event in format3_events(sorted(history, key=lambda e: e.originator_version))
    ]
    seen = {type(event) for event in [*events, *rewritten]}
    assert seen == set(EVENT_CLASSES)
    blocks = {
        type(event.block)
        for event in [*events, *rewritten]
        if isinstance(event, BlockAppended | BlockRecorded)
    }
    assert blocks == set(BLOCK_CLASSES)


def test_a_state_it_cannot_rebuild_goes_to_the_validating_decoder() -> None:
    """A body holding a key its model does not have, or a value of the wrong type, is not
    rebuilt: the validating decoder refuses it, as every other reader does."""
    state = next(s for s in _fixture_states() if decode_compact(s).type == "block_appended")
    body_start = state.index(b',"index"')
    tampered = state[:body_start] + b',"surprise":1' + state[body_start:]
    with pytest.raises(ValueError, match="surprise"):
        decode_trusted(tampered)
    wrong = state.replace(b'"index":0,', b'"index":"x",', 1)
    assert wrong != state
    with pytest.raises(ValueError, match="index"):
        decode_trusted(wrong)
    # A string of digits there: the validator reads it as the number, and so does replay.
    digits = state.replace(b'"index":0,', b'"index":"0",', 1)
    assert decode_trusted(digits) == decode_compact(digits) == decode_compact(state)


def test_a_fresh_process_that_replays_builds_no_event_validator(tmp_path: Path) -> None:
    """Replaying a conversation of text, reasoning and tool blocks in a new process leaves
    the event models' validators unbuilt (they cost more than the whole read)."""
    import convstore  # noqa: PLC0415

    path = tmp_path / "store.db"
    with convstore.open_store(path) as store:
        conversation = store.new_conversation()
        for k in range(3):
            call = {"type": "tool_use", "id": f"c{k}", "name": "ls", "input": {"path": "/"}}
            store.append_message(
                conversation,
                "assistant",
                [{"type": "reasoning", "text": "look"}, {"type": "text", "text": "ok"}, call],
            )
            store.append_message(
                conversation,
                "user",
                [{"type": "tool_result", "tool_use_id": f"c{k}", "content": "a b"}],
            )
    code = (
        "import sys, convstore\n"
        "from convstore.domain.events import EVENT_ADAPTER, BlockRecorded\n"
        "store = convstore.open_store(sys.argv[1])\n"
        "assert len(store.replay(sys.argv[2])['messages']) == 7  # the opening marker too\n"
        "built = [type(x.__pydantic_validator__).__name__ for x in (BlockRecorded,)]\n"
        "print(built, type(EVENT_ADAPTER.validator).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(conversation)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "['MockValSer'] MockValSer", out
