"""Stored states: the compact form this version writes in a store of format 2, and the
full-JSON form of earlier versions, which a store of format 1 keeps being written in, read
side by side.

The earlier form is rebuilt here the way the earlier mapper wrote it: each row's state is the
event's ``model_dump_json()``, each conversation's head is the chain over those bytes, as the
earlier writer computed it in the insert's transaction, and the store's marker says format 1.
"""

from __future__ import annotations

import json
import sqlite3
import types
import typing
import zlib
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.persistence import JSONTranscoder
from pydantic import BaseModel

import convstore
from convstore import Store
from convstore.cli import cli
from convstore.domain.blocks import TextBlock, ToolResultBlock
from convstore.domain.events import (
    EVENT_ADAPTER,
    EVENT_CLASSES,
    BlockAppended,
    ConversationStarted,
    Event,
    MessageStarted,
)
from convstore.infrastructure.common import mapper
from convstore.infrastructure.common.mapper import (
    COMPACT,
    COMPACT_LZ4,
    COMPACT_ZLIB,
    COMPRESS_FROM,
    COMPRESS_LEVEL,
    KIND_CODES,
    PydanticMapper,
    UnreadableEvent,
    compact_state,
    decode_compact,
    event_json,
)
from convstore.infrastructure.common.trusted_decode import decode_trusted
from convstore.ports.chain import HEADS_TABLE, genesis, link
from convstore.projections.format3 import format3_events
from tests.conftest import format2_store_file, one_error_line
from tests.test_transfer import fill, log_order, problems, replays

# -- helpers -----------------------------------------------------------------------------------


def every_kind(store: Store) -> UUID:
    """One conversation holding an event of every kind, with metadata, labels and entries."""
    conv = store.new_conversation(title="kinds", source="test:kinds")
    first = store.append_message(
        conv, "user", [{"type": "text", "text": "hello"}], meta={"model": "m", "extra": {"a": None}}
    )
    store.append_message(conv, "assistant", [{"type": "text", "text": "hi " * 1200}])
    store.rename(conv, "renamed")
    store.rename(conv, None)
    store.set_labels(conv, {"team": "a", "env": "prod"})
    store.remove_labels(conv, ["env"])
    store.compact(conv, "a summary", through=first)
    rewind = store.rewind(conv, to=first)
    store.undo_rewind(conv, rewind)
    open_ = store.start_message(conv, "assistant")
    store.interrupt_message(conv, open_, reason="stop")
    store.record_entries(conv, [{"uuid": "e1", "type": "x", "nested": {"k": [1, None]}}])
    store.delete_entries(conv)
    return conv


