"""Importing histories: recorded whole or not at all, linked, deduplicated, and reported.

The store-level tests build :class:`History` values by hand (the shape every converter
returns); the command-line tests drive ``convstore import`` against real SQLite files. The
per-format converters are tested with their own code; the round trips at the end run
through them (and skip, saying so, where a converter is not in this build).
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

import convstore
from convstore import Store
from convstore.app.demo import record_demo, tiny_png
from convstore.app.export import export_conversation
from convstore.cli import cli
from convstore.convert.history import History, HistoryCompaction, HistoryMessage, Skipped
from convstore.domain.blocks import (
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import AlreadyImported, InvalidBlock, InvalidInput
from convstore.engine.plan import Shape
from convstore.store.importing import (
    BLOCK_KINDS,
    ImportFormat,
    read_histories,
    sources_for,
)
from convstore.store.verify import Verifier

CONVSTORE = Path(sys.executable).parent / "convstore"
PNG = base64.b64encode(tiny_png()).decode()


def text(value: str) -> TextBlock:
    return TextBlock(text=value)


def session() -> list[History]:
    """A main conversation (an unanswered call, an orphan result, an interruption, a
    compaction, a message left open) and one subagent of it."""
    main = History(
        messages=[
            HistoryMessage("system", (text("Be brief."),)),
            HistoryMessage(
                "user",
                (text("Fix CI"), ImageBlock(media_type="image/png", data=PNG)),
            ),
            HistoryMessage(
                "assistant",
                (
                    ReasoningBlock(text="look", signature="s1"),
                    ToolUseBlock(id="a", name="read", input={"p": "ci.log"}),
                    ToolUseBlock(id="b", name="task", input="raw args"),
                ),
            ),
            HistoryMessage(
                "user",
                (
                    ToolResultBlock(tool_use_id="a", content="E", is_error=True),
                    ToolResultBlock(tool_use_id="zz", content="from before the compaction"),
                ),
            ),
            HistoryMessage("assistant", (text("Let me"),), "interrupted", "user pressed stop"),
            HistoryMessage("assistant", (text("still typing"),), "open"),
        ],
        compactions=[HistoryCompaction("They asked to fix CI.", through=1)],
        title="main",
        key="s-1",
        skipped=[Skipped("not valid JSON", line=7)],
        ignored=Counter({"file-history-snapshot": 3, "progress": 2}),
    )
    agent = History(
        messages=[
            HistoryMessage("user", (text("read the log"),)),
            HistoryMessage("assistant", (text("done"),)),
        ],
        title="agent",
        key="s-1/agent-x",
        parent=0,
    )
    return [main, agent]


def problems(store: Store) -> list[str]:
    verifier = Verifier()
    verifier.check_all(store.scan())
    return [p.problem for p in verifier.problems]


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with convstore.open_store(tmp_path / "s.db") as opened:
        yield opened


# -- recording ---------------------------------------------------------------------------------


def test_a_session_is_recorded_with_its_subagent_linked(store: Store) -> None:
    """Main first, the subagent linked by parent_id; statuses, compaction and sources kept."""
    report = store.import_histories(session(), sources=["claude-code:s-1", "claude-code:s-1/x"])
    main, agent = report.ids
    listed = {c.id: c for c in store.conversations()}
    assert listed[main].parent_id is None
    assert listed[agent].parent_id == main
    assert (listed[main].source, listed[agent].source) == ("claude-code:s-1", "claude-code:s-1/x")
    assert [(m.role, m.status) for m in store.messages(main)] == [
        ("system", "ended"),
        ("user", "ended"),
        ("assistant", "ended"),
        ("user", "ended"),
        ("assistant", "interrupted"),
        ("assistant", "open"),
    ]
    replayed = store.replay(main)["messages"]
    assert replayed[1]["content"].startswith("[Summary of the earlier conversation")
    assert replayed[2]["content"].startswith("[Reasoning]: look\n\nTool use: read(")
    assert replayed[3]["content"] == (
        "Error (read): E\n\nResult (unknown): from before the compaction"
    )
    assert replayed[4]["content"] == "Let me\n\n[Interrupted: user pressed stop]"
    assert problems(store) == []


def test_the_report_counts_blocks_calls_skips_and_ignored_lines(store: Store) -> None:
    """Blocks by every kind, unanswered calls, orphan results, skipped and ignored lines."""
    report = store.import_histories(session()).as_json()
    assert list(report["blocks"]) == list(BLOCK_KINDS)
    assert report["blocks"] == {
        "text": 6,
        "tool_use": 2,
        "tool_result": 2,
        "reasoning": 1,
        "image": 1,
        "document": 0,
        "hosted_tool_use": 0,
        "hosted_tool_result": 0,
    }
    assert report["messages"] == 8
    assert report["calls_without_result"] == 1  # "b"
    assert report["results_without_call"] == 1  # "zz"
    assert report["images_in_results"] == 0
    assert report["skipped"] == [{"line": 7, "reason": "not valid JSON"}]
    assert report["ignored"] == {"file-history-snapshot": 3, "progress": 2}
    assert [c["messages"] for c in report["conversations"]] == [6, 2]


def test_an_import_is_all_or_nothing(store: Store) -> None:
    """A rule broken in the last history's last message leaves the store exactly as it was."""
    record_demo(store)
    before = store.log_position()
    histories = session()
    histories[1].messages.append(
        HistoryMessage("user", (ToolUseBlock(id="u", name="x", input={}),))
    )
    with pytest.raises(InvalidBlock, match=r"message 3 \(user\): block 0: tool_use blocks"):
        store.import_histories(histories)
    assert store.log_position() == before
    assert len(store.conversations()) == 1


