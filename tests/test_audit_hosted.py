"""The audit read model and its commands over calls the provider ran (hosted) and documents
inside tool output: hosted calls are tool calls, told apart by ``hosted``, joined to their
results and errors by id; every document, a result's included, has its row.

Real SQLite files in ``tmp_path``; the round is tests/hosted.py's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from convstore import open_store
from convstore.app.projector import audit_path, catch_up, rebuild
from convstore.audit.db import AuditDatabase
from convstore.cli import cli
from tests.hosted import record_round
from tests.strategies import TINY_PDF
from tests.test_audit import assert_same_read_model


def _projected(tmp_path: Path) -> tuple[Path, Path, str]:
    """A store holding the hosted round, its read model caught up; and the conversation."""
    db = tmp_path / "store.db"
    with open_store(db) as store:
        conversation = str(record_round(store))
        path = audit_path(store, tmp_path / "audit.db")
        audit = AuditDatabase(path, store.location, store_id=store.identity)
        try:
            catch_up(store, audit, batch_size=3)
        finally:
            audit.close()
        rebuild(store, tmp_path / "rebuilt.db")
    return db, path, conversation


def _query(path: Path, sql: str) -> list[dict[str, Any]]:
    with open_store(path.parent / "store.db") as store:
        audit = AuditDatabase(path, store.location, store_id=store.identity)
        try:
            return audit.query(sql)
        finally:
            audit.close()


def test_hosted_calls_are_tool_calls_told_apart_with_their_outcomes(tmp_path: Path) -> None:
    """A hosted call answered, one that failed, one with no result, and the caller's own
    call: each a tool_calls row, ``hosted`` set on the provider's, outcomes joined by id."""
    _, path, _ = _projected(tmp_path)
    rows = _query(path, "SELECT * FROM tool_calls ORDER BY call_id")
    found = {
        r["call_id"]: (r["name"], r["hosted"], r["server"], r["outcome"], r["results"])
        for r in rows
    }
    assert found == {
        "mcptoolu_03": ("ask_question", 1, "deepwiki", "missing", 0),
        "srvtoolu_01": ("web_search", 1, None, "ok", 1),
        "srvtoolu_02": ("web_fetch", 1, None, "error", 1),
        "toolu_04": ("read_report", 0, None, "ok", 1),
    }
    search = next(r for r in rows if r["call_id"] == "srvtoolu_01")
    assert search["input"] == '{"query":"PEP 750 template strings"}'
    assert search["result_message_id"] == search["message_id"]  # in the same assistant turn


def test_block_counts_and_documents_in_results(tmp_path: Path) -> None:
    """The hosted kinds have their counters; the PDF inside the tool result has its row
    (part 1 of the result), with its hash and size; a rebuild gives the same rows."""
    _, path, _ = _projected(tmp_path)
    counts = _query(
        path,
        "SELECT sum(hosted_tool_use_blocks) AS uses, sum(hosted_tool_result_blocks) AS results, "
        "sum(tool_use_blocks) AS calls, sum(document_blocks) AS documents FROM messages",
    )
    assert counts == [{"uses": 3, "results": 2, "calls": 1, "documents": 0}]
    documents = _query(path, "SELECT * FROM documents")
    raw = base64.b64decode(TINY_PDF)
    assert len(documents) == 1
    document = documents[0]
    assert (document["part"], document["media_type"], document["name"]) == (
        1,
        "application/pdf",
        "report.pdf",
    )
    assert (document["byte_size"], document["sha256"]) == (
        len(raw),
        hashlib.sha256(raw).hexdigest(),
    )
    result = _query(path, "SELECT byte_size FROM blocks WHERE kind = 'tool_result'")
    assert result == [{"byte_size": len(b"The report:") + len(raw)}]
    assert_same_read_model(path, tmp_path / "rebuilt.db")


def test_audit_tools_filters_hosted_calls_and_finds_the_missing_one(tmp_path: Path) -> None:
    """``audit tools --status missing`` finds the hosted call with no result; ``--hosted`` and
    ``--not-hosted`` split the calls by who ran them; search reaches hosted output."""
    db, path, conversation = _projected(tmp_path)

    def run(*args: str) -> list[dict[str, Any]]:
        argv = ["--db", str(db), "--audit", str(path), "audit", *args, "--json"]
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 0, (result.stdout, result.stderr)
        parsed = json.loads(result.stdout)
        assert isinstance(parsed, list)
        return parsed

    missing = run("tools", "--status", "missing")
    assert [(r["call_id"], r["hosted"], r["server"]) for r in missing] == [
        ("mcptoolu_03", 1, "deepwiki")
    ]
    assert [r["call_id"] for r in run("tools", "--server", "deepwiki")] == ["mcptoolu_03"]
    assert run("tools", "--server", "github") == []
    assert {r["call_id"] for r in run("tools", "--hosted")} == {
        "srvtoolu_01",
        "srvtoolu_02",
        "mcptoolu_03",
    }
    assert [r["call_id"] for r in run("tools", "--not-hosted")] == ["toolu_04"]
    assert [r["call_id"] for r in run("tools", "--hosted", "--status", "error")] == ["srvtoolu_02"]
    hits = run("search", "Template Strings")
    assert {h["kind"] for h in hits} >= {"hosted_tool_result"}
    assert all(h["conversation_id"] == conversation for h in hits)
    stats = {(r["metric"], r["detail"]): r["value"] for r in run("stats")}
    assert stats[("hosted tool calls", "missing")] == 1
    assert stats[("documents", "count")] == 1
