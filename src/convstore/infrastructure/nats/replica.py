"""Whose a replica file is: a ``nats://`` store's replica belongs to exactly one store, the
streams it follows (their names say the number of partitions) and their identity, as its
position table records them (one row per stream, all made in the file's first transaction).

Checked twice: read-only when the store is opened, before anything is written to the file
(another store's replica, or another application's SQLite file, is refused and left as it
is), and again in the transaction that makes the position rows (two stores opening one new
file at once: the second finds the first's rows and is refused).

Imports no client: the backend checks a file with this module alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import closing
from pathlib import Path

from convstore.domain.errors import InvalidInput
from convstore.infrastructure.sqlite.files import _readonly, _table_exists

POSITION_TABLE = "convstore_nats_position"
"""The replica's row per stream (one, or one per partition): the sequence applied up to, and
the identity of the stream it was fed from."""

SKIPPED_TABLE = "convstore_nats_skipped"
"""What the replica could not apply: each message of the streams not written by convstore (a
subject naming no conversation, headers missing or unreadable, a version already held), and
each run of the stream's newest sequences found deleted (no subject), one row each with why.
``verify`` reports them, and an append takes a skipped message on its conversation's subject
as that subject's newest (the stream checks it so)."""


def skipped_line(stream: str, seq: int, subject: str, problem: str) -> str:
    """How a skipped message is reported (by the follower's log, and by ``verify``); with
    no ``subject``, sequences up to ``seq`` the stream had deleted (``problem`` says so)."""
    if not subject:
        return f"stream {stream}: {problem}"
    return (
        f"stream {stream}: message {seq} on {subject} was not applied ({problem}): not "
        "written by convstore"
    )


def skipped_messages(path: Path) -> list[str]:
    """Each message the replica at ``path`` skipped, as :func:`skipped_line` reports it
    (read only; none from a replica of a version that skipped none)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    with closing(_readonly(path)) as conn:
        if not _table_exists(conn, SKIPPED_TABLE):
            return []
        rows = conn.execute(
            f"SELECT stream, seq, subject, problem FROM {SKIPPED_TABLE} ORDER BY stream, seq"  # noqa: S608 - fixed name
        ).fetchall()
    return [skipped_line(str(a), int(b), str(c), str(d)) for a, b, c, d in rows]


def owner_problem(
    replica: object,
    rows: Iterable[tuple[str, str]],
    streams: Sequence[str],
    identity: str | None,
) -> str | None:
    """Why a replica whose position ``rows`` are (stream, identity) pairs is not the one of
    the store of ``streams`` with ``identity`` (not compared when ``None``: not known yet);
    ``None`` when it is (or has no rows yet)."""
    found = dict(rows)
    if not found:
        return None
    if set(found) != set(streams):
        return (
            f"the replica {replica} belongs to another store (streams {', '.join(sorted(found))}"
            f"), not this one (streams {', '.join(streams)}): give each store a replica file "
            "of its own (?replica=PATH)"
        )
    for stream in streams:
        if identity is not None and found[stream] != identity:
            return (
                f"the replica {replica} was fed from another stream named {stream} (another "
                "cluster's, or one since deleted): give this store a replica file of its own, "
                "or remove this one and it is rebuilt"
            )
    return None


def replica_owner(path: Path, streams: Sequence[str]) -> list[tuple[str, str]]:
    """The position rows of the file at ``path`` (none for a missing or empty file, or an
    empty SQLite database), read only; :class:`InvalidInput` (one line) for a file that is
    not a replica of the store of ``streams``: another application's, or another store's
    replica. Nothing is written to it. The rows' identities are compared with the stream's
    by :func:`owner_problem` once the stream is read."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    try:
        with closing(_readonly(path)) as conn:
            conn.execute("BEGIN")  # one snapshot for every check
            tables = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
            ).fetchone()[0]
            if not tables:
                return []  # a SQLite file made by a first open that stopped before its tables
            if not _table_exists(conn, POSITION_TABLE):
                msg = (
                    f"{path} is not the replica of a convstore NATS store (it has no "
                    f"{POSITION_TABLE} table): give the store a replica file of its own "
                    "(?replica=PATH)"
                )
                raise InvalidInput(msg)
            rows = conn.execute(f"SELECT stream, identity FROM {POSITION_TABLE}").fetchall()  # noqa: S608 - fixed name
    except sqlite3.DatabaseError as exc:
        msg = f"the replica {path} cannot be read as a SQLite file: {exc}"
        raise InvalidInput(msg) from None
    refuse_other_owner(path, rows, streams, None)
    return [(str(stream), str(identity)) for stream, identity in rows]


def refuse_other_owner(
    replica: object,
    rows: Iterable[tuple[str, str]],
    streams: Sequence[str],
    identity: str | None,
) -> None:
    """:class:`InvalidInput` with :func:`owner_problem`'s line, if it has one."""
    if problem := owner_problem(replica, rows, streams, identity):
        raise InvalidInput(problem)
