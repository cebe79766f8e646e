"""A dump of an earlier store format loaded into a store of format 3 is folded into format 3.

The dump 0.3.0 wrote (``tests/fixtures/format2/dump.jsonl``, every event kind) loads into a new
SQLite store and into PostgreSQL as format-3 events: each message's start, blocks and end become
its block events (every start and end of the fixture folds), versions are renumbered and an
undone rewind names its rewind's new version. The loaded store replays what 0.3.0 recorded, its
hash chains verify, and its source times and listing are what a plain load into a store of
format 2 gives. A store of format 2 keeps a dump's events as they are (docs/design/format-3.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from convstore import Store
from convstore.app.verifying import store_verifier
from convstore.domain.blocks import Block
from convstore.domain.events import (
    EVENT_ADAPTER,
    BlockAppended,
    Event,
    MessageEnded,
    MessageStarted,
    RewindUndone,
    happened,
)
from convstore.projections.format3 import format3_events
from convstore.store.listing import ConversationInfo
from convstore.store.transfer import Loader
from tests.conftest import format2_store_file
from tests.formats import BLOCK_EVENTS
from tests.test_format2_fixture import _recorded
from tests.test_source_times import imported

FIXTURE = Path(__file__).parent / "fixtures" / "format2"
SCRIPT = Path(sys.executable).parent / "convstore"
LINES = (FIXTURE / "dump.jsonl").read_bytes().splitlines(keepends=True)
FOLDED_AWAY = (MessageStarted, BlockAppended, MessageEnded)


def _logs() -> dict[UUID, list[Event]]:
    """The fixture dump's events, by conversation."""
    logs: dict[UUID, list[Event]] = defaultdict(list)
    for line in LINES[1:-1]:
        event = EVENT_ADAPTER.validate_python(json.loads(line)["event"])
        logs[event.originator_id].append(event)
    return logs


def _blocks(events: list[Event]) -> list[tuple[Block, datetime, datetime | None]]:
    """Each block of a log with when it was recorded and when its source says it happened."""
    return [(e.block, e.timestamp, e.happened_at) for e in events if isinstance(e, BLOCK_EVENTS)]


def _listed(store: Store, conversations: list[ConversationInfo]) -> list[ConversationInfo]:
    """The listing with each conversation's count of events checked against its log, then
    left out (a folded log holds fewer)."""
    for info in conversations:
        assert info.events == len(store.events(info.id))
    return [replace(info, events=0) for info in conversations]


