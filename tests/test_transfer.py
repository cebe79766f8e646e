"""Dump and load: a whole log moves between stores exactly, in bounded memory, or not at all.

Stores are real SQLite files (and, for the move the docs show, the real PostgreSQL
server); the command-line tests run the installed console script.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import sqlite3
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from convstore import Store, open_async_store
from convstore.app.demo import record_demo
from convstore.convert.history import History, HistoryMessage
from convstore.domain.blocks import TextBlock
from convstore.domain.errors import DumpError, InvalidInput
from convstore.store import aio
from convstore.store import transfer as store_transfer
from convstore.store.transfer import BATCH_SIZE, Loader
from convstore.store.verify import Verifier
from tests.conftest import one_error_line as error_line
from tests.formats import BLOCK_TYPES, events_of

CONVSTORE = Path(sys.executable).parent / "convstore"


# -- helpers -----------------------------------------------------------------------------------


def fill(store: Store, conversations: int = 3) -> list[UUID]:
    """Conversations written interleaved: the demo, plus open, interrupted, compacted and
    rewound ones."""
    ids = [record_demo(store)]
    others = [store.new_conversation(title=f"c{n}") for n in range(conversations)]
    for round_ in range(4):
        for n, conv in enumerate(others):
            store.append_message(conv, "user", [{"type": "text", "text": f"q{round_}.{n}"}])
            turn = store.start_message(conv, "assistant")
            call = {"type": "tool_use", "id": f"t{round_}", "name": "grep", "input": {"n": n}}
            store.append_block(conv, turn, call)
            if round_ == 3 and n == 0:
                continue  # left open: the process "died" mid-turn
            if round_ == 2:
                store.interrupt_message(conv, turn, reason="stop")
            else:
                store.end_message(conv, turn)
            result = {"type": "tool_result", "tool_use_id": f"t{round_}", "content": "ok"}
            store.append_message(conv, "user", [result])
            if round_ == 1:
                store.compact(conv, f"summary {n}", through=turn)
            if round_ == 3 and n == 1:
                store.rewind(conv, to=turn)  # withdraws the result after it
    return ids + others


def log_rows(store: Store) -> list[tuple[str, int, bytes]]:
    """The whole log in order: conversation, version and stored JSON of every event."""
    rows: list[tuple[str, int, bytes]] = []
    for conv in store.conversations():
        rows.extend((str(conv.id), n, raw) for n, raw in enumerate(store.raw_events(conv.id), 1))
    return rows


def log_order(store: Store) -> list[tuple[UUID, int]]:
    """(conversation, version) of every event, in log (notification) order."""
    order: list[tuple[UUID, int]] = []
    after = 0
    while page := store.notifications(after, 500):
        order.extend((e.originator_id, e.originator_version) for _, e in page)
        after = page[-1][0]
    return order


def replays(store: Store) -> dict[UUID, bytes]:
    """Every conversation's replay in both shapes, with and without vision, as JSON bytes."""
    out = {}
    for conv in store.conversations():
        bodies = [
            store.replay(conv.id, shape=shape, vision=vision)
            for shape in ("openai", "anthropic")
            for vision in (False, True)
        ]
        out[conv.id] = json.dumps(bodies, ensure_ascii=False).encode()
    return out


def problems(store: Store) -> list[str]:
    verifier = Verifier()
    verifier.check_all(store.scan())
    return [p.problem for p in verifier.problems]


def assert_same_log(source: Store, target: Store) -> None:
    """Ids, versions, timestamps (inside the stored JSON), order and replays all match."""
    assert log_rows(target) == log_rows(source)
    assert log_order(target) == log_order(source)
    assert replays(target) == replays(source)
    assert [(c.id, c.title, c.created_at) for c in target.conversations()] == [
        (c.id, c.title, c.created_at) for c in source.conversations()
    ]
    assert problems(target) == []


def row_count(path: Path) -> int:
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM stored_events").fetchone()[0])


def run(
    *args: str, stdin: bytes | None = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if k not in {"CONVSTORE_DB"}}
    full_env.update(env or {})
    return subprocess.run(
        [str(CONVSTORE), *args],
        input=stdin,
        capture_output=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def one_error_line(proc: subprocess.CompletedProcess[bytes], code: int = 2) -> str:
    return error_line(proc.returncode, proc.stdout, proc.stderr, code=code)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Store]:
    with convstore.open_store(tmp_path / "source.db") as store:
        fill(store)
        yield store


