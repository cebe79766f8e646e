"""Reading the audit read model without writing it: how far it has got, and full-text search.

The read model keeps an FTS5 index over the text of blocks (``blocks_fts``, external content
on ``blocks``, kept by triggers and built the same by a rebuild). The web pages open the file
read-only for each request (a rebuild may swap a new one in at any time) and never create it.
Every function is given the identity of the store it answers for, and each connection reads
the file's identity first: a file swapped in from another store (one that had shared its path)
answers nothing. That costs one primary-key lookup per request.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from convstore.audit.db import ERASURES, MARK, PROJECTION, SCHEMA_VERSION, STORE_ID
from convstore.domain.errors import InvalidInput
from convstore.views.hits import MARK_END, MARK_START, Hit

MAX_TERMS = 20
MAX_QUERY_CHARS = 500


@dataclass(frozen=True, slots=True)
class AuditState:
    """Whether the read model can answer, and the log position it holds."""

    path: Path
    position: int | None
    """The log position of the last event it holds; ``None`` when it cannot be used."""
    problem: str | None = None
    """Why it cannot be used (missing, another schema, unreadable), for the page."""
    erasures: int = 0
    """The ``seq`` of the last erasure it acted on."""


@dataclass(slots=True)
class Found:
    """One conversation with matching blocks: the best first."""

    conversation_id: UUID
    title: str | None
    rank: float
    """FTS5's bm25 rank of its best block: lower is better."""
    matches: int = 0
    hits: list[Hit] = field(default_factory=list)


class NotThisStore(sqlite3.DatabaseError):
    """The read model was built from another store than the one it is asked for."""


def _open(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=5.0)


def _connect(path: Path, store_id: str) -> sqlite3.Connection:
    """A read-only connection to ``path``, once its file says it is ``store_id``'s read model
    (the connection keeps that file open, so every query on it reads the file checked)."""
    conn = _open(path)
    try:
        row = conn.execute("SELECT value FROM _meta WHERE key = ?", [STORE_ID]).fetchone()
    except BaseException:
        conn.close()
        raise
    if row is None or row[0] != store_id:
        conn.close()
        msg = f"{path} is not the read model of store {store_id or '(no identity)'}"
        raise NotThisStore(msg)
    return conn


def audit_state(path: Path, store_id: str) -> AuditState:
    """What the read model at ``path`` holds, read without creating or changing it; it cannot
    be used unless it was built from the store whose identity is ``store_id``."""
    if not path.exists():
        return AuditState(path, None, f"there is no audit read model at {path} yet")
    try:
        with closing(_open(path)) as conn:
            meta = dict(conn.execute("SELECT key, value FROM _meta").fetchall())
            if meta.get("role") != MARK:
                return AuditState(path, None, f"{path} is not an audit read model")
            if meta.get(STORE_ID) != store_id:
                found = meta.get(STORE_ID)
                problem = (
                    f"{path} was built from another store (identity {found}) than this one "
                    f"({store_id or 'none'}): delete it or give another --audit path"
                    if found is not None
                    else f"{path} records no store identity yet (made by an older convstore)"
                )
                return AuditState(path, None, problem)
            if meta.get("schema_version") != str(SCHEMA_VERSION):
                problem = (
                    f"the audit read model at {path} has schema version "
                    f"{meta.get('schema_version')}; this convstore reads {SCHEMA_VERSION}"
                )
                return AuditState(path, None, problem)
            tracked = dict(conn.execute("SELECT projection, position FROM _tracking").fetchall())
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as exc:
        return AuditState(path, None, f"the audit read model at {path} cannot be read: {exc}")
    if "blocks_fts" not in tables:
        return AuditState(path, None, f"the audit read model at {path} has no full-text index")
    return AuditState(path, int(tracked.get(PROJECTION, 0)), erasures=int(tracked.get(ERASURES, 0)))


def match_expression(text: str) -> str:
    """The user's words as an FTS5 query that only ever means "all of these words": each
    word quoted as a string (no operators, columns or prefixes from the input)."""
    if len(text) > MAX_QUERY_CHARS:
        msg = f"a search is at most {MAX_QUERY_CHARS} characters"
        raise InvalidInput(msg)
    words = text.split()
    if not words:
        msg = "give some words to search for"
        raise InvalidInput(msg)
    if len(words) > MAX_TERMS:
        msg = f"a search is at most {MAX_TERMS} words"
        raise InvalidInput(msg)
    return " ".join('"' + word.replace('"', '""') + '"' for word in words)


