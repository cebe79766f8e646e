"""Result rows and the table ``bench/run.py`` prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Row:
    """One line of the table: convstore's median, the baseline's, and their paired ratio."""

    bench: str
    size: str
    reps: int
    convstore: float | None
    baseline: float | None
    unit: str
    ratio: float | None = None
    better: str = ""
    target: str = ""
    status: str = ""
    note: str = ""
    samples: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """Everything one run measured, printed as a table or dumped as JSON."""

    mode: str
    machine: dict[str, str]
    settings: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:,.1f} ms" if value >= 10 else f"{value:,.2f} ms"
    if unit == "us":
        return f"{value:,.1f} us"
    if unit == "MB":
        return f"{value:,.1f} MB"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.3g} {unit}"


def render_table(report: Report) -> str:
    head = [
        "benchmark",
        "size",
        "reps",
        "convstore (median)",
        "baseline (median)",
        "ratio",
        "better",
        "target",
        "result",
    ]
    body = [
        [
            r.bench,
            r.size,
            str(r.reps),
            fmt_value(r.convstore, r.unit),
            fmt_value(r.baseline, r.unit),
            "-" if r.ratio is None else f"{r.ratio:.2f}x",
            r.better,
            r.target or "-",
            r.status or "-",
        ]
        for r in report.rows
    ]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(b) for b in body]
    return "\n".join(out)


def render(report: Report) -> str:
    m = report.machine
    parts = [
        f"convstore benchmarks ({report.mode} run, {report.seconds:.0f} s) - {m['date']}",
        f"machine: nproc={m['nproc']}, Python {m['python']}, SQLite {m['sqlite']}, "
        f"PostgreSQL {m['postgres']}, {m['platform']}",
        "",
        render_table(report),
        "",
        "ratio = convstore / baseline of paired measurements (same repeat), median over repeats;",
        "'better' says whether a higher or lower ratio is better. Growth and linearity rows show",
        "convstore's own ratio (baseline column: the same ratio for the raw baseline).",
    ]
    notes = [r for r in report.rows if r.note]
    if report.settings or notes or report.skipped:
        parts.append("")
        parts.append("notes:")
        parts += [f"- {s}" for s in report.settings]
        parts += [f"- {r.bench} [{r.size}]: {r.note}" for r in notes]
    parts += [f"- SKIPPED {s}" for s in report.skipped]
    return "\n".join(parts)