# -- the Python API ----------------------------------------------------------------------------


def test_dump_then_load_keeps_ids_versions_timestamps_and_order(
    source: Store, tmp_path: Path
) -> None:
    """A loaded store holds exactly the source's log: same JSON, order, replays; verify clean."""
    lines = list(source.dump())
    header = json.loads(lines[0])
    assert header["format"] == "convstore-dump"
    assert header["version"] == 1
    assert json.loads(lines[-1]) == {"end": {"events": len(lines) - 2, "conversations": 4}}
    with convstore.open_store(tmp_path / "target.db") as target:
        report = target.load(lines)
        assert (report.loaded, report.already_present, report.conversations) == (
            len(lines) - 2,
            0,
            4,
        )
        assert_same_log(source, target)


def test_dump_is_of_the_log_when_it_started(source: Store) -> None:
    """Events recorded while a dump is being read are not in it (a consistent snapshot)."""
    lines = source.dump()
    header = json.loads(next(lines))
    source.new_conversation(title="late")
    rest = list(lines)
    assert json.loads(rest[-1])["end"]["events"] == header["through"] == len(rest) - 1


def _transfer_peaks(tmp_path: Path, messages: int) -> tuple[int, int, int]:
    """Dump bytes, and the traced peaks of dumping and of loading a store of ``messages``
    messages of 1,500 characters, 70 to a conversation (pages of 200, batches of 50)."""
    with convstore.open_store(tmp_path / f"big{messages}.db") as store:
        text = "x" * 2500  # a dump of over 5 MB at 2,100 messages, one event a message
        for n in range(messages):
            if n % 70 == 0:
                conv = store.new_conversation()
            store.append_message(conv, "user", [{"type": "text", "text": text}])
        size = 0
        tracemalloc.start()
        for line in store.dump():
            size += len(line)
        _, dump_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        with convstore.open_store(tmp_path / f"copy{messages}.db") as target:
            tracemalloc.start()
            report = Loader(store.dump(), max_line_bytes=1 << 20).run(target, batch_size=50)
            _, load_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert report.loaded == events_of(store) * messages + messages // 70
    return size, dump_peak, load_peak