def stored_rows(db: Path) -> list[tuple[int, str, int, str, bytes]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(
            "SELECT rowid, originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY rowid"
        ).fetchall()


def marker(db: Path) -> list[tuple[str, str]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute(
            "SELECT key, value FROM convstore_store WHERE key = 'format'"
        ).fetchall()


def mark(db: Path, store_format: str) -> None:
    tamper(db, "UPDATE convstore_store SET value = ? WHERE key = 'format'", [store_format])


def rewrite_as_before(db: Path) -> None:
    """Turn a store into one the earlier version wrote: every state the event's full JSON (as
    its mapper stored it), every head the chain over those bytes, and the marker format 1."""
    rows = stored_rows(db)
    chains: dict[str, bytes] = {}
    versions: dict[str, int] = {}
    mark(db, "1")
    with closing(sqlite3.connect(db)) as conn:
        for rowid, originator, version, topic, state in rows:
            if state[:1] == b"{":
                continue  # already the earlier form
            event = decode_compact(state)
            before = event.model_dump_json().encode()  # the earlier mapper's state
            conn.execute("UPDATE stored_events SET state = ? WHERE rowid = ?", [before, rowid])
            previous = chains.get(originator, genesis(UUID(originator)))
            chains[originator] = link(previous, version, topic.encode(), before)
            versions[originator] = version
        for originator, chain in chains.items():
            updated = conn.execute(
                f"UPDATE {HEADS_TABLE} SET chain = ?, version = ? WHERE originator_id = ?",  # noqa: S608
                [chain, versions[originator], originator],
            )
            assert updated.rowcount == 1
        conn.commit()
    assert all(state[:1] == b"{" for *_, state in stored_rows(db))


def tamper(db: Path, sql: str, params: list[object]) -> None:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(sql, params)
        conn.commit()


def verify_problems(db: Path) -> list[str]:
    result = CliRunner().invoke(cli, ["--db", str(db), "verify", "--json"])
    assert result.exit_code in {0, 1}, result.output
    return [p["problem"] for p in json.loads(result.stdout)]


def dump_events(store: Store) -> list[bytes]:
    """A dump's event lines (the header, which names the store and the time, left out)."""
    return list(store.dump())[1:]


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """The same log twice: in compact states, as 0.3.x writes it (format 2, which this version
    keeps writing in that form), and as 0.2.0 wrote it (format 1, full JSON)."""
    new_db, old_db = format2_store_file(tmp_path / "new.db"), tmp_path / "old.db"
    with convstore.open_store(new_db) as store:
        fill(store)
        every_kind(store)
        store._log.recorder.truncate_wal()  # type: ignore[attr-defined]
    old_db.write_bytes(new_db.read_bytes())
    rewrite_as_before(old_db)
    with convstore.open_store(new_db) as new, convstore.open_store(old_db) as old:
        yield new, old


# -- the earlier form keeps working ----------------------------------------------------------


def test_a_store_written_before_reads_replays_verifies_and_dumps_the_same(
    twins: tuple[Store, Store],
) -> None:
    """Every reader gives the same answer for the earlier full-JSON states as for compact ones."""
    new, old = twins
    assert {state[0] for *_, state in stored_rows(Path(new.location))} == {COMPACT, COMPACT_ZLIB}
    assert replays(old) == replays(new)
    for conv in new.conversations():
        assert old.events(conv.id) == new.events(conv.id)
        assert old.messages(conv.id) == new.messages(conv.id)
        assert list(old.raw_events(conv.id)) == list(new.raw_events(conv.id))
    assert log_order(old) == log_order(new)
    assert old.notifications(0, 10_000) == new.notifications(0, 10_000)
    assert dump_events(old) == dump_events(new)
    assert problems(old) == problems(new) == []
    assert verify_problems(Path(old.location)) == []
    assert verify_problems(Path(new.location)) == []


def test_a_new_store_is_of_format_3_and_written_compact(tmp_path: Path) -> None:
    with convstore.open_store(tmp_path / "fresh.db") as new:
        conv = new.new_conversation()
        new.append_message(conv, "user", [{"type": "text", "text": "one block, one event"}])
        assert marker(Path(new.location)) == [("format", "3")]
        assert new._log.pydantic_mapper.compact
        assert [e.type for e in new.events(conv)] == ["conversation_started", "block_recorded"]


def appended_states(store: Store, conv: UUID, after: int) -> list[tuple[bytes, Event]]:
    """The stored states of a conversation's events after version ``after``, with the events."""
    rows = [r for r in stored_rows(Path(store.location)) if r[1] == conv.hex and r[2] > after]
    return list(zip([r[4] for r in rows], store.events(conv)[after:], strict=True))


def test_appending_to_a_format_1_store_keeps_writing_full_json(
    twins: tuple[Store, Store], tmp_path: Path
) -> None:
    """New events in a store of format 1 are stored as the earlier mapper stored them (the
    event's ``model_dump_json()``), so convstore 0.2.0 can go on sharing it; it stays format 1,
    verifies, and replays as the same writes in a format-2 store do. Its dump loads into a new
    store of format 2 (the way to move it to compact states), which replays the same."""
    new, old = twins
    assert not old._log.pydantic_mapper.compact
    for store in twins:
        conv = next(c.id for c in store.conversations() if c.title == "c1")
        before = len(store.events(conv))
        store.append_message(conv, "user", [{"type": "text", "text": "after the upgrade"}])
        turn = store.start_message(conv, "assistant")
        store.append_block(conv, turn, {"type": "text", "text": "long words " * 400})
        store.end_message(conv, turn)
    added = appended_states(old, conv, before)
    assert len(added) == 6
    assert all(state == event.model_dump_json().encode() for state, event in added)
    assert {state[0] for state, _ in appended_states(new, conv, before)} == {COMPACT, COMPACT_ZLIB}
    db = Path(old.location)
    assert all(state[:1] == b"{" for *_, state in stored_rows(db))
    assert marker(db) == [("format", "1")]
    assert verify_problems(db) == []
    assert replays(old) == replays(new)
    with convstore.open_store(db, replay_cache_bytes=0) as folded:
        assert replays(folded) == replays(new)
    with convstore.open_store(tmp_path / "moved.db") as moved:
        moved.load(list(old.dump()))
        assert replays(moved) == replays(old)
        # A new store is of format 3: the load folds each conversation as the rewrite does.
        for info in old.conversations():
            assert moved.events(info.id) == format3_events(old.events(info.id))
    moved_db = tmp_path / "moved.db"
    assert marker(moved_db) == [("format", "3")]  # a new store; it reads the events as they are
    assert {state[0] for *_, state in stored_rows(moved_db)} == {COMPACT, COMPACT_LZ4}
    assert verify_problems(moved_db) == []


def test_no_store_keeps_a_replay_model_beside_its_log(twins: tuple[Store, Store]) -> None:
    """Replay folds the log (format 3 removed the stored model): neither a new store nor one
    of format 1 gains the model's tables, whatever is replayed and appended."""
    for store in twins:
        for info in store.conversations():
            store.replay(info.id)
            store.append_message(info.id, "user", [{"type": "text", "text": "and now?"}])
    tables = "SELECT name FROM sqlite_master WHERE name LIKE 'convstore_replay%'"
    for store in twins:
        with closing(sqlite3.connect(Path(store.location))) as conn:
            assert conn.execute(tables).fetchall() == [], store.location


def test_a_format_1_store_holding_compact_rows_mixes_both_forms(tmp_path: Path) -> None:
    """A store of format 1 whose rows are compact (written by a development version between
    0.2.0 and format 2) reads as ever, and new events go after them in full JSON: the chain
    runs on across the two forms, and its dump loads into a store that replays the same."""
    db = format2_store_file(tmp_path / "between.db")  # format-2 events, as that version wrote
    with convstore.open_store(db) as store:
        ids = fill(store)
    mark(db, "1")
    with convstore.open_store(db) as store:
        conv = ids[-1]
        before = len(store.events(conv))
        store.append_message(conv, "user", [{"type": "text", "text": "after the upgrade"}])
        forms = [r[4][:1] for r in stored_rows(db) if r[1] == conv.hex]
        assert forms == [bytes([COMPACT])] * before + [b"{"] * 3
        assert verify_problems(db) == []
        assert store.replay(conv)["messages"][-1] == {
            "role": "user",
            "content": "after the upgrade",
        }
        with convstore.open_store(tmp_path / "loaded.db") as loaded:
            loaded.load(list(store.dump()))
            assert replays(loaded) == replays(store)
            for info in store.conversations():  # a new store: the load folds into format 3
                assert loaded.events(info.id) == format3_events(store.events(info.id))


@pytest.mark.parametrize("value", ["4", "0", "2.0", ""])
def test_a_store_of_an_unknown_format_is_refused_in_one_line(tmp_path: Path, value: str) -> None:
    """A marker naming any format but 1, 2 or 3 (a newer convstore's store) is refused by the API
    and the CLI, in one line naming the format, and nothing is written."""
    db = tmp_path / "future.db"
    with convstore.open_store(db) as store:
        store.new_conversation()
    mark(db, value)
    before = db.read_bytes()
    with pytest.raises(convstore.InvalidInput) as caught:
        convstore.open_store(db)
    assert str(caught.value) == (
        f"{db} is a convstore store of format {value!r}; this version reads formats 1, 2 and 3"
    )
    for args in (["new"], ["list"], ["verify"]):
        result = CliRunner().invoke(cli, ["--db", str(db), *args])
        one_error_line(result.exit_code, result.stdout, result.stderr, f"format {value!r}")
    assert db.read_bytes() == before


def test_a_changed_text_is_found_in_either_form(twins: tuple[Store, Store]) -> None:
    """One character of a text changed in place, in an earlier JSON state and in a compact
    one (no re-encoding: the bytes edited as they lie), breaks the hash chain."""
    for store in twins:
        db = Path(store.location)
        rowid, *_, state = next(
            row
            for row in stored_rows(db)
            if row[3] in {"convstore:block_appended", "convstore:block_recorded"}
            and b'"text":"' in row[4]
        )
        at = state.index(b'"text":"') + len(b'"text":"')
        changed = state[:at] + (b"X" if state[at : at + 1] != b"X" else b"Y") + state[at + 1 :]
        tamper(db, "UPDATE stored_events SET state = ? WHERE rowid = ?", [changed, rowid])
        found = verify_problems(db)
        assert len(found) == 1, found
        assert "do not match the hash chain in its head" in found[0]


@pytest.mark.parametrize(
    "tag", [COMPACT_LZ4, COMPACT_ZLIB], ids=["lz4 (format 3)", "zlib (format 2)"]
)
def test_a_damaged_compressed_state_is_reported(tmp_path: Path, tag: int) -> None:
    """A byte flipped inside a compressed body: verify names the row, replay refuses it."""
    db = tmp_path / "store.db"
    if tag == COMPACT_ZLIB:
        format2_store_file(db)
    with convstore.open_store(db) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "long words " * 400}])
    [(rowid, state)] = [(r[0], r[4]) for r in stored_rows(db) if r[4][0] == tag]
    damaged = state[:-10] + bytes([state[-10] ^ 0xFF]) + state[-9:]
    tamper(db, "UPDATE stored_events SET state = ? WHERE rowid = ?", [damaged, rowid])
    found = verify_problems(db)
    assert any(p.startswith("does not decode") for p in found), found
    assert any("hash chain" in p for p in found), found
    with convstore.open_store(db) as store, pytest.raises(convstore.StoreError, match="decode"):
        store.replay(conv)


