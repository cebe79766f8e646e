"""LangGraph: a checkpointer (``BaseCheckpointSaver``) whose messages are convstore messages.

    pip install -e '.[langgraph]'   # in the convstore checkout

A thread is one conversation (its id a UUID5 of the thread id, labelled ``langgraph=thread``),
and everything the saver is handed is a runtime entry of that conversation's log (see
``docs/integrations/langgraph.md`` for the design):

- each LangChain message with an id (in a channel value or a pending write) once, without
  its default fields, carrying the convstore message it is, so ``replay``, ``audit`` and
  ``serve`` see the thread like any other conversation;
- a checkpoint in one entry: its changes from its parent, its metadata, and the values of the
  channels it changed (a messages channel as the refs it adds to the parent's value);
- a task's pending writes in one entry (messages as refs); what ``prune`` and
  ``delete_for_runs`` removed.

Values are plain JSON where that reads back exactly, else LangGraph's serialized bytes. So
storage grows with the messages, not with messages times steps. Each thread's fold is kept
and caught up from the events after it, so a call reads what changed since the last one;
``delete_thread`` is :meth:`~convstore.Store.delete_entries` (the log keeps the bytes;
``convstore erase`` deletes the conversation for good).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID, uuid5

from convstore.ports.extras import missing_extra

try:
    from langchain_core.messages import messages_from_dict
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    _HINT = missing_extra(
        "convstore.integrations.langgraph (langgraph 1.2 and langgraph-checkpoint 4)",
        "langgraph",
        "'langgraph>=1.2' 'langgraph-checkpoint>=4'",
    )
    raise ImportError(_HINT) from None

from pydantic import JsonValue

from convstore.domain.errors import InvalidInput
from convstore.domain.events import Event
from convstore.integrations.langchain import entry_messages
from convstore.integrations.langgraph_entries import (
    Batch,
    Entry,
    Slot,
    Thread,
    checkpoint_key,
    decode,
    diff,
    encode,
    is_message,
    is_messages,
    micros_of,
    patched,
    plain,
    untree,
)
from convstore.store import EntryBatch, Store
from convstore.store.aio import AsyncStore

__all__ = ["ConvstoreSaver", "conversation_for"]

NAMESPACE = UUID("7c1e9f44-2b6d-4c0a-8e53-3d9a1f6b2c71")
"""The UUID5 namespace a LangGraph thread id is hashed in (fixed forever)."""

SOURCE_PREFIX = "langgraph:"
"""``ConversationStarted.source`` of a thread's conversation: this, then the thread id."""

THREAD_LABEL = {"langgraph": "thread"}
"""The label every thread's conversation carries, so the listing index finds them all."""

THREADS_KEPT = 64
"""How many threads' folds a saver keeps in memory (the least recently read goes first)."""


def conversation_for(thread_id: str) -> UUID:
    """The conversation that holds LangGraph thread ``thread_id``, in any process."""
    if not isinstance(thread_id, str) or not thread_id:
        msg = f"a LangGraph thread_id must be a non-empty string, not {thread_id!r}"
        raise InvalidInput(msg)
    return uuid5(NAMESPACE, SOURCE_PREFIX + thread_id)


@dataclass
class _Folded:
    """A thread's fold and the log position it is caught up to."""

    thread: Thread
    version: int = 0
    changes: int = 0


class ConvstoreSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer kept in a convstore store (sync and async).

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore` (its
    ``Store`` is used; the async methods run the sync ones on a worker thread, off the loop).
    Each thread's fold is kept in this process and caught up from the events recorded after
    it (by this saver or any other writer), so a call reads what changed since the last one.
    """

    def __init__(self, *, store: Store | AsyncStore, serde: Any = None) -> None:
        super().__init__(serde=serde)
        self.store = store.store if isinstance(store, AsyncStore) else store
        self.events_read = 0
        """How many events this saver has read from the store (what a call costs)."""
        self._created: set[UUID] = set()
        self._folds: dict[UUID, _Folded] = {}
        self._lock = threading.RLock()

    # -- the thread's conversation and entries ---------------------------------------------

    def _conversation(self, thread_id: str) -> UUID:
        conversation = conversation_for(thread_id)
        if conversation not in self._created:
            with contextlib.suppress(InvalidInput):  # it exists already
                self.store.new_conversation(
                    f"langgraph thread {thread_id}",
                    conversation_id=conversation,
                    source=SOURCE_PREFIX + thread_id,
                )
                self.store.set_labels(conversation, THREAD_LABEL)
            self._created.add(conversation)
        return conversation

    def _thread(self, thread_id: str) -> Thread:
        """The thread's fold, caught up: the events after the folded ones are read, and the
        last folded one again, so an erased or rewritten log is noticed and folded anew."""
        conversation = conversation_for(thread_id)
        with self._lock:
            folded = self._folds.pop(conversation, None)
            if folded is not None:
                self._folds[conversation] = folded  # now the most recently read
                last = folded.version
                changes, events = self.store.events_after(conversation, max(last - 1, 0))
                self.events_read += len(events)
                if changes == folded.changes and last == 0:
                    return self._catch_up(folded, events)
                if changes == folded.changes and events and events[0].originator_version == last:
                    return self._catch_up(folded, events[1:])
            self._folds.pop(conversation, None)
            while len(self._folds) >= THREADS_KEPT:  # the least recently read goes
                del self._folds[next(iter(self._folds))]
            folded = self._folds[conversation] = _Folded(Thread(self.serde))
            folded.changes, events = self.store.events_after(conversation, 0)
            self.events_read += len(events)
            return self._catch_up(folded, events)

    @staticmethod
    def _catch_up(folded: _Folded, events: Sequence[Event]) -> Thread:
        for event in events:
            folded.thread = folded.thread.fold(event)
            folded.version = event.originator_version
        return folded.thread

    def _record(
        self,
        thread_id: str,
        entries: builtins.list[Entry],
        whole: dict[str, Entry] | None = None,
    ) -> None:
        """Record ``entries`` and the messages they carry (their whole ``message_to_dict``
        from ``whole`` when given: an entry may have left its body to the block)."""
        found = whole or {}

        def carry(fresh: builtins.list[dict[str, JsonValue]]) -> EntryBatch:
            carried = [
                found.get(str(e["uuid"]), cast(dict[str, Any], e.get("langchain")))
                for e in fresh
                if is_message(e)
            ]
            messages = messages_from_dict(carried)
            return entry_messages(messages, self.store.limits), []

        self.store.record_entries(self._conversation(thread_id), entries, carry)

    def _thread_ids(self) -> Iterator[str]:
        after: str | None = None
        while True:
            page = self.store.list_conversations(labels=THREAD_LABEL, limit=500, after=after)
            for info in page.conversations:
                if info.source and info.source.startswith(SOURCE_PREFIX):
                    yield info.source.removeprefix(SOURCE_PREFIX)
            if page.next is None:
                return
            after = page.next

    # -- reading -----------------------------------------------------------------------------

    def _value(self, thread: Thread, value: Entry, slot: Slot | None = None) -> Any:
        """A stored value read back (a messages channel's from its ``slot``)."""
        if "add" in value and slot is not None:
            return [thread.message(r) for r in thread.message_ids(slot)]
        if "m" in value:
            return untree(thread, value["m"])
        return decode(self.serde, value)

    def _tuple(
        self, thread_id: str, thread: Thread, ns: str, checkpoint_id: str
    ) -> CheckpointTuple:
        entry = thread.checkpoints[ns, checkpoint_id]
        checkpoint = cast(Checkpoint, copy.deepcopy(thread.checkpoint(ns, checkpoint_id)))
        values: dict[str, Any] = {}
        for channel in checkpoint["channel_versions"]:
            slot = thread.slot(ns, checkpoint_id, channel)
            value = None if slot is None else thread.values.get(slot)
            if value is not None:
                values[channel] = self._value(thread, value, slot)
        writes = thread.writes.get((ns, checkpoint_id), {})
        parent = entry.get("p")

        def config(checkpoint_id: str) -> RunnableConfig:
            return {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            }

        return CheckpointTuple(
            config=config(checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=cast(CheckpointMetadata, copy.deepcopy(thread.metadata(ns, checkpoint_id))),
            parent_config=config(parent) if parent else None,
            pending_writes=[
                (task, channel, self._value(thread, value))
                for (task, _), (channel, value) in sorted(writes.items())
            ],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (the newest of its namespace when it names none)."""
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        with self._lock:
            thread = self._thread(thread_id)
            checkpoint_id = get_checkpoint_id(config)
            if checkpoint_id is None:
                ids = [cid for (n, cid) in thread.checkpoints if n == ns]
                if not ids:
                    return None
                checkpoint_id = max(ids)
            if (ns, checkpoint_id) not in thread.checkpoints:
                return None
            return self._tuple(thread_id, thread, ns, checkpoint_id)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's parameter name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, by thread (every thread when ``config`` is ``None``),
        namespace, metadata ``filter``, ``before`` a checkpoint, up to ``limit``."""
        configurable = config["configurable"] if config else {}
        threads = [configurable["thread_id"]] if "thread_id" in configurable else self._thread_ids()
        ns_wanted = configurable.get("checkpoint_ns")
        id_wanted = configurable.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        remaining = limit
        for thread_id in threads:
            with self._lock:
                thread = self._thread(thread_id)
                keys = sorted(thread.checkpoints, key=lambda k: k[1], reverse=True)
            for ns, checkpoint_id in keys:
                if ns_wanted is not None and ns != ns_wanted:
                    continue
                if id_wanted and checkpoint_id != id_wanted:
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                if filter:
                    metadata = thread.metadata(ns, checkpoint_id)
                    if any(metadata.get(k) != v for k, v in filter.items()):
                        continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                with self._lock:
                    found = self._tuple(thread_id, thread, ns, checkpoint_id)
                yield found

    # -- writing -----------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record a checkpoint in one entry: the values of the channels it changed (a messages
        channel as the refs it adds to the parent's, each new message recorded once), and
        the checkpoint as its changes from its parent."""
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        parent = configurable.get("checkpoint_id")
        values = checkpoint["channel_values"]
        saved: dict[str, Any] = {
            k: v for k, v in checkpoint.items() if k not in {"channel_values", "id"}
        }
        with self._lock:
            thread = self._thread(thread_id)
            base = (
                thread.checkpoint(ns, parent)
                if parent is not None and (ns, parent) in thread.saved
                else None
            )
            batch = Batch(thread, self.serde, self.store.limits)
            vals: dict[str, Entry] = {}
            for channel, version in new_versions.items():
                if channel not in values:
                    continue  # no value: nothing to record, the fold finds none
                value = values[channel]
                if is_messages(value):
                    refs = [batch.ref(m) for m in value]
                    found = self._change(
                        thread, ns, channel, parent if base is not None else None, refs
                    )
                else:
                    found = batch.encode(value)
                if version != saved["channel_versions"].get(channel):
                    found["ver"] = version
                vals[channel] = found
            entry: Entry = {"uuid": checkpoint_key(ns, checkpoint["id"])}
            if parent:
                entry["p"] = parent
            if base is not None and plain(saved):
                diffed = diff({k: v for k, v in base.items() if k != "id"}, saved)
                if patched(base, diffed) | {"id": checkpoint["id"]} == {
                    **saved,
                    "id": checkpoint["id"],
                }:
                    micros = micros_of(diffed.get("ts"))
                    if micros is not None:  # 20 bytes, not 40
                        del diffed["ts"]
                        entry["tsu"] = micros
                    entry["dk"] = diffed
            if "dk" not in entry:
                entry["ck"] = encode(self.serde, saved)
            meta: dict[str, Any] = dict(get_checkpoint_metadata(config, metadata))
            before = thread.metadata(ns, parent) if base is not None and parent else None
            if before is not None and plain(meta) and plain(before):
                changes = diff(before, meta)
                if patched(before, changes) == meta:
                    entry["md"] = changes
            if "md" not in entry:
                entry["m"] = encode(self.serde, meta)
            if vals:
                entry["vals"] = vals
            self._record(thread_id, [*batch.entries, entry], batch.carried())
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _change(
        self,
        thread: Thread,
        ns: str,
        channel: str,
        parent: str | None,
        refs: builtins.list[str],
    ) -> Entry:
        """A messages channel's new value as a change from the parent checkpoint's (the value
        of the parent's own branch: the fold finds the same one): the refs it adds
        (``more``), or how many of the parent's it ``keep``s and the refs it ``add``s; the
        whole value (``add``) when the parent has none."""
        slot = None if parent is None else thread.slot(ns, parent, channel)
        if slot is None or slot not in thread.values:
            return {"add": refs}
        before = thread.message_ids(slot)
        keep = 0
        while keep < min(len(before), len(refs)) and before[keep] == refs[keep]:
            keep += 1
        if keep == len(before):
            return {"more": refs[keep:]}
        return {"keep": keep, "add": refs[keep:]}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record a task's pending writes for a checkpoint in one entry (a regular write
        once; a special channel's write, such as an error or an interrupt, replaces the one
        before). Messages with ids are recorded as messages, once, and written as refs."""
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        if not writes:
            return
        with self._lock:
            thread = self._thread(thread_id)
            batch = Batch(thread, self.serde, self.store.limits)
            items = [
                [channel, WRITES_IDX_MAP.get(channel, index), batch.encode(value)]
                for index, (channel, value) in enumerate(writes)
            ]
            entry: Entry = {"lg": "w", "cp": configurable["checkpoint_id"], "task": task_id}
            if ns:
                entry["ns"] = ns
            if task_path:
                entry["path"] = task_path
            self._record(thread_id, [*batch.entries, entry | {"w": items}], batch.carried())

    # -- deleting and copying ----------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes, and withdraw its messages from replay
        (the log keeps the bytes; ``convstore erase`` deletes them for good)."""
        with self._lock:
            if self._thread(thread_id).entries:
                self.store.delete_entries(conversation_for(thread_id))

    def _forget(self, thread_id: str, keys: builtins.list[tuple[str, str]]) -> None:
        if keys:
            self._record(thread_id, [{"lg": "x", "checkpoints": [list(k) for k in keys]}])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of ``run_ids``,
        in every thread."""
        wanted = set(run_ids)
        if not wanted:
            return
        for thread_id in builtins.list(self._thread_ids()):
            with self._lock:
                thread = self._thread(thread_id)
                doomed = [
                    key
                    for key, entry in thread.checkpoints.items()
                    if thread.metadata(*key).get("run_id") in wanted
                ]
                self._forget(thread_id, doomed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and message of one thread to another."""
        source = conversation_for(source_thread_id)
        with self._lock:
            entries = self.store.entries(source) if self.store.last_event(source) else None
            if not entries:
                return
            thread = self._thread(source_thread_id)
            whole = {  # with the bodies their entries left to the source's blocks
                key: {"uuid": key, "langchain": thread.messages[key.removeprefix("langchain:")]}
                for e in entries
                if is_message(e) and isinstance(key := e["uuid"], str)
            }
            copied = [whole.get(cast(str, e.get("uuid")), e) for e in entries]
            self._record(target_thread_id, cast(builtins.list[Entry], copied))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint; ``delete``: delete all.
        Channel values and messages stay (a kept checkpoint may refer to them)."""
        if strategy not in {"keep_latest", "delete"}:
            msg = f"unknown prune strategy {strategy!r} (known: keep_latest, delete)"
            raise InvalidInput(msg)
        for thread_id in thread_ids:
            with self._lock:
                thread = self._thread(thread_id)
                latest: dict[str, str] = {}
                for ns, checkpoint_id in thread.checkpoints:
                    latest[ns] = max(latest.get(ns, checkpoint_id), checkpoint_id)
                doomed = [
                    key
                    for key in thread.checkpoints
                    if strategy == "delete" or latest[key[0]] != key[1]
                ]
                self._forget(thread_id, doomed)

    # -- async: the sync methods on a worker thread ------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,  # noqa: A002 - LangGraph's parameter name
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    def get_next_version(self, current: int | None, channel: None) -> int:
        """Versions are small integers: they are written into every checkpoint."""
        return 1 if current is None else int(current) + 1