def test_dump_and_load_hold_one_page_or_batch_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory: with pages of 200 and batches of 50, dumping a log three times as long peaks at
    about the same (one page); loading it grows only by the writer state it checks each
    conversation against (a few hundred bytes a message, as `verify` keeps), never by the
    dump's lines, and both stay well under the dump's size (5 MB for the longer one)."""
    monkeypatch.setattr(store_transfer, "PAGE_SIZE", 200)
    short = _transfer_peaks(tmp_path, 700)
    size, dump_peak, load_peak = _transfer_peaks(tmp_path, 2100)
    assert size > 5_000_000
    assert dump_peak < 1.25 * short[1], (dump_peak, short[1])
    per_message = (load_peak - short[2]) / (2100 - 700)
    assert per_message < 400, (load_peak, short[2])
    assert max(dump_peak, load_peak) < size / 4, (dump_peak, load_peak, size)


def test_load_refuses_a_store_that_is_not_empty(source: Store, tmp_path: Path) -> None:
    """Loading into a store with other events is refused and writes nothing."""
    with convstore.open_store(tmp_path / "other.db") as other:
        fill(other, conversations=1)
        before = log_rows(other)
        with pytest.raises(DumpError, match="load into an empty store"):
            other.load(source.dump())
        assert log_rows(other) == before


def test_an_interrupted_load_leaves_a_prefix_that_a_second_load_completes(
    source: Store, tmp_path: Path
) -> None:
    """A bad line after committed batches leaves a prefix and says so; the good dump resumes."""
    lines = list(source.dump())
    broken = [*lines[:50], b'{"conversation": "nope"}\n', *lines[50:]]
    with convstore.open_store(tmp_path / "target.db") as target:
        with pytest.raises(DumpError, match="holds the first 40 events") as caught:
            Loader(broken, max_line_bytes=1 << 20).run(target, batch_size=20)
        assert "line 51 is not an event line" in str(caught.value)
        assert len(log_order(target)) == 40
        resumed: list[int] = []
        report = Loader(lines, max_line_bytes=1 << 20).run(target, on_resume=resumed.append)
        assert resumed == [40]
        assert (report.already_present, report.loaded) == (40, len(lines) - 42)
        assert_same_log(source, target)
        again = target.load(lines)  # complete already: nothing more to write
        assert (again.loaded, again.already_present) == (0, len(lines) - 2)


def test_a_dump_differing_inside_the_stores_events_is_not_resumed(
    source: Store, tmp_path: Path
) -> None:
    """Resuming holds every event the store has against the dump's, not only the newest: a
    dump of the same origin changed at an early line is refused, nothing written."""
    lines = list(source.dump())
    at = next(
        n
        for n, raw in enumerate(lines[1:-1], start=1)
        if json.loads(raw)["event"]["type"] in BLOCK_TYPES
        and json.loads(raw)["event"]["block"]["type"] == "text"
    )
    line = json.loads(lines[at])
    line["event"]["block"]["text"] = "changed in the dump"
    changed = [*lines[:at], json.dumps(line).encode() + b"\n", *lines[at + 1 :]]
    with convstore.open_store(tmp_path / "target.db") as target:
        target.load(lines)
        before = log_rows(target)
        with pytest.raises(DumpError, match=f"line {at + 1}'s place differs") as caught:
            target.load(changed)
        assert "load into an empty store" in str(caught.value)
        assert log_rows(target) == before


def test_a_dump_cut_short_writes_nothing_of_its_unfinished_batch(
    source: Store, tmp_path: Path
) -> None:
    """Without its closing line a dump is incomplete: the last batch is not written."""
    lines = list(source.dump())
    with convstore.open_store(tmp_path / "target.db") as target:
        with pytest.raises(DumpError, match="cut short"):
            target.load(lines[:-1])
        assert target.log_position() == 0
        with pytest.raises(DumpError, match="truncated"):
            target.load([*lines[:30], lines[30][:40]])
        assert target.log_position() == 0


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        ([], "empty"),
        ([b"not json\n"], "not a convstore dump"),
        ([b'{"type": "conversation_started"}\n'], "not a convstore dump"),
        ([b'{"format": "convstore-dump", "version": 9}\n'], "version 9"),
    ],
)
def test_load_refuses_what_is_not_a_dump(lines: list[bytes], match: str, tmp_path: Path) -> None:
    """An empty input, non-JSON, another JSON, or a newer format is refused before writing."""
    with convstore.open_store(tmp_path / "t.db") as target:
        with pytest.raises(InvalidInput, match=match):
            target.load(lines)
        assert target.log_position() == 0


def test_load_refuses_events_that_break_the_log_rules(source: Store, tmp_path: Path) -> None:
    """An event whose version leaves a gap, or that disagrees with its line, is refused."""
    lines = list(source.dump())
    line = json.loads(lines[3])
    gap = dict(line, version=line["version"] + 5)
    gap["event"] = dict(line["event"], originator_version=line["version"] + 5)
    liar = dict(line, version=line["version"] + 1)
    for bad, match in ((gap, "a gap"), (liar, "disagrees")):
        doctored = [*lines[:3], json.dumps(bad).encode() + b"\n", *lines[4:]]
        with convstore.open_store(tmp_path / f"{match}.db") as target:
            with pytest.raises(DumpError, match=match):
                target.load(doctored)
            assert target.log_position() == 0


def test_the_async_store_dumps_loads_and_imports_the_same(
    source: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AsyncStore.dump pages the same lines out; AsyncStore.load records them; a converted
    history imports through AsyncStore.import_history."""
    monkeypatch.setattr(aio, "DUMP_PAGE", 7)  # several pages
    expected = [line for line in source.dump() if not line.startswith(b'{"format"')]

    async def main() -> None:
        async with await open_async_store(source.location) as a:
            lines = [line async for line in a.dump()]
        assert [x for x in lines if not x.startswith(b'{"format"')] == expected
        async with await open_async_store(tmp_path / "copy.db") as b:
            report = await b.load(lines)
            assert report.loaded == len(expected) - 1
            history = History(messages=[HistoryMessage("user", (TextBlock(text="hi"),))])
            conv = await b.import_history(history, source="test:1")
            assert (await b.replay(conv))["messages"] == [{"role": "user", "content": "hi"}]

    asyncio.run(main())
    with convstore.open_store(tmp_path / "copy.db") as copy:
        assert problems(copy) == []


