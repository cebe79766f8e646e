"""How much of each imported history convstore keeps, and how much a seeing model is shown.

For the closing note of issue 22 (fidelity). Every file given (a directory stands for every
file under it; the default is ``tests/fixtures/import``, the history fixtures) is read with
format detection (``convstore.store.importing.detect_format`` / ``read_histories``) and
imported into a fresh temporary SQLite store of its own. For each file the report gives its
detected format, the messages and the blocks by kind the store then holds (the kinds are the
``Block`` union's, in its order), and how many markers its replay with ``vision=True``
carries in each shape: an image or document that stands as "[Image not shown: …]" or
"[Document not read: …]" rather than being sent natively (inside tool results too). Then the
totals, then each file that was refused, with its one-line reason. A path that does not
exist is named and skipped.

    .venv/bin/python tools/fidelity_report.py tests/fixtures/import /work/shared/corpus
    .venv/bin/python tools/fidelity_report.py --json /work/shared/corpus | jq .totals

A replay that fails is reported, in one line, for that file, and its markers are left out
of the totals.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import get_args

from convstore import open_store
from convstore.domain.blocks import (
    AnyToolResult,
    DocumentBlock,
    ImageBlock,
    block_documents,
    block_images,
)
from convstore.domain.errors import ConvstoreError
from convstore.engine.plan import Shape
from convstore.projections.prose import document_marker, image_marker
from convstore.store.importing import BLOCK_KINDS, detect_format, read_histories

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = (ROOT / "tests" / "fixtures" / "import",)
SHAPES: tuple[Shape, ...] = get_args(Shape)


def _marker_head(marker: str) -> str:
    return marker.split(":", 1)[0] + ":"


MARKERS = (
    _marker_head(image_marker(ImageBlock(url="https://example.com/a.png"), "-")),
    _marker_head(document_marker(DocumentBlock(url="https://example.com/a.pdf"), "-")),
)
"""How a marker for an image or a document that was not sent begins, taken from the one
module that words them (``convstore.projections.prose``)."""


@dataclass
class FileReport:
    """What one file gave: its format, what the store holds, its replay's markers; or why it
    was refused."""

    path: str
    format: str | None = None
    conversations: int = 0
    messages: int = 0
    blocks: dict[str, int] = field(default_factory=dict)
    parts_in_results: int = 0
    """Images and documents inside tool results (parts of a block, not blocks)."""
    markers: dict[str, int] = field(default_factory=dict)
    replay_error: str | None = None
    refused: str | None = None


def files(paths: Iterable[Path], absent: list[str]) -> Iterator[Path]:
    """Every file of ``paths`` (directories walked, in name order); missing paths go to
    ``absent``."""
    for path in paths:
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.name != "SOURCES.md")
        elif path.is_file():
            yield path
        else:
            absent.append(str(path))


def _count_markers(request: object) -> int:
    text = json.dumps(request, ensure_ascii=False)
    return sum(text.count(head) for head in MARKERS)


def report_file(path: Path, shown: str | None = None) -> FileReport:
    """Import ``path`` into a fresh temporary store and count what it holds and shows."""
    report = FileReport(path=shown or str(path))
    try:
        text = path.read_text(encoding="utf-8")
        fmt = detect_format(text)
        histories = read_histories(fmt, text)
    except UnicodeDecodeError:
        report.refused = "not UTF-8 text"
        return report
    except ConvstoreError as exc:
        report.refused = str(exc)
        return report
    report.format = fmt
    with tempfile.TemporaryDirectory() as folder, open_store(Path(folder) / "s.db") as store:
        try:
            store.import_histories(histories)
        except ConvstoreError as exc:
            report.refused = str(exc)
            return report
        kinds: Counter[str] = Counter()
        markers: Counter[str] = Counter()
        for conversation in store.conversations():
            report.conversations += 1
            for message in store.messages(conversation.id):
                report.messages += 1
                for stored in message.blocks:
                    kinds[stored.block.type] += 1
                    if isinstance(stored.block, AnyToolResult):
                        inside = block_images(stored.block) + block_documents(stored.block)
                        report.parts_in_results += len(inside)
            for shape in SHAPES:
                try:
                    request = store.replay(conversation.id, vision=True, shape=shape)
                except (AssertionError, ConvstoreError) as exc:
                    report.replay_error = str(exc).splitlines()[0][:120]
                    continue
                markers[shape] += _count_markers(request)
        report.blocks = {kind: kinds[kind] for kind in BLOCK_KINDS}
        if report.replay_error is None:
            report.markers = {shape: markers[shape] for shape in SHAPES}
    return report


def totals(reports: list[FileReport]) -> dict[str, object]:
    """The sums over the files that were read (markers over those that replayed)."""
    read = [r for r in reports if r.refused is None]
    blocks: Counter[str] = Counter()
    markers: Counter[str] = Counter()
    for report in read:
        blocks.update(report.blocks)
        markers.update(report.markers)
    return {
        "files": len(reports),
        "read": len(read),
        "refused": len(reports) - len(read),
        "replay_failed": sum(1 for r in read if r.replay_error is not None),
        "conversations": sum(r.conversations for r in read),
        "messages": sum(r.messages for r in read),
        "blocks": {kind: blocks[kind] for kind in BLOCK_KINDS},
        "parts_in_results": sum(r.parts_in_results for r in read),
        "markers": {shape: markers[shape] for shape in SHAPES},
    }


def _short(kind: str) -> str:
    return kind.replace("hosted_tool_", "hosted_").replace("tool_", "")


def render(reports: list[FileReport], absent: list[str]) -> str:
    """The report as a table for people."""
    kinds = map(_short, BLOCK_KINDS)
    head = ["file", "format", "msgs", *kinds, "in_results", *(f"mk:{s}" for s in SHAPES)]
    rows: list[list[str]] = []
    for report in reports:
        if report.refused is not None:
            continue
        marks = [str(report.markers[s]) if report.markers else "-" for s in SHAPES]
        counts = [str(report.blocks[k]) for k in BLOCK_KINDS]
        inside = str(report.parts_in_results)
        rows.append(
            [report.path, str(report.format), str(report.messages), *counts, inside, *marks]
        )
    total = totals(reports)
    blocks = total["blocks"]
    markers = total["markers"]
    assert isinstance(blocks, dict)
    assert isinstance(markers, dict)
    rows.append(
        [
            f"TOTAL ({total['read']} of {total['files']} files read)",
            "",
            str(total["messages"]),
            *(str(blocks[k]) for k in BLOCK_KINDS),
            str(total["parts_in_results"]),
            *(str(markers[s]) for s in SHAPES),
        ]
    )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(width) if index < 2 else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines.insert(-1, lines[1])
    lines.append("")
    lines.append("in_results = images and documents inside tool results (parts, not blocks);")
    lines.append("mk:SHAPE = images and documents replayed as a 'not shown' / 'not read' marker")
    lines.append("with vision=True in that shape ('-': the replay failed, see below).")
    failed = [r for r in reports if r.refused is None and r.replay_error is not None]
    lines.extend(f"replay failed: {r.path}: {r.replay_error}" for r in failed)
    refused = [r for r in reports if r.refused is not None]
    if refused:
        lines.append("")
        lines.append("Refused:")
        lines.extend(f"  {r.path}: {r.refused}" for r in refused)
    lines.extend(f"skipped (absent): {path}" for path in absent)
    return "\n".join(lines)


def _shown(path: Path, roots: list[Path]) -> str:
    for root in roots:
        if root.is_dir() and path.is_relative_to(root):
            return str(path.relative_to(root.parent))
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(
            "Import every history file given (directories are walked) into a fresh temporary "
            "store each, and print per file its detected format, messages, blocks by kind and "
            "the markers its replay carries for a seeing model; then totals and refusals."
        ),
        epilog="example: tools/fidelity_report.py tests/fixtures/import /work/shared/corpus",
    )
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help="history files or directories (default: tests/fixtures/import); absent ones "
        "are named and skipped",
    )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    args = parser.parse_args(argv)
    roots: list[Path] = list(args.paths) or list(DEFAULT_PATHS)
    absent: list[str] = []
    reports = [report_file(path, _shown(path, roots)) for path in files(roots, absent)]
    if args.json:
        document = {
            "files": [asdict(report) for report in reports],
            "totals": totals(reports),
            "absent": absent,
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(render(reports, absent) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
