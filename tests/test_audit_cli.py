"""The audit commands end to end: project, rebuild, and audit tools/search/stats/sql.

The commands run in-process through click's ``CliRunner`` (stdout and stderr apart) on real
SQLite files in ``tmp_path``. ``audit sql`` is also driven directly through
:func:`read_only_query`, to show that nothing but a read gets through, whatever the statement.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from convstore import open_store
from convstore.app.demo import record_demo
from convstore.app.projector import rebuild
from convstore.cli import cli
from convstore.cli.audit import audit as audit_group
from convstore.domain.errors import InvalidInput, NoStore
from convstore.infrastructure.common.readonly import read_only_query
from tests.conftest import one_error_line
from tests.test_audit import assert_same_read_model, files_under, orphan_result


class Demo:
    """A store with two demo conversations (one with an orphan tool result), and its paths."""

    def __init__(self, root: Path) -> None:
        self.db = root / "store.db"
        self.audit = root / "audit.db"
        with open_store(self.db) as store:
            self.first = record_demo(store)
            orphan_result(store, self.first)
            self.second = record_demo(store)
            self.position = store.log_position()

    def run(self, *args: str) -> Result:
        """Run the CLI on this store and read model."""
        argv = ["--db", str(self.db), "--audit", str(self.audit), *args]
        return CliRunner().invoke(cli, argv)

    def ok(self, *args: str) -> str:
        """Run the CLI, insist it succeeded, and return its stdout."""
        result = self.run(*args)
        assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
        assert result.exception is None
        return result.stdout

    def json(self, *args: str) -> list[dict[str, Any]]:
        """Run a command with --json and parse what it printed."""
        parsed = json.loads(self.ok(*args, "--json"))
        assert isinstance(parsed, list)
        return parsed

    def csv(self, *args: str) -> list[dict[str, str]]:
        """Run a command with --csv and parse what it printed."""
        return list(csv.DictReader(io.StringIO(self.ok(*args, "--csv"))))


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    """The demo store, its read model not built yet."""
    return Demo(tmp_path)


@pytest.fixture
def projected(demo: Demo) -> Demo:
    """The demo store with its read model caught up."""
    demo.ok("project")
    return demo


def refused(result: Result) -> None:
    """Exit 2, nothing on stdout, one ``error: …`` line on stderr."""
    one_error_line(result.exit_code, result.stdout, result.stderr)


# -- 5. audit sql reads and only reads ---------------------------------------------------------

RUNAWAY = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT count(*) FROM n"


def writes(root: Path) -> list[str]:
    """Statements that would change the read model or touch another file, each to be refused."""
    return [
        "INSERT INTO _meta (key, value) VALUES ('x', 'y')",
        "UPDATE tool_calls SET outcome = 'ok'",
        "DELETE FROM tool_calls",
        "DROP TABLE tool_calls",
        "CREATE TABLE t (x)",
        "CREATE TEMP TABLE t (x)",
        f"ATTACH DATABASE '{root / 'attached.db'}' AS other",
        f"VACUUM INTO '{root / 'copy.db'}'",
        "SELECT load_extension('/usr/lib/x86_64-linux-gnu/libsqlite3.so.0')",
        "PRAGMA writable_schema = 1",
        "PRAGMA query_only = 0",
        "PRAGMA journal_mode = wal",
        "REPLACE INTO _tracking VALUES ('audit', 0)",
        "SELECT 1; DELETE FROM tool_calls",
    ]


def test_read_only_query_reads_with_named_parameters(projected: Demo) -> None:
    """A SELECT returns its columns and rows, with :name parameters bound."""
    columns, rows = read_only_query(
        projected.audit,
        "SELECT call_id, outcome FROM tool_calls WHERE name = :tool AND conversation_id = :c",
        {"tool": "run_tests", "c": str(projected.first)},
    )
    assert columns == ["call_id", "outcome"]
    assert rows == [("call_3", "missing")]
    columns, rows = read_only_query(projected.audit, "PRAGMA table_info(images)")
    assert "sha256" in [row[1] for row in rows]


def test_read_only_query_refuses_every_write(projected: Demo, tmp_path: Path) -> None:
    """Writes, ATTACH, VACUUM INTO, extensions and pragmas that write raise and change nothing."""
    before, files = projected.audit.read_bytes(), files_under(tmp_path)
    for statement in writes(tmp_path):
        with pytest.raises(InvalidInput, match=r"^audit sql: "):
            read_only_query(projected.audit, statement)
        assert projected.audit.read_bytes() == before, statement
        assert files_under(tmp_path) == files, statement


def test_read_only_query_on_a_missing_file_creates_nothing(tmp_path: Path) -> None:
    """Without a read model the query fails as NoStore and leaves no file behind."""
    with pytest.raises(NoStore):
        read_only_query(tmp_path / "absent.db", "SELECT 1")
    assert files_under(tmp_path) == set()


def test_read_only_query_stops_a_runaway_query(projected: Demo) -> None:
    """A recursive CTE with no end is stopped at the time limit."""
    with pytest.raises(InvalidInput, match="time limit"):
        read_only_query(projected.audit, RUNAWAY, time_limit=0.2)


def test_audit_sql_selects_with_params_in_every_format(projected: Demo) -> None:
    """`audit sql` with -p binds parameters; table, JSON and CSV show the same rows."""
    query = "SELECT call_id, name, outcome FROM tool_calls WHERE name = :tool ORDER BY 1"
    args = ("audit", "sql", query, "-p", "tool", "git_diff")
    table = projected.ok(*args).splitlines()
    assert table[0].split() == ["call_id", "name", "outcome"]
    assert set(table[1]) <= {"-", " "}
    assert [line.split() for line in table[2:]] == [["call_2", "git_diff", "error"]] * 2
    expected = [{"call_id": "call_2", "name": "git_diff", "outcome": "error"}] * 2
    assert projected.json(*args) == expected
    assert projected.csv(*args) == expected


def test_audit_sql_refuses_every_write(projected: Demo, tmp_path: Path) -> None:
    """Each write is exit 2 with one error line; the file and the directory stay as they were."""
    before, files = projected.audit.read_bytes(), files_under(tmp_path)
    for statement in writes(tmp_path):
        refused(projected.run("audit", "sql", statement))
        assert projected.audit.read_bytes() == before, statement
        assert files_under(tmp_path) == files, statement


def test_audit_sql_stops_a_runaway_query(projected: Demo) -> None:
    """--time-limit stops a recursive CTE with no end, as one error line."""
    result = projected.run("audit", "sql", RUNAWAY, "--time-limit", "0.2")
    refused(result)
    assert "time limit" in result.stderr


def test_audit_sql_can_query_the_full_text_index(projected: Demo) -> None:
    """blocks_fts, which `audit sql --help` lists, can be queried with MATCH."""
    rows = projected.json(
        "audit", "sql", "SELECT rowid FROM blocks_fts WHERE blocks_fts MATCH 'KeyError'"
    )
    assert len(rows) == 2


# -- 6. project, rebuild, tools, search, stats -------------------------------------------------

PROJECT_LINE = re.compile(r"audit: applied (\d+) events; at log position (\d+) \((.+)\)")
REBUILD_LINE = re.compile(
    r"rebuilt audit: (\d+) events in (\d+\.\d\d) s \(([\d,]+) events/s\) into (.+)"
)


def test_project_prints_what_it_applied(demo: Demo) -> None:
    """`project` prints one line: events applied, the log position and the file."""
    first = demo.run("project")
    assert first.exit_code == 0
    assert first.stderr == ""
    match = PROJECT_LINE.fullmatch(first.stdout.strip())
    assert match is not None, first.stdout
    assert match.groups() == (str(demo.position), str(demo.position), str(demo.audit))
    again = PROJECT_LINE.fullmatch(demo.ok("project").strip())
    assert again is not None
    assert again.groups()[:2] == ("0", str(demo.position))


def test_project_defaults_to_a_file_beside_the_store(demo: Demo) -> None:
    """Without --audit, `project` writes NAME.audit.db beside the store."""
    result = CliRunner().invoke(cli, ["--db", str(demo.db), "project"])
    assert result.exit_code == 0
    beside = demo.db.with_name("store.audit.db")
    assert str(beside.resolve()) in result.stdout
    assert beside.exists()


def test_rebuild_prints_one_summary_line(projected: Demo, tmp_path: Path) -> None:
    """`rebuild` off a terminal prints one line with events, seconds and events/s."""
    result = projected.run("rebuild", "--projection", "audit")
    assert result.exit_code == 0
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    match = REBUILD_LINE.fullmatch(lines[0])
    assert match is not None, lines[0]
    assert int(match[1]) == projected.position
    assert match[4] == str(projected.audit)
    assert not [p for p in tmp_path.iterdir() if ".rebuild-" in p.name]
    with open_store(projected.db) as store:
        rebuild(store, tmp_path / "again.db")
    assert_same_read_model(projected.audit, tmp_path / "again.db")


def test_audit_tools_filters(projected: Demo) -> None:
    """--status, --name and --conversation each narrow the list of tool calls."""
    every = projected.json("audit", "tools")
    assert len(every) == 9
    assert {row["call_id"] for row in every} == {
        "call_1",
        "call_2",
        "call_3",
        "call_4",
        "call_ghost",
    }
    missing = projected.json("audit", "tools", "--status", "missing")
    assert [(r["call_id"], r["name"]) for r in missing] == [("call_3", "run_tests")] * 2
    errors = projected.json("audit", "tools", "--status", "error", "--name", "git_diff")
    assert [r["call_id"] for r in errors] == ["call_2", "call_2"]
    assert projected.json("audit", "tools", "--status", "error", "--name", "run_tests") == []
    mine = projected.json("audit", "tools", "--conversation", str(projected.first))
    assert {r["conversation_id"] for r in mine} == {str(projected.first)}
    assert [r["call_id"] for r in mine] == ["call_1", "call_2", "call_3", "call_4", "call_ghost"]
    ghost = mine[-1]
    assert (ghost["name"], ghost["outcome"], ghost["called_at"]) == ("unknown", "ok", None)
    limited = projected.json("audit", "tools", "--limit", "2")
    assert len(limited) == 2


def test_audit_tools_table_and_csv(projected: Demo) -> None:
    """The default table and --csv list the same calls under the same columns."""
    args = ("audit", "tools", "--conversation", str(projected.second))
    result = projected.run(*args)
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["conversation_id", "call_id", "name", "outcome"]
    assert len(lines) == 2 + 4
    assert result.stderr.strip() == "(4 rows)"
    rows = projected.csv(*args)
    assert [(r["call_id"], r["outcome"]) for r in rows] == [
        ("call_1", "ok"),
        ("call_2", "error"),
        ("call_3", "missing"),
        ("call_4", "ok"),
    ]
    assert rows[0]["input"] == '{"path":"ci.log"}'
    assert rows[2]["seconds_to_result"] == ""


def test_audit_search_finds_tool_output_and_reasoning(projected: Demo) -> None:
    """Search finds words in tool output and in reasoning, marking the hit."""
    hits = projected.json("audit", "search", "KeyError")
    assert {(h["kind"], h["tool_name"], h["role"]) for h in hits} == {
        ("tool_result", "read_file", "user")
    }
    assert len(hits) == 2
    assert all("[KeyError]" in h["snippet"] for h in hits)
    reasoning = projected.json("audit", "search", "cut off")
    assert {h["kind"] for h in reasoning} == {"reasoning"}
    assert len(projected.json("audit", "search", "access_token", "--limit", "1")) == 1
    table = projected.ok("audit", "search", "unknown revision")
    assert "git_diff" in table


FTS_SYNTAX = ["token*", '"access_token', 'say "hi', 'a"b"c', "NOT", "OR", "NEAR(", "a:b"]
"""Search strings that are FTS5 query syntax, each with at least one word in it."""


def test_audit_search_takes_fts_syntax_characters_literally(tmp_path: Path) -> None:
    """A search string with FTS syntax characters is searched for, not parsed as a query: the
    block holding it is found (and one of only punctuation finds nothing, without an error)."""
    demo = Demo(tmp_path)
    with open_store(demo.db) as store:
        conv = store.new_conversation()
        for text in FTS_SYNTAX:
            store.append_message(conv, "user", [{"type": "text", "text": f"needle {text} hay"}])
    for text in FTS_SYNTAX:
        hits = demo.json("audit", "search", text)
        found = {h["snippet"].replace("[", "").replace("]", "") for h in hits}
        assert f"needle {text} hay" in found, (text, found)
    for text in ("*", "(", "^"):
        assert demo.json("audit", "search", text) == []


@pytest.mark.parametrize("text", ['"', '""'])
def test_audit_search_of_only_quotes_finds_nothing(projected: Demo, text: str) -> None:
    """A search for nothing but double quotes returns no rows rather than an error."""
    assert projected.json("audit", "search", text) == []


def test_audit_search_raw_takes_an_fts_query(projected: Demo) -> None:
    """--raw passes FTS5 syntax through; a malformed one is a one-line input error."""
    hits = projected.json("audit", "search", "--raw", "tok* NOT login")
    assert {h["kind"] for h in hits} >= {"tool_use", "tool_result"}
    refused(projected.run("audit", "search", "--raw", 'NEAR("x'))


def test_audit_stats_in_every_format(projected: Demo) -> None:
    """Stats count conversations, outcomes, images and the position, as table, JSON and CSV."""
    rows = projected.json("audit", "stats")
    stats = {(r["metric"], r["detail"]): r["value"] for r in rows}
    assert stats[("conversations", "")] == 2
    assert stats[("tool calls", "ok")] == 5
    assert stats[("tool calls", "error")] == 2
    assert stats[("tool calls", "missing")] == 2
    assert stats[("tool errors", "git_diff")] == 2
    assert stats[("images", "count")] == 4
    assert stats[("read model", "log position")] == projected.position
    assert stats[("messages", "assistant open")] == 2  # the killed rounds
    as_csv = projected.csv("audit", "stats")
    assert [(r["metric"], r["detail"], r["value"]) for r in as_csv] == [
        (r["metric"], r["detail"], str(r["value"])) for r in rows
    ]
    table = projected.ok("audit", "stats").splitlines()
    assert table[0].split() == ["metric", "detail", "value"]
    assert len(table) == 2 + len(rows)


def test_audit_catches_up_unless_stale(projected: Demo) -> None:
    """Queries catch up first; --stale shows the read model as it was."""
    with open_store(projected.db) as store:
        record_demo(store)
        now = store.log_position()

    def position(*flags: str) -> Any:
        rows = projected.json("audit", *flags, "stats")
        return {(r["metric"], r["detail"]): r["value"] for r in rows}[
            ("read model", "log position")
        ]

    assert position("--stale") == projected.position
    assert position() == now
    assert position("--stale") == now


@pytest.mark.parametrize(
    "args",
    [("tools",), ("stats",), ("search", "token"), ("sql", "SELECT 1")],
)
def test_json_and_csv_together_are_a_usage_error(projected: Demo, args: tuple[str, ...]) -> None:
    """--json with --csv is exit 2 with one error line."""
    refused(projected.run("audit", *args, "--json", "--csv"))


def _help_commands() -> Iterator[list[str]]:
    yield ["project"]
    yield ["rebuild"]
    yield ["audit"]
    for name in audit_group.commands:
        yield ["audit", name]


@pytest.mark.parametrize("command", list(_help_commands()), ids=" ".join)
def test_help_has_an_example(command: list[str], tmp_path: Path) -> None:
    """--help works for each audit command, shows an example and touches no file."""
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.stderr
    assert "Example" in result.stdout
    assert files_under(tmp_path) == set()


@pytest.mark.parametrize(
    "args",
    [
        ("project",),
        ("rebuild",),
        ("audit", "tools"),
        ("audit", "--stale", "tools"),
        ("audit", "search", "token"),
        ("audit", "stats"),
        ("audit", "sql", "SELECT 1"),
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("with_audit", [True, False], ids=["--audit", "default-audit"])
def test_a_missing_store_is_exit_2_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...], with_audit: bool
) -> None:
    """Audit commands on a store that does not exist fail with one line and leave no file."""
    argv = ["--db", str(tmp_path / "missing.db")]
    if with_audit:
        argv += ["--audit", str(tmp_path / "missing.audit.db")]
    result = CliRunner().invoke(cli, [*argv, *args])
    refused(result)
    assert "no store at" in result.stderr
    assert list(tmp_path.iterdir()) == []