def test_the_same_source_twice_is_refused_unless_again(store: Store) -> None:
    """A second import names the conversation holding the source; again=True records a copy."""
    first = store.import_histories(session(), sources=["sha256:ab", None]).ids[0]
    before = store.log_position()
    with pytest.raises(AlreadyImported, match=f"already imported as conversation {first}"):
        store.import_histories(session(), sources=["sha256:ab", None])
    assert store.log_position() == before
    second = store.import_histories(session(), sources=["sha256:ab", None], again=True).ids[0]
    assert second != first
    assert store.replay(second) == store.replay(first)
    sources = [c.source for c in store.conversations()]
    assert sources.count("sha256:ab") == 2


def test_an_erased_import_can_be_imported_again(store: Store) -> None:
    """The id derived from a source is not reused once erased: importing the source after its
    erasure records it under the source's next derived id, and is refused after that."""
    first = store.import_histories(session()).ids
    store.erase(first[0], reason="test")
    store.erase(first[1], reason="test")
    second = store.import_histories(session()).ids
    assert not set(first) & set(second)
    assert store.replay(second[1])["messages"][0] == {"role": "user", "content": "read the log"}
    with pytest.raises(AlreadyImported, match=f"conversation {second[0]}"):
        store.import_histories(session())


def test_import_history_records_one_conversation(store: Store) -> None:
    """The one-history call returns the new id; its source is the history's key."""
    history = session()[1]
    history.parent = None
    conv = store.import_history(history)
    assert [c.source for c in store.conversations()] == ["s-1/agent-x"]
    assert store.replay(conv)["messages"] == [
        {"role": "user", "content": "read the log"},
        {"role": "assistant", "content": "done"},
    ]
    with pytest.raises(AlreadyImported):
        store.import_history(history)


def test_sources_name_keys_by_format_and_the_rest_by_their_bytes() -> None:
    """A keyed history is FORMAT:KEY (a key already so prefixed is kept); others share the
    input's digest, numbered after the first."""
    keyed, plain, plain2 = History(key="abc"), History(), History()
    prefixed = History(key="claude-code:s1")
    assert sources_for("claude-code", [keyed, plain, plain2, prefixed], b"x") == [
        "claude-code:abc",
        "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881#1",
        "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881#2",
        "claude-code:s1",
    ]


def test_a_bad_compaction_or_parent_index_is_refused(store: Store) -> None:
    """Indexes past the history's messages (or the input's histories) are refused, unwritten."""
    histories = session()
    histories[0].compactions.append(HistoryCompaction("x", through=99))
    with pytest.raises(InvalidInput, match="compaction names message 99"):
        store.import_histories(histories)
    histories = session()
    histories[1].parent = 5
    with pytest.raises(InvalidInput, match="parent 5"):
        store.import_histories(histories)
    assert store.log_position() == 0


# -- the command line --------------------------------------------------------------------------


def invoke(db: Path, *args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=stdin)


@pytest.mark.parametrize(
    ("fmt", "content", "match"),
    [
        ("openai-chat", '{"messages": [', "malformed JSON"),
        ("anthropic", "not json at all", "malformed JSON"),
        ("openai-chat", '{"type": "user"}\n{"type": "assistant"}\n', "malformed JSON"),
        ("yaml", "{}", "'yaml' is not one of"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_and_no_store(
    tmp_path: Path, fmt: str, content: str, match: str
) -> None:
    """Not JSON, truncated, JSON lines given as a JSON format, or an unknown format: one line,
    exit 2, and no store file made."""
    db = tmp_path / "s.db"
    result = invoke(db, "import", "--format", fmt, stdin=content)
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert match in line
    assert not db.exists()


CHAT_BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "system", "content": "terse"}, {"role": "user", "content": "hi"}],
}
MESSAGES_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
        },
    ],
}


