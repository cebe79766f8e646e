"""A store written by convstore 0.3.0 (format 2, ``tests/fixtures/format2/``, made by its
``make.py``) opens, verifies, replays and dumps exactly as 0.3.0 left it.

This is the ground issue 40's format change stands on (docs/design/format-3.md): whatever
the new format does, a format-2 store must keep answering as recorded here, and its upgrade
must replay the same.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import convstore
from convstore.domain.events import EVENT_CLASSES, BlockRecorded
from convstore.infrastructure.common.mapper import topic_of

FIXTURE = Path(__file__).parent / "fixtures" / "format2"
SCRIPT = Path(sys.executable).parent / "convstore"


@pytest.fixture
def old_store(tmp_path: Path) -> Path:
    """A copy of the fixture's store (opening may add what a newer version keeps beside it)."""
    copy = tmp_path / "store.db"
    shutil.copyfile(FIXTURE / "store.db", copy)
    return copy


def _recorded() -> dict[str, list[dict[str, Any]]]:
    """Each conversation's replays as 0.3.0 rendered them, with the one change made on purpose
    since: an Anthropic request with no system message leaves ``system`` out, where 0.3.0 sent
    ``"system": ""`` (issue 39, item 19)."""
    conversations: dict[str, list[dict[str, Any]]] = json.loads(
        (FIXTURE / "replays.json").read_text()
    )["conversations"]
    for replays in conversations.values():
        for replay in replays:
            if replay["request"].get("system") == "":
                del replay["request"]["system"]
    return conversations


def test_the_fixture_holds_every_kind_of_event() -> None:
    lines = (FIXTURE / "dump.jsonl").read_bytes().splitlines()
    topics = {json.loads(line)["topic"] for line in lines[1:-1]}
    # Every kind a format-2 store records: all but format 3's block events.
    assert topics == {topic_of(cls) for cls in EVENT_CLASSES if cls is not BlockRecorded}


def test_a_format_2_store_replays_as_0_3_0_did(old_store: Path) -> None:
    recorded = _recorded()
    with convstore.open_store(str(old_store)) as store:
        assert sorted(str(c.id) for c in store.conversations()) == sorted(recorded)
        for conversation, replays in recorded.items():
            for replay in replays:
                mode = replay["mode"]
                got = store.replay(
                    conversation, shape=mode["shape"], vision=mode["vision"], full=mode["full"]
                )
                assert got == replay["request"], (conversation, mode)


def test_a_format_2_store_dumps_as_0_3_0_did(old_store: Path) -> None:
    with convstore.open_store(str(old_store)) as store:
        dumped = b"".join(store.dump()).splitlines()
    recorded = (FIXTURE / "dump.jsonl").read_bytes().splitlines()
    # The first line says when and from where the dump was made; every event line after it,
    # and the closing count, are the store's own.
    assert dumped[1:] == recorded[1:]
    assert json.loads(dumped[0])["format"] == json.loads(recorded[0])["format"]


@pytest.mark.slow
def test_a_format_2_store_verifies_clean(old_store: Path) -> None:
    done = subprocess.run(
        [str(SCRIPT), "--db", str(old_store), "verify"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 78 events in 3 conversations"), done.stdout
