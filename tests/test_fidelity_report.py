"""``tools/fidelity_report.py``, the numbers for issue 22's closing note, run on the history
fixtures: every fixture is read, and what it reports is what the converters read and the
store holds."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from convstore.domain.blocks import AnyToolResult, block_documents, block_images
from convstore.store.importing import BLOCK_KINDS, read_histories

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "fidelity_report.py"
FIXTURES = ROOT / "tests" / "fixtures" / "import"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_report_reads_every_fixture_and_its_counts_are_the_stores() -> None:
    """Each fixture is read (none refused) and its messages and blocks by kind are exactly
    those its converter read; the totals are the sums of the files; a path that does not
    exist is named and skipped."""
    missing = ROOT / "no-such-corpus"
    result = _run("--json", str(FIXTURES), str(missing))
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["absent"] == [str(missing)]
    by_path = {entry["path"]: entry for entry in report["files"]}
    names = sorted(p.name for p in FIXTURES.iterdir() if p.is_file())
    assert sorted(path.removeprefix("import/") for path in by_path) == names
    for name in names:
        entry = by_path[f"import/{name}"]
        assert entry["refused"] is None, (name, entry["refused"])
        histories = read_histories(entry["format"], (FIXTURES / name).read_text())
        blocks = [b for h in histories for m in h.messages for b in m.blocks]
        assert entry["conversations"] == len(histories), name
        assert entry["messages"] == sum(len(h.messages) for h in histories), name
        kinds: Counter[str] = Counter(b.type for b in blocks)
        assert entry["blocks"] == {kind: kinds[kind] for kind in BLOCK_KINDS}, name
        inside = [
            part
            for b in blocks
            if isinstance(b, AnyToolResult)
            for part in [*block_images(b), *block_documents(b)]
        ]
        assert entry["parts_in_results"] == len(inside), name
    totals = report["totals"]
    assert (totals["files"], totals["read"], totals["refused"]) == (len(names), len(names), 0)
    assert totals["messages"] == sum(e["messages"] for e in report["files"])
    for kind in BLOCK_KINDS:
        assert totals["blocks"][kind] == sum(e["blocks"][kind] for e in report["files"])
    assert totals["blocks"]["hosted_tool_use"] > 0
    replayed = [e for e in report["files"] if e["replay_error"] is None]
    for shape, count in totals["markers"].items():
        assert count == sum(e["markers"][shape] for e in replayed)


def test_the_table_names_refusals_in_one_line_each(tmp_path: Path) -> None:
    """A file no format reads is listed under Refused with its one-line reason, and the
    table's total says how many were read."""
    bad = tmp_path / "notes.txt"
    bad.write_text("not a history\n")
    good = FIXTURES / "openai-chat.json"
    result = _run(str(good), str(bad))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["file", "format", "msgs"]
    assert any(line.startswith("TOTAL (1 of 2 files read)") for line in lines)
    refused = lines[lines.index("Refused:") + 1 :]
    assert len(refused) == 1
    assert refused[0].startswith(f"  {bad}: ")
    assert "none of the importers reads it" in refused[0]


def test_help_says_what_it_does() -> None:
    result = _run("--help")
    assert result.returncode == 0
    assert "fresh temporary store" in " ".join(result.stdout.split())
