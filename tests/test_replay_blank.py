"""A message whose recorded text is all blank replays as its marker alone, with no blank lines
before it (issue 22: an interrupted assistant ``""`` began with two stray newlines).

Its stored row changed with that (replay rules 2), so a stored model written under rules 1
must still read right: ``verify`` finds it clean (it compares with the fold as rules 1 wrote
it, and still reports a row that is neither), and a replay folds the log again and stores the
model under rules 2. Real SQLite files in ``tmp_path``.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from uuid import UUID

import pytest

from convstore import Store, open_store
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.engine.plan import BLANK_MESSAGE, SHAPES
from convstore.engine.state import model_digest, row_digest
from tests.replay_oracle import replay as oracle_replay

MARKED = f"{BLANK_MESSAGE}\n\n[Interrupted: stop]"
"""The blank interrupted message as replay sends it now."""
RULES_1_ROW = f"ai\n\n{MARKED}"
"""Its stored row as rules 1 wrote it: the codes, a blank line, then the markers."""


def _encode(value: object) -> str:
    """JSON as the stored model writes it (compact, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


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


def _stored(db: Path, conv: UUID) -> tuple[str, dict[str, str]]:
    with sqlite3.connect(db) as conn:
        (head,) = conn.execute(
            f"SELECT head FROM {HEADS} WHERE originator_id = ?",  # noqa: S608 - fixed names
            [conv.hex],
        ).fetchone()
        rows = conn.execute(
            f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ?",  # noqa: S608
            [conv.hex],
        ).fetchall()
    return head, dict(rows)


def _as_rules_1_wrote_it(db: Path, conv: UUID, blank: UUID, key: bytes, row: str) -> None:
    """Rewrite the stored model as rules 1 wrote it: ``row`` for the blank message, a head
    with no ``v`` whose digest is rules 1's (its facts without the version)."""
    head, rows = _stored(db, conv)
    loaded = json.loads(head)
    rows[blank.hex] = row
    with sqlite3.connect(db) as conn:
        order = conn.execute(
            f"SELECT message_id FROM {MESSAGES} WHERE originator_id = ? "  # noqa: S608
            "ORDER BY position",
            [conv.hex],
        ).fetchall()
        version = conn.execute(
            f"SELECT version FROM {HEADS} WHERE originator_id = ?",  # noqa: S608
            [conv.hex],
        ).fetchone()[0]
        facts = _encode({"c": loaded["c"], "r": loaded["r"]})
        digests = [row_digest(message_id, rows[message_id]) for (message_id,) in order]
        digest = model_digest(conv.hex, version, loaded["n"], facts, digests, key)
        old_head = _encode({"c": loaded["c"], "r": loaded["r"], "n": loaded["n"], "d": digest})
        conn.execute(
            f"UPDATE {MESSAGES} SET plan = ? WHERE originator_id = ? AND message_id = ?",  # noqa: S608
            [row, conv.hex, blank.hex],
        )
        conn.execute(
            f"UPDATE {HEADS} SET head = ? WHERE originator_id = ?",  # noqa: S608
            [old_head, conv.hex],
        )


def test_a_model_stored_under_rules_1_verifies_clean_and_is_folded_again(tmp_path: Path) -> None:
    """verify finds a rules-1 model clean; the next replay sends the fixed text and stores the
    model under rules 2, which verify finds clean too."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv, blank = _record(store)
        store._replays.write_lag = 1  # store the model on this replay
        store.replay(conv)
        head, rows = _stored(db, conv)
        assert json.loads(head)["v"] == 2
        assert rows[blank.hex] == f"ai{MARKED}"
        key = store._replays.key
    _as_rules_1_wrote_it(db, conv, blank, key, RULES_1_ROW)
    with open_store(db) as store:
        assert store.replay_model_differences(conv) == []
        store._replays.write_lag = 1
        sent = store.replay(conv, shape="openai")["messages"][1]["content"]
        assert sent == MARKED
        head, rows = _stored(db, conv)
        assert json.loads(head)["v"] == 2
        assert rows[blank.hex] == f"ai{MARKED}"
        assert store.replay_model_differences(conv) == []


def test_a_rules_1_row_that_rules_1_never_wrote_is_still_reported(tmp_path: Path) -> None:
    """Under rules 1, verify accepts only what rules 1 wrote: the fixed row in a rules-1 head
    is a difference (rules 1 never wrote it), and so is any other text."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv, blank = _record(store)
        store._replays.write_lag = 1
        store.replay(conv)
        key = store._replays.key
    for row in (f"ai{MARKED}", f"ai\n\n\n\n{MARKED}"):
        _as_rules_1_wrote_it(db, conv, blank, key, row)
        with open_store(db) as store:
            found = store.replay_model_differences(conv)
        assert len(found) == 1
        assert "differs from the log" in found[0]