# -- the compact form ----------------------------------------------------------------------


def _events(store: Store) -> Iterator[Event]:
    for conv in store.conversations():
        yield from store.events(conv.id)


def test_every_kind_has_a_code_and_round_trips(twins: tuple[Store, Store]) -> None:
    """Each event decodes from its compact state equal to itself, and its full JSON is the
    JSON the earlier form stored. The store's events as this version writes them, and the
    same logs rewritten as format 3 records them (its block events)."""
    new, _ = twins
    assert set(KIND_CODES) == {c.model_fields["type"].default for c in EVENT_CLASSES}
    seen = set()
    logs = [new.events(conv.id) for conv in new.conversations()]
    for event in [event for log in logs for event in (*log, *format3_events(log))]:
        state = compact_state(event)
        assert decode_compact(state) == event
        assert event_json(state) == event.model_dump_json().encode()
        seen.add(event.type)
    assert seen == set(KIND_CODES)


def test_the_version_is_read_from_a_compact_header_without_decoding(
    twins: tuple[Store, Store],
) -> None:
    """``version_in_header`` gives every kind's version from its compact state, 4-byte and
    8-byte versions alike, compressed body or not; for what it cannot read without decoding
    (a full-JSON state, a cut or unknown one, a state wrapped by eventsourcing's compressor
    or cipher) it says so (``None``), and the reader decodes instead."""
    new, _ = twins
    mapper = PydanticMapper(transcoder=JSONTranscoder())
    wrapped = PydanticMapper(transcoder=JSONTranscoder(), compressor=ZlibCompressor())
    for event in _events(new):
        for version in (event.originator_version, 2**32 + 7):
            moved = event.model_copy(update={"originator_version": version})
            for compress in (True, False):
                state = compact_state(moved, compress=compress)
                assert mapper.version_in_header(state) == version
                assert wrapped.version_in_header(state) is None
            assert mapper.version_in_header(state[:21]) is None
            assert mapper.version_in_header(moved.model_dump_json().encode()) is None
            assert mapper.version_in_header(state[:1] + b"\x00" + state[2:]) is None
    assert mapper.version_in_header(b"") is None


