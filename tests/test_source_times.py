"""Imports keep what the source knew: each message's time, model, usage, stop reason and ids;
forks keep them too; subagents are linked to their session; untitled conversations are listed
by their first user text. On both backends, through the store and the command line.

The transcript is a small Claude Code session of our own from 2025: a user question, an
assistant answer written over two lines (one ``message.id``, usage on each), a tool round,
and one subagent's sidechain.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import convstore
from convstore import ConversationActive, Store
from convstore.app.export import export_conversation
from convstore.convert.claude_code import histories_from_transcript
from convstore.convert.responses import history_from_responses
from convstore.domain.events import MessageMeta, TokenUsage
from convstore.store.importing import read_histories
from tests.formats import BLOCK_TYPES

CONVSTORE = Path(sys.executable).parent / "convstore"
SESSION = "5e551011-2025-4000-8000-000000000001"


def line(kind: str, uuid: str, at: str, message: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "uuid": uuid,
        "timestamp": at,
        "sessionId": SESSION,
        "isSidechain": False,
        "message": message,
        **more,
    }


def assistant(mid: str, content: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {
        "id": mid,
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        **fields,
    }


TRANSCRIPT = [
    line(
        "user",
        "u1",
        "2025-03-04T10:00:00.250Z",
        {"role": "user", "content": "Why  is the\nbuild red?"},
    ),
    line(
        "assistant",
        "a1",
        "2025-03-04T10:00:05Z",
        assistant(
            "msg_A",
            [{"type": "text", "text": "Let me look."}],
            usage={"input_tokens": 10, "output_tokens": 1},
        ),
        requestId="req_1",
    ),
    line(
        "assistant",
        "a2",
        "2025-03-04T10:00:07Z",
        assistant(
            "msg_A",
            [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}],
            stop_reason="tool_use",
            usage={
                "input_tokens": 10,
                "output_tokens": 42,
                "cache_read_input_tokens": 7,
                "cache_creation_input_tokens": 3,
            },
        ),
        requestId="req_1",
    ),
    line(
        "user",
        "u2",
        "2025-03-04T10:01:00Z",
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "FAIL"}],
        },
    ),
    {
        **line(
            "user",
            "s1",
            "2025-03-04T10:01:30Z",
            {"role": "user", "content": "Find the failing test."},
            agentId="agent7",
        ),
        "isSidechain": True,
    },
    {
        **line(
            "assistant",
            "s2",
            "2025-03-04T10:02:00Z",
            assistant("msg_S", [{"type": "text", "text": "test_x fails."}], stop_reason="end_turn"),
            agentId="agent7",
        ),
        "isSidechain": True,
    },
    line(
        "assistant",
        "a3",
        "2025-03-04T10:03:00Z",
        assistant("msg_B", [{"type": "text", "text": "test_x is broken."}], stop_reason="end_turn"),
    ),
]
TEXT = "\n".join(json.dumps(entry) for entry in TRANSCRIPT) + "\n"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def store(location: str) -> Iterator[Store]:
    with convstore.open_store(location) as opened:
        yield opened


def imported(store: Store) -> tuple[UUID, UUID]:
    report = store.import_histories(histories_from_transcript(TEXT))
    main, agent = report.ids
    return main, agent


def test_messages_keep_their_source_times_and_metadata(store: Store) -> None:
    main, _ = imported(store)
    messages = store.messages(main)
    assert [m.started_at for m in messages] == [
        at("2025-03-04T10:00:00.250+00:00"),
        at("2025-03-04T10:00:05+00:00"),  # the first line of the two-line answer
        at("2025-03-04T10:01:00+00:00"),
        at("2025-03-04T10:03:00+00:00"),
    ]
    answer = messages[1].meta
    assert answer == MessageMeta(
        model="claude-sonnet-4-5",
        provider_message_id="msg_A",
        stop_reason="tool_use",
        usage=TokenUsage(
            input_tokens=10, output_tokens=42, cache_read_tokens=7, cache_write_tokens=3
        ),
        extra={"uuids": ["a1", "a2"], "request_id": "req_1"},
    )
    assert messages[0].meta == MessageMeta(extra={"uuids": ["u1"]})
    # The log still says when each event was recorded: now, not 2025.
    events = store.events(main)
    assert all(e.timestamp.year >= 2026 for e in events)
    assert {e.happened_at for e in events if e.type in BLOCK_TYPES} >= {
        at("2025-03-04T10:00:05+00:00")
    }


def test_listing_activity_and_start_are_the_source_times_and_rebuild_agrees(store: Store) -> None:
    main, agent = imported(store)
    info = store.conversation_info(main)
    assert info.created_at == at("2025-03-04T10:00:00.250+00:00")
    assert info.last_active == at("2025-03-04T10:03:00+00:00")
    sub = store.conversation_info(agent)
    assert (sub.parent_id, sub.source) == (main, f"claude-code:{SESSION}:agent7")
    assert sub.last_active == at("2025-03-04T10:02:00+00:00")
    page = store.list_conversations(active_before=datetime(2026, 1, 1, tzinfo=UTC))
    assert [c.id for c in page.conversations] == [main, agent]
    before = store.conversations()
    store.rebuild_listing()
    assert store.conversations() == before


def test_retention_goes_by_the_source_times(store: Store) -> None:
    main, agent = imported(store)
    live = store.new_conversation()
    store.append_message(live, "user", [{"type": "text", "text": "today"}])
    cutoff = datetime(2026, 1, 1, tzinfo=UTC)
    store.erase(main, reason="retention", idle_since=cutoff)
    with pytest.raises(ConversationActive):
        store.erase(live, reason="retention", idle_since=cutoff)
    # Appending to an imported conversation is activity now.
    store.append_message(agent, "user", [{"type": "text", "text": "more"}])
    with pytest.raises(ConversationActive):
        store.erase(agent, reason="retention", idle_since=cutoff)


FUTURE = "9999-12-31T23:59:59Z"
"""A Codex rollout dated at the end of time: before, it listed first forever and no retention
could erase it."""


def future_rollout(tmp_path: Path) -> Path:
    """A Codex rollout whose every line is dated :data:`FUTURE`."""
    meta = {"id": "0199a1b2-c3d4-7e5f-8a9b-00000000ffff", "timestamp": FUTURE}
    ask = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    lines = [
        {"timestamp": FUTURE, "type": "session_meta", "payload": meta},
        {"timestamp": FUTURE, "type": "response_item", "payload": ask},
    ]
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return rollout


def test_a_source_time_after_the_recording_decides_nothing_but_is_kept(
    store: Store, tmp_path: Path
) -> None:
    """A message its source dates after the store recorded it is at its recording for
    activity, listing order and retention; the source's time stays in the log as its claim
    and is shown as such."""
    report = store.import_histories(read_histories("codex", future_rollout(tmp_path).read_text()))
    [future] = report.ids
    live = store.new_conversation()
    store.append_message(live, "user", [{"type": "text", "text": "today"}])
    now = datetime.now(UTC)
    info = store.conversation_info(future)
    assert info.created_at is not None
    assert info.last_active is not None
    assert info.created_at <= info.last_active <= now
    assert [c.id for c in store.list_conversations().conversations] == [live, future]
    [message] = store.messages(future)
    assert message.started_at <= now
    assert message.claimed_at == at(FUTURE)
    assert {e.happened_at for e in store.events(future)} == {at(FUTURE)}  # kept as given
    store.rebuild_listing()
    assert store.conversation_info(future) == info
    text = export_conversation(store, future, "markdown").text
    assert "(the source dates it 9999-12-31 23:59:59 UTC, after it was recorded)" in text
    store.erase(future, reason="retention", idle_since=now)
    assert [c.id for c in store.conversations()] == [live]


def test_a_fork_keeps_its_messages_times_and_metadata(store: Store) -> None:
    main, _ = imported(store)
    parent = store.messages(main)
    fork = store.fork(main, at=parent[1].message_id)
    copied = store.messages(fork)
    assert [(m.started_at, m.meta) for m in copied] == [(m.started_at, m.meta) for m in parent[:2]]
    assert {m.message_id for m in copied}.isdisjoint(m.message_id for m in parent)
    info = store.conversation_info(fork)
    assert info.created_at.year >= 2026  # the fork itself was made now
    # A fork of a live conversation keeps the parent's recorded times as well.
    live = store.new_conversation()
    first = store.append_message(live, "user", [{"type": "text", "text": "hi"}])
    again = store.fork(live, at=first)
    assert store.messages(again)[0].started_at == store.messages(live)[0].started_at


def test_untitled_conversations_are_listed_by_their_first_user_text(
    store: Store, location: str
) -> None:
    main, agent = imported(store)
    assert store.conversation_info(main).preview == "Why is the build red?"
    assert store.conversation_info(agent).preview == "Find the failing test."
    # Streamed: the first user message's text arrives in a later write; an assistant's text
    # and a later user message never take its place.
    conv = store.new_conversation()
    store.append_message(conv, "assistant", [{"type": "text", "text": "Hello, I am the agent."}])
    first = store.start_message(conv, "user")
    store.append_message(conv, "user", [{"type": "text", "text": "second user"}])
    assert store.conversation_info(conv).preview is None
    store.append_block(conv, first, {"type": "text", "text": "   "})
    store.append_block(conv, first, {"type": "text", "text": "x" * 200})
    preview = store.conversation_info(conv).preview
    assert preview == "x" * 79 + "…"
    titled = store.new_conversation(title="Named")
    store.append_message(titled, "user", [{"type": "text", "text": "body"}])
    assert store.conversation_info(titled).shown_title == "Named"
    assert store.conversation_info(conv).shown_title == f"“{preview}”"
    before = store.conversations()
    store.rebuild_listing()
    assert store.conversations() == before


def test_a_listing_made_before_previews_gains_them(location: str) -> None:
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "old store"}])
    drop = "ALTER TABLE {t} DROP COLUMN preview; ALTER TABLE {t} DROP COLUMN preview_message"
    if location.endswith(".db"):
        import sqlite3  # noqa: PLC0415

        with sqlite3.connect(location) as conn:
            conn.executescript(drop.format(t="convstore_listing"))
    else:
        import psycopg  # noqa: PLC0415

        server, _, schema = location.partition("?schema=")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(drop.format(t=f'"{schema}".convstore_listing').encode())
    with convstore.open_store(location) as store:
        assert store.conversation_info(conv).preview == "old store"


def test_dump_and_load_keep_source_times(store: Store, tmp_path: Path) -> None:
    main, _ = imported(store)
    live = store.new_conversation()
    lines = list(store.dump())
    events = [e for e in map(json.loads, lines[1:]) if "event" in e]
    imported_lines = [e["event"] for e in events if e["conversation"] == str(main)]
    assert imported_lines
    assert all("happened_at" in e for e in imported_lines)
    live_lines = [e["event"] for e in events if e["conversation"] == str(live)]
    assert live_lines
    assert all("happened_at" not in e for e in live_lines)
    with convstore.open_store(tmp_path / "copy.db") as copy:
        copy.load(lines)
        assert copy.messages(main) == store.messages(main)
        assert copy.conversation_info(main).last_active == store.conversation_info(main).last_active
        assert copy.conversations() == store.conversations()  # previews and parents too


def test_an_agent_file_alone_links_to_its_session_imported_before(store: Store) -> None:
    main_lines = [e for e in TRANSCRIPT if not e["isSidechain"]]
    agent_lines = [e for e in TRANSCRIPT if e["isSidechain"]]
    [main] = store.import_histories(
        histories_from_transcript("\n".join(json.dumps(e) for e in main_lines))
    ).ids
    report = store.import_histories(
        histories_from_transcript("\n".join(json.dumps(e) for e in agent_lines))
    )
    [agent] = report.ids
    assert store.conversation_info(agent).parent_id == main
    assert report.conversations[0].parent_id == main


def test_previous_response_id_is_kept_and_reported(store: Store, tmp_path: Path) -> None:
    body = {"previous_response_id": "resp_123", "input": [{"role": "user", "content": "and then?"}]}
    history = history_from_responses(body)
    report = store.import_histories([history], sources=["responses:test"])
    [conv] = report.ids
    assert store.messages(conv)[0].meta == MessageMeta(extra={"previous_response_id": "resp_123"})
    assert report.as_json()["conversations"][0]["previous_response_id"] == "resp_123"
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    proc = run(tmp_path / "cli.db", "import", "--format", "responses", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "history continues in a stored response convstore does not have" in proc.stderr
    assert "resp_123" in proc.stderr


def test_an_anthropic_response_keeps_its_model_and_usage(store: Store) -> None:
    from anthropic.types import Message  # noqa: PLC0415

    from convstore.convert.anthropic import history_from_messages  # noqa: PLC0415

    response = Message.model_validate(
        {
            "id": "msg_R",
            "type": "message",
            "role": "assistant",
            "model": "claude-opus-4-1",
            "content": [{"type": "text", "text": "done"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 2},
        }
    )
    [conv] = store.import_histories([history_from_messages(response)], sources=["anthropic:r"]).ids
    meta = store.messages(conv)[0].meta
    assert meta is not None
    assert (meta.model, meta.provider_message_id, meta.stop_reason) == (
        "claude-opus-4-1",
        "msg_R",
        "end_turn",
    )
    assert meta.usage == TokenUsage(input_tokens=5, output_tokens=2)


# -- the command line --------------------------------------------------------------------------


def run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CONVSTORE_DB"}
    return subprocess.run(
        [str(CONVSTORE), "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_cli_show_list_and_export_give_the_source_times(tmp_path: Path) -> None:
    transcript = tmp_path / f"{SESSION}.jsonl"
    transcript.write_text(TEXT)
    db = tmp_path / "s.db"
    proc = run(db, "import", "--format", "claude-code", str(transcript))
    assert proc.returncode == 0, proc.stderr
    main, agent = proc.stdout.split()
    shown = run(db, "show", main)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("“Why is the build red?”\n")
    assert "2025-03-04 10:00:00" in shown.stdout
    assert "2025-03-04 10:03:00" in shown.stdout
    listed = run(db, "list")
    assert listed.returncode == 0, listed.stderr
    rows = listed.stdout.splitlines()
    assert rows[0] == f"{main}  2025-03-04 10:03:00  “Why is the build red?”"
    assert rows[1] == f"{agent}  2025-03-04 10:02:00  ↳ {main[:8]} “Find the failing test.”"
    as_json = json.loads(run(db, "list", "--json").stdout)["conversations"]
    assert [(c["parent_id"], c["source"], c["children"]) for c in as_json] == [
        (None, f"claude-code:{SESSION}", 1),
        (main, f"claude-code:{SESSION}:agent7", 0),
    ]
    exported = run(db, "export", main, "--format", "markdown")
    assert exported.returncode == 0, exported.stderr
    assert "started 2025-03-04 10:00:00 UTC" in exported.stdout
    assert "## 4 · assistant · 2025-03-04 10:03:00 UTC" in exported.stdout
    checked = run(db, "verify")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_cli_retention_erases_a_history_dated_in_the_future(tmp_path: Path) -> None:
    """The issue's steps: a Codex rollout dated 9999 imported, then `erase --inactive-for`
    (0s, so that no wait is needed) erases it; before, it said "no conversations match".
    `list` dates it now, and `show` gives the source's time as its claim."""
    db = tmp_path / "s.db"
    proc = run(db, "import", "--format", "codex", str(future_rollout(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    conv = proc.stdout.strip()
    shown = run(db, "show", conv)
    assert "(the source dates it 9999-12-31 23:59:59 UTC, after it was recorded)" in shown.stdout
    listed = run(db, "list")
    assert "9999" not in listed.stdout
    erased = run(db, "erase", "--inactive-for", "0s", "--reason", "retention")
    assert erased.returncode == 0, erased.stderr
    assert erased.stdout.startswith(f"erased {conv}"), erased.stdout
    assert run(db, "list", "--json").stdout.count(conv) == 0


def test_import_bookkeeping_is_kept_and_shown_only_where_asked(tmp_path: Path) -> None:
    """A Claude Code import keeps each message's line ids and request id in its metadata
    extras; `show` and the Markdown export leave them out, `show --verbose` gives them, and
    the web page folds them in a <details>. Before, `{"uuids": [...]}` and `request_id` sat
    under every message of all three."""
    transcript = tmp_path / f"{SESSION}.jsonl"
    transcript.write_text(TEXT)
    db = tmp_path / "s.db"
    proc = run(db, "import", "--format", "claude-code", str(transcript))
    assert proc.returncode == 0, proc.stderr
    main = proc.stdout.split()[0]
    shown = run(db, "show", main)
    assert shown.returncode == 0, shown.stderr
    assert "uuids" not in shown.stdout
    assert "req_1" not in shown.stdout
    assert "    (claude-sonnet-4-5 · 10 input / 42 output" in shown.stdout  # the rest stays
    verbose = run(db, "show", main, "--verbose").stdout
    assert '{"request_id": "req_1", "uuids": ["a1", "a2"]}' in verbose
    exported = run(db, "export", main, "--format", "markdown").stdout
    assert "uuids" not in exported
    assert "req_1" not in exported
    with convstore.open_store(db) as store:
        assert store.messages(main)[1].meta == MessageMeta(
            model="claude-sonnet-4-5",
            provider_message_id="msg_A",
            stop_reason="tool_use",
            usage=TokenUsage(
                input_tokens=10, output_tokens=42, cache_read_tokens=7, cache_write_tokens=3
            ),
            extra={"uuids": ["a1", "a2"], "request_id": "req_1"},
        )
        from starlette.testclient import TestClient  # noqa: PLC0415

        from convstore.web.app import create_app  # noqa: PLC0415

        with TestClient(create_app(store)) as client:
            page = client.get(f"/c/{main}").text
    folded = re.findall(r"<details class='meta msg-extra'>(.*?)</details>", page)
    assert "<summary>metadata extras</summary>" in folded[1]
    assert "&quot;request_id&quot;: &quot;req_1&quot;" in folded[1]
    assert "req_1" not in re.sub(r"<details class='meta msg-extra'>.*?</details>", "", page)


def test_markdown_export_and_web_list_show_the_source_times(store: Store) -> None:
    main, agent = imported(store)
    text = export_conversation(store, main, "markdown").text
    assert "## 1 · user · 2025-03-04 10:00:00 UTC" in text
    from starlette.testclient import TestClient  # noqa: PLC0415

    from convstore.web.app import create_app  # noqa: PLC0415

    with TestClient(create_app(store)) as client:
        page = client.get("/").text
        assert "2025-03-04 10:03:00 UTC" in page
        assert "“Why is the build red?”" in page
        assert f"↳ branch of <a href='/c/{main}'>" in page
        conversation = client.get(f"/c/{main}").text
        assert "2025-03-04 10:00:00 UTC" in conversation
    assert agent


def test_an_encrypted_store_keeps_no_preview(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cipher, message text stays out of the clear: the listing keeps no preview, not
    when written and not when rebuilt."""
    from eventsourcing.cipher import AESCipher  # noqa: PLC0415

    monkeypatch.setenv("CONVSTORE_CIPHER_TOPIC", "eventsourcing.cipher:AESCipher")
    monkeypatch.setenv("CONVSTORE_CIPHER_KEY", AESCipher.create_key(16))
    with convstore.open_store(location) as store:
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "secret-preview-51c"}])
        assert store.conversation_info(conv).preview is None
        store.rebuild_listing()
        assert store.conversation_info(conv).preview is None
        assert store.conversation_info(conv).shown_title == "(untitled)"
    if location.endswith(".db"):
        for path in (Path(location), Path(f"{location}-wal")):
            if path.exists():
                assert b"secret-preview-51c" not in path.read_bytes()