@pytest.mark.parametrize(
    ("fmt", "body"),
    [
        ("anthropic", CHAT_BODY),
        ("responses", CHAT_BODY),
        ("openai-chat", MESSAGES_BODY),
        ("claude-code", MESSAGES_BODY),
    ],
)
def test_cli_the_wrong_format_is_one_line_exit_2_and_no_store(
    tmp_path: Path, fmt: str, body: dict[str, Any]
) -> None:
    """A real body of another format: one line naming the format, exit 2, no store made."""
    db = tmp_path / "s.db"
    result = invoke(db, "import", "--format", fmt, stdin=json.dumps(body, indent=2))
    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert fmt in line
    assert "--format" in line
    assert not db.exists()


@pytest.mark.slow
def test_cli_a_100_mb_file_is_refused_whole(tmp_path: Path) -> None:
    """A 100 MB input is past CONVSTORE_MAX_INPUT_BYTES (64 MiB): one line, exit 2, no store."""
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.write(b'{"messages": [{"role": "user", "content": "')
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            handle.write(chunk)
        handle.write(b'"}]}')
    db = tmp_path / "s.db"
    env = {k: v for k, v in os.environ.items() if k != "CONVSTORE_DB"}
    proc = subprocess.run(
        [str(CONVSTORE), "--db", str(db), "import", "--format", "openai-chat", str(big)],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    [line] = proc.stderr.decode().splitlines()
    assert "larger than 67,108,864 bytes (CONVSTORE_MAX_INPUT_BYTES)" in line
    assert not db.exists()


# -- through the converters: round trips -------------------------------------------------------


@pytest.mark.parametrize(("fmt", "shape"), [("openai-chat", "openai"), ("anthropic", "anthropic")])
@pytest.mark.parametrize("vision", [False, True])
def test_import_export_import_gives_an_identical_replay(
    tmp_path: Path, fmt: str, shape: str, vision: bool
) -> None:
    """import → export in the same format → import --again: the replays are identical."""
    db = tmp_path / "s.db"
    with convstore.open_store(db) as store:
        original = record_demo(store)
    flag = "--vision" if vision else "--no-vision"
    exported = invoke(db, "export", str(original), "--format", fmt, flag)
    assert exported.exit_code == 0, exported.stderr
    first = invoke(db, "import", "--format", fmt, stdin=exported.stdout)
    assert first.exit_code == 0, first.stderr
    [first_id] = first.stdout.split()
    again = invoke(db, "export", first_id, "--format", fmt, flag)
    assert again.stdout == exported.stdout
    refused = invoke(db, "import", "--format", fmt, stdin=again.stdout)
    assert refused.exit_code == 2
    assert f"already imported as conversation {first_id}" in refused.stderr
    second = invoke(db, "import", "--format", fmt, "--again", "--json", stdin=again.stdout)
    assert second.exit_code == 0, second.stderr
    report = json.loads(second.stdout)
    [second_id] = [c["id"] for c in report["conversations"]]
    with convstore.open_store(db) as store:
        for conv in (first_id, second_id):
            assert store.replay(conv, shape=shape, vision=vision) == store.replay(
                original, shape=shape, vision=vision
            )


# -- every corpus file, through the command ----------------------------------------------------

CORPUS_FORMATS: dict[str, ImportFormat] = {
    "claude-code": "claude-code",
    "openai-chat": "openai-chat",
    "anthropic-messages": "anthropic",
    "openai-responses": "responses",
}


@pytest.mark.slow
def test_every_corpus_file_imports_once_through_the_command(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Each corpus file imports (stdout: only the ids, main first; the --json summary agrees),
    a second import of it is refused with nothing written, and the store verifies clean."""
    db = tmp_path / "corpus.db"
    for folder, fmt in CORPUS_FORMATS.items():
        for path in sorted((corpus_dir / folder).iterdir()):
            result = invoke(db, "import", "--format", fmt, str(path))
            assert result.exit_code == 0, (path.name, result.stderr)
            ids = result.stdout.split()
            assert result.stdout == "".join(f"{i}\n" for i in ids)
            assert result.stderr.startswith(f"imported {len(ids)} conversation")
            with convstore.open_store(db) as store:
                listed = {str(c.id): c for c in store.conversations()}
                before = store.log_position()
            assert all(listed[i].parent_id is None for i in ids[:1]), path.name
            assert all(str(listed[i].parent_id) == ids[0] for i in ids[1:]), path.name
            again = invoke(db, "import", "--format", fmt, "--json", str(path))
            assert again.exit_code == 2, path.name
            assert f"already imported as conversation {ids[0]}" in again.stderr
            with convstore.open_store(db) as store:
                assert store.log_position() == before
            copy = invoke(db, "import", "--format", fmt, "--again", "--json", str(path))
            assert copy.exit_code == 0, copy.stderr
            summary = json.loads(copy.stdout)
            assert len(summary["conversations"]) == len(ids)
            assert summary["messages"] == sum(c["messages"] for c in summary["conversations"])
            with convstore.open_store(db) as store:
                assert store.log_position() > before
    with convstore.open_store(db) as store:
        assert problems(store) == []


ROUND_TRIPS: list[tuple[Literal["openai-chat", "anthropic"], Shape]] = [
    ("openai-chat", "openai"),
    ("anthropic", "anthropic"),
]


@pytest.mark.slow
def test_every_corpus_conversation_survives_export_and_import_again(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Each conversation imported from the corpus (subagents included), exported as an
    openai-chat and as an anthropic body and imported from that body again, replays exactly
    as the first import did, vision or not: the round trip holds on real histories."""
    checked = 0
    with convstore.open_store(tmp_path / "trip.db") as store:
        for folder, fmt in CORPUS_FORMATS.items():
            for path in sorted((corpus_dir / folder).iterdir()):
                text = path.read_text(encoding="utf-8")
                data = None if fmt == "claude-code" else json.loads(text)
                report = store.import_histories(read_histories(fmt, text, data))
                for conv in report.ids:
                    for out, shape in ROUND_TRIPS:
                        for vision in (False, True):
                            body = export_conversation(store, conv, out, vision=vision).text
                            [history] = read_histories(out, body, json.loads(body))
                            copy = store.import_history(history, again=True)
                            assert store.replay(copy, shape=shape, vision=vision) == store.replay(
                                conv, shape=shape, vision=vision
                            ), (path.name, out, vision)
                            checked += 1
    assert checked >= 4 * len(CORPUS_FORMATS)


@pytest.mark.slow
def test_the_corpus_edge_cases_report_skipped_lines_and_unanswered_calls(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """The hand-written malformed transcript imports, reporting each skipped line by number
    and its two calls without a result."""
    path = corpus_dir / "claude-code" / "claudecodelog-edge_cases.jsonl"
    result = invoke(tmp_path / "e.db", "import", "--format", "claude-code", "--json", str(path))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    summary = json.loads(result.stdout)
    assert summary["calls_without_result"] == 2
    assert {s["line"] for s in summary["skipped"]} >= {13, 15, 16}
    assert all(s["reason"] for s in summary["skipped"])


# -- concurrent imports ------------------------------------------------------------------------

IMPORTERS = 3


def _long_history() -> History:
    """A history long enough that deciding its events takes a while (the race's window)."""
    messages = [
        HistoryMessage("user" if i % 2 == 0 else "assistant", (text(f"turn {i}"),))
        for i in range(300)
    ]
    return History(messages=messages, title="long", key="race-1")


def _import_once(location: str, ready: Any, outcomes: Any) -> None:
    """One importer process: wait for the others, then import the same history."""
    with convstore.open_store(location) as store:
        history = _long_history()
        ready.wait()
        try:
            outcomes.put(f"imported {store.import_history(history)}")
        except AlreadyImported as exc:
            outcomes.put(f"refused {exc}")


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store location on either backend, made before the processes start."""
    if request.param == "sqlite":
        where = str(tmp_path / "race.db")
    else:
        where = request.getfixturevalue("postgres_url")
    convstore.open_store(where).close()
    return where


@pytest.mark.parametrize("again", [False, True], ids=["once", "again"])
def test_three_processes_importing_one_history_record_it_once(location: str, again: bool) -> None:
    """Three processes import the same history at the same moment: one records it, the other
    two are refused (AlreadyImported, naming the winner's conversation); with again=True each
    records its own copy."""
    spawn = multiprocessing.get_context("spawn")
    ready = spawn.Barrier(IMPORTERS)
    outcomes = spawn.Queue()
    target = _import_again if again else _import_once
    workers = [
        spawn.Process(target=target, args=(location, ready, outcomes)) for _ in range(IMPORTERS)
    ]
    for worker in workers:
        worker.start()
    results = sorted(outcomes.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0] * IMPORTERS
    with convstore.open_store(location) as store:
        held = [c.id for c in store.conversations() if c.source == "race-1"]
    if again:
        assert [r.split()[0] for r in results] == ["imported"] * IMPORTERS
        assert len(held) == IMPORTERS
        return
    assert [r.split()[0] for r in results] == ["imported", "refused", "refused"]
    assert held == [UUID(results[0].split()[1])]
    for refused in results[1:]:
        assert f"already imported as conversation {held[0]}" in refused


def _import_again(location: str, ready: Any, outcomes: Any) -> None:
    """One importer process that records its own copy (again=True)."""
    with convstore.open_store(location) as store:
        history = _long_history()
        ready.wait()
        outcomes.put(f"imported {store.import_history(history, again=True)}")
