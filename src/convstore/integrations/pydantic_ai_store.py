"""Pydantic AI's ``ConversationStore`` kept in a convstore store.

    pip install -e '.[pydantic-ai]'   # in the convstore checkout

:class:`ConvstoreConversationStore` implements the storage primitives of
``pydantic_ai.conversation_store.ConversationStore``, so ``load``, ``save``, ``branch``,
``fork``, ``list_conversations``, ``update`` and ``delete`` (the base class's) run on convstore:

- **One conversation per Pydantic AI conversation.** Its id is a UUID5 of the Pydantic AI id
  and a generation (see :func:`conversation_for`); a deleted conversation is erased, and the id
  used again starts the next generation, so every process finds the live one.
- **Entries verbatim.** Each ``ConversationEntry`` is a runtime entry (its ``uuid`` the entry
  id) holding the entry as Pydantic AI serialises it, and the message it holds is recorded as
  convstore message(s) beside it in the same write, converted as :mod:`.pydantic_ai`'s
  ``record_messages`` converts it: ``convstore replay``, ``show`` and ``audit`` see it.
- **The record** (head, usage, deferred tool requests, scope, title, metadata, branches,
  revision) is an entry too, written last in the same write as the entries it points at: the
  newest record entry of the log is the conversation's record. Each write is conditional on
  the log's version the record was read at (``record_entries(..., expected_version=)``), so of
  two writers holding the same revision one wins and the other gets ``ConversationConflict``
  with nothing written.
- **The listing.** After each write the record is published as labels (kind, scope, the
  record's JSON), so ``read_records`` reads only convstore's listing index, never a log.
- **A fork copies** the entries of the history it keeps into its own conversation (same ids),
  as :meth:`convstore.Store.fork` does: every conversation holds every entry its history and
  branches reach, so erasing one never breaks another.
- **Delete erases** (:meth:`convstore.Store.erase`): the conversation's events are deleted for
  good, and on SQLite the bytes are overwritten and the write-ahead log emptied.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Sequence
from typing import cast
from uuid import UUID, uuid4, uuid5

from convstore.ports.extras import missing_extra

try:
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationDetails,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )
    from pydantic_ai.messages import ModelRequest
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    _HINT = missing_extra(
        "convstore.integrations.pydantic_ai_store (Pydantic AI 2.78 or newer)",
        "pydantic-ai",
        "'pydantic-ai-slim>=2.78'",
    )
    raise ImportError(_HINT) from None

from pydantic import JsonValue, TypeAdapter

from convstore.domain.blocks import TextBlock
from convstore.domain.conversation import EntryMessage
from convstore.domain.errors import (
    ConversationErased,
    ConversationNotFound,
    InvalidInput,
    VersionConflict,
)
from convstore.domain.events import EntriesDeleted, EntriesRecorded, Role
from convstore.domain.events import Event as LogEvent
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_name
from convstore.integrations.pydantic_ai import convert_messages
from convstore.store import Store
from convstore.store.aio import AsyncStore, as_async

__all__ = ["ConvstoreConversationStore", "conversation_for"]

NAMESPACE = UUID("5b0f8a3e-9c41-4d2a-8e6f-1a7c3d9b2e54")
"""The UUID5 namespace of Pydantic AI conversation ids (fixed forever: it is how an id finds
its conversation)."""

SOURCE_PREFIX = "pydantic-ai:"
"""``ConversationStarted.source`` of a Pydantic AI conversation: this, then its id as JSON."""

KIND, SCOPE, RECORD = "pydantic-ai.kind", "pydantic-ai.scope", "pydantic-ai.record"
"""The labels the listing index lists Pydantic AI conversations by, and the record's JSON."""

KIND_VALUE = "conversation"

ENTRY_KEY, RECORD_KEY, DELETED_KEY = (
    "pydantic_ai_entry",
    "pydantic_ai_record",
    "pydantic_ai_deleted",
)
"""The key of a runtime entry holding a ``ConversationEntry``, a ``ConversationRecord``, or the
mark a delete writes before it erases."""

TOO_LARGE = json.dumps({"too_large": True})
"""The record label's value when the record's JSON is larger than a label holds."""

WRITE_ATTEMPTS = 50
"""How many times a write reads again after losing the race to a write that kept the revision
(a label, a title, an update of the details)."""

PUBLISH_ATTEMPTS = 3
"""How many times a write puts a record in the labels before it leaves the listing to the
next write (only a newer record written meanwhile, by another writer, makes it look again)."""

ENTRY: TypeAdapter[ConversationEntry] = TypeAdapter(ConversationEntry)
RECORD_JSON: TypeAdapter[ConversationRecord] = TypeAdapter(ConversationRecord)

Json = dict[str, JsonValue]


