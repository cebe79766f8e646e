"""The Claude Agent SDK SessionStore on convstore: the SDK's own conformance suite, on both
backends, plus what the suite does not check (restarts, blocks, deletion, the corpus)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from claude_agent_sdk import (
    fork_session_via_store,
    get_session_messages,
    get_session_messages_from_store,
    list_sessions,
    list_sessions_from_store,
)
from claude_agent_sdk._internal.sessions import project_key_for_directory
from claude_agent_sdk.testing import run_session_store_conformance
from claude_agent_sdk.types import SessionKey
from hypothesis import given, settings
from hypothesis import strategies as st

import convstore
from convstore.domain.blocks import TextBlock, ToolUseBlock
from convstore.integrations.claude_agent import CALL_MARK, ConvstoreSessionStore
from convstore.projections.wording import NO_RESULT
from tests.histories import prose_tool_blocks, source_tool_blocks
from tests.killed_in_tool import ROOT, kill_in_tool, missing_calls
from tests.sdk import rejections, request_body


@pytest.fixture(params=["sqlite", "postgres"])
def make_location(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Makes fresh store locations on one backend."""
    if request.param == "postgres":
        make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
        # The conformance suite keeps 14+ stores open at once; small pools keep that within
        # the server's connection limit while another test worker uses it too.
        return lambda: f"{make()}&pool_size=1&max_overflow=1"
    count = iter(range(1_000_000))
    return lambda: str(tmp_path / f"s{next(count)}.db")


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_sdk_conformance_suite_passes_every_contract(
    make_location: Callable[[], str], flavour: str
) -> None:
    """run_session_store_conformance passes with no optional contract skipped, with a Store
    and with an AsyncStore."""
    opened: list[Any] = []

    async def run() -> None:
        async def make() -> ConvstoreSessionStore:
            if flavour == "sync":
                store: Any = convstore.open_store(make_location())
            else:
                store = await convstore.open_async_store(make_location())
            opened.append(store)
            return ConvstoreSessionStore(store)

        try:
            await run_session_store_conformance(make, skip_optional=frozenset())
        finally:
            for store in opened:
                if isinstance(store, convstore.AsyncStore):
                    await store.close()
                else:
                    store.close()

    asyncio.run(run())
    assert len(opened) >= 14


KEY: SessionKey = {"project_key": "-home-me-app", "session_id": "s-1"}


def test_a_key_finds_its_entries_after_a_restart(make_location: Callable[[], str]) -> None:
    """Another store object on the same location (a new process) loads the same entries;
    repeated uuids are recorded once; the subagent's conversation names its parent."""
    location = make_location()
    entries: list[Any] = [{"type": "x", "uuid": "a", "n": 1.5, "deep": {"l": [1, None, "é"]}}]

    async def first() -> None:
        with convstore.open_store(location) as store:
            sessions = ConvstoreSessionStore(store)
            await sessions.append(KEY, entries)
            await sessions.append(KEY, [*entries, {"type": "y"}])
            await sessions.append({**KEY, "subpath": "subagents/agent-1"}, [{"type": "z"}])

    async def second() -> tuple[Any, Any, list[convstore.ConversationInfo]]:
        async with await convstore.open_async_store(location) as store:
            sessions = ConvstoreSessionStore(store)
            return (
                await sessions.load(KEY),
                sessions.conversation_for(KEY),
                await store.conversations(),
            )

    asyncio.run(first())
    loaded, conv, infos = asyncio.run(second())
    assert loaded == [*entries, {"type": "y"}]
    by_id = {info.id: info for info in infos}
    [sub] = [info for info in infos if info.parent_id is not None]
    assert sub.parent_id == conv
    assert by_id[conv].source is not None


def _transcript_entries(path: Path) -> list[Any]:
    """The file's JSON object lines, each uuid's first only (the protocol's idempotency key)."""
    entries, seen = [], set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and line.get("uuid", object()) not in seen:
            entries.append(line)
            seen.add(line.get("uuid"))
    return entries


