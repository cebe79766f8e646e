"""A SQLite store keeps its replay model's long plans LZ4-packed: what is stored reads back as
the very text it was written from, a damaged packed row is never rendered (replay folds the
log instead, the command line's quick path steps aside, ``verify`` names the message), and a
row an earlier version stored as text still reads.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from uuid import UUID

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from convstore import Store, open_store
from convstore.app.quick_replay import read_state
from convstore.backends.common.replay_tables import MESSAGES
from convstore.cli import cli
from convstore.engine.plan import replay
from convstore.engine.state import PACK_FROM, packed_plan, plan_text

# Every code point, lone surrogates included: a plan's text may hold them (its MAC encodes
# with ``surrogatepass``), and packing must give them back.
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=3000)


@given(ANY_TEXT)
def test_a_packed_plan_reads_back_as_its_text(text: str) -> None:
    stored = packed_plan(text)
    assert plan_text(stored) == text
    if len(text) < PACK_FROM:
        assert stored == text  # short plans stay text: nothing to unpack on a read


def test_only_plans_that_pack_well_are_packed() -> None:
    prose = "The tests pass on both backends; the tool's output follows. " * 20
    assert isinstance(packed_plan(prose), bytes)
    assert len(packed_plan(prose)) < len(prose) // 4
    # Text that does not shrink by an eighth (digests in hex) stays as it is.
    scattered = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(40))
    assert packed_plan(scattered) == scattered
    assert packed_plan("short") == "short"


@pytest.mark.parametrize(
    "damage",
    [
        lambda packed: packed[:-7],  # cut short
        lambda packed: packed[:1] + (2**31 - 1).to_bytes(4, "little") + packed[5:],  # huge size
        lambda packed: packed[:9] + b"\xff" * 16 + packed[25:],  # bytes overwritten
    ],
    ids=["cut-short", "impossible-size", "overwritten"],
)
def test_a_damaged_packed_plan_is_a_value_error_or_other_text(damage: object) -> None:
    text = "Result (ls): " + "a.txt b.txt c.txt " * 60
    packed = packed_plan(text)
    assert isinstance(packed, bytes)
    broken = damage(packed)  # type: ignore[operator]
    try:
        got = plan_text(broken)
    except ValueError:
        return
    assert got != text  # what it unpacks to is caught by the row's MAC (the store tests)


# -- in a store -------------------------------------------------------------------------------

OUTPUT = "\n".join(f"src/module_{i}.py: {i * 37} lines, changed by the agent" for i in range(60))


def recorded(store: Store) -> tuple[UUID, str]:
    """A conversation with one long tool result (its row packs) among short messages; the id
    of the message holding the result."""
    conv = store.new_conversation(title="packed")
    store.append_message(conv, "user", [{"type": "text", "text": "List the modules."}])
    call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {"path": "src"}}
    store.append_message(conv, "assistant", [call])
    result = {"type": "tool_result", "tool_use_id": "c1", "content": OUTPUT}
    message = store.append_message(conv, "user", [result])
    store.append_message(conv, "assistant", [{"type": "text", "text": "Sixty modules."}])
    return conv, message.hex


def stored_plans(path: Path, conv: UUID) -> dict[str, str | bytes]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ?",  # noqa: S608
            (conv.hex,),
        ).fetchall()
    return dict(rows)


def set_plan(path: Path, conv: UUID, message: str, plan: str | bytes) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        changed = conn.execute(
            f"UPDATE {MESSAGES} SET plan = ? WHERE originator_id = ? AND message_id = ?",  # noqa: S608
            (plan, conv.hex, message),
        ).rowcount
    assert changed == 1


def test_the_writer_stores_a_long_plan_packed_and_a_fresh_process_reads_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with open_store(path) as store:
        conv, message = recorded(store)
        want = replay(store.events(conv))
    plans = stored_plans(path, conv)
    assert isinstance(plans[message], bytes)
    assert len(plans[message]) < len(OUTPUT) // 2
    assert all(isinstance(plan, str) for m, plan in plans.items() if m != message)
    state = read_state(str(path), conv)  # the command line's quick path: no pydantic, no fold
    assert state is not None
    with open_store(path, replay_cache_bytes=0) as store:
        assert store.replay(conv) == want
    clean = CliRunner().invoke(cli, ["--db", str(path), "verify"])
    assert clean.exit_code == 0, clean.output


def test_a_damaged_packed_row_is_never_rendered_and_verify_names_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_store(path) as store:
        conv, message = recorded(store)
        want = replay(store.events(conv))
    packed = stored_plans(path, conv)[message]
    assert isinstance(packed, bytes)
    set_plan(path, conv, message, packed[:-9])
    assert read_state(str(path), conv) is None  # the quick path steps aside
    result = CliRunner().invoke(cli, ["--db", str(path), "verify", "--json"])
    assert result.exit_code == 1, result.output
    [problem] = json.loads(result.stdout)
    assert f"differs from the log at message {UUID(message)}" in problem["problem"]
    with open_store(path, replay_cache_bytes=0) as store:
        assert store.replay(conv) == want  # folded from the log, and stored again
    assert stored_plans(path, conv)[message] == packed


def test_a_row_stored_as_text_by_an_earlier_version_still_reads(tmp_path: Path) -> None:
    """Before packing, every plan was text: such a model is read as it is, with no rewrite."""
    path = tmp_path / "s.db"
    with open_store(path) as store:
        conv, message = recorded(store)
        want = replay(store.events(conv))
    text = plan_text(stored_plans(path, conv)[message])
    set_plan(path, conv, message, text)
    assert read_state(str(path), conv) is not None
    with open_store(path, replay_cache_bytes=0) as store:
        assert store.replay(conv) == want
    assert stored_plans(path, conv)[message] == text
