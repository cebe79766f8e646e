"""Erasure racing other processes: retention decides idleness inside the erasing transaction,
the wait for SQLite's write-ahead log is bounded and lets other writers through, and an
erasure stopped before its checkpoint is finished by running `erase` again."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from uuid import UUID

import pytest

from convstore import ConversationActive, open_store
from convstore.domain.events import utcnow
from tests.conftest import one_error_line
from tests.formats import events_of

SCRIPT = Path(sys.executable).parent / "convstore"
SECRET = "erase-race-secret-5500000000000004"  # noqa: S105 - the bytes grep looks for


def _full_pipe() -> tuple[int, int]:
    """A pipe whose buffer is already full: a process writing to it blocks at its first
    write until the reading end is drained."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"#" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    return read_end, write_end


def _drain(read_end: int) -> str:
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    return b"".join(chunks).decode().lstrip("#")


def test_retention_skips_a_conversation_appended_to_during_the_run(location: str) -> None:
    """`erase --inactive-for` over 150 idle conversations, with an append acknowledged after
    the run listed them and before it reached the one it erases last: that conversation is
    reported as skipped and keeps the append; the other 149 are erased.

    The run is held between its first erasure and the rest by its own output: its stdout is a
    pipe already full, so it blocks printing the first line (holding no lock) until drained."""
    with open_store(location) as store:
        ids = [store.new_conversation(title=f"idle {n}") for n in range(150)]
    time.sleep(1.1)  # every conversation is now idle for 1 s
    with open_store(location) as store:
        order = store.list_conversations(active_before=utcnow(), limit=500).conversations
        assert {c.id for c in order} == set(ids)
        last = order[-1].id
        read_end, write_end = _full_pipe()
        run = subprocess.Popen(
            [SCRIPT, "--db", location, "erase", "--inactive-for", "1s", "--reason", "retention"],
            stdout=write_end,
            stderr=subprocess.PIPE,
        )
        os.close(write_end)
        try:
            deadline = time.monotonic() + 120
            while not store.erasures():
                assert run.poll() is None, run.stderr.read() if run.stderr else ""
                assert time.monotonic() < deadline, "the run erased nothing"
                time.sleep(0.02)
            # The run has listed every candidate, erased the first, and waits on its pipe.
            message = store.append_message(last, "user", [{"type": "text", "text": "back"}])
        finally:
            output = _drain(read_end)
            _, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr
        lines = output.splitlines()
        assert len(lines) == 150, output
        assert sum(line.startswith("erased ") for line in lines) == 149
        assert lines[-1].startswith(f"skipped {last}: active after the cutoff (last active "), lines
        assert [m.message_id for m in store.messages(last)] == [message]
        assert [c.id for c in store.conversations()] == [last]
        assert last not in {e.id for e in store.erasures()}


def test_erase_with_idle_since_is_decided_at_erase_time(location: str) -> None:
    """`Store.erase(idle_since=T)` erases a conversation whose newest event is before T and
    refuses, with ConversationActive and nothing erased, one that has an event since."""
    with open_store(location) as store:
        conv = store.new_conversation()
        cutoff = utcnow()
        store.append_message(conv, "user", [{"type": "text", "text": "after the cutoff"}])
        with pytest.raises(ConversationActive, match="active after"):
            store.erase(conv, reason="retention", idle_since=cutoff)
        assert len(store.messages(conv)) == 1
        assert store.erasures() == []
        erased = store.erase(conv, reason="retention", idle_since=utcnow())
        assert erased.events == 1 + events_of(store)


def test_a_repeated_erase_says_already_erased_and_succeeds(location: str) -> None:
    """`erase` of a conversation erased before prints that it was, and exits 0 (its job, the
    conversation gone and its bytes out of the files, is done); the tombstone is unchanged."""
    with open_store(location) as store:
        conv = store.new_conversation()
    args: list[str | Path] = [SCRIPT, "--db", location, "erase", str(conv), "--reason", "asked"]
    first = subprocess.run(args, capture_output=True, text=True, check=False)
    assert (first.returncode, first.stdout) == (0, f"erased {conv}: 1 event(s)\n"), first.stderr
    again = subprocess.run(args, capture_output=True, text=True, check=False)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"already erased {conv}: 1 event(s) at "), again.stdout
    with open_store(location) as store:
        assert [(e.id, e.reason) for e in store.erasures()] == [(conv, "asked")]


