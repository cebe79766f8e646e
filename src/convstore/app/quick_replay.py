"""``convstore --db PATH replay CONV`` answered from the stored replay model, before the command
line (click, pydantic, eventsourcing) is imported.

A new process replaying a conversation spends most of its time importing: the domain's pydantic
models are built before any row is read. When the stored replay model already holds the whole
conversation, nothing needs them: this reads the model's rows through a read-only connection
and renders them (:mod:`convstore.engine.state` and :mod:`convstore.engine.render` import no
model at run time).

It answers only when every condition holds; otherwise it returns ``False`` and the full command
line runs, with its own checks and messages:

- the arguments are exactly ``--db PATH replay CONV`` (or ``replay CONV`` with PATH in
  ``CONVSTORE_DB``), with ``--shape openai|anthropic`` and
  ``--compact`` as the only options (``--vision``, ``--full``, ``--keep-tool-results``,
  ``--live`` and ``--fit-tokens`` take the full path), and CONV is a whole conversation id;
- no ``CONVSTORE_`` variable is set but those that cannot change what a read returns
  (:data:`HARMLESS`: the store and audit paths, the lock timeout, the write limits); the rest
  (eventsourcing's cipher and compressor settings, ``CONVSTORE_DEBUG``…) can change how a store
  opens or is read);
- PATH is a SQLite file holding a convstore store of a format this version reads (1 or 2);
- the conversation's stored model is at the newest version its log holds (read in one read
  transaction), its rows match the digest in its head (so none was edited, added, dropped or
  moved), and it was folded when the log's change count (the triggers' count of rows changed
  or deleted in place, :data:`convstore.backends.common.log_changes.CHANGES_TABLE`) was what it is
  now, so it is exactly what a fold of the log gives. A model that fails a check is never
  rendered: the full path then folds the log, and refuses a damaged row as it always does.

It writes nothing, so it never creates a store or a model.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import UUID

from convstore.backends.common.log_changes import (
    CHANGE_TRIGGERS,
    CHANGES_TABLE,
    SELECT_CHANGE_COUNT,
)
from convstore.backends.common.tables import HEADS, MESSAGES
from convstore.backends.common.tables import MARKER_TABLE as MARKER_TABLE  # noqa: PLC0414
from convstore.backends.common.tables import STORE_FORMATS as FORMATS
from convstore.backends.sqlite.tables import EVENTS_TABLE as EVENTS_TABLE  # noqa: PLC0414
from convstore.engine.render import render
from convstore.engine.state import ReplayState

if TYPE_CHECKING:
    from convstore.engine.plan import Shape

STORE_FORMATS = tuple(map(str, FORMATS))
"""The store formats it reads, as the marker writes them: the model tables are the same in
every one."""

_WHOLE_ID = re.compile(
    r"[0-9a-fA-F]{32}|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


@dataclass(frozen=True, slots=True)
class _Options:
    vision: bool = False
    full: bool = False
    keep_tool_results: int | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """A replay the quick path can answer."""

    path: str
    conversation: UUID
    shape: str = "openai"
    compact: bool = False


def parse(argv: list[str]) -> Request | None:
    """The request in ``argv`` (after the program name), or ``None`` when it is not one the
    quick path answers."""
    args = list(argv)
    if len(args) >= 2 and args[0] == "--db":
        path = args[1]
        rest = args[2:]
    elif args and args[0].startswith("--db="):
        path = args[0].removeprefix("--db=")
        rest = args[1:]
    elif args[:1] == ["replay"] and os.environ.get("CONVSTORE_DB"):
        path = os.environ["CONVSTORE_DB"]  # what --db defaults to (the command line's envvar)
        rest = args
    else:
        return None
    if len(rest) < 2 or rest[0] != "replay":
        return None
    conversation, options = rest[1], rest[2:]
    if not _WHOLE_ID.fullmatch(conversation):
        return None
    shape, compact = "openai", False
    while options:
        option = options.pop(0)
        if option == "--compact":
            compact = True
        elif option == "--shape" and options:
            shape = options.pop(0)
        elif option.startswith("--shape="):
            shape = option.removeprefix("--shape=")
        else:
            return None
        if shape not in {"openai", "anthropic"}:
            return None
    if not path or "://" in path or path.startswith("file:") or path == ":memory:":
        return None
    return Request(path, UUID(conversation), shape, compact)


def read_state(path: str, conversation: UUID) -> ReplayState | None:
    """The conversation's stored model when it is at its log's newest version, else ``None``."""
    target = Path(os.path.realpath(path))
    if not target.is_file():
        return None
    uri = f"{target.as_uri()}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            conn.execute("BEGIN")
            names = (MARKER_TABLE, HEADS, MESSAGES, EVENTS_TABLE, CHANGES_TABLE, *CHANGE_TRIGGERS)
            marks = ", ".join("?" * len(names))
            found = conn.execute(
                f"SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') "  # noqa: S608
                f"AND name IN ({marks})",
                names,
            ).fetchall()
            if len(found) != len(names):
                return None
            marker = conn.execute(
                f"SELECT value FROM {MARKER_TABLE} WHERE key = 'format'"  # noqa: S608
            ).fetchone()
            if marker is None or marker[0] not in STORE_FORMATS:
                return None
            key = conversation.hex
            head = conn.execute(
                f"SELECT version, head FROM {HEADS} WHERE originator_id = ?",  # noqa: S608
                (key,),
            ).fetchone()
            newest = conn.execute(
                f"SELECT max(originator_version) FROM {EVENTS_TABLE} "  # noqa: S608
                "WHERE originator_id = ?",
                (key,),
            ).fetchone()
            if head is None or newest is None or head[0] != newest[0]:
                return None
            counted = conn.execute(SELECT_CHANGE_COUNT, (key,)).fetchone()
            rows = conn.execute(
                f"SELECT message_id, plan FROM {MESSAGES} WHERE originator_id = ? "  # noqa: S608
                "ORDER BY position",
                (key,),
            ).fetchall()
    except sqlite3.Error:
        return None
    try:
        state = ReplayState.decode(key, head[0], head[1], rows)
    except (ValueError, KeyError, TypeError, IndexError):
        return None  # damaged or edited: the full path folds the log and stores it again
    if state.changes != (counted[0] if counted else 0):
        return None  # a row of the log was changed in place since the model was folded
    return state


HARMLESS = ("CONVSTORE_DB", "CONVSTORE_AUDIT_DB", "CONVSTORE_LOCK_TIMEOUT")
"""Variables that leave a replay's answer and its errors as they are."""
HARMLESS_PREFIXES = ("CONVSTORE_MAX_",)
"""The write limits (``CONVSTORE_MAX_BLOCK_BYTES`` …): a read never checks them."""


def _steps_aside_for(name: str) -> bool:
    return (
        name.startswith("CONVSTORE_")
        and name not in HARMLESS
        and not name.startswith(HARMLESS_PREFIXES)
    )


def quick_replay(argv: list[str]) -> bool:
    """Print the replay ``argv`` asks for and return ``True``, or return ``False`` having
    printed nothing (the full command line then runs)."""
    request = parse(argv)
    if request is None:
        return False
    if any(_steps_aside_for(name) for name in os.environ):
        return False
    state = read_state(request.path, request.conversation)
    if state is None:
        return False
    shape: Shape = "anthropic" if request.shape == "anthropic" else "openai"
    result = render(state, _Options(), shape)
    text = json.dumps(result, ensure_ascii=False, indent=None if request.compact else 2)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return False  # the full path decides how such text is written
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    return True
