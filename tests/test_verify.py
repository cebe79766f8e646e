"""``convstore verify`` over real SQLite files: a sound log, and logs tampered with by hand.

Each tampering is done with plain ``sqlite3`` on the ``stored_events`` table. Verify must name
the problem, exit 1 with one ``error:`` line on stderr, and change nothing: the stored rows,
the files in the directory and their bytes are the same before and after.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from click.testing import CliRunner, Result

from convstore import open_store
from convstore.app.demo import record_demo
from convstore.app.verifying import store_verifier
from convstore.cli import cli
from convstore.domain.errors import StoreError
from convstore.infrastructure.common.mapper import event_json
from convstore.ports.chain import genesis, link
from tests.conftest import format2_store_file

# -- helpers -----------------------------------------------------------------------------------


def verify(db: Path, *flags: str) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), "verify", *flags])


def dump(db: Path) -> list[Any]:
    """Every stored event row, in insertion order."""
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()


def files(directory: Path) -> dict[str, str]:
    """Each file in ``directory`` with the SHA-256 of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


@dataclass(frozen=True)
class Stored:
    """A store holding the demo conversation and a small second one."""

    db: Path
    demo: UUID
    other: UUID


@pytest.fixture(params=[3, 2], ids=["format-3", "format-2"])
def stored(request: pytest.FixtureRequest, tmp_path: Path) -> Stored:
    """The demo conversation (images, tools, an interrupted and an unfinished message) and
    another with an open message, so tampering can hit the middle of the log; in a store of
    this version's format, and in one of format 2 (an earlier version's, written as it was)."""
    db = tmp_path / "store" / "convstore.db"
    db.parent.mkdir()
    if request.param == 2:
        format2_store_file(db)
    with open_store(db) as store:
        assert store.store_format == request.param
        demo = record_demo(store)
        other = store.new_conversation(title="second")
        store.append_message(other, "user", [{"type": "text", "text": "one"}])
        message = store.start_message(other, "assistant")
        store.append_block(other, message, {"type": "text", "text": "two"})
    return Stored(db, demo, other)


BLOCK_TOPICS = {"convstore:block_appended", "convstore:block_recorded"}
"""A block's event in either form (format 2, format 3)."""


def rows_of(db: Path, conversation: UUID) -> list[tuple[int, int, str, bytes]]:
    """(rowid, version, topic, state) of a conversation's stored events, in version order."""
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute(
            "SELECT rowid, originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version",
            [conversation.hex],
        ).fetchall()


def tamper(db: Path, sql: str, params: list[Any]) -> None:
    with closing(sqlite3.connect(db)) as connection:
        connection.execute(sql, params)
        connection.commit()