def conversation_for(conversation_id: str, generation: int = 0) -> UUID:
    """The convstore conversation that holds generation ``generation`` of a Pydantic AI
    conversation (0 until it is first deleted, then 1, …; for ``convstore show``, ``replay``)."""
    return uuid5(NAMESPACE, json.dumps([conversation_id, generation]))


@dataclasses.dataclass
class _Fold:
    """One conversation's log folded: its entries by id, its newest record, its version."""

    conversation: UUID
    version: int = 0
    changes: int | None = None
    exists: bool = False
    entries: dict[str, Json] = dataclasses.field(default_factory=dict[str, Json])
    record: Json | None = None
    deleted: bool = False
    """A delete marked it and the erasure has not finished (a process killed between)."""

    def apply(self, events: Sequence[LogEvent]) -> None:
        for event in events:
            if event.originator_version <= self.version:
                continue  # folded already, by a read that ran beside this one
            self.exists = True
            self.version = event.originator_version
            if isinstance(event, EntriesDeleted):  # convstore's delete_entries: nothing loads
                self.entries, self.record = {}, None
            if not isinstance(event, EntriesRecorded):
                continue
            for entry in event.entries:
                if ENTRY_KEY in entry:
                    self.entries[cast("str", entry["uuid"])] = cast("Json", entry[ENTRY_KEY])
                elif RECORD_KEY in entry:
                    self.record, self.deleted = cast("Json", entry[RECORD_KEY]), False
                elif DELETED_KEY in entry:
                    self.record, self.deleted = None, True

    def current(self) -> ConversationRecord | None:
        return None if self.record is None else RECORD_JSON.validate_python(self.record)


