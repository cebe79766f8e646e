"""What ``convstore import`` says about input it cannot record: the one line must point at
what is wrong, where the user can find it."""

from __future__ import annotations

from pathlib import Path

from tests.cli.support import assert_refused, dump, invoke, ok


def test_a_truncated_json_body_without_format_is_called_malformed(tmp_path: Path) -> None:
    """A request body cut short, imported without --format: before, the line only said no
    importer reads it (and to try --format), hiding the JSON error that is the whole story."""
    db = tmp_path / "s.db"
    ok(db, "new")
    before = dump(db)
    body = tmp_path / "body.json"
    body.write_text('{"messages": [\n  {"role": "user", "content": "hi"},\n')
    line = assert_refused(
        invoke(db, "import", str(body)), "cannot tell the input's format: it is neither JSON ("
    )
    assert "line 3 column 1" in line
    assert dump(db) == before


def test_json_lines_that_no_importer_reads_are_not_called_malformed(tmp_path: Path) -> None:
    """JSON lines are not one JSON document, but they are not malformed either: no JSON error
    is named for them."""
    db = tmp_path / "s.db"
    lines = tmp_path / "log.jsonl"
    lines.write_text('{"event": "start"}\n{"event": "stop"}\n')
    line = assert_refused(invoke(db, "import", str(lines)), "none of the importers reads it")
    assert "JSON" not in line.split("(")[0]