def problems_of(result: Result) -> list[dict[str, Any]]:
    """The problems ``verify --json`` printed; insists on exit 1 and one stderr line."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "problem(s)" in lines[0], lines[0]
    assert "Traceback" not in result.output
    parsed: list[dict[str, Any]] = json.loads(result.stdout)
    return parsed


# -- a sound log ------------------------------------------------------------------------------


def test_a_sound_log_is_ok_in_every_format(stored: Stored) -> None:
    """A clean store: exit 0, one "ok:" line counting events; --json is [] and --csv a header."""
    before = files(stored.db.parent)
    result = verify(stored.db)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    [line] = result.stdout.splitlines()
    events = len(dump(stored.db))
    assert line == f"ok: {events} events in 2 conversations, log position {events}"
    assert result.stderr == ""
    as_json = verify(stored.db, "--json")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == []
    as_csv = verify(stored.db, "--csv")
    assert as_csv.exit_code == 0
    assert list(csv.reader(io.StringIO(as_csv.stdout))) == [
        ["position", "conversation", "version", "problem"]
    ]
    assert files(stored.db.parent) == before  # no audit file, no leftover -wal: nothing written


def test_an_empty_store_is_ok(tmp_path: Path) -> None:
    """A store with nothing in it verifies, and a missing one is bad input (exit 2), not made."""
    db = tmp_path / "empty.db"
    with open_store(db):
        pass
    result = verify(db)
    assert result.exit_code == 0
    assert result.stdout.startswith("ok: 0 events in 0 conversations")
    missing = verify(tmp_path / "missing.db")
    assert missing.exit_code == 2
    assert not (tmp_path / "missing.db").exists()


# -- tampered logs ------------------------------------------------------------------------------


def _delete_middle(s: Stored) -> str:
    rowid, version, _, _ = rows_of(s.db, s.demo)[5]
    tamper(s.db, "DELETE FROM stored_events WHERE rowid = ?", [rowid])
    return f"version {version + 1} follows {version - 1} (a gap)"


def _empty_state(s: Stored) -> str:
    rowid = rows_of(s.db, s.demo)[4][0]
    tamper(s.db, "UPDATE stored_events SET state = ? WHERE rowid = ?", [b"{}", rowid])
    return "does not decode"


def _not_json(s: Stored) -> str:
    rowid = rows_of(s.db, s.other)[-1][0]
    tamper(s.db, "UPDATE stored_events SET state = ? WHERE rowid = ?", [b"\xff\x00{", rowid])
    return "does not decode"


def _version_column(s: Stored) -> str:
    rowid = rows_of(s.db, s.demo)[3][0]
    tamper(s.db, "UPDATE stored_events SET originator_version = ? WHERE rowid = ?", [900, rowid])
    return "the stored id or version disagrees with the event inside"


def _block_for_unknown_message(s: Stored) -> str:
    rows = rows_of(s.db, s.other)
    _, _, topic, state = next(r for r in rows if r[2] in BLOCK_TOPICS)
    event = json.loads(event_json(state))
    stranger = str(uuid4())
    # Not the first block (which, in format 3, opens its message): a later one.
    event.update(originator_version=len(rows) + 1, message_id=stranger, index=1)
    tamper(
        s.db,
        "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
        "VALUES (?, ?, ?, ?)",
        [s.other.hex, len(rows) + 1, topic, json.dumps(event).encode()],
    )
    return f"breaks a writer rule: message {stranger} not found in conversation {s.other}"


def _first_event_not_a_start(s: Stored) -> str:
    rowid = rows_of(s.db, s.other)[0][0]
    tamper(s.db, "DELETE FROM stored_events WHERE rowid = ?", [rowid])
    return "version 2 follows 0 (a gap)"


TAMPERINGS: dict[str, Callable[[Stored], str]] = {
    "an event deleted in the middle": _delete_middle,
    "a state overwritten with {}": _empty_state,
    "a state that is not JSON": _not_json,
    "the stored version column changed": _version_column,
    "a block for a message never started": _block_for_unknown_message,
    "the first event deleted": _first_event_not_a_start,
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS), ids=list(TAMPERINGS))
def test_tampering_is_reported_and_verify_changes_nothing(stored: Stored, tampering: str) -> None:
    """Each tampering is named in the report, verify exits 1, and no file changes."""
    expected = TAMPERINGS[tampering](stored)
    rows, before = dump(stored.db), files(stored.db.parent)
    problems = problems_of(verify(stored.db, "--json"))
    assert any(expected in p["problem"] for p in problems), (expected, problems)
    assert all(set(p) == {"position", "conversation", "version", "problem"} for p in problems)
    table = verify(stored.db)
    assert table.exit_code == 1
    assert expected[:40] in table.stdout  # the table cuts long cells, not the start
    # Rough edge (reported): the table format adds a "(N rows)" line to stderr.
    assert table.stderr.splitlines()[-1].startswith(f"error: {len(problems)} problem(s) in ")
    assert dump(stored.db) == rows
    assert files(stored.db.parent) == before


def test_the_report_names_where_each_problem_is(stored: Stored) -> None:
    """A problem carries the log position, conversation and version of the bad record."""
    rowid, version, _, _ = rows_of(stored.db, stored.demo)[4]
    _empty_state(stored)
    [problem] = [p for p in problems_of(verify(stored.db, "--json")) if "decode" in p["problem"]]
    assert problem["position"] == rowid
    assert problem["conversation"] == str(stored.demo)
    assert problem["version"] == version


# -- the audit read model's position ----------------------------------------------------------


def test_an_audit_position_past_the_log_end_is_reported(stored: Stored) -> None:
    """A read model tracked beyond the newest event is a problem; verify leaves it alone."""
    runner = CliRunner()
    projected = runner.invoke(cli, ["--db", str(stored.db), "project"])
    assert projected.exit_code == 0, projected.stderr
    audit = stored.db.with_name("convstore.audit.db")
    assert audit.exists()
    assert verify(stored.db).exit_code == 0  # caught up exactly: fine
    end = len(dump(stored.db))
    with closing(sqlite3.connect(audit)) as connection:
        connection.execute("UPDATE _tracking SET position = ?", [end + 1000])
        connection.commit()
    before = files(stored.db.parent)
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["problem"] == (
        f"audit read model at position {end + 1000}, past the log's end {end}"
    )
    assert files(stored.db.parent) == before
    # The --audit option points verify at another read model file.
    elsewhere = stored.db.parent / "elsewhere.audit.db"
    audit.rename(elsewhere)
    assert verify(stored.db).exit_code == 0
    result = CliRunner().invoke(cli, ["--db", str(stored.db), "--audit", str(elsewhere), "verify"])
    assert result.exit_code == 1


def test_an_audit_file_that_is_not_a_read_model_is_reported(stored: Stored) -> None:
    """A file at the audit path that is not a read model is reported, not a crash."""
    audit = stored.db.with_name("convstore.audit.db")
    audit.write_bytes(b"not a database at all, just text " * 100)
    before = files(stored.db.parent)
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["problem"].startswith("audit read model: ")
    assert files(stored.db.parent) == before


# -- tampering that once crashed verify or slipped past it (regression cases) -------------------


def test_a_topic_column_that_disagrees_is_reported(stored: Stored) -> None:
    """A stored topic that names another event type than the state holds is reported."""
    rowid = rows_of(stored.db, stored.other)[-1][0]
    tamper(stored.db, "UPDATE stored_events SET topic = ? WHERE rowid = ?", ["convstore:x", rowid])
    assert problems_of(verify(stored.db, "--json")) != []


def test_an_originator_id_that_is_not_a_uuid_is_reported(stored: Stored) -> None:
    """A stored originator_id that is not a UUID is reported as a problem."""
    rowid = rows_of(stored.db, stored.other)[-1][0]
    tamper(stored.db, "UPDATE stored_events SET originator_id = 'x' WHERE rowid = ?", [rowid])
    assert problems_of(verify(stored.db, "--json")) != []


@pytest.mark.parametrize("version", [None, "three"], ids=["null", "text"])
def test_a_version_that_is_not_a_number_is_reported(stored: Stored, version: str | None) -> None:
    """A stored originator_version that is NULL or text is reported as a problem."""
    rowid = rows_of(stored.db, stored.other)[1][0]  # an event with more after it
    tamper(
        stored.db,
        "UPDATE stored_events SET originator_version = ? WHERE rowid = ?",
        [version, rowid],
    )
    assert problems_of(verify(stored.db, "--json")) != []


def test_verify_writes_nothing_to_a_sqlite_file_that_is_not_a_store(tmp_path: Path) -> None:
    """Verify pointed at some other SQLite database leaves its bytes as they were."""
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
        connection.commit()
    before = files(tmp_path)
    verify(other)
    assert files(tmp_path) == before


# -- every rule the writer enforces, and the hash chain (issue 10, item 15) --------------------


def _state_of(db: Path, rowid: int) -> dict[str, Any]:
    with closing(sqlite3.connect(db)) as connection:
        [(state,)] = connection.execute("SELECT state FROM stored_events WHERE rowid = ?", [rowid])
    parsed: dict[str, Any] = json.loads(event_json(state))
    return parsed


def _set_state(db: Path, rowid: int, event: dict[str, Any]) -> None:
    tamper(
        db,
        "UPDATE stored_events SET state = ? WHERE rowid = ?",
        [json.dumps(event).encode(), rowid],
    )


def rechain(db: Path, conversation: UUID) -> None:
    """Recompute a conversation's head from its stored rows, as a tamperer who knows the
    (unkeyed) chain would: what is left to catch is then every writer rule."""
    rows = rows_of(db, conversation)
    chain = genesis(conversation)
    for _, version, topic, state in rows:
        chain = link(chain, version, topic.encode(), state)
    tamper(
        db,
        "UPDATE convstore_heads SET version = ?, chain = ? WHERE originator_id = ?",
        [rows[-1][1], chain, conversation.hex],
    )


def _block_rows(s: Stored, kind: str) -> list[tuple[int, int, dict[str, Any]]]:
    """(rowid, version, event) of the demo's block events holding a block of ``kind``."""
    found = []
    for rowid, version, topic, state in rows_of(s.db, s.demo):
        event = json.loads(event_json(state))
        if topic in BLOCK_TOPICS and event["block"]["type"] == kind:
            found.append((rowid, version, event))
    return found