def test_corpus_sessions_mirror_losslessly_and_replay_their_tool_rounds(
    corpus_dir: Path, tmp_path: Path
) -> None:
    """Real transcripts appended in batches of 7 load back deep-equal, and their replay shows
    every tool call and result as prose, accepted by both SDKs."""
    files = sorted((corpus_dir / "claude-code").glob("*.jsonl"))
    assert files

    async def run() -> None:
        with convstore.open_store(tmp_path / "s.db") as store:
            sessions = ConvstoreSessionStore(store)
            for path in files:
                entries = _transcript_entries(path)
                key: SessionKey = {"project_key": "corpus", "session_id": path.stem}
                for start in range(0, len(entries), 7):
                    await sessions.append(key, entries[start : start + 7])
                assert await sessions.load(key) == entries, path.name
                conv = sessions.conversation_for(key)
                full = store.replay(conv, full=True)
                text = path.read_text(encoding="utf-8")
                shown = prose_tool_blocks(full)
                source = source_tool_blocks(text)
                assert shown["tool_result"] == source["tool_result"], path.name
                assert shown["tool_use"] == source["tool_use"], path.name
                for shape in ("openai", "anthropic"):
                    replayed = store.replay(conv, shape=shape)
                    if replayed["messages"]:
                        body = request_body(shape, replayed)
                        assert rejections(shape, body) == [], path.name

    asyncio.run(run())


def test_delete_withdraws_messages_from_replay_and_keeps_the_log(tmp_path: Path) -> None:
    """After delete, load is None, replay is empty, and the log still holds every event;
    appending again starts the session afresh."""
    user: Any = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": "hi"}}
    answer: Any = {
        "type": "assistant",
        "uuid": "a1",
        "message": {"id": "m1", "role": "assistant", "content": [{"type": "text", "text": "yo"}]},
    }

    async def run() -> None:
        with convstore.open_store(tmp_path / "s.db") as store:
            sessions = ConvstoreSessionStore(store)
            await sessions.append(KEY, [user, answer])
            conv = sessions.conversation_for(KEY)
            assert [m["content"] for m in store.replay(conv)["messages"]] == ["hi", "yo"]
            logged = len(store.events(conv))
            await sessions.delete(KEY)
            assert await sessions.load(KEY) is None
            assert store.replay(conv)["messages"] == []
            assert len(store.events(conv)) == logged + 2
            assert await sessions.list_sessions(KEY["project_key"]) == []
            await sessions.append(KEY, [user])
            assert await sessions.load(KEY) == [user]
            assert [m["content"] for m in store.replay(conv)["messages"]] == ["hi"]

    asyncio.run(run())