def test_compact_states_are_smaller_and_say_their_form() -> None:
    """Ids, version, type, timestamp and message id leave the JSON; only big bodies are
    compressed, and only when that pays."""
    conv, message = uuid4(), uuid4()
    now = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
    small = BlockAppended(
        originator_id=conv,
        originator_version=3,
        timestamp=now,
        message_id=message,
        index=0,
        block=TextBlock(text="x" * 100),
    )
    state = compact_state(small)
    assert state[0] == COMPACT
    assert len(state) < len(small.model_dump_json()) - 100
    for text in (str(conv), conv.hex, str(message), message.hex, "block_appended", "null"):
        assert text.encode() not in state
    big = small.model_copy(update={"block": small.block.model_copy(update={"text": "ab" * 2000})})
    packed = compact_state(big)
    assert packed[0] == COMPACT_ZLIB
    assert decode_compact(packed) == big
    assert len(packed) < 200
    assert compact_state(big, compress=False)[0] == COMPACT
    assert len(big.model_dump_json()) > COMPRESS_FROM
    # A backend may compress from fewer bytes (SQLite: 512): a paragraph (a reasoning block,
    # an answer) then is too, a line of text is not.
    prose = " ".join(f"step {i} checks the parser against the fixture" for i in range(14))
    paragraph = small.model_copy(update={"block": TextBlock(text=prose)})
    assert 512 <= len(prose) < COMPRESS_FROM
    assert compact_state(paragraph)[0] == COMPACT
    assert compact_state(paragraph, compress_from=512)[0] == COMPACT_ZLIB
    assert decode_compact(compact_state(paragraph, compress_from=512)) == paragraph
    line = small.model_copy(update={"block": TextBlock(text=prose[:256])})
    assert compact_state(line, compress_from=512)[0] == COMPACT


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2))),
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
    ids=["utc", "offset kept", "before 1970", "epoch", "past 2286"],
)
def test_timestamps_come_back_exactly(moment: datetime) -> None:
    """Any timestamp reads back equal, and its full JSON is byte for byte the earlier form
    (an offset other than UTC stays in the body, so it is not turned into UTC)."""
    event = MessageStarted(
        originator_id=uuid4(),
        originator_version=2,
        timestamp=moment,
        message_id=uuid4(),
        role="user",
    )
    state = compact_state(event)
    assert decode_compact(state) == event
    assert event_json(state) == event.model_dump_json().encode()