def test_text_that_is_not_utf8_is_listed_not_fatal(stored: Stored) -> None:
    """A TEXT column holding invalid UTF-8 is one listed problem; verify reads on past it."""
    rowid = rows_of(stored.db, stored.demo)[3][0]
    tamper(
        stored.db,
        "UPDATE stored_events SET topic = CAST(x'ff00fe' AS TEXT) WHERE rowid = ?",
        [rowid],
    )
    other = rows_of(stored.db, stored.other)[1][0]
    tamper(
        stored.db,
        "UPDATE stored_events SET originator_id = CAST(x'c328' AS TEXT) WHERE rowid = ?",
        [other],
    )
    problems = problems_of(verify(stored.db, "--json"))
    texts = {p["position"]: p["problem"] for p in problems}
    assert texts[rowid].startswith("cannot be read: the topic column is not valid UTF-8")
    assert texts[other].startswith("cannot be read: originator_id")
    assert {p["conversation"] for p in problems} >= {str(stored.other)}  # read on past both


def test_a_lost_last_event_is_reported(stored: Stored) -> None:
    """Deleting a conversation's newest event leaves its head ahead: verify says so."""
    rowid, version, _, _ = rows_of(stored.db, stored.other)[-1]
    tamper(stored.db, "DELETE FROM stored_events WHERE rowid = ?", [rowid])
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["conversation"] == str(stored.other)
    assert problem["problem"] == (
        f"the log ends at version {version - 1}, but its head records version {version}: "
        "the last event(s) are missing"
    )