def test_the_sdks_own_store_readers_see_what_its_disk_readers_see(
    corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real session mirrored into convstore reads back through the SDK's store helpers
    (messages, listing, fork) exactly as the SDK reads the same file from disk."""
    source = corpus_dir / "claude-code/spotter-subagent.jsonl"
    entries = _transcript_entries(source)
    session_id = next(e["sessionId"] for e in entries if "sessionId" in e)
    project = tmp_path / "project"
    project.mkdir()
    config = tmp_path / "claude"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    on_disk = config / "projects" / project_key_for_directory(str(project))
    on_disk.mkdir(parents=True)
    (on_disk / f"{session_id}.jsonl").write_bytes(source.read_bytes())

    async def run() -> None:
        with convstore.open_store(tmp_path / "s.db") as store:
            sessions = ConvstoreSessionStore(store)
            key: SessionKey = {
                "project_key": project_key_for_directory(str(project)),
                "session_id": session_id,
            }
            for start in range(0, len(entries), 10):
                await sessions.append(key, entries[start : start + 10])
            from_disk = get_session_messages(session_id, directory=str(project))
            from_store = await get_session_messages_from_store(
                sessions, session_id, directory=str(project)
            )
            assert from_disk
            assert from_store == from_disk
            # Listing goes through list_session_summaries (the SDK's fold), whose summary
            # heuristics (summary, created_at) differ from its disk lite-parse by design.
            [listed] = await list_sessions_from_store(sessions, directory=str(project))
            [disk_listed] = list_sessions(directory=str(project))
            assert listed.session_id == disk_listed.session_id == session_id
            assert (listed.cwd, listed.git_branch) == (disk_listed.cwd, disk_listed.git_branch)
            assert listed.summary

            fork = await fork_session_via_store(sessions, session_id, directory=str(project))
            forked: SessionKey = {**key, "session_id": fork.session_id}
            original = store.replay(sessions.conversation_for(key), full=True)
            copy = store.replay(sessions.conversation_for(forked), full=True)
            assert prose_tool_blocks(copy) == prose_tool_blocks(original)

    asyncio.run(run())


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_ENTRIES = st.lists(
    st.dictionaries(st.text(max_size=8), _JSON, max_size=5).map(lambda d: {"type": "x", **d}),
    min_size=1,
    max_size=5,
)


def test_any_json_entries_load_back_deep_equal(tmp_path: Path) -> None:
    """Whatever JSON objects are appended (without uuids), load returns them deep-equal."""
    with convstore.open_store(tmp_path / "s.db") as store:
        sessions = ConvstoreSessionStore(store)

        @settings(max_examples=60, deadline=None)
        @given(batches=st.lists(_ENTRIES, min_size=1, max_size=3))
        def check(batches: list[list[Any]]) -> None:
            key: SessionKey = {"project_key": "p", "session_id": str(uuid4())}

            async def run() -> Any:
                for batch in batches:
                    await sessions.append(key, batch)
                return await sessions.load(key)

            assert asyncio.run(run()) == [entry for batch in batches for entry in batch]

        check()


def test_a_call_the_cli_wrote_before_the_hook_ran_loads_as_prose_once(tmp_path: Path) -> None:
    """When the hook runs late (a busy machine), the CLI's own line for the call is already in
    the transcript it mirrors: both reach the store. With no result after them (the process
    died inside the tool), load gives the CLI's line, in its place in the chain, as the prose
    of a call without a result, and leaves the hook's entry out: no call left hanging, none
    shown twice. A CI run caught the resumed request holding the bare call."""
    call = {"type": "tool_use", "id": "toolu_1", "name": "delete_branch", "input": {"b": "r7"}}
    user = {"type": "user", "uuid": "u1", "parentUuid": None, "message": {"role": "user"}}
    native = {
        "type": "assistant",
        "uuid": "a1",
        "parentUuid": "u1",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "On it."}, call]},
    }
    hooked = {
        "type": "assistant",
        "uuid": "h1",
        "parentUuid": "a1",
        CALL_MARK: "toolu_1",
        "message": {"role": "assistant", "content": [call]},
    }
    result = {
        "type": "user",
        "uuid": "r1",
        "parentUuid": "h1",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}],
        },
    }
    key: SessionKey = {"project_key": "p", "session_id": str(uuid4())}
    answered: SessionKey = {"project_key": "p", "session_id": str(uuid4())}
    with convstore.open_store(tmp_path / "s.db") as store:
        sessions = ConvstoreSessionStore(store)

        async def run() -> tuple[Any, Any]:
            await sessions.append(key, [user, native, hooked])  # type: ignore[list-item]
            await sessions.append(answered, [user, native, hooked, result])  # type: ignore[list-item]
            return await sessions.load(key), await sessions.load(answered)

        killed, finished = asyncio.run(run())
    prose = f'On it.\n\nTool use: delete_branch({{"b":"r7"}})\n\n{NO_RESULT}'
    assert [e["uuid"] for e in killed] == ["u1", "a1"]
    assert killed[1]["message"]["content"] == [{"type": "text", "text": prose}]
    assert finished == [user, native, result]


def test_a_block_past_the_store_limits_is_a_marker_and_its_entry_is_kept(tmp_path: Path) -> None:
    """An entry whose image breaks the store's image limit is still kept verbatim; its
    message records a marker in the image's place."""
    png = (
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAE"
        "hQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    entry: Any = {"type": "user", "uuid": "u1", "message": {"role": "user", "content": [image]}}
    limits = convstore.Limits(max_image_bytes=10)

    async def run() -> None:
        with convstore.open_store(tmp_path / "s.db", limits=limits) as store:
            sessions = ConvstoreSessionStore(store)
            await sessions.append(KEY, [entry])
            assert await sessions.load(KEY) == [entry]
            [message] = store.replay(sessions.conversation_for(KEY))["messages"]
            assert message["content"].startswith("[Block not kept: image is 70 bytes")

    asyncio.run(run())


def _said(body: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """A request's messages as their roles and the texts, calls and results they hold,
    without the CLI's ``<system-reminder>`` texts."""
    said = []
    for message in body["messages"]:
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        shown = [
            block["text"] if block["type"] == "text" else block["type"]
            for block in blocks
            if not str(block.get("text", "")).startswith("<system-reminder>")
        ]
        said.append((message["role"], shown))
    return said


def _run_worker(argv: list[str]) -> str:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_a_call_killed_inside_its_tool_is_in_the_store_and_resumes_as_prose(
    make_location: Callable[[], str], tmp_path: Path
) -> None:
    """The SDK's real runner (its bundled CLI, a scripted endpoint), given the store's hooks
    and SIGKILLed inside ``delete_branch``: the call was recorded before the tool ran,
    ``audit tools --status missing`` lists it, and a run resumed from the store on another
    host (a fresh CLI config) sends the call as prose, with no call left without its
    result; that run's lines are mirrored after it, each message once."""
    location, project = make_location(), tmp_path / "project"
    project.mkdir()
    seen, ready = tmp_path / "seen.jsonl", tmp_path / "in-tool"
    worker = [sys.executable, "-m", "tests.claude_agent_worker", location, str(project)]
    first = [*worker, str(tmp_path / "host-1"), "Delete release-7.", str(seen)]
    kill_in_tool([*first, f"--ready={ready}"], ready)

    project_key = project_key_for_directory(str(project))
    with convstore.open_store(location) as store:
        sessions = ConvstoreSessionStore(store)
        [listed] = asyncio.run(sessions.list_sessions(project_key))
        key: SessionKey = {"project_key": project_key, "session_id": listed["session_id"]}
        conversation = sessions.conversation_for(key)
        [user, call] = [(m.role, [b.block for b in m.blocks]) for m in store.messages(conversation)]
    assert user == ("user", [TextBlock(text="Delete release-7.")])
    [(role, [block])] = [call]
    assert isinstance(block, ToolUseBlock)
    assert (role, block.name, block.input) == (
        "assistant",
        "mcp__ops__delete_branch",
        {"branch": "release-7"},
    )
    assert missing_calls(location, tmp_path / "audit.db") == [
        ("mcp__ops__delete_branch", '{"branch":"release-7"}')
    ]

    resumed_seen = tmp_path / "resumed.jsonl"
    answer = _run_worker(
        [
            *worker,
            str(tmp_path / "host-2"),
            "Did that go through?",
            str(resumed_seen),
            f"--resume={listed['session_id']}",
        ]
    )
    assert answer == "I cannot tell."
    first_request = json.loads(resumed_seen.read_text().splitlines()[0])
    assert _said(first_request) == [
        ("user", ["Delete release-7."]),
        (
            "assistant",
            [f'Tool use: mcp__ops__delete_branch({{"branch":"release-7"}})\n\n{NO_RESULT}'],
        ),
        ("user", ["Did that go through?"]),
    ]
    with convstore.open_store(location) as store:
        assert [m.role for m in store.messages(conversation)] == [
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        assert store.replay(conversation)["messages"][-1] == {
            "role": "assistant",
            "content": "I cannot tell.",
        }


@pytest.mark.slow
def test_a_finished_run_records_its_call_once_and_loads_as_the_cli_wrote_it(
    make_location: Callable[[], str], tmp_path: Path
) -> None:
    """A run given the store's hooks that finishes: the call recorded by the hook and the
    CLI's own line for it make one call, answered, and ``load`` returns the CLI's lines
    only (the hook's entry left out), so a resumed run sends the call natively."""
    location, project = make_location(), tmp_path / "project"
    project.mkdir()
    seen = tmp_path / "seen.jsonl"
    worker = [sys.executable, "-m", "tests.claude_agent_worker", location, str(project)]
    assert _run_worker([*worker, str(tmp_path / "host-1"), "Delete release-7.", str(seen)]) == (
        "Deleted."
    )

    project_key = project_key_for_directory(str(project))
    with convstore.open_store(location) as store:
        sessions = ConvstoreSessionStore(store)
        [listed] = asyncio.run(sessions.list_sessions(project_key))
        key: SessionKey = {"project_key": project_key, "session_id": listed["session_id"]}
        conversation = sessions.conversation_for(key)
        kinds = [[b.block.type for b in m.blocks] for m in store.messages(conversation)]
        loaded = asyncio.run(sessions.load(key)) or []
        recorded = store.entries(conversation) or []
    assert kinds == [["text"], ["tool_use"], ["tool_result"], ["text"]]
    assert missing_calls(location, tmp_path / "audit.db") == []
    assert [e for e in recorded if CALL_MARK in e] != []
    assert [e for e in loaded if CALL_MARK in e] == []
    assert loaded == [e for e in recorded if CALL_MARK not in e]

    resumed_seen = tmp_path / "resumed.jsonl"
    argv = [*worker, str(tmp_path / "host-2"), "Did that go through?", str(resumed_seen)]
    assert _run_worker([*argv, f"--resume={listed['session_id']}"]) == "I cannot tell."
    first_request = json.loads(resumed_seen.read_text().splitlines()[0])
    assert _said(first_request) == [
        ("user", ["Delete release-7."]),
        ("assistant", ["tool_use"]),
        ("user", ["tool_result"]),
        ("assistant", ["Deleted."]),
        ("user", ["Did that go through?"]),
    ]
