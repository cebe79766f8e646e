"""The audit read model: a SQLite file, written with sqlite-utils, rebuilt from the log at will.

Every batch of events is applied in one transaction together with the projection's position
in the log, and the position only moves from the value the batch was read after (a
compare-and-set). So a crash between batches loses nothing and counts nothing twice, and two
projectors racing on one file cannot both apply the same batch.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, assert_never

import sqlite_utils

from convstore.domain.blocks import (
    BLOCK_CLASSES,
    AnyToolResult,
    AnyToolUse,
    HostedToolResultBlock,
    HostedToolUseBlock,
)
from convstore.domain.errors import (
    InvalidInput,
    ProjectionConflict,
    ReadModelBusy,
    ReadModelMoved,
    StoreError,
)
from convstore.domain.events import (
    BlockAppended,
    BlockRecorded,
    Compacted,
    ConversationRenamed,
    ConversationStarted,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    LabelsRemoved,
    LabelsSet,
    MessageEnded,
    MessageInterrupted,
    MessageMeta,
    MessageMetaRecorded,
    MessageStarted,
    RewindUndone,
    Rewound,
)
from convstore.infrastructure.sqlite.recorder import create_private_file
from convstore.infrastructure.sqlite.transaction import delete_securely
from convstore.ports.erasure import Erasure
from convstore.projections.audit import block_facts
from convstore.projections.prose import tool_input_json

PROJECTION = "audit"
SCHEMA_VERSION = 6
"""4 added ``messages.document_blocks``; 5 the hosted kinds' counters, ``tool_calls.hosted``
and the ``documents`` table; 6 ``tool_calls.server`` (the MCP server a hosted call went to)."""
BUSY_TIMEOUT_SECONDS = 10.0

BLOCK_COUNTERS = {
    kind: f"{kind}_blocks"
    for kind in (str(cls.model_fields["type"].default) for cls in BLOCK_CLASSES)
}
"""Each block kind's counter column in ``messages``, in the union's order."""

_COUNTERS = ", ".join(BLOCK_COUNTERS.values())
_ZEROS = ", ".join("0" for _ in BLOCK_COUNTERS)

TABLES = (
    "conversations",
    "labels",
    "messages",
    "blocks",
    "tool_calls",
    "images",
    "documents",
    "compactions",
    "withdrawals",
)
"""The read model's tables, in the order a reader should learn them."""

DERIVED_TABLES = tuple(table for table in TABLES if table != "conversations")
"""The tables whose rows belong to a conversation through ``conversation_id``: an erasure
deletes from each (and from ``conversations`` by ``id``)."""

ERASURES = "erasures"
"""The ``_tracking`` row holding the ``seq`` of the last tombstone the read model acted on."""


META_COLUMNS: dict[str, type] = {
    "model": str,
    "provider_message_id": str,
    "stop_reason": str,
    "latency_ms": float,
    "input_tokens": int,
    "output_tokens": int,
    "cache_read_tokens": int,
    "cache_write_tokens": int,
    "reasoning_tokens": int,
    "meta_extra": str,
}
"""The message columns filled from :class:`~convstore.MessageMeta` (``meta_extra`` is JSON)."""

MARK = "convstore audit read model"
"""The ``_meta`` role of a file convstore made for an audit read model."""

STORE_ID = "store_id"
"""The ``_meta`` key holding the identity of the store the read model was built from
(:attr:`convstore.Store.identity`): a location can name another store later (a schema dropped
and made again, a file replaced), the identity cannot."""


