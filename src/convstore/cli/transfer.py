"""Commands that move histories: dump and load whole logs, export one conversation."""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, NoReturn
from uuid import uuid4

import click

from convstore.app.bootstrap import fill_new_store
from convstore.app.export import EXPORT_FORMATS, ExportFormat, export_conversation
from convstore.cli.options import conversation_argument, store_from, vision_option
from convstore.cli.output import counted
from convstore.domain.errors import InvalidInput, NoStore, OutputError
from convstore.domain.limits import Limits
from convstore.store import Store
from convstore.store.transfer import Loader, LoadReport, dump_lines


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


class Sink:
    """Where a command writes its output. A failed write is an :class:`OutputError` naming
    the output (one line, exit 1); a reader gone from stdout stays a ``BrokenPipeError``,
    which the command line ends quietly as Unix tools do."""

    def __init__(self, handle: BinaryIO, name: str) -> None:
        self._handle = handle
        self._name = name

    def write(self, data: bytes) -> None:
        """Write ``data`` (buffered)."""
        self._guard(lambda: self._handle.write(data))

    def flush(self) -> None:
        """Hand what is buffered to the output."""
        self._guard(self._handle.flush)

    def sync(self, mode: int | None = None) -> None:
        """Give the file ``mode`` (when given) and sync it to disk."""
        fd = self._handle.fileno()
        if mode is not None:
            self._guard(lambda: os.chmod(fd, mode))  # noqa: PTH101 - of the open file, by descriptor
        self._guard(lambda: os.fsync(fd))

    def _guard(self, call: Callable[[], object]) -> None:
        try:
            call()
        except BrokenPipeError:
            if self._name == "stdout":
                raise
            self._failed("the reader went away")
        except OSError as exc:
            self._failed(exc.strerror or str(exc))

    def _failed(self, why: str) -> NoReturn:
        msg = f"cannot write {self._name}: {why}"
        raise OutputError(msg) from None


@contextmanager
def binary_output(output: str | None, store: Store) -> Iterator[Sink]:
    """Where ``--output`` writes: stdout without one; else the file it names, with a symbolic
    link followed to its target (the link stays a link).

    A regular file (or a new name) is written beside its real path under a hidden temporary
    name, synced, and renamed over it only once complete, so an interrupted or failed write
    never leaves a file that looks whole (an existing file keeps its permissions). A FIFO or a
    character device (``/dev/stdout``, a named pipe) cannot be replaced that way: it is written
    to directly as the output is made. Anything else that is not a regular file (a block
    device, a socket), a directory, and the store's own file (however spelled) are refused
    before anything is written."""
    if output is None:
        sink = Sink(sys.stdout.buffer, "stdout")
        yield sink
        sink.flush()
        return
    target = writable(output, store)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise InvalidInput(msg) from None
    if mode is not None and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        with _streamed(output, target) as sink:
            yield sink
        return
    if mode is not None and not stat.S_ISREG(mode):
        msg = f"cannot write {output}: it is neither a file, a FIFO nor a character device"
        raise InvalidInput(msg)
    with _replaced(output, target, None if mode is None else stat.S_IMODE(mode)) as sink:
        yield sink


def _opened(output: str, path: Path, flags: int) -> BinaryIO:
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        msg = f"cannot write {output}: {exc.strerror or exc}"
        raise InvalidInput(msg) from None
    return os.fdopen(fd, "wb")


@contextmanager
def _streamed(output: str, target: Path) -> Iterator[Sink]:
    """The FIFO or device itself, opened for writing (a FIFO waits for its reader)."""
    handle = _opened(output, target, os.O_WRONLY)
    sink = Sink(handle, output)
    try:
        yield sink
        sink.flush()
    finally:
        with suppress(OSError):  # a failed write was reported; closing only repeats it
            handle.close()


@contextmanager
def _replaced(output: str, target: Path, mode: int | None) -> Iterator[Sink]:
    """A hidden file beside ``target``, renamed over it once whole (removed otherwise)."""
    # Cut short so a long name still leaves room within the filesystem's name limit.
    partial = target.with_name(f".{target.name[:200]}.{uuid4().hex[:12]}.partial")
    handle = _opened(output, partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW)
    sink = Sink(handle, output)
    try:
        try:
            yield sink
            sink.flush()
            sink.sync(mode)
        finally:
            with suppress(OSError):  # flushed and synced above, or failing anyway
                handle.close()
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def streamed(target: Path) -> bool:
    """Whether ``target`` is a FIFO or a character device, written to as output is made."""
    try:
        mode = target.stat().st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def writable(output: str, store: Store) -> Path:
    """``output``'s real path (symbolic links followed) to write, refused (one line, nothing
    written) when it is a directory or the SQLite store's own file or journal, however
    spelled: replacing those loses the log."""
    target = Path(os.path.realpath(output))
    if target.is_dir():
        msg = f"cannot write {output}: it is a directory (give a file name)"
        raise InvalidInput(msg)
    if not target.parent.is_dir():
        msg = f"cannot write {output}: directory {target.parent} does not exist"
        raise InvalidInput(msg)
    if "://" in store.location:
        return target
    db = Path(store.location)
    for kept in (db, *(db.with_name(db.name + end) for end in ("-wal", "-shm", "-journal"))):
        linked = target.exists() and kept.exists() and target.samefile(kept)  # a hard link
        if linked or target == kept.resolve():
            msg = f"refusing to write {output}: it is the store's own file ({kept})"
            raise InvalidInput(msg)
    return target