def _verified(store: Store) -> list[str]:
    """What ``verify`` finds in ``store`` (the log's rules and each conversation's chain)."""
    verifier = store_verifier(store)
    verifier.check_all(store.scan())
    return [p.problem for p in verifier.problems]


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new store of format 3: a SQLite file, or a schema of the PostgreSQL test server."""
    if request.param == "sqlite":
        return str(tmp_path / "new.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


def test_the_0_3_0_dump_loads_as_format_3(location: str) -> None:
    """Every start and end of the fixture folds into a block; each conversation holds what
    the rewrite of its log gives, replays as 0.3.0 recorded and verifies clean."""
    logs = _logs()
    with convstore.open_store(location) as store:
        assert store.store_format == 3
        report = store.load(LINES)
        folded = {conv: format3_events(events) for conv, events in logs.items()}
        assert report.read == 78
        assert report.events == report.loaded == sum(len(e) for e in folded.values())
        assert report.folded
        recorded = _recorded()
        for conv, events in logs.items():
            held = store.events(conv)
            assert held == folded[conv]
            assert not any(isinstance(e, FOLDED_AWAY) for e in held)
            # The blocks, their times (recorded and the source's) and their order are the dump's.
            assert _blocks(held) == _blocks(events)
            for entry in recorded[str(conv)]:
                mode = entry["mode"]
                got = store.replay(
                    conv, shape=mode["shape"], vision=mode["vision"], full=mode["full"]
                )
                assert got == entry["request"], (conv, mode)
        undone = [e for events in folded.values() for e in events if isinstance(e, RewindUndone)]
        assert undone  # the fixture undoes a rewind: it names the rewind's new version
        for event in undone:
            assert store.events(event.originator_id)[event.rewind - 1].type == "rewound"
        assert _verified(store) == []


def test_a_store_of_format_2_keeps_the_dumps_events(tmp_path: Path) -> None:
    """Into a store of format 2 the dump loads as it is: it dumps the same lines again."""
    with convstore.open_store(str(format2_store_file(tmp_path / "old.db"))) as store:
        report = store.load(LINES)
        assert (report.loaded, report.read, report.folded) == (78, 78, False)
        assert b"".join(store.dump()).splitlines()[1:] == [line.rstrip(b"\n") for line in LINES[1:]]
        assert _verified(store) == []


def test_the_folded_store_lists_as_the_plain_load_does(tmp_path: Path) -> None:
    """Titles, labels, previews, parents, first and last activity (which go by the source's
    times): a store of format 3 lists the folded dump as a store of format 2 lists the dump."""
    with (
        convstore.open_store(str(format2_store_file(tmp_path / "old.db"))) as old,
        convstore.open_store(str(tmp_path / "new.db")) as new,
    ):
        old.load(LINES)
        new.load(LINES)
        assert _listed(new, new.conversations()) == _listed(old, old.conversations())
        for conv, events in _logs().items():
            # A streamed message's start was an event of its own, a few milliseconds before
            # its first block: folded, the message starts when that block was recorded
            # (docs/design/format-3.md). Everything else about it is the same.
            first_block = {
                e.message_id: happened(e)
                for e in reversed(events)
                if isinstance(e, BlockAppended) and e.index == 0
            }
            for folded, plain in zip(new.messages(conv), old.messages(conv), strict=True):
                if folded.started_at != plain.started_at:
                    assert folded.started_at == first_block[folded.message_id]
                    folded.started_at = plain.started_at
                assert folded == plain


def test_source_times_survive_the_fold(tmp_path: Path) -> None:
    """An imported history (each message with its source's time) written by a store of format
    2, dumped and loaded into a store of format 3: the messages, their times and the listing
    are the source store's."""
    with convstore.open_store(str(format2_store_file(tmp_path / "old.db"))) as source:
        main, agent = imported(source)
        lines = list(source.dump())
        assert json.loads(lines[0])["store_format"] == 2
        with convstore.open_store(str(tmp_path / "new.db")) as copy:
            assert copy.load(lines).folded
            for conv in (main, agent):
                assert not any(isinstance(e, FOLDED_AWAY) for e in copy.events(conv))
                assert copy.messages(conv) == source.messages(conv)
                assert copy.replay(conv) == source.replay(conv)
            assert _listed(copy, copy.conversations()) == _listed(source, source.conversations())


def test_a_folded_load_cut_short_resumes(tmp_path: Path) -> None:
    """What a folded load writes depends on the dump alone: a load stopped by a bad line
    leaves a prefix of it, and the good dump continues from there to the whole fold."""
    broken = [*LINES[:50], b'{"conversation": "nope"}\n', *LINES[50:]]
    with convstore.open_store(str(tmp_path / "whole.db")) as whole:
        whole.load(LINES)
        with convstore.open_store(str(tmp_path / "resumed.db")) as target:
            with pytest.raises(convstore.DumpError, match="holds the first 20 events"):
                Loader(broken, max_line_bytes=1 << 20).run(target, batch_size=10)
            resumed: list[int] = []
            report = Loader(LINES, max_line_bytes=1 << 20).run(target, on_resume=resumed.append)
            assert resumed == [20]
            assert report.already_present == 20
            for conv in _logs():
                assert target.events(conv) == whole.events(conv)
            assert _verified(target) == []


def test_a_dump_of_a_format_3_store_is_not_folded(tmp_path: Path) -> None:
    """A dump names its store's format: a format-3 store's dump loads as it is, in its order."""
    with convstore.open_store(str(tmp_path / "a.db")) as source:
        conv = source.new_conversation()
        streamed = source.start_message(conv, "assistant")
        other = source.new_conversation()
        source.append_message(other, "user", [{"type": "text", "text": "between"}])
        source.append_block(conv, streamed, {"type": "text", "text": "x"}, last=True)
        lines = list(source.dump())
        assert json.loads(lines[0])["store_format"] == 3
        with convstore.open_store(str(tmp_path / "b.db")) as target:
            report = target.load(lines)
            assert not report.folded
            assert list(target.dump())[1:] == lines[1:]


@pytest.mark.slow
def test_convstore_load_folds_and_verify_is_clean(tmp_path: Path) -> None:
    """The command says it folded the dump, and `convstore verify` finds nothing wrong."""
    db = tmp_path / "new.db"
    loaded = subprocess.run(
        [str(SCRIPT), "--db", str(db), "load", str(FIXTURE / "dump.jsonl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr
    starts_and_ends = sum(
        isinstance(e, MessageStarted | MessageEnded) for events in _logs().values() for e in events
    )
    count = 78 - starts_and_ends
    assert loaded.stderr.startswith(
        f"loaded {count} events ({count} in all, 3 conversations; the dump's 78 folded into "
        "format 3)"
    ), loaded.stderr
    checked = subprocess.run(
        [str(SCRIPT), "--db", str(db), "verify"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith(f"ok: {count} events in 3 conversations"), checked.stdout