def test_a_changed_text_is_reported(stored: Stored) -> None:
    """One changed character in a stored text breaks the conversation's hash chain."""
    rowid, _, event = _block_rows(stored, "text")[0]
    event["block"]["text"] = event["block"]["text"].replace("e", "a", 1)
    _set_state(stored.db, rowid, event)
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["conversation"] == str(stored.demo)
    assert "do not match the hash chain in its head" in problem["problem"]


@pytest.mark.parametrize("chain_recomputed", [False, True], ids=["as is", "chain recomputed"])
def test_a_tool_use_in_a_user_message_is_reported_where_it_is(
    stored: Stored, chain_recomputed: bool
) -> None:
    """A tool_use moved into a user message breaks the writer's role rule, reported at its row
    even when the tamperer recomputed the hash chain."""
    text_rows = _block_rows(stored, "text")
    user_starts = {  # a message's role is on its start, or (format 3) on each block
        json.loads(event_json(state))["message_id"]
        for _, _, topic, state in rows_of(stored.db, stored.demo)
        if json.loads(event_json(state)).get("role") == "user"
    }
    rowid, version, event = next(r for r in text_rows if r[2]["message_id"] in user_starts)
    event["block"] = {"type": "tool_use", "id": "sneaky", "name": "rm", "input": {}}
    _set_state(stored.db, rowid, event)
    if chain_recomputed:
        rechain(stored.db, stored.demo)
    problems = problems_of(verify(stored.db, "--json"))
    rule = [p for p in problems if p["problem"].startswith("breaks a writer rule")]
    assert rule == [
        {
            "position": rowid,
            "conversation": str(stored.demo),
            "version": version,
            "problem": (
                "breaks a writer rule: tool_use blocks belong in assistant messages, not user"
            ),
        }
    ]
    assert len(problems) == (1 if chain_recomputed else 2)


def test_a_duplicated_call_id_is_reported(stored: Stored) -> None:
    """A second tool_use with an id already recorded breaks the writer's once-only rule."""
    first, (rowid, version, event) = _block_rows(stored, "tool_use")[:2]
    event["block"]["id"] = first[2]["block"]["id"]
    _set_state(stored.db, rowid, event)
    rechain(stored.db, stored.demo)
    [problem] = problems_of(verify(stored.db, "--json"))
    assert (problem["position"], problem["version"]) == (rowid, version)
    assert problem["problem"] == (
        f"breaks a writer rule: tool_use id {first[2]['block']['id']!r} is already recorded "
        "in this conversation"
    )