def _is_moved(exc: sqlite3.Error) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_READONLY_DBMOVED


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class AuditDatabase:
    """One audit read-model file."""

    def __init__(self, path: Path, source: str, *, store_id: str, bulk: bool = False) -> None:
        """Open (or create) the read model at ``path``, built from the log at ``source``,
        the store whose identity is ``store_id``.

        ``bulk`` is for building a fresh file no reader sees yet (a rebuild): no journal, no
        fsync per batch, and the full-text index built once at the end by :meth:`finish_bulk`.
        The file is created owner-only (0600), and its tables in one transaction, so
        projectors starting together on a new path all find one complete read model.
        """
        self.path = path
        self.source = source
        self.store_id = store_id
        self._bulk = bulk
        self._open()

    def _open(self) -> None:
        path, bulk = self.path, self._bulk
        if not path.parent.is_dir():
            msg = f"cannot create the audit database {path}: {path.parent} does not exist"
            raise StoreError(msg)
        try:
            create_private_file(path)
            conn = delete_securely(
                sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None)
            )
            self.db = sqlite_utils.Database(conn)
            if bulk:
                self.db.execute("PRAGMA journal_mode = OFF")
                self.db.execute("PRAGMA synchronous = OFF")
            self._create_schema(self.source)
        except (sqlite3.Error, OSError) as exc:
            self._close_quietly()
            msg = f"cannot open the audit database {path}: {exc}"
            raise StoreError(msg) from exc
        except BaseException:
            self._close_quietly()
            raise

    def _close_quietly(self) -> None:
        db: sqlite_utils.Database | None = getattr(self, "db", None)
        if db is not None:
            db.close()

    def close(self) -> None:
        """Close the file."""
        self.db.close()

    def reopen(self) -> None:
        """Close this connection and open the file now at the path (after a rebuild's swap)."""
        self.close()
        self._bulk = False
        self._open()

    @contextmanager
    def _write_transaction(self) -> Iterator[None]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``: waits for the write lock up front, rolls back on error.

        A swap by a rebuild surfaces as :class:`ReadModelMoved`, a lock held past the busy
        timeout as :class:`ReadModelBusy`; either way nothing of the batch was written.
        """
        conn = self.db.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            if _is_moved(exc):
                msg = f"the audit database {self.path} was replaced by a rebuild"
                raise ReadModelMoved(msg) from exc
            if _is_busy(exc):
                msg = (
                    f"the audit database {self.path} stayed locked for "
                    f"{BUSY_TIMEOUT_SECONDS:g} s (a long query?); try again"
                )
                raise ReadModelBusy(msg) from exc
            raise

    # -- schema --------------------------------------------------------------------------

    def _create_schema(self, source: str) -> None:
        db = self.db
        if "_meta" not in db.table_names():
            with self._write_transaction():
                if "_meta" not in db.table_names():  # another projector may have won the race
                    self._create_tables(source)
        meta = {row["key"]: row["value"] for row in db.table("_meta").rows}
        if meta.get("source") != source:
            msg = (
                f"the audit database {self.path} was built from {meta.get('source')}, "
                f"not {source}; give another --audit path or delete it"
            )
            raise InvalidInput(msg)
        if STORE_ID not in meta:  # built by a version before identities, from this location
            with self._write_transaction():
                db.execute(
                    "INSERT OR IGNORE INTO _meta (key, value) VALUES (?, ?)",
                    [STORE_ID, self.store_id],
                )
            meta = {row["key"]: row["value"] for row in db.table("_meta").rows}
        if meta[STORE_ID] != self.store_id:
            msg = (
                f"the audit database {self.path} was built from another store at {source} "
                f"(identity {meta[STORE_ID] or 'none'}, not {self.store_id or 'none'}); "
                "give another --audit path or delete it"
            )
            raise InvalidInput(msg)
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            msg = (
                f"the audit database {self.path} has schema version "
                f"{meta.get('schema_version')}, this convstore writes {SCHEMA_VERSION}: "
                "run `convstore rebuild`"
            )
            raise InvalidInput(msg)

    def _create_tables(self, source: str) -> None:
        db = self.db
        with db.atomic():
            db.table("_meta").insert_all(
                [
                    {"key": "role", "value": MARK},
                    {"key": "source", "value": source},
                    {"key": STORE_ID, "value": self.store_id},
                    {"key": "schema_version", "value": str(SCHEMA_VERSION)},
                ],
                pk="key",
            )
            db.table("_tracking").insert({"projection": PROJECTION, "position": 0}, pk="projection")
            db.table("conversations").create(
                {
                    "id": str,
                    "title": str,
                    "created_at": str,
                    "last_event_at": str,
                    "events": int,
                    "messages": int,
                    "blocks": int,
                },
                pk="id",
            )
            db.table("messages").create(
                {
                    "id": str,
                    "conversation_id": str,
                    "position": int,
                    "role": str,
                    "status": str,
                    "interrupt_reason": str,
                    "started_at": str,
                    "closed_at": str,
                    "blocks": int,
                    **dict.fromkeys(BLOCK_COUNTERS.values(), int),
                    **META_COLUMNS,
                    "withdrawn": int,
                },
                pk="id",
            )
            db.table("labels").create(
                {"conversation_id": str, "key": str, "value": str, "set_at": str},
                pk=("conversation_id", "key"),
            )
            db.table("withdrawals").create(
                {"conversation_id": str, "rewind_version": int, "message_id": str},
                pk=("conversation_id", "rewind_version", "message_id"),
            )
            db.table("blocks").create(
                {
                    "conversation_id": str,
                    "version": int,
                    "message_id": str,
                    "idx": int,
                    "kind": str,
                    "tool_name": str,
                    "text": str,
                    "byte_size": int,
                    "recorded_at": str,
                },
                pk=("conversation_id", "version"),
            )
            db.table("tool_calls").create(
                {
                    "conversation_id": str,
                    "call_id": str,
                    "name": str,
                    "input": str,
                    "message_id": str,
                    "called_at": str,
                    "call_found": int,
                    "hosted": int,
                    "server": str,
                    "outcome": str,
                    "results": int,
                    "result_message_id": str,
                    "result_size": int,
                    "result_at": str,
                    "seconds_to_result": float,
                },
                pk=("conversation_id", "call_id"),
            )
            db.table("images").create(
                {
                    "conversation_id": str,
                    "version": int,
                    "message_id": str,
                    "part": int,
                    "sha256": str,
                    "media_type": str,
                    "byte_size": int,
                    "width": int,
                    "height": int,
                }
            )
            db.table("documents").create(
                {
                    "conversation_id": str,
                    "version": int,
                    "message_id": str,
                    "part": int,
                    "sha256": str,
                    "media_type": str,
                    "name": str,
                    "byte_size": int,
                    "url": str,
                    "file_id": str,
                }
            )
            db.table("compactions").create(
                {
                    "conversation_id": str,
                    "version": int,
                    "through_message_id": str,
                    "summary": str,
                    "recorded_at": str,
                },
                pk=("conversation_id", "version"),
            )
            db.table("messages").create_index(["conversation_id", "position"])
            db.table("labels").create_index(["key", "value"])
            db.table("blocks").create_index(["message_id"])
            db.table("blocks").create_index(["kind"])
            db.table("tool_calls").create_index(["outcome", "name"])
            db.table("tool_calls").create_index(["name"])
            db.table("withdrawals").create_index(["message_id"])
            db.table("images").create_index(["sha256"])
            db.table("images").create_index(["conversation_id", "version"])
            db.table("documents").create_index(["sha256"])
            db.table("documents").create_index(["conversation_id", "version"])
            if not self._bulk:
                db.table("blocks").enable_fts(["text"], create_triggers=True)

    def finish_bulk(self) -> None:
        """End a bulk build: index the text once, and make the file durable like any other."""
        if self._bulk:
            self.db.table("blocks").enable_fts(["text"], create_triggers=True)
            self.db.execute("PRAGMA journal_mode = DELETE")
            self._bulk = False

    # -- tracking ------------------------------------------------------------------------

    def position(self) -> int:
        """The notification id of the last event this read model holds (0 for none)."""
        row = self.db.execute(
            "SELECT position FROM _tracking WHERE projection = ?", [PROJECTION]
        ).fetchone()
        return int(row[0])

    def apply(self, batch: Sequence[tuple[int, Event]], *, after: int) -> int:
        """Apply events (with their log positions) read after position ``after``, atomically.

        The position moves first, in the same transaction: that takes the file's write lock,
        so a second projector waits, then finds the position moved and raises
        :class:`ProjectionConflict` having changed nothing. Returns the new position.
        """
        if not batch:
            return after
        position = batch[-1][0]
        with self._write_transaction():
            moved = self.db.execute(
                "UPDATE _tracking SET position = ? WHERE projection = ? AND position = ?",
                [position, PROJECTION, after],
            )
            if moved.rowcount != 1:
                msg = f"the audit read model moved past position {after} before this batch"
                raise ProjectionConflict(msg)
            for _, event in batch:
                self._apply(event)
        return position

    # -- erasures -------------------------------------------------------------------------

    def erasures_seen(self) -> int:
        """The ``seq`` of the last tombstone this read model acted on (0 for none)."""
        row = self.db.execute(
            "SELECT position FROM _tracking WHERE projection = ?", [ERASURES]
        ).fetchone()
        return int(row[0]) if row else 0

    def forget(self, erasures: Sequence[Erasure], *, after: int) -> int:
        """Delete every row derived from the erased conversations, atomically with the
        tombstone position (a compare-and-set from ``after``, as :meth:`apply`); the deleted
        bytes are overwritten and the full-text index is merged so no erased word stays in
        it. Returns the new tombstone position."""
        if not erasures:
            return after
        seq = erasures[-1].seq
        with self._write_transaction():
            moved = self.db.execute(
                "INSERT INTO _tracking (projection, position) VALUES (?, ?) "
                "ON CONFLICT (projection) DO UPDATE SET position = excluded.position "
                "WHERE _tracking.position = ?",
                [ERASURES, seq, after],
            )
            if moved.rowcount != 1 or self.erasures_seen() != seq:
                msg = f"the audit read model's erasures moved past {after} before this batch"
                raise ProjectionConflict(msg)
            for erasure in erasures:
                conv = str(erasure.id)
                self.db.execute("DELETE FROM conversations WHERE id = ?", [conv])
                for table in DERIVED_TABLES:
                    self.db.execute(
                        f"DELETE FROM {table} WHERE conversation_id = ?",  # noqa: S608 - fixed names
                        [conv],
                    )
        if "blocks_fts" in self.db.table_names():
            with self._write_transaction():
                self.db.execute("INSERT INTO blocks_fts (blocks_fts) VALUES ('optimize')")
        return seq

    # -- one event -----------------------------------------------------------------------

    def _apply(self, event: Event) -> None:
        sql = self.db.execute
        conv = str(event.originator_id)
        at = event.timestamp.isoformat()
        match event:
            case ConversationStarted():
                sql(
                    "INSERT INTO conversations (id, title, created_at, last_event_at, events, "
                    "messages, blocks) VALUES (?, ?, ?, ?, 1, 0, 0)",
                    [conv, event.title, at, at],
                )
                return
            case MessageStarted():
                self._open_message(str(event.message_id), conv, event.role, at)
            case BlockAppended():
                self._apply_block(event, conv, at)
            case BlockRecorded():
                message = str(event.message_id)
                if event.index == 0 and not self._known(message):
                    self._open_message(message, conv, event.role, at)
                self._apply_block(event, conv, at)
                if event.closes:
                    self._close(message, at)
                if event.meta is not None:
                    self._apply_meta(event.meta, message)
            case MessageEnded():
                self._close(str(event.message_id), at)
            case MessageInterrupted():
                sql(
                    "UPDATE messages SET status = 'interrupted', closed_at = ?, "
                    "interrupt_reason = ? WHERE id = ?",
                    [at, event.reason, str(event.message_id)],
                )
            case Rewound():
                after = 0 if event.to is None else "(SELECT position FROM messages WHERE id = ?)"
                params = [conv, event.originator_version, conv]
                if event.to is not None:
                    params.append(str(event.to))
                sql(
                    "INSERT OR IGNORE INTO withdrawals (conversation_id, rewind_version, "  # noqa: S608 - fixed text
                    "message_id) SELECT ?, ?, id FROM messages WHERE conversation_id = ? "
                    f"AND position > {after}",
                    params,
                )
                self._mark_withdrawn(conv)
            case RewindUndone():
                sql(
                    "DELETE FROM withdrawals WHERE conversation_id = ? AND rewind_version = ?",
                    [conv, event.rewind],
                )
                self._mark_withdrawn(conv)
            case EntriesRecorded() | EntriesDeleted():
                pass  # counted below with every event
            case ConversationRenamed():
                sql("UPDATE conversations SET title = ? WHERE id = ?", [event.title, conv])
            case LabelsSet():
                for key, value in event.labels.items():
                    sql(
                        "INSERT INTO labels (conversation_id, key, value, set_at) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (conversation_id, key) "
                        "DO UPDATE SET value = excluded.value, set_at = excluded.set_at",
                        [conv, key, value, at],
                    )
            case LabelsRemoved():
                for key in event.keys:
                    sql("DELETE FROM labels WHERE conversation_id = ? AND key = ?", [conv, key])
            case MessageMetaRecorded():
                self._apply_meta(event.meta, str(event.message_id))
            case Compacted():
                sql(
                    "INSERT INTO compactions (conversation_id, version, through_message_id, "
                    "summary, recorded_at) VALUES (?, ?, ?, ?, ?)",
                    [conv, event.originator_version, str(event.through), event.summary, at],
                )
            case _:
                assert_never(event)
        sql(
            "UPDATE conversations SET events = events + 1, last_event_at = ? WHERE id = ?",
            [at, conv],
        )

    def _open_message(self, message: str, conv: str, role: str, at: str) -> None:
        """A message opened (by its start, or by its first block)."""
        self.db.execute(
            "INSERT INTO messages (id, conversation_id, position, role, status, "  # noqa: S608 - fixed columns
            f"started_at, blocks, {_COUNTERS}, withdrawn) VALUES (?, ?, "
            "(SELECT messages + 1 FROM conversations WHERE id = ?), "
            f"?, 'open', ?, 0, {_ZEROS}, 0)",
            [message, conv, conv, role, at],
        )
        self.db.execute("UPDATE conversations SET messages = messages + 1 WHERE id = ?", [conv])

    def _known(self, message: str) -> bool:
        """Whether a message's row exists (a start opened it before its first block)."""
        found = self.db.execute("SELECT 1 FROM messages WHERE id = ?", [message]).fetchone()
        return found is not None

    def _close(self, message: str, at: str) -> None:
        self.db.execute(
            "UPDATE messages SET status = 'ended', closed_at = ? WHERE id = ?", [at, message]
        )

    def _apply_meta(self, meta: MessageMeta, message: str) -> None:
        """Fields given replace the message's earlier ones; ``extra`` objects merge."""
        usage = meta.usage
        values: dict[str, Any] = {
            "model": meta.model,
            "provider_message_id": meta.provider_message_id,
            "stop_reason": meta.stop_reason,
            "latency_ms": meta.latency_ms,
            "input_tokens": usage and usage.input_tokens,
            "output_tokens": usage and usage.output_tokens,
            "cache_read_tokens": usage and usage.cache_read_tokens,
            "cache_write_tokens": usage and usage.cache_write_tokens,
            "reasoning_tokens": usage and usage.reasoning_tokens,
        }
        sets = ", ".join(f"{name} = coalesce(?, {name})" for name in values)
        self.db.execute(
            f"UPDATE messages SET {sets}, "  # noqa: S608 - columns from a fixed table
            "meta_extra = json_patch(coalesce(meta_extra, '{}'), ?) WHERE id = ?",
            [*values.values(), json.dumps(meta.extra), message],
        )

    def _mark_withdrawn(self, conv: str) -> None:
        """Set each message's ``withdrawn`` flag from the rewinds in force."""
        self.db.execute(
            "UPDATE messages SET withdrawn = EXISTS (SELECT 1 FROM withdrawals w "
            "WHERE w.message_id = messages.id) WHERE conversation_id = ?",
            [conv],
        )

    def _apply_block(self, event: BlockAppended | BlockRecorded, conv: str, at: str) -> None:
        sql = self.db.execute
        message = str(event.message_id)
        block = event.block
        facts = block_facts(block)
        sql(
            "INSERT INTO blocks (conversation_id, version, message_id, idx, kind, tool_name, "
            "text, byte_size, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                conv,
                event.originator_version,
                message,
                event.index,
                facts.kind,
                event.tool_name,
                facts.text,
                facts.byte_size,
                at,
            ],
        )
        counter = BLOCK_COUNTERS[facts.kind]
        sql(
            f"UPDATE messages SET blocks = blocks + 1, {counter} = {counter} + 1 "  # noqa: S608 - column from a fixed table
            "WHERE id = ?",
            [message],
        )
        sql("UPDATE conversations SET blocks = blocks + 1 WHERE id = ?", [conv])
        for image in facts.images:
            sql(
                "INSERT INTO images (conversation_id, version, message_id, part, sha256, "
                "media_type, byte_size, width, height) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    conv,
                    event.originator_version,
                    message,
                    image.part,
                    image.sha256,
                    image.media_type,
                    image.byte_size,
                    image.width,
                    image.height,
                ],
            )
        for document in facts.documents:
            sql(
                "INSERT INTO documents (conversation_id, version, message_id, part, sha256, "
                "media_type, name, byte_size, url, file_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    conv,
                    event.originator_version,
                    message,
                    document.part,
                    document.sha256,
                    document.media_type,
                    document.name,
                    document.byte_size,
                    document.url,
                    document.file_id,
                ],
            )
        if isinstance(block, AnyToolUse):
            hosted = int(isinstance(block, HostedToolUseBlock))
            server = block.server if isinstance(block, HostedToolUseBlock) else None
            sql(
                "INSERT INTO tool_calls (conversation_id, call_id, name, input, message_id, "
                "called_at, call_found, hosted, server, outcome, results) "
                "VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, 'missing', 0) "
                "ON CONFLICT (conversation_id, call_id) DO UPDATE SET name = excluded.name, "
                "input = excluded.input, message_id = excluded.message_id, "
                "called_at = excluded.called_at, call_found = 1, hosted = excluded.hosted, "
                "server = excluded.server",
                [conv, block.id, block.name, tool_input_json(block), message, at, hosted, server],
            )
        elif isinstance(block, AnyToolResult):
            outcome = "error" if block.is_error else "ok"
            # A result whose call was never recorded tells by its own kind who ran the call.
            hosted = int(isinstance(block, HostedToolResultBlock))
            sql(
                "INSERT INTO tool_calls (conversation_id, call_id, name, call_found, hosted, "
                "outcome, results, result_message_id, result_size, result_at) "
                "VALUES (?, ?, ?, 0, ?, ?, 1, ?, ?, ?) "
                "ON CONFLICT (conversation_id, call_id) DO UPDATE SET "
                "outcome = excluded.outcome, results = results + 1, "
                "result_message_id = coalesce(result_message_id, excluded.result_message_id), "
                "result_size = coalesce(result_size, excluded.result_size), "
                "result_at = coalesce(result_at, excluded.result_at), "
                "seconds_to_result = coalesce(seconds_to_result, "
                "round((julianday(excluded.result_at) - julianday(called_at)) * 86400, 3))",
                [
                    conv,
                    block.tool_use_id,
                    event.tool_name,
                    hosted,
                    outcome,
                    message,
                    facts.byte_size,
                    at,
                ],
            )

    # -- queries -------------------------------------------------------------------------

    def query(
        self, sql: str, params: dict[str, Any] | list[Any] | None = None
    ) -> list[dict[str, Any]]:
        """Rows of a query over the read model (used by convstore's own commands)."""
        return list(self.db.query(sql, params or []))