class ConvstoreConversationStore(ConversationStore):
    """Pydantic AI's ``ConversationStore`` on a convstore :class:`~convstore.Store` or
    :class:`~convstore.AsyncStore` (a ``Store`` is taken through
    :func:`convstore.store.aio.as_async`, so no store call runs on the event loop). See the
    module's docstring for what is kept where.

    The object keeps each conversation it has read folded in memory and catches it up with
    one read of the events after it, so a ``save`` after a ``load`` reads only what changed.
    """

    def __init__(
        self, store: Store | AsyncStore, *, erase_reason: str = "pydantic-ai delete"
    ) -> None:
        self.store = as_async(store)
        self.erase_reason = parse_name(
            erase_reason, "erase_reason", self.store.limits.max_note_bytes
        )
        """The reason each erasure's tombstone records (``store.erasures()`` shows it)."""
        self._folds: dict[UUID, _Fold] = {}
        self._erased: set[UUID] = set()
        self._erasures_seen = 0

    @property
    def limits(self) -> Limits:
        return self.store.limits

    # -- the storage primitives ------------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's newest record, from its log (caught up with one read)."""
        fold = await self._live(conversation_id)
        return fold.current()

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        """The records as published in the listing index's labels (one indexed read; a
        record too large for a label is read from its log), newest ``updated_at`` first."""
        labels = {KIND: KIND_VALUE}
        if scope is not None:
            labels[SCOPE] = json.dumps(scope)
        records: list[ConversationRecord] = []
        for info in await self.store.conversations(labels=labels):
            raw = json.loads(info.labels.get(RECORD, "null"))
            if isinstance(raw, dict) and raw.get("too_large"):
                raw = (await self._fold(info.id)).record
            if raw is not None:
                records.append(RECORD_JSON.validate_python(raw))
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        """Write the record and its new entries (their messages as convstore messages) in one
        conditional write; ``ConversationConflict`` and nothing written when the stored
        revision is not ``expected_revision``."""
        conversation_id = record.conversation_id
        new = [_entry_json(entry) for entry in new_entries]
        carried = await asyncio.to_thread(_carried_by_id, new_entries, self.limits)
        for _ in range(WRITE_ATTEMPTS):
            fold = await self._live(conversation_id)
            version = fold.version  # read with the record: a later read moves the fold on
            if fold.deleted and expected_revision is None:
                await self._erase(fold.conversation)  # finish a delete killed before erasing
                continue
            stored = fold.current()
            if (stored.revision if stored is not None else None) != expected_revision:
                raise ConversationConflict(conversation_id)
            if not fold.exists:
                await self._create(fold.conversation, conversation_id)
                continue
            try:
                copies = await self._missing(fold, record, new)
            except LookupError:
                raise ConversationConflict(conversation_id) from None
            if stored is not None:  # the details are update's, never a save's
                record = dataclasses.replace(record, title=stored.title, metadata=stored.metadata)
            carried.update(await asyncio.to_thread(_carried_by_id, copies, self.limits))
            body = _record_json(record)
            entries = [*map(_entry_json, copies), *new, _record_entry(body)]
            if await self._written(fold.conversation, version, entries, carried):
                await self._publish(fold.conversation, body)
                return
        raise ConversationConflict(conversation_id)

    async def write_details(
        self,
        conversation_id: str,
        details: ConversationDetails,
        *,
        expected_revision: str,
        expected: ConversationDetails | None = None,
    ) -> ConversationRecord:
        """Write a new record with the title or metadata changed (the revision and
        ``updated_at`` kept), conditional as :meth:`write_record`; the title is also the
        conversation's convstore title."""
        for key in [*details, *(expected or {})]:
            if key not in {"title", "metadata"}:
                msg = f"{type(self).__name__} does not store a conversation's {key!r}"
                raise NotImplementedError(msg)
        for _ in range(WRITE_ATTEMPTS):
            fold = await self._live(conversation_id)
            version, stored = fold.version, fold.current()
            if stored is None or stored.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            if expected and any(getattr(stored, key) != value for key, value in expected.items()):
                raise ConversationConflict(conversation_id)
            updated = dataclasses.replace(stored, **details)
            body = _record_json(updated)
            if await self._written(fold.conversation, version, [_record_entry(body)], {}):
                if "title" in details:
                    await self._retitle(fold.conversation, updated.title)
                await self._publish(fold.conversation, body)
                return RECORD_JSON.validate_python(body)
        raise ConversationConflict(conversation_id)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        """Mark the conversation deleted (conditional on ``expected_revision``, so a save that
        won the race is never erased unseen), then erase it: its events, entries and messages
        are deleted for good (convstore's erase; a tombstone stays). Forks keep their copies."""
        for _ in range(WRITE_ATTEMPTS):
            fold = await self._live(conversation_id)
            version, stored = fold.version, fold.current()
            if stored is None or stored.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            mark: Json = {"uuid": f"deleted:{uuid4()}", DELETED_KEY: True}
            if await self._written(fold.conversation, version, [mark], {}):
                await self._erase(fold.conversation)
                return
        raise ConversationConflict(conversation_id)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        """The entry, from a conversation this object has read (else found through the
        listing, reading Pydantic AI conversations' logs until one holds it); ``KeyError``
        when no stored conversation holds it."""
        await self._erasures()
        return ENTRY.validate_python((await self._holder(entry_id)).entries[entry_id])

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The history up to ``head_id``, read from the one conversation that holds it (every
        conversation holds its whole history), with no read per entry."""
        if head_id is None:
            return []
        await self._erasures()
        entries = (await self._holder(head_id)).entries
        found: list[ConversationEntry] = []
        entry_id: str | None = head_id
        while entry_id is not None and (limit is None or len(found) < limit):
            raw = entries.get(entry_id)
            entry = (
                ENTRY.validate_python(raw) if raw is not None else await self.read_entry(entry_id)
            )
            found.append(entry)
            entry_id = entry.parent_id
        found.reverse()
        return found

    # -- reading ---------------------------------------------------------------------------

    async def _erasures(self) -> None:
        """Take in the erasures since the last look (one read of the tombstones after it)."""
        for erasure in await self.store.erasures(self._erasures_seen):
            self._erased.add(erasure.id)
            self._folds.pop(erasure.id, None)
            self._erasures_seen = erasure.seq

    async def _live(self, conversation_id: str) -> _Fold:
        """The fold of the conversation's live generation: the first not erased (it may not
        exist yet)."""
        await self._erasures()
        generation = 0
        while (conversation := conversation_for(conversation_id, generation)) in self._erased:
            generation += 1
        return await self._fold(conversation)

    async def _fold(self, conversation: UUID) -> _Fold:
        """The conversation folded, caught up with one read of the events after the fold."""
        fold = self._folds.setdefault(conversation, _Fold(conversation))
        changes, events = await self.store.events_after(conversation, fold.version)
        if fold.changes is not None and changes != fold.changes:  # rows changed in place
            fold = self._folds[conversation] = _Fold(conversation)
            changes, events = await self.store.events_after(conversation, 0)
        fold.changes = changes
        fold.apply(events)
        return fold

    async def _holder(self, entry_id: str) -> _Fold:
        """A fold holding the entry: one already read, else the listed conversations' in turn,
        each caught up (another process may have written it since this one read it)."""
        for fold in list(self._folds.values()):
            if entry_id in fold.entries:
                return fold
        for info in await self.store.conversations(labels={KIND: KIND_VALUE}):
            if entry_id in (fold := await self._fold(info.id)).entries:
                return fold
        raise KeyError(entry_id)

    async def _missing(
        self, fold: _Fold, record: ConversationRecord, new: list[Json]
    ) -> list[ConversationEntry]:
        """The entries of other conversations the record reaches (a fork's kept history),
        oldest first, to copy in; ``LookupError`` when one is in no stored conversation."""
        have = set(fold.entries) | {cast("str", entry["uuid"]) for entry in new}
        first_parents = [cast("str | None", cast("Json", e[ENTRY_KEY])["parent_id"]) for e in new]
        copies: list[ConversationEntry] = []
        for tip in [record.head_id, *record.branches, *first_parents]:
            chain: list[ConversationEntry] = []
            entry_id = tip
            while entry_id is not None and entry_id not in have:
                entry = await self.read_entry(entry_id)
                chain.append(entry)
                have.add(entry_id)
                entry_id = entry.parent_id
            copies += reversed(chain)
        return copies

    # -- writing ---------------------------------------------------------------------------

    async def _create(self, conversation: UUID, conversation_id: str) -> None:
        """Start the conversation of a generation (another writer may have just done so)."""
        try:
            await self.store.new_conversation(
                conversation_id=conversation, source=SOURCE_PREFIX + json.dumps(conversation_id)
            )
        except ConversationErased:
            return  # erased meanwhile: the next look finds the next generation
        except InvalidInput:
            if not (await self._fold(conversation)).exists:
                raise  # not a race: the id cannot be kept (longer than a source holds)

    async def _written(
        self,
        conversation: UUID,
        version: int,
        entries: list[Json],
        carried: dict[str, list[EntryMessage]],
    ) -> bool:
        """Record ``entries`` (and the messages their entries carry) if the log is still at
        ``version``, the version its record was read at; ``False`` when it moved on or was
        erased (nothing written)."""

        def messages(fresh: list[Json]) -> tuple[list[EntryMessage], list[tuple[str, int]]]:
            return [m for entry in fresh for m in carried.get(cast("str", entry["uuid"]), [])], []

        try:
            await self.store.record_entries(
                conversation, entries, messages, expected_version=version
            )
        except (VersionConflict, ConversationNotFound):
            return False
        return True

    async def _publish(self, conversation: UUID, body: Json) -> None:
        """Put the record in the conversation's labels for the listing; then, if another
        writer's newer record was written meanwhile and this label came after its own, put
        that one back (a few times at most: each look costs a read and a write)."""
        for _ in range(PUBLISH_ATTEMPTS):
            text = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
            if len(text) > self.limits.max_note_bytes:
                text = TOO_LARGE
            labels = {KIND: KIND_VALUE, RECORD: text}
            if (scope := body.get("scope")) is not None:
                labels[SCOPE] = json.dumps(scope)
            try:
                await self.store.set_labels(conversation, labels)
                fold = await self._fold(conversation)
            except ConversationNotFound:
                return  # deleted meanwhile
            if fold.record is None or fold.record == body:
                return
            body = fold.record

    async def _retitle(self, conversation: UUID, title: str | None) -> None:
        """The conversation's convstore title, for ``convstore list`` (the record keeps the
        title whatever it holds; one convstore cannot keep, such as a NUL, is left out)."""
        try:
            await self.store.rename(conversation, title)
        except ConversationNotFound:
            return
        except InvalidInput:
            await self.store.rename(conversation, None)

    async def _erase(self, conversation: UUID) -> None:
        # ConversationNotFound: erased already (ConversationErased), or never started.
        with contextlib.suppress(ConversationNotFound):
            await self.store.erase(conversation, reason=self.erase_reason)
        self._erased.add(conversation)
        self._folds.pop(conversation, None)


def _entry_json(entry: ConversationEntry) -> Json:
    return {"uuid": entry.id, ENTRY_KEY: ENTRY.dump_python(entry, mode="json")}


def _record_json(record: ConversationRecord) -> Json:
    dumped: Json = RECORD_JSON.dump_python(record, mode="json")
    return dumped


def _record_entry(body: Json) -> Json:
    return {"uuid": f"record:{uuid4()}", RECORD_KEY: body}


def _carried_by_id(
    entries: Sequence[ConversationEntry], limits: Limits
) -> dict[str, list[EntryMessage]]:
    """Each entry's message as convstore messages, by entry id (a message convstore cannot
    keep as blocks becomes a note saying why: the entry keeps it whole)."""
    carried: dict[str, list[EntryMessage]] = {}
    for entry in entries:
        try:
            converted = convert_messages([entry.message], limits)
        except InvalidInput as exc:
            role: Role = "user" if isinstance(entry.message, ModelRequest) else "assistant"
            note = TextBlock(text=f"[Pydantic AI message not kept as blocks: {exc}]")
            carried[entry.id] = [(role, [note], "ended", None)]
            continue
        carried[entry.id] = [(m.role, m.blocks, m.status, m.reason) for m in converted]
    return carried