def test_a_damaged_topic_is_reported_and_replay_refuses_it(stored: Stored) -> None:
    """A row whose topic no longer names its event: verify lists it, and replay (like project,
    which selects by topic and would never see it) does not quietly use it."""
    rowid, version, _, _ = rows_of(stored.db, stored.other)[2]
    tamper(
        stored.db, "UPDATE stored_events SET topic = ? WHERE rowid = ?", ["convstore:bogus", rowid]
    )
    problems = problems_of(verify(stored.db, "--json"))
    assert any(
        p["position"] == rowid and "stored topic 'convstore:bogus' disagrees" in p["problem"]
        for p in problems
    ), problems
    with open_store(stored.db) as store, pytest.raises(StoreError) as raised:
        store.replay(stored.other)
    assert f"{stored.other} v{version} is damaged: its topic 'convstore:bogus'" in str(raised.value)
    result = CliRunner().invoke(cli, ["--db", str(stored.db), "replay", str(stored.other)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: stored event")


@pytest.mark.parametrize("topic", ["convstore:bogus", "convstore:message_started"])
def test_project_and_dump_refuse_a_damaged_topic_naming_the_row(stored: Stored, topic: str) -> None:
    """``project`` (one-shot and ``--follow``) reads every row, not only those with a known
    topic: a damaged topic stops it with one error line naming the row's log position (exit 1),
    as replay refuses it, instead of a read model that silently lacks the row; ``dump`` refuses
    a topic that names no event (``load`` refuses one that names another event)."""
    rowid, version, _, _ = next(r for r in rows_of(stored.db, stored.other) if r[2] in BLOCK_TOPICS)
    tamper(stored.db, "UPDATE stored_events SET topic = ? WHERE rowid = ?", [topic, rowid])
    named = f"stored event {stored.other} v{version} (log position {rowid}) is damaged: its topic"
    commands = [["project"], ["project", "--follow", "--interval", "0.05"]]
    if topic == "convstore:bogus":
        commands.append(["dump"])
    for command in commands:
        result = CliRunner().invoke(cli, ["--db", str(stored.db), *command])
        assert result.exit_code == 1, (command, result.output)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1, (command, result.stderr)
        assert errors[0].startswith(f"error: {named} {topic!r}"), (command, errors[0])
        assert "Traceback" not in result.output
    with open_store(stored.db) as store, pytest.raises(StoreError, match="log position"):
        store.notifications(rowid - 1, 10)


def test_a_removed_head_is_reported(stored: Stored) -> None:
    """A chained conversation whose head row was deleted is damage, not an old conversation."""
    tamper(stored.db, "DELETE FROM convstore_heads WHERE originator_id = ?", [stored.demo.hex])
    [problem] = problems_of(verify(stored.db, "--json"))
    assert problem["conversation"] == str(stored.demo)
    assert "has no head, but events written after hash chains began" in problem["problem"]


def test_a_store_from_before_chains_verifies_and_starts_chaining(stored: Stored) -> None:
    """A store written before heads existed is sound, with a note; its next append starts a
    chain from that version, and a later change to those chained events is caught."""
    with closing(sqlite3.connect(stored.db)) as connection:
        connection.execute("DROP TABLE convstore_heads")  # what today's stores look like
        connection.commit()
    result = verify(stored.db)
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "note: 2 conversation(s) unchained (written before v0.2): not covered by a hash chain "
        "until their next append\n"
    )
    with open_store(stored.db) as store:
        [message] = [m.message_id for m in store.messages(stored.other) if m.status == "open"]
        store.append_block(stored.other, message, {"type": "text", "text": "three"})
        store.end_message(stored.other, message)
    again = verify(stored.db)
    assert again.exit_code == 0, again.output
    assert again.stderr.splitlines() == [
        "note: 1 conversation(s) unchained (written before v0.2): not covered by a hash chain "
        "until their next append",
        "note: 1 conversation(s) chained from a later version: their events written before "
        "v0.2 are not covered",
    ]
    rowid, _, _, _ = rows_of(stored.db, stored.other)[-2]
    event = _state_of(stored.db, rowid)
    event["block"]["text"] = "tree"
    _set_state(stored.db, rowid, event)
    changed = verify(stored.db, "--json")
    assert changed.exit_code == 1
    [problem] = json.loads(changed.stdout)
    assert problem["conversation"] == str(stored.other)
    assert "do not match the hash chain" in problem["problem"]


def test_chains_stay_whole_when_two_writers_take_turns(tmp_path: Path) -> None:
    """Two stores on one file appending to one conversation in turn keep one sound chain (each
    writer notices the other moved the head)."""
    db = tmp_path / "turns.db"
    with open_store(db) as first, open_store(db) as second:
        conversation = first.new_conversation()
        messages = [first.start_message(conversation, "assistant")]
        messages.append(second.start_message(conversation, "assistant"))
        for n in range(6):
            writer = (first, second)[n % 2]
            writer.append_block(conversation, messages[n % 2], {"type": "text", "text": str(n)})
        first.end_message(conversation, messages[0])
    result = verify(db)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok: 10 events in 1 conversation,")


def test_a_keyed_chain_resists_a_tamperer_without_the_key(
    stored: Stored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unkeyed, a tamperer who recomputes the chain hides a changed text (the documented
    limit); with CONVSTORE_CHAIN_KEY set for the writers and verify, the same tampering is
    caught."""
    rowid, _, event = _block_rows(stored, "text")[0]
    event["block"]["text"] = "nothing to see"
    _set_state(stored.db, rowid, event)
    rechain(stored.db, stored.demo)
    assert verify(stored.db).exit_code == 0  # unkeyed: recomputed, so not detected

    monkeypatch.setenv("CONVSTORE_CHAIN_KEY", "correct horse battery staple")
    db = tmp_path / "keyed.db"
    with open_store(db) as store:
        keyed = record_demo(store)
    assert verify(db).exit_code == 0, verify(db).output
    monkeypatch.delenv("CONVSTORE_CHAIN_KEY")  # verify must be given the writers' key
    [problem] = problems_of(verify(db, "--json"))
    assert problem["problem"].endswith("CONVSTORE_CHAIN_KEY differs from this one, which is unset)")
    monkeypatch.setenv("CONVSTORE_CHAIN_KEY", "correct horse battery staple")
    rowid = _block_rows(Stored(db, keyed, keyed), "text")[0][0]
    tampered = _state_of(db, rowid)
    tampered["block"]["text"] = "nothing to see"
    _set_state(db, rowid, tampered)
    rechain(db, keyed)  # without the key
    [problem] = problems_of(verify(db, "--json"))
    assert "do not match the hash chain in its head" in problem["problem"]


def test_conversations_started_or_erased_during_the_check_are_no_damage(stored: Stored) -> None:
    """verify reads the heads, then scans the log. A conversation started in between has events
    but no head in that first read, and one erased in between has a head but no events: the log
    read again explains both, so neither is reported (the erased one is noted), while the new
    one's events are still checked against its head: a text changed in it is caught."""
    with open_store(stored.db) as store:
        verifier = store_verifier(store)  # the heads as verify reads them first
        started = store.new_conversation(title="during the check")
        store.append_message(started, "user", [{"type": "text", "text": "new"}])
        store.erase(stored.other, reason="erased during the check")
        verifier.check_all(store.scan())
    assert verifier.problems == []
    assert "1 conversation(s) erased during the check: nothing of them is left to check" in (
        verifier.notes
    )
    assert str(started) in verifier.conversations

    with open_store(stored.db) as store:
        verifier = store_verifier(store)
        changed = store.new_conversation(title="changed during the check")
        store.append_message(changed, "user", [{"type": "text", "text": "as written"}])
        rowid, _, _, _ = [r for r in rows_of(stored.db, changed) if r[2] in BLOCK_TOPICS][-1]
        event = _state_of(stored.db, rowid)
        event["block"]["text"] = "as changed"
        _set_state(stored.db, rowid, event)
        verifier.check_all(store.scan())
    [problem] = verifier.problems
    assert problem.conversation == str(changed)
    assert "do not match the hash chain" in problem.problem