def test_versions_past_four_bytes_round_trip() -> None:
    event = ConversationStarted(
        originator_id=uuid4(), originator_version=2**40 + 7, timestamp=datetime.now(UTC)
    )
    state = compact_state(event)
    assert decode_compact(state) == event
    with pytest.raises(UnreadableEvent):
        compact_state(event.model_copy(update={"originator_version": 2**63}))


@pytest.mark.parametrize(
    "state",
    [b"", b"\x01", b"\x01\x03" + bytes(20), b"\x09\x03" + bytes(40), b"\x01\x1f" + bytes(40)],
    ids=["empty", "tag only", "cut short", "unknown tag", "unknown kind"],
)
def test_malformed_compact_states_raise_value_error(state: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - any ValueError, ValidationError included
        decode_compact(state)


def test_a_compressed_body_that_does_not_inflate_says_so() -> None:
    good = compact_state(
        ConversationStarted(
            originator_id=uuid4(),
            originator_version=1,
            timestamp=datetime.now(UTC),
            title="t" * 3000,
        )
    )
    assert good[0] == COMPACT_ZLIB
    with pytest.raises(ValueError, match="does not inflate"):
        decode_compact(good[:-20])
    assert zlib.decompress(good[30:]).startswith(b',"title":')


def test_full_json_reads_through_the_events_adapter() -> None:
    """What a compact state decodes to is what the events adapter makes of its full JSON."""
    event = ConversationStarted(
        originator_id=uuid4(), originator_version=1, timestamp=datetime.now(UTC), title="x"
    )
    state = compact_state(event)
    assert EVENT_ADAPTER.validate_json(event_json(state)) == event


def test_eventsourcings_compressor_wraps_compact_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``COMPRESSOR_TOPIC`` set, eventsourcing compresses each whole compact state (whose
    body is then never compressed twice), and every reader gives what a plain store gives."""
    texts = [{"type": "text", "text": "long words " * 400}, {"type": "text", "text": "short"}]
    with convstore.open_store(tmp_path / "plain.db") as plain:
        conv = plain.new_conversation(conversation_id=uuid4())
        plain.append_message(conv, "user", texts)
        expected = plain.replay(conv)
    monkeypatch.setenv("CONVSTORE_COMPRESSOR_TOPIC", "eventsourcing.compressor:ZlibCompressor")
    db = tmp_path / "compressed.db"
    with convstore.open_store(db) as store:
        store.new_conversation(conversation_id=conv)
        store.append_message(conv, "user", texts)
        assert store.replay(conv) == expected
        states = [row[4] for row in stored_rows(db)]
        assert all(zlib.decompress(s)[0] == COMPACT for s in states)
        assert [json.loads(raw) for raw in store.raw_events(conv)] == [
            json.loads(e.model_dump_json()) for e in store.events(conv)
        ]
    assert verify_problems(db) == []


def _models_in(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _models_in(argument)


def _may_be_none(annotation: object) -> bool:
    if annotation is type(None):
        return True
    if typing.get_origin(annotation) is typing.Annotated:
        return _may_be_none(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_may_be_none(a) for a in typing.get_args(annotation))
    return False


def test_every_field_that_may_be_none_defaults_to_none() -> None:
    """Compact bodies leave out every model field that is ``None`` (at any depth), which is
    lossless only while each such field's default is ``None``: held over every model the
    event union reaches."""
    seen: set[type[BaseModel]] = set()
    todo: list[type[BaseModel]] = list(EVENT_CLASSES)
    wrong = []
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            if _may_be_none(info.annotation) and (info.is_required() or info.default is not None):
                wrong.append(f"{model.__name__}.{name}")
            todo.extend(_models_in(info.annotation))
    assert TextBlock in seen
    assert wrong == []


def test_a_text_block_without_annotations_stores_no_null() -> None:
    """A text block inside a tool result, and one on its own, leave their absent annotations
    out of the compact body, and read back equal."""
    conv, message = uuid4(), uuid4()
    result = ToolResultBlock(tool_use_id="t", content=[TextBlock(text="out")])
    for block in (TextBlock(text="hi"), result):
        event = BlockAppended(
            originator_id=conv,
            originator_version=2,
            timestamp=datetime.now(UTC),
            message_id=message,
            index=0,
            block=block,
        )
        state = compact_state(event)
        assert b"null" not in state
        assert decode_compact(state) == event


# -- the compressed bodies' codec --------------------------------------------------------------


def test_compressed_bodies_are_zlib_streams_whichever_library_wrote_them() -> None:
    """Bodies are written through ISA-L's zlib where it is installed: the standard library
    reads every one, and what the standard library wrote (stores written before, or on a
    platform without isal) reads back, at every level."""
    bodies = [
        b"",
        b"x",
        ("tool output line\n" * 300).encode(),
        json.dumps({"k": list(range(2000)), "s": "é" * 500}).encode(),
        bytes(range(256)) * 20,
    ]
    for body in bodies:
        assert zlib.decompress(mapper.deflate(body, COMPRESS_LEVEL)) == body
        for level in (1, 6, 9):
            assert mapper.inflate(zlib.compress(body, level)) == body
    with pytest.raises(ValueError, match=r"^Error -\d"):  # zlib's and ISA-L's both say so
        mapper.inflate(b"\x78\x9c not a stream")


def test_lz4_bodies_read_back_and_a_damaged_one_is_refused_before_its_size_is_allocated() -> None:
    """A store of format 3 compresses bodies with LZ4 (size in front): every body reads back;
    one cut short, one whose size field claims more than LZ4 can expand to (a damaged row
    that would otherwise allocate that much), and garbage are each a ``ValueError`` saying
    so, as a zlib body that does not inflate is."""
    bodies = [
        b"x",
        ("tool output line\n" * 300).encode(),
        json.dumps({"k": list(range(2000)), "s": "é" * 500}).encode(),
        bytes(range(256)) * 20,
        bytes(1_000_000),  # LZ4's best ratio, just under its bound
    ]
    for body in bodies:
        packed = mapper.lz4_pack(body)
        assert mapper.lz4_unpack(packed) == body
        assert mapper.unpacked(COMPACT_LZ4, packed) == body
    packed = mapper.lz4_pack(("tool output line\n" * 300).encode())
    claims_a_gigabyte = (2**30).to_bytes(4, "little") + packed[4:]
    for damaged in (packed[:-7], claims_a_gigabyte, b"\x10\x00\x00\x00 not a block", b"\x01"):
        with pytest.raises(ValueError):  # noqa: PT011 - the message varies by the damage
            mapper.unpacked(COMPACT_LZ4, damaged)
    with pytest.raises(ValueError, match="cannot hold 1,073,741,824 bytes"):
        mapper.lz4_unpack(claims_a_gigabyte)


def test_each_store_format_writes_its_own_codec_and_reads_both() -> None:
    """A store of format 3 writes LZ4 bodies, one of format 2 zlib bodies, as 0.3.0 does (it
    shares such a store); a compact state of either tag decodes to the same event, through
    the validating decoder and the trusted one alike."""
    event = ConversationStarted(
        originator_id=uuid4(), originator_version=1, timestamp=datetime.now(UTC), title="t " * 1500
    )
    states = {tag: compact_state(event, packed_tag=tag) for tag in (COMPACT_LZ4, COMPACT_ZLIB)}
    assert {tag: state[0] for tag, state in states.items()} == {
        COMPACT_LZ4: COMPACT_LZ4,
        COMPACT_ZLIB: COMPACT_ZLIB,
    }
    for state in states.values():
        assert decode_compact(state) == event
        assert decode_trusted(state) == event
        assert event_json(state) == event.model_dump_json().encode()
    transcoder = JSONTranscoder()
    three = PydanticMapper(transcoder, block_events=True, packed_tag=COMPACT_LZ4)
    two = PydanticMapper(transcoder, packed_tag=COMPACT_ZLIB)
    assert three.to_stored_event(event).state[0] == COMPACT_LZ4
    assert two.to_stored_event(event).state[0] == COMPACT_ZLIB


_WITHOUT_ISAL = """
import sys
sys.modules["isal"] = None  # as on a platform without its wheel
import json
from convstore import open_store
from convstore.infrastructure.common import mapper
path, conversation = sys.argv[1], sys.argv[2]
with open_store(path) as store:
    if conversation == "new":
        conversation = str(store.new_conversation())
    store.append_message(conversation, "user", [{"type": "text", "text": "written by zlib " * 80}])
    print(json.dumps({"conversation": conversation, "replay": store.replay(conversation),
                      "inflate": mapper.zlib_library()}))
"""


def test_a_store_reads_the_same_with_and_without_isal(tmp_path: Path) -> None:
    """A process without isal (the standard library's zlib) reads a store of format 2 this
    process wrote through isal and appends to it, and this process reads what it wrote: one
    format."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    path = format2_store_file(tmp_path / "store.db")  # a store of format 3 writes LZ4 bodies
    with convstore.open_store(path) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "written by isal " * 80}])
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ISAL, str(path), str(conv)],
        capture_output=True,
        text=True,
        check=True,
    )
    other = json.loads(result.stdout)
    assert other["inflate"] == "zlib"
    assert mapper.zlib_library() != "zlib"  # this process writes through isal
    tags = {row[4][0] for row in stored_rows(path)}
    assert tags == {COMPACT, COMPACT_ZLIB}
    with convstore.open_store(path) as store:
        assert store.replay(conv) == other["replay"]
        texts = [m["content"] for m in other["replay"]["messages"]]
        assert any("written by isal" in str(t) for t in texts)
        assert any("written by zlib" in str(t) for t in texts)