RANK_SQL = """
SELECT b.conversation_id, min(blocks_fts.rank) AS best, count(*), c.title
FROM blocks_fts
JOIN blocks b ON b.rowid = blocks_fts.rowid
LEFT JOIN conversations c ON c.id = b.conversation_id
WHERE blocks_fts MATCH :query
GROUP BY b.conversation_id
ORDER BY best, b.conversation_id
"""

HITS_SQL = """
SELECT b.message_id, b.version, b.kind, m.role, m.position, m.withdrawn,
       snippet(blocks_fts, 0, :start, :end, '…', 16)
FROM blocks_fts
JOIN blocks b ON b.rowid = blocks_fts.rowid
LEFT JOIN messages m ON m.id = b.message_id
WHERE blocks_fts MATCH :query AND b.conversation_id = :conversation
ORDER BY blocks_fts.rank
LIMIT :limit
"""


def ranked_conversations(path: Path, text: str, store_id: str) -> list[Found]:
    """Every conversation whose block text holds every word of ``text``, best first (by its
    best block's bm25 rank), with how many of its blocks match; no hits yet (see
    :func:`add_hits`). Each match is ranked, none is left out."""
    query = match_expression(text)
    try:
        with closing(_connect(path, store_id)) as conn:
            rows = conn.execute(RANK_SQL, {"query": query}).fetchall()
    except NotThisStore:
        return []
    return [
        Found(UUID(conv), title, float(rank), matches=int(count))
        for conv, rank, count, title in rows
    ]


def add_hits(
    path: Path, text: str, found: Sequence[Found], store_id: str, *, per_conversation: int = 3
) -> None:
    """Fill each conversation's best ``per_conversation`` matching blocks, with snippets
    (none when the file is not ``store_id``'s read model)."""
    query = match_expression(text)
    try:
        conn = _connect(path, store_id)
    except NotThisStore:
        return
    with closing(conn):
        for entry in found:
            params = {
                "start": MARK_START,
                "end": MARK_END,
                "query": query,
                "conversation": str(entry.conversation_id),
                "limit": per_conversation,
            }
            entry.hits = [
                Hit(
                    UUID(message) if message else None,
                    int(version),
                    str(kind),
                    role,
                    position,
                    bool(withdrawn),
                    str(snippet or ""),
                )
                for message, version, kind, role, position, withdrawn, snippet in conn.execute(
                    HITS_SQL, params
                )
            ]


def message_position(path: Path, message: UUID, store_id: str) -> int | None:
    """A message's number in its conversation (1 for the first started), when the read
    model holds it: numbers never change once given, so a read model behind the log still
    knows every message it holds right."""
    try:
        with closing(_connect(path, store_id)) as conn:
            row = conn.execute("SELECT position FROM messages WHERE id = ?", [str(message)])
            found = row.fetchone()
    except sqlite3.Error:
        return None
    return None if found is None or found[0] is None else int(found[0])


def conversation_counts(
    path: Path, ids: Sequence[UUID], store_id: str
) -> dict[UUID, tuple[int, int, int]]:
    """For each conversation the read model holds: how many of its events it has applied,
    its messages and its tool calls, the provider's (hosted) included as ``audit tools`` lists
    them (compare the events with the listing's to know the counts are whole)."""
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    sql = (
        "SELECT c.id, c.events, c.messages, "  # noqa: S608 - adds question marks only
        "(SELECT coalesce(sum(m.tool_use_blocks + m.hosted_tool_use_blocks), 0) "
        "FROM messages m WHERE m.conversation_id = c.id) "
        f"FROM conversations c WHERE c.id IN ({marks})"
    )
    try:
        with closing(_connect(path, store_id)) as conn:
            rows = conn.execute(sql, [str(i) for i in ids]).fetchall()
    except sqlite3.Error:
        return {}
    return {
        UUID(conv): (int(events), int(messages), int(calls))
        for conv, events, messages, calls in rows
    }