@click.command()
@click.option(
    "--output",
    "-o",
    metavar="FILE",
    help="Write the dump to FILE (renamed into place once complete; a FIFO or device is "
    "written to). Default: stdout.",
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


@click.command()
@click.argument("source", metavar="FILE|-")
@click.pass_context
def load(ctx: click.Context, source: str) -> None:
    """Record a dump's events into an empty store, keeping ids, versions and timestamps.

    Events are checked as `verify` checks a log and written in batches, one
    transaction each. A load that stopped half-way is continued by loading the same
    dump again; any other store that is not empty is refused, with nothing written.
    A dump of a store of format 1 or 2 loaded into a store of format 3 (every new
    one) is folded: each message's start, blocks and end become its block events.

    \b
    Example:
        convstore --db postgresql://app@db/agents load agent.dump.jsonl
        convstore --db agent.db dump | convstore --db postgresql://app@db/agents load -
    """
    limits = Limits.from_env()
    limit = limits.max_input_bytes
    with _input(source) as stream:
        lines = iter(lambda: stream.readline(limit + 1), b"")
        # The header is checked before any store is opened or made.
        loader = Loader(lines, max_line_bytes=limit, limits=limits)
        through = loader.header.get("through")
        total = through if isinstance(through, int) else 0

        def resumed(count: int) -> None:
            click.echo(f"resuming: the store holds the dump's first {count} events", err=True)

        def run(store: Store, *, kept: bool) -> LoadReport:
            with progress_bar(total, "loading", shown=sys.stderr.isatty()) as update:
                return loader.run(store, progress=update, on_resume=resumed, kept_on_failure=kept)

        filling: list[Store] = []

        def fill(store: Store) -> LoadReport:
            filling.append(store)
            return run(store, kept=False)

        try:
            existing: Store | None = store_from(ctx, create=False)
        except NoStore:
            # A new SQLite file is made whole: loaded under a temporary name and linked into
            # place only once the whole dump has loaded, so a refused dump leaves no file.
            try:
                report, location = fill_new_store(ctx.obj["db"], fill, limits=limits)
                existing = None
            except InvalidInput:
                if filling:
                    raise
                # Refused before anything was filled: a location that is not made whole at
                # once (a PostgreSQL schema) is made a store and loaded as an existing one.
                existing = store_from(ctx, create=True)
        if existing is not None:
            report, location = run(existing, kept=True), existing.location
    rate = report.loaded / report.seconds if report.seconds > 0 else 0.0
    folded = f"; the dump's {report.read:,} folded into format 3" if report.folded else ""
    click.echo(
        f"loaded {counted(report.loaded, 'event')} ({report.events:,} in all, "
        f"{counted(report.conversations, 'conversation')}{folded}) in {report.seconds:.2f} s "
        f"({rate:,.0f} events/s) into {location}",
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


@click.command()
@conversation_argument
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    required=True,
    help="openai-chat / anthropic: the replay as a request body; markdown: a readable "
    "transcript; jsonl: the raw events; html: the `serve` page as one self-contained file; "
    "otel: OpenTelemetry GenAI span attributes (gen_ai.input.messages / output.messages).",
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
    `convstore import` reads both back. otel keeps the structure instead (tool calls with
    their ids, results linked by id, reasoning, images) as OpenTelemetry GenAI semantic
    conventions 1.41.0 messages, for a tracing backend.

    \b
    Example:
        convstore export $CONV --format markdown --output triage.md
        convstore export $CONV --format html --output triage.html
        convstore export $CONV --format anthropic --vision \\
          | jq '. + {model: "claude-sonnet-4-5", max_tokens: 1024}'
        convstore export $CONV --format otel | jq '."gen_ai.output.messages"'
    """
    store = store_from(ctx, create=False)
    target = None if output is None else writable(output, store)
    # Images go to files beside a file written; on stdout, a FIFO or a device they are markers.
    beside = target is not None and fmt == "markdown" and not streamed(target)
    image_dir = f"{target.stem}-images" if beside and target is not None else None
    exported = export_conversation(store, conversation, fmt, vision=vision, image_dir=image_dir)
    if output is None or target is None:
        with binary_output(None, store) as sink:
            sink.write(exported.text.encode())
        return
    for image in exported.images:
        path = target.parent / image.path
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(base64.b64decode(image.data))
    with binary_output(output, store) as sink:
        sink.write(exported.text.encode())
    if exported.images:
        where = target.parent / (image_dir or "")
        click.echo(f"wrote {output} and {len(exported.images)} image(s) in {where}", err=True)
