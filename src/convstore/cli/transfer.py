"""Commands that move histories: dump and load whole logs, export one conversation."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import click

from convstore.cli.app import cli, conversation_argument, store_from, vision_option
from convstore.cli.output import counted
from convstore.domain.limits import Limits
from convstore.errors import InvalidInput, NoStore
from convstore.store import Store
from convstore.transfer import (
    EXPORT_FORMATS,
    ExportFormat,
    Loader,
    dump_lines,
    export_conversation,
)


@contextmanager
def progress_bar(total: int, label: str, *, shown: bool) -> Iterator[Callable[[int], None] | None]:
    """A progress bar with a rate on stderr when ``shown`` (a terminal), else nothing."""
    if not shown:
        yield None
        return
    started = time.perf_counter()

    def rate(_: object) -> str:
        elapsed = time.perf_counter() - started
        return f"{bar.pos / elapsed:,.0f} events/s" if elapsed > 0 and bar.pos else ""

    bar = click.progressbar(length=max(total, 1), label=label, file=sys.stderr, item_show_func=rate)
    with bar:
        yield bar.update


@contextmanager
def binary_output(output: str | None, store: Store) -> Iterator[BinaryIO]:
    """stdout, or a file written beside its final name and renamed into place when complete,
    so an interrupted write never leaves a file that looks whole. A directory, or the store's
    own file (however spelled), is refused before anything is written."""
    if output is None:
        yield sys.stdout.buffer
        return
    target = writable(output, store)
    partial = target.with_name(target.name + ".partial")
    try:
        handle = partial.open("wb")
    except OSError as exc:
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise InvalidInput(msg) from None
    try:
        with handle:
            yield handle
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def writable(output: str, store: Store) -> Path:
    """``output`` as a path to write, refused (one line, nothing written) when it is a directory
    or the SQLite store's own file or journal, however spelled: replacing those loses the log."""
    target = Path(output)
    if target.is_dir():
        msg = f"cannot write {output}: it is a directory (give a file name)"
        raise InvalidInput(msg)
    if "://" in store.location:
        return target
    db = Path(store.location)
    for kept in (db, *(db.with_name(db.name + end) for end in ("-wal", "-shm", "-journal"))):
        linked = target.exists() and kept.exists() and target.samefile(kept)  # a hard link
        if linked or target.resolve() == kept.resolve():
            msg = f"refusing to write {target}: it is the store's own file ({kept})"
            raise InvalidInput(msg)
    return target


@cli.command()
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    help="Write the dump to FILE (renamed into place once complete). Default: stdout.",
)
@click.pass_context
def dump(ctx: click.Context, output: str | None) -> None:
    """Write every event of every conversation as JSON lines, in log order.

    The first line names the format and its version, the last one counts the events;
    each line between is one stored event with its conversation, version and topic.
    Memory stays bounded however large the store. `convstore load` reads it back into
    another store, of either backend.

    \b
    Example:
        convstore --db agent.db dump --output agent.dump.jsonl
        convstore --db agent.db dump | convstore --db postgresql://app@db/agents load -
    """
    store = store_from(ctx, create=False)
    shown = sys.stderr.isatty() and (output is not None or not sys.stdout.isatty())
    events = conversations = 0
    with (
        progress_bar(store.log_position(), "dumping", shown=shown) as update,
        binary_output(output, store) as sink,
    ):
        for line in dump_lines(store, progress=update):
            sink.write(line)
            if line.startswith(b'{"end": '):
                events, conversations = _counts(line)
        sink.flush()
    click.echo(
        f"dumped {counted(events, 'event')} of {counted(conversations, 'conversation')}", err=True
    )


def _counts(closing: bytes) -> tuple[int, int]:
    counted = json.loads(closing)["end"]
    return int(counted["events"]), int(counted["conversations"])