def pipe_dump_into(db: Path, location: str) -> subprocess.CompletedProcess[bytes]:
    """`convstore --db DB dump | convstore --db LOCATION load -`, both ending well; the load."""
    dumping = subprocess.Popen(
        [str(CONVSTORE), "--db", str(db), "dump"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    loading = subprocess.run(
        [str(CONVSTORE), "--db", location, "load", "-"],
        stdin=dumping.stdout,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert dumping.stdout is not None
    dumping.stdout.close()
    assert dumping.wait(timeout=60) == 0
    assert loading.returncode == 0, loading.stderr
    return loading


def filled_and_piped(db: Path, location: str, *flag_sets: list[str]) -> list[UUID]:
    """A store at ``db`` made by :func:`fill`, piped into ``location`` (:func:`pipe_dump_into`):
    ``verify`` is clean there and every conversation replays byte-identically, with each of
    ``flag_sets`` (none: plain); the conversations' ids."""
    with convstore.open_store(db) as store:
        ids = fill(store)
    pipe_dump_into(db, location)
    checked = run("--db", location, "verify")
    assert checked.returncode == 0, checked.stderr
    for conv in ids:
        for flags in flag_sets or ([],):
            expected = run("--db", str(db), "replay", str(conv), *flags)
            assert run("--db", location, "replay", str(conv), *flags).stdout == expected.stdout
    return ids


# -- the command line --------------------------------------------------------------------------


@pytest.mark.slow
def test_sqlite_to_postgresql_through_a_pipe(tmp_path: Path, postgres_url: str) -> None:
    """`dump | load -` moves a store to PostgreSQL: verify is clean and every replay is
    byte-identical in both stores (the worked example in docs/import.md)."""
    db = tmp_path / "agent.db"
    with convstore.open_store(db) as store:
        ids = fill(store)
        count = store.log_position()
    # convstore --db agent.db dump | convstore --db postgresql://… load -
    loading = pipe_dump_into(db, postgres_url)
    assert f"loaded {count} events ({count} in all, 4 conversations)".encode() in loading.stderr
    for location in (str(db), postgres_url):
        checked = run("--db", location, "verify")
        assert checked.returncode == 0, checked.stderr
    for conv in ids:
        for flags in ([], ["--shape", "anthropic", "--vision"], ["--full"]):
            sqlite_replay = run("--db", str(db), "replay", str(conv), *flags)
            pg_replay = run("--db", postgres_url, "replay", str(conv), *flags)
            assert sqlite_replay.returncode == 0
            assert pg_replay.stdout == sqlite_replay.stdout
    with convstore.open_store(db) as a, convstore.open_store(postgres_url) as b:
        assert_same_log(a, b)


@pytest.mark.slow
def test_cli_dump_to_file_and_load_report(tmp_path: Path) -> None:
    """`dump --output` writes the file whole; `load FILE` reports; stdout stays empty."""
    db, copy, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "a.dump.jsonl"
    with convstore.open_store(db) as store:
        fill(store, conversations=1)
        count = store.log_position()
    dumped = run("--db", str(db), "dump", "--output", str(out))
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stdout == b""
    assert dumped.stderr == f"dumped {count} events of 2 conversations\n".encode()
    assert not (tmp_path / "a.dump.jsonl.partial").exists()
    loaded = run("--db", str(copy), "load", str(out))
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout == b""
    assert loaded.stderr.startswith(
        f"loaded {count} events ({count} in all, 2 conversations)".encode()
    )
    again = run("--db", str(copy), "load", str(out))
    assert again.stderr.startswith(
        f"resuming: the store holds the dump's first {count} events\n".encode()
    )
    assert row_count(copy) == count


@pytest.mark.slow
@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"this is not json\n", "not a convstore dump"),
        (b'[{"type": "text", "text": "a block array"}]\n', "not a convstore dump"),
        (b'{"format": "convstore-dump", "version": 1}\n{"conversation": "x", "ver', "truncated"),
        (b'{"format": "convstore-dump", "version": 1}\n', "cut short"),
    ],
)
def test_cli_load_bad_input_is_one_line_exit_2_nothing_written(
    content: bytes, match: str, tmp_path: Path
) -> None:
    """Not JSON, not a dump, a truncated line or a dump cut short within its first batch: one
    line, exit 2, and no store file made (the store is created only for a batch to write)."""
    target = tmp_path / "t.db"
    line = one_error_line(run("--db", str(target), "load", "-", stdin=content))
    assert match in line
    assert not target.exists()