_WRITER = """
import sys
from convstore import open_store
with open_store(sys.argv[1]) as store:
    while True:
        store.append_message(sys.argv[2], "user", [{"type": "text", "text": "meanwhile"}])
        print(store.log_position(), flush=True)
"""


def _files(db: Path) -> list[Path]:
    return [p for p in (db, db.with_name(db.name + "-wal")) if p.exists()]


def _position(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("SELECT max(rowid) FROM stored_events").fetchone()[0])


def test_erase_waits_a_bounded_time_for_a_reader_and_a_rerun_finishes(tmp_path: Path) -> None:
    """While another connection holds a read transaction on the write-ahead log, `erase`
    commits, tries to empty the log for its documented 5 s, and fails (exit 1, one line);
    a writer process's appends keep landing all the while. The old bytes are still in the
    files then; once the reader is done, `erase` again empties them (exit 0)."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv = store.new_conversation(title=SECRET)
        other = store.new_conversation(title="other")
        for n in range(20):
            store.append_message(conv, "user", [{"type": "text", "text": f"{SECRET} #{n}"}])
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM stored_events").fetchone()
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db), str(other)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        writer.stdout.readline()  # the writer is appending
        erase = subprocess.run(
            [SCRIPT, "--db", db, "erase", str(conv), "--reason", "asked"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        landed_during = _position(db)
        assert writer.poll() is None, writer.communicate()[1]
    finally:
        writer.kill()
        writer.communicate()
    one_error_line(
        erase.returncode, erase.stdout, erase.stderr, "was erased", "5 s", "run erase", code=1
    )
    with open_store(db) as store:
        (erased,) = store.erasures()
        # Many appends landed between the erasure's commit and its failure.
        assert landed_during - erased.high >= events_of(store) * 5, (landed_during, erased.high)
    assert any(SECRET.encode() in p.read_bytes() for p in _files(db))
    reader.execute("COMMIT")
    again = subprocess.run(
        [SCRIPT, "--db", db, "erase", str(conv), "--reason", "asked"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    reader.close()
    assert again.returncode == 0, again.stderr
    with open_store(db) as store:
        count = 1 + 20 * events_of(store)
    assert again.stdout.startswith(f"already erased {conv}: {count} event(s) at ")
    for path in _files(db):
        assert SECRET.encode() not in path.read_bytes(), path
    assert isinstance(erased.id, UUID)


def test_erase_again_finishes_an_erasure_killed_after_its_commit(tmp_path: Path) -> None:
    """An `erase` process killed after its commit, before its checkpoint, leaves the erased
    text in the store's files; `erase` of the same conversation then empties them, prints
    "already erased" and exits 0."""
    db = tmp_path / "s.db"
    with open_store(db) as store:
        conv = store.new_conversation(title=SECRET)
        store.append_message(conv, "user", [{"type": "text", "text": SECRET}])
    # A reader holds the erasure in its checkpoint wait, where the process is killed.
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM stored_events").fetchone()
    erase = subprocess.Popen(
        [SCRIPT, "--db", db, "erase", str(conv), "--reason", "asked"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with open_store(db) as store:
            deadline = time.monotonic() + 60
            while not store.erasures():
                assert erase.poll() is None
                assert time.monotonic() < deadline, "the erasure never committed"
                time.sleep(0.02)
    finally:
        erase.kill()
        erase.communicate()
    reader.execute("COMMIT")  # the reader stays open, so closing nothing checkpoints the log
    assert any(SECRET.encode() in p.read_bytes() for p in _files(db))
    again = subprocess.run(
        [SCRIPT, "--db", db, "erase", str(conv), "--reason", "asked"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    try:
        assert again.returncode == 0, again.stderr
        with open_store(db) as store:
            count = 1 + events_of(store)
        assert again.stdout.startswith(f"already erased {conv}: {count} event(s) at ")
        for path in _files(db):
            assert SECRET.encode() not in path.read_bytes(), path
    finally:
        reader.close()
