"""Metadata and listing end to end on SQLite files: the CLI, the audit read model, the index's
upgrade and dump/load paths."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from uuid import UUID

from click.testing import CliRunner, Result

from convstore import open_store
from convstore.app.projector import audit_path, catch_up, open_audit
from convstore.cli import cli

TEXT = {"type": "text", "text": "hello"}


def invoke(db: Path, *args: str, stdin: str | None = None) -> Result:
    """Run the CLI in-process against ``db``."""
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=stdin)


def ok(db: Path, *args: str, stdin: str | None = None) -> str:
    """Run the CLI, insist it succeeded, return stdout."""
    result = invoke(db, *args, stdin=stdin)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def refused(db: Path, *args: str, fragment: str) -> None:
    """Exit 2 with one error line naming ``fragment``."""
    result = invoke(db, *args)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ")
    assert fragment in result.stderr


def test_cli_label_rename_meta_list_and_show(tmp_path: Path) -> None:
    """label, rename, --meta on append/end, list filters and show work through the CLI."""
    db = tmp_path / "s.db"
    conv = ok(db, "new", "--title", "first").strip()
    other = ok(db, "new", "--title", "second").strip()
    ok(db, "label", conv, "team=search", "env=prod")
    ok(db, "label", conv, "--remove", "env")
    ok(db, "rename", conv, "parser work")
    meta = json.dumps({"model": "gpt-4.1", "usage": {"input_tokens": 12, "output_tokens": 3}})
    ok(db, "append", conv, "--role", "user", "--meta", meta, stdin=json.dumps([TEXT]))
    msg = ok(db, "append", conv, "--role", "assistant", "--open", stdin=json.dumps([TEXT]))
    ok(db, "end", conv, msg.strip(), "--meta", '{"stop_reason": "end_turn", "latency_ms": 840}')

    page = json.loads(ok(db, "list", "--json", "--limit", "1"))
    assert [c["id"] for c in page["conversations"]] == [conv]
    assert page["conversations"][0]["labels"] == {"team": "search"}
    assert page["conversations"][0]["title"] == "parser work"
    rest = json.loads(ok(db, "list", "--json", "--after", page["next"]))
    assert [c["id"] for c in rest["conversations"]] == [other]
    assert rest["next"] is None
    labelled = json.loads(ok(db, "list", "--json", "--label", "team=search"))
    assert [c["id"] for c in labelled["conversations"]] == [conv]
    assert (
        json.loads(ok(db, "list", "--json", "--title", "SECOND"))["conversations"][0]["id"] == other
    )
    later = json.loads(ok(db, "list", "--json", "--started-after", "2999-01-01"))
    assert later == {"conversations": [], "next": None}
    plain = ok(db, "list")
    assert plain.splitlines()[0].startswith(conv)
    assert "[team=search]" in plain

    shown = ok(db, "show", conv)
    assert shown.startswith("parser work · labels: team=search")
    assert "gpt-4.1 · 12 input / 3 output tokens" in shown
    assert "840 ms · stop: end_turn" in shown
    logged = [json.loads(line) for line in ok(db, "log", conv).splitlines()]
    events = [e["type"] for e in logged]
    # Metadata is its own event, or (a whole message's, format 3) on its opening block.
    recorded = [e for e in logged if e["type"] == "message_meta_recorded" or e.get("meta")]
    assert len(recorded) == 2
    assert {"labels_set", "labels_removed", "conversation_renamed"} <= set(events)


def test_cli_refuses_bad_labels_meta_and_cursors(tmp_path: Path) -> None:
    """Bad KEY=VALUE, keys, --meta JSON, cursors and dates exit 2 and write nothing."""
    db = tmp_path / "s.db"
    conv = ok(db, "new").strip()
    refused(db, "label", conv, fragment="KEY=VALUE labels")
    refused(db, "label", conv, "novalue", fragment="is not KEY=VALUE")
    refused(db, "label", conv, "bad key=x", fragment="label key")
    refused(db, "label", conv, "a=1", "--remove", "a", fragment="set and removed")
    refused(db, "append", conv, "--role", "user", "--meta", "[1]", fragment="JSON object")
    refused(db, "append", conv, "--role", "user", "--meta", "{", fragment="not JSON")
    refused(db, "list", "--after", "nope", fragment="cursor")
    # A stamp past the index's 64-bit column was an OverflowError (exit 1, a 500 in `serve`).
    refused(db, "list", "--after", f"{2**63}.{UUID(conv).hex}", fragment="cursor")
    refused(db, "list", "--after", f"-{2**63 + 1}.{UUID(conv).hex}", fragment="cursor")
    assert ok(db, "list", "--after", f"{2**63 - 1}.{UUID(conv).hex}", "--json")
    refused(db, "list", "--active-after", "yesterday", fragment="ISO 8601")
    assert [json.loads(line)["type"] for line in ok(db, "log", conv).splitlines()] == [
        "conversation_started"
    ]


def test_audit_has_labels_and_message_meta(tmp_path: Path) -> None:
    """The audit read model keeps current labels in a table and metadata in message columns."""
    with open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation(title="t")
        store.set_labels(conv, {"team": "a", "env": "prod"})
        store.remove_labels(conv, ["env"])
        store.rename(conv, "renamed")
        msg = store.append_message(
            conv, "assistant", [TEXT], meta={"model": "m", "extra": {"a": 1}}
        )
        store.append_message(conv, "user", [TEXT])
        audit = open_audit(store, audit_path(store))
        catch_up(store, audit)
        store.end_message(conv, store.append_message(conv, "user", [TEXT], leave_open=True))
        with closing(audit):
            assert audit.query("SELECT key, value FROM labels") == [{"key": "team", "value": "a"}]
            assert audit.query("SELECT title FROM conversations") == [{"title": "renamed"}]
            rows = audit.query(
                "SELECT id, model, output_tokens, meta_extra FROM messages WHERE model IS NOT NULL"
            )
            assert rows == [
                {"id": str(msg), "model": "m", "output_tokens": None, "meta_extra": '{"a":1}'}
            ]


def test_store_made_before_the_index_gets_it_on_open(tmp_path: Path) -> None:
    """Dropping the listing tables (an older store) and reopening rebuilds them exactly."""
    path = tmp_path / "s.db"
    with open_store(path) as store:
        conv = store.new_conversation(title="kept")
        store.set_labels(conv, {"k": "v"})
        store.append_message(conv, "user", [TEXT])
        before = store.conversations()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DROP TABLE convstore_listing")
        conn.execute("DROP TABLE convstore_labels")
        conn.commit()
    with open_store(path) as store:
        assert store.conversations() == before
        assert store.list_conversations(labels={"k": "v"}).conversations == before


def test_dump_and_load_keep_the_listing(tmp_path: Path) -> None:
    """A loaded dump lists exactly as its source: titles, labels, times, activity, counts."""
    with open_store(tmp_path / "a.db") as source:
        first = source.new_conversation(title="one")
        source.set_labels(first, {"team": "x"})
        second = source.new_conversation()
        source.append_message(second, "user", [TEXT])
        source.rename(second, "two")
        with open_store(tmp_path / "b.db") as target:
            target.load(source.dump())
            assert target.conversations() == source.conversations()
            assert target.list_conversations() == source.list_conversations()
            assert [c.id for c in target.list_conversations().conversations] == [second, first]
    assert isinstance(first, UUID)


def test_cli_rebuild_listing(tmp_path: Path) -> None:
    """`rebuild --projection listing` refills the index and says how many it lists."""
    db = tmp_path / "s.db"
    ok(db, "new")
    ok(db, "new")
    assert ok(db, "rebuild", "--projection", "listing").startswith(
        "rebuilt listing: 2 conversations"
    )


def test_async_twins_label_rename_meta_and_page(tmp_path: Path) -> None:
    """The AsyncStore's twins record and list exactly as the sync store does."""
    import asyncio  # noqa: PLC0415

    from convstore import open_async_store  # noqa: PLC0415

    async def scenario() -> None:
        async with await open_async_store(tmp_path / "a.db") as store:
            conv = await store.new_conversation()
            await store.rename(conv, "async")
            await store.set_labels(conv, {"k": "v", "gone": "x"})
            await store.remove_labels(conv, ["gone"])
            msg = await store.append_message(conv, "user", [TEXT], leave_open=True)
            await store.end_message(conv, msg, meta={"model": "m"})
            page = await store.list_conversations(labels={"k": "v"})
            assert [(c.title, c.labels) for c in page.conversations] == [("async", {"k": "v"})]
            assert await store.conversations(title="ASY") == page.conversations
            assert await store.rebuild_listing() == 1
            [message] = await store.messages(conv)
            assert message.meta is not None
            assert message.meta.model == "m"

    asyncio.run(scenario())
