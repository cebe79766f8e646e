"""Rows out: a readable table for people, JSON or CSV for scripts."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import click

Format = Literal["table", "json", "csv"]

_F = TypeVar("_F", bound=Callable[..., Any])

MAX_CELL = 60


def format_options(func: _F) -> _F:
    """``--json`` and ``--csv``; without either, a table."""
    func = click.option("--csv", "as_csv", is_flag=True, help="CSV output, with a header row.")(
        func
    )
    return click.option("--json", "as_json", is_flag=True, help="JSON output: a list of objects.")(
        func
    )


def chosen_format(as_json: bool, as_csv: bool) -> Format:
    if as_json and as_csv:
        msg = "--json and --csv cannot be combined"
        raise click.UsageError(msg)
    return "json" if as_json else "csv" if as_csv else "table"


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def emit(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: Format, *, count: bool = True
) -> None:
    """Print rows in the chosen format (a table ends with a row count on stderr)."""
    if fmt == "json":
        objects = [dict(zip(columns, row, strict=True)) for row in rows]
        click.echo(json.dumps(objects, ensure_ascii=False, indent=2, default=str))
        return
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
        return
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    click.echo("  ".join("-" * w for w in widths))
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if count:
        click.echo(f"({counted(len(rows), 'row')})", err=True)


def emit_dicts(rows: list[dict[str, Any]], fmt: Format, columns: Sequence[str] = ()) -> None:
    """Print dict rows; ``columns`` fixes the header when there may be no rows."""
    names = list(columns) or (list(rows[0]) if rows else [])
    emit(names, [[row.get(name) for name in names] for row in rows], fmt)


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1: "1 conversation", "7 events"."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