def test_cli_output_refuses_the_store_itself_and_a_directory(tmp_path: Path) -> None:
    """`dump -o` and `export -o` naming the store (directly, through a symlink, or its WAL)
    or a directory: one line, exit 2, and the store still verifies with every event."""
    db = tmp_path / "s.db"
    with convstore.open_store(db) as store:
        [conv, *_] = fill(store)
        events = store.log_position()
    (tmp_path / "link.db").symlink_to(db)
    for output in (db, tmp_path / "link.db", tmp_path / "s.db-wal", tmp_path):
        for command in (["dump"], ["export", str(conv), "--format", "jsonl"]):
            proc = run("--db", str(db), *command, "--output", str(output))
            line = one_error_line(proc)
            assert "store's own file" in line or "is a directory" in line, line
    assert not list(tmp_path.glob("*.partial"))
    with convstore.open_store(db) as store:
        assert store.log_position() == events
        assert problems(store) == []


@pytest.mark.slow
def test_cli_load_of_a_100_mb_file_is_refused_without_writing(tmp_path: Path) -> None:
    """A 100 MB file with no line break is refused at its first line: nothing written."""
    big = tmp_path / "big.jsonl"
    with big.open("wb") as handle:
        handle.write(b'{"format": "convstore-dump", "version": 1, "pad": "')
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            handle.write(chunk)
    target = tmp_path / "t.db"
    line = one_error_line(run("--db", str(target), "load", str(big)))
    assert "longer than" in line
    assert not target.exists()


@pytest.mark.slow
def test_cli_load_refuses_a_non_empty_store(tmp_path: Path) -> None:
    """`load` into a store holding something else: exit 2, one line, the store unchanged."""
    db, other = tmp_path / "a.db", tmp_path / "b.db"
    with convstore.open_store(db) as store:
        fill(store, conversations=1)
    with convstore.open_store(other) as store:
        store.new_conversation(title="mine")
    dumped = run("--db", str(db), "dump")
    line = one_error_line(run("--db", str(other), "load", "-", stdin=dumped.stdout))
    assert "not empty" in line
    assert row_count(other) == 1


def _run_on_a_terminal(*args: str) -> tuple[int, str]:
    """Run the script with stderr on a pseudo-terminal; its exit status and terminal output."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [str(CONVSTORE), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
        )
        os.close(terminal)
        chunks = []
        while True:
            ready, _, _ = select.select([controller], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process is done
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = proc.wait(timeout=60)
    finally:
        os.close(controller)
    return code, b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_progress_bars_show_on_a_terminal_only(tmp_path: Path) -> None:
    """With stderr a terminal, dump and load draw a progress bar with a rate; piped, they
    print only their one-line summary."""
    db, copy, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "a.jsonl"
    with convstore.open_store(db) as store:
        conv = store.new_conversation()
        for n in range(BATCH_SIZE):
            store.append_block(
                conv, store.start_message(conv, "user"), {"type": "text", "text": str(n)}
            )
    code, shown = _run_on_a_terminal("--db", str(db), "dump", "--output", str(out))
    assert code == 0, shown
    assert "dumping" in shown
    assert "100%" in shown
    assert "events/s" in shown
    code, shown = _run_on_a_terminal("--db", str(copy), "load", str(out))
    assert code == 0, shown
    assert "loading" in shown
    assert "events/s" in shown
    piped = run("--db", str(tmp_path / "c.db"), "load", str(out))
    assert piped.stderr.count(b"\n") == 1
    assert b"loading" not in piped.stderr
