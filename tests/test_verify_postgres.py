"""``convstore verify`` on PostgreSQL: rows tampered with through psycopg are found.

The chain heads live beside the events (``convstore_heads`` in the store's schema) and are
written in the same transaction as each insert.
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

from convstore import open_store
from convstore.app.demo import record_demo
from convstore.cli import cli
from convstore.domain.errors import StoreError
from convstore.infrastructure.common.mapper import event_json

psycopg = pytest.importorskip("psycopg")
sql = psycopg.sql


def verify(url: str) -> Result:
    return CliRunner().invoke(cli, ["--db", url, "verify", "--json"])


def run(url: str, statement: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Execute one statement on the store's schema with plain psycopg."""
    schema = parse_qs(urlsplit(url).query)["schema"][0]
    with psycopg.connect(url.split("?", maxsplit=1)[0], autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def recorded(postgres_url: str) -> tuple[str, UUID]:
    """A PostgreSQL store holding the demo conversation."""
    with open_store(postgres_url) as store:
        conversation = record_demo(store)
        # Readers see only settled rows: a transaction still running anywhere on the server
        # (another test's, or the server's own) holds them back for a while; a check that
        # deletes or edits a row must start from a log the scan reaches whole.
        written = store.last_event(conversation)
        assert written is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = [e for _, e in store.notifications(0, 10_000) if e.originator_id == conversation]
            if seen and seen[-1].originator_version == written.originator_version:
                break
            time.sleep(0.1)
    return postgres_url, conversation


def test_a_sound_postgres_store_verifies(recorded: tuple[str, UUID]) -> None:
    """Untouched, every conversation matches its head: exit 0, no problems."""
    url, _ = recorded
    result = verify(url)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_a_transaction_open_elsewhere_is_no_damage_but_a_lost_event_still_is(
    recorded: tuple[str, UUID],
) -> None:
    """A transaction left open elsewhere in the cluster holds the log's readers back (they
    keep to settled rows), so the scan misses events committed after it began while their
    heads already show them. verify reads those conversations by id before it calls anything
    lost: no problem, a note. A last event that really went is still reported."""
    url, conversation = recorded
    with psycopg.connect(url.split("?", maxsplit=1)[0], autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_current_xact_id()")  # holds the cluster's horizon
        with open_store(url) as store:
            later = store.new_conversation(title="after the horizon")
            store.append_message(later, "user", [{"type": "text", "text": "held back"}])
            store.append_message(conversation, "user", [{"type": "text", "text": "more"}])
        result = verify(url)
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == []
        assert "2 conversation(s) had events the scan did not reach" in result.stderr
        run(
            url,
            "DELETE FROM convstore_events WHERE originator_id = %s AND originator_version = "
            "(SELECT max(originator_version) FROM convstore_events WHERE originator_id = %s)",
            [later, later],
        )
        result = verify(url)
        holder.execute("ROLLBACK")
    assert result.exit_code == 1
    [problem] = json.loads(result.stdout)
    assert problem["conversation"] == str(later)


def test_a_changed_text_is_found_on_postgres(recorded: tuple[str, UUID]) -> None:
    """A text edited in place with psycopg breaks the conversation's hash chain."""
    url, conversation = recorded
    [(version, state)] = run(
        url,
        "SELECT originator_version, state FROM convstore_events WHERE originator_id = %s "
        "AND topic IN ('convstore:block_appended', 'convstore:block_recorded') "
        "AND state::text LIKE %s "
        "ORDER BY originator_version LIMIT 1",
        [conversation, "%" + b'"type":"text"'.hex() + "%"],
    )
    event = json.loads(event_json(bytes(state)))
    event["block"]["text"] += "!"
    run(
        url,
        "UPDATE convstore_events SET state = %s WHERE originator_id = %s "
        "AND originator_version = %s",
        [json.dumps(event).encode(), conversation, version],
    )
    result = verify(url)
    assert result.exit_code == 1, result.output
    [problem] = json.loads(result.stdout)
    assert problem["conversation"] == str(conversation)
    assert "do not match the hash chain in its head" in problem["problem"]


def test_a_lost_last_event_is_found_on_postgres(recorded: tuple[str, UUID]) -> None:
    """Deleting the newest event leaves the head ahead of the log; verify reports it."""
    url, conversation = recorded
    [(last,)] = run(
        url,
        "SELECT max(originator_version) FROM convstore_events WHERE originator_id = %s",
        [conversation],
    )
    run(
        url,
        "DELETE FROM convstore_events WHERE originator_id = %s AND originator_version = %s",
        [conversation, last],
    )
    result = verify(url)
    assert result.exit_code == 1, result.output
    [problem] = json.loads(result.stdout)
    assert problem["problem"] == (
        f"the log ends at version {last - 1}, but its head records version {last}: "
        "the last event(s) are missing"
    )


def test_a_damaged_topic_stops_replay_on_postgres(recorded: tuple[str, UUID]) -> None:
    """Replay refuses a row whose topic disagrees with its event, naming it, and verify lists it."""
    url, conversation = recorded
    run(
        url,
        "UPDATE convstore_events SET topic = 'convstore:bogus' WHERE originator_id = %s "
        "AND originator_version = 3",
        [conversation],
    )
    with open_store(url) as store, pytest.raises(StoreError, match=" v3 is damaged: its topic"):
        store.replay(conversation)
    result = verify(url)
    assert result.exit_code == 1
    assert any("disagrees with the event" in p["problem"] for p in json.loads(result.stdout))
