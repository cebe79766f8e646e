"""``convstore upgrade``: rewrite a store of format 1 or 2 as format 3, whole or not at all.

The steps (docs/design/format-3.md, "The store format, and the upgrade path"), on SQLite:

1. the old store's write lock is taken and kept (:mod:`convstore.infrastructure.sqlite.upgrade`), so
   what is verified is what is rewritten, and no append lands meanwhile;
2. the old log is verified as ``convstore verify`` verifies it (every row, each conversation's
   rules and hash chain, SQLite's check of every page); a damaged store is refused, naming the
   first damaged conversation, before anything is written;
3. a new store of format 3 is built beside it under a temporary name and filled by the load
   path itself: the old store's dump, folded as ``convstore load`` folds an older dump into a
   store of format 3 (:class:`~convstore.store.transfer.Loader`), so there is one fold, not a
   second; the new store computes the hash chains of what it is given, and its marker table
   keeps the old store's format and identity (``upgraded_from``) and each conversation's old
   chain head (``upgraded_from:<conversation>``), so an audit can tie the new log to the
   verified old one. Erasure tombstones are carried over: an erased id stays erased;
4. the differential check: every conversation replays from the new store exactly as from the
   old store's log, byte for byte, in every mode (both shapes, vision on and off, full on and
   off), or nothing is switched;
5. the switch, which a kill at any moment leaves with the old store whole and working.

The new store keeps no stored replay model (this version keeps none).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from uuid import UUID

from convstore.app.bootstrap import open_store, resolve_location
from convstore.app.verifying import log_problems
from convstore.domain.errors import InvalidInput, StoreError
from convstore.infrastructure import backend_for
from convstore.infrastructure.common.tables import BLOCK_EVENTS_FORMAT
from convstore.ports.backend import UPGRADED_FROM, StoreUpgrade
from convstore.ports.chain import Head
from convstore.store import Store
from convstore.store.transfer import Loader, dump_lines
from convstore.store.verify import Problem

MODES = tuple(product(("openai", "anthropic"), (False, True), (False, True)))
"""Every replay mode the differential check compares: shape, vision, full."""

Stage = Callable[[str, int], None]
"""Told of each step as it starts: its name and how many units :data:`Progress` will count
in it (events while building, conversations while checking; 0 when none are counted)."""

Progress = Callable[[int], None]
"""Told how many more units of the current step are done."""


@dataclass(frozen=True, slots=True)
class UpgradeReport:
    """What an upgrade did: the store's formats before and after, its conversations, its events
    and its bytes before and after, and where the old store was kept (None: not kept, or
    nothing to do)."""

    location: str
    from_format: int
    to_format: int
    conversations: int = 0
    events_before: int = 0
    events_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    backup: str | None = None
    seconds: float = 0.0

    @property
    def upgraded(self) -> bool:
        """Whether the store was rewritten (False: it was of the newest format already)."""
        return self.from_format != self.to_format


def upgrade_store(
    location: str | os.PathLike[str] | None = None,
    *,
    backup: bool = True,
    stage: Stage | None = None,
    progress: Progress | None = None,
) -> UpgradeReport:
    """Rewrite the store at ``location`` (a SQLite file) of format 1 or 2 as format 3, whole or
    not at all; a store of format 3 is left untouched (:attr:`UpgradeReport.upgraded` is
    False).

    The old file is kept beside the new one as ``NAME.format2`` (``.format1``) unless
    ``backup`` is False. Raises :class:`~convstore.StoreError` with nothing switched when the
    old log is damaged (naming the conversation), when a replay of the new store differs from
    the old one's, when another process holds the store's write lock past the lock timeout or
    has it open at the switch; :class:`~convstore.InvalidInput` for a PostgreSQL or NATS
    store (not supported yet: dump and load) or a backup name already taken.
    """
    started = time.perf_counter()
    resolved = resolve_location(location)
    backend = backend_for(resolved)
    files = backend.upgrade_files(backend.show(resolved), backup=backup)
    if files is None:
        msg = (
            f"upgrading a {backend.name} store is not supported yet: dump it and load the "
            "dump into a new store (`convstore --db OLD dump | convstore --db NEW load -`; "
            "the load folds it into format 3)"
        )
        raise InvalidInput(msg)
    old = open_store(resolved, create=False)
    try:
        if old.store_format >= BLOCK_EVENTS_FORMAT:
            return UpgradeReport(old.location, old.store_format, old.store_format)
        return _upgrade(old, files, stage=stage, progress=progress, started=started)
    finally:
        old.close()


def _upgrade(
    old: Store,
    files: StoreUpgrade,
    *,
    stage: Stage | None,
    progress: Progress | None,
    started: float,
) -> UpgradeReport:
    tell = stage or (lambda _name, _total: None)
    path = Path(old.location)
    from_format = old.store_format
    bytes_before = _size(path) + _size(path.with_name(path.name + "-wal"))
    try:
        files.hold(from_format)
        tell("verifying", 0)
        verifier, problems = log_problems(old)
        if problems:
            raise StoreError(_refusal(path, problems))
        conversations = [UUID(c) for c in sorted(verifier.conversations)]
        marks = _marks(old, conversations, old.heads())
        tell("building", old.log_position())
        new = open_store(files.build(files.tombstones(), marks), create=False)
        try:
            limits = old.limits
            loader = Loader(dump_lines(old), max_line_bytes=limits.max_input_bytes, limits=limits)
            loaded = loader.run(new, progress=progress, kept_on_failure=False)
            tell("checking", len(conversations))
            _compare(old, new, conversations, progress)
        finally:
            new.close()
        bytes_after = files.finish_new(mode=path.stat().st_mode)
        old.close()  # its connections would keep the switch from having the file to itself
        tell("switching", 0)
        files.switch(linked=lambda: tell("backed up", 0))
    finally:
        files.close()
    return UpgradeReport(
        location=str(path),
        from_format=from_format,
        to_format=BLOCK_EVENTS_FORMAT,
        conversations=len(conversations),
        events_before=verifier.events,
        events_after=loaded.events,
        bytes_before=bytes_before,
        bytes_after=bytes_after,
        backup=files.backup_location,
        seconds=time.perf_counter() - started,
    )


def _refusal(path: Path, problems: list[Problem]) -> str:
    first = problems[0]
    if not first.conversation:
        where = "its file is damaged"
    elif first.version is None:
        where = f"conversation {first.conversation} is damaged"
    else:
        where = f"conversation {first.conversation} is damaged at version {first.version}"
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return (
        f"refusing to upgrade {path}: {where}: {first.problem}{more}; `convstore verify` lists "
        "every problem; nothing was written"
    )


def _marks(old: Store, conversations: Iterable[UUID], heads: dict[UUID, Head]) -> dict[str, str]:
    """The new store's marker rows naming what it was upgraded from."""
    marks = {
        UPGRADED_FROM: json.dumps(
            {
                "format": old.store_format,
                "identity": old.identity,
                "at": datetime.now(UTC).isoformat(),
            }
        )
    }
    for conversation in conversations:
        head = heads.get(conversation)
        if head is not None:
            marks[f"{UPGRADED_FROM}:{conversation}"] = f"{head.version} {head.chain.hex()}"
    return marks


def _compare(old: Store, new: Store, conversations: list[UUID], progress: Progress | None) -> None:
    """Every conversation's replay, in every mode, from the new store as from the old log,
    byte for byte; a difference raises :class:`StoreError` naming the conversation."""
    for conversation in conversations:
        for shape, vision, full in MODES:
            before = old.replay(conversation, shape=shape, vision=vision, full=full)
            after = new.replay(conversation, shape=shape, vision=vision, full=full)
            if _bytes(before) != _bytes(after):
                msg = (
                    f"refusing to switch {old.location} to format 3: conversation "
                    f"{conversation} replays differently from the new store "
                    f"(shape {shape}, vision {'on' if vision else 'off'}, full "
                    f"{'on' if full else 'off'}); nothing was switched, the old store is as it "
                    "was: please report this"
                )
                raise StoreError(msg)
        if progress is not None:
            progress(1)


def _bytes(request: object) -> bytes:
    return json.dumps(request, ensure_ascii=False).encode()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