@cli.command()
@click.argument("source", metavar="FILE|-")
@click.pass_context
def load(ctx: click.Context, source: str) -> None:
    """Record a dump's events into an empty store, keeping ids, versions and timestamps.

    Events are checked as `verify` checks a log and written in batches, one
    transaction each. A load that stopped half-way is continued by loading the same
    dump again; any other store that is not empty is refused, with nothing written.

    \b
    Example:
        convstore --db postgresql://app@db/agents load agent.dump.jsonl
        convstore --db agent.db dump | convstore --db postgresql://app@db/agents load -
    """
    limit = Limits.from_env().max_input_bytes
    with _input(source) as stream:
        lines = iter(lambda: stream.readline(limit + 1), b"")
        loader = Loader(lines, max_line_bytes=limit)  # refuses a non-dump before any store opens
        try:
            target: Store | Callable[[], Store] = store_from(ctx, create=False)
        except NoStore:  # created only once a first batch has passed every check
            target = lambda: store_from(ctx, create=True)  # noqa: E731
        through = loader.header.get("through")
        total = through if isinstance(through, int) else 0

        def resumed(count: int) -> None:
            click.echo(f"resuming: the store holds the dump's first {count} events", err=True)

        with progress_bar(total, "loading", shown=sys.stderr.isatty()) as update:
            report = loader.run(target, progress=update, on_resume=resumed)
        store = loader.store
        assert store is not None  # run() makes it, at the latest once the dump checked out
    rate = report.loaded / report.seconds if report.seconds > 0 else 0.0
    click.echo(
        f"loaded {counted(report.loaded, 'event')} ({report.events:,} in all, "
        f"{counted(report.conversations, 'conversation')}) in {report.seconds:.2f} s "
        f"({rate:,.0f} events/s) into {store.location}",
        err=True,
    )


@contextmanager
def _input(source: str) -> Iterator[BinaryIO]:
    if source == "-":
        if sys.stdin.isatty():
            msg = "no input: give a dump FILE, or pipe one in with -"
            raise InvalidInput(msg)
        yield sys.stdin.buffer
        return
    try:
        handle = Path(source).open("rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        msg = f"cannot read {source}: {exc.strerror or exc}"
        raise InvalidInput(msg) from None
    with handle:
        yield handle


@cli.command()
@conversation_argument
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    required=True,
    help="openai-chat / anthropic: the replay as a request body; markdown: a readable "
    "transcript; jsonl: the raw events; html: the `serve` page as one self-contained file.",
)
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    help="Write to FILE (Markdown images go to FILE's name + '-images/' beside it). "
    "Default: stdout (images become markers).",
)
@vision_option
@click.pass_context
def export(
    ctx: click.Context, conversation: str, fmt: ExportFormat, output: str | None, vision: bool
) -> None:
    """Write one conversation out: as a request body, a transcript (Markdown or HTML) or raw events.

    openai-chat and anthropic give exactly what `replay` gives (every block as prose)
    with no model key: add the model (and for Anthropic max_tokens) when sending it.
    `convstore import` reads both back.

    \b
    Example:
        convstore export $CONV --format markdown --output triage.md
        convstore export $CONV --format html --output triage.html
        convstore export $CONV --format anthropic --vision \\
          | jq '. + {model: "claude-sonnet-4-5", max_tokens: 1024}'
    """
    store = store_from(ctx, create=False)
    image_dir = f"{Path(output).stem}-images" if output is not None and fmt == "markdown" else None
    exported = export_conversation(store, conversation, fmt, vision=vision, image_dir=image_dir)
    if output is None:
        click.echo(exported.text, nl=False)
        return
    target = writable(output, store)
    if not target.parent.is_dir():
        msg = f"cannot write {output}: directory {target.parent} does not exist"
        raise InvalidInput(msg)
    for image in exported.images:
        path = target.parent / image.path
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(base64.b64decode(image.data))
    with binary_output(output, store) as sink:
        sink.write(exported.text.encode())
    if exported.images:
        where = target.parent / (image_dir or "")
        click.echo(f"wrote {output} and {len(exported.images)} image(s) in {where}", err=True)
