"""LangGraph: a checkpointer (``BaseCheckpointSaver``) whose messages are convstore messages.

    pip install -e '.[langgraph]'   # in the convstore checkout

A thread is one conversation (its id a UUID5 of the thread id, labelled ``langgraph=thread``),
and everything the saver is handed is a runtime entry of that conversation's log (see
``docs/integrations/langgraph.md`` for the design):

- each message of a messages channel (a list of LangChain messages with ids, as
  ``add_messages`` keeps them) once, verbatim, carrying the convstore message it is, so
  ``replay``, ``audit`` and ``serve`` see the thread like any other conversation;
- a channel's value once per version it took: a messages channel as the ids of its messages,
  written as a change from the version before (kept ids, then added ones), any other channel
  as LangGraph's own serialized bytes;
- a checkpoint (its versions, without the values) and its metadata; pending writes; and what
  ``prune`` and ``delete_for_runs`` removed.

So storage grows with the messages, not with messages times steps. Reading folds the thread's
entries; ``delete_thread`` is :meth:`~convstore.Store.delete_entries` (the log keeps the bytes;
``convstore erase`` deletes the conversation for good).
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from uuid import UUID, uuid5

from convstore.ports.extras import missing_extra

try:
    from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
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
from convstore.integrations.langchain import entry_messages
from convstore.store import EntryBatch, Store
from convstore.store.aio import AsyncStore

__all__ = ["ConvstoreSaver", "conversation_for"]

NAMESPACE = UUID("7c1e9f44-2b6d-4c0a-8e53-3d9a1f6b2c71")
"""The UUID5 namespace a LangGraph thread id is hashed in (fixed forever)."""

SOURCE_PREFIX = "langgraph:"
"""``ConversationStarted.source`` of a thread's conversation: this, then the thread id."""

THREAD_LABEL = {"langgraph": "thread"}
"""The label every thread's conversation carries, so the listing index finds them all."""

Entry = dict[str, Any]


def conversation_for(thread_id: str) -> UUID:
    """The conversation that holds LangGraph thread ``thread_id``, in any process."""
    return uuid5(NAMESPACE, SOURCE_PREFIX + thread_id)


@dataclass
class Thread:
    """A thread's entries folded: what the saver reads."""

    messages: dict[str, Entry] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], Entry] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], Entry] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], Entry]] = field(default_factory=dict)

    @classmethod
    def fold(cls, entries: Sequence[Entry]) -> Thread:
        thread = cls()
        for entry in entries:
            kind = entry.get("lg")
            if "langchain" in entry:
                thread.messages[entry["ref"]] = entry["langchain"]
            elif kind == "blob":
                thread.blobs[entry["ns"], entry["ch"], entry["ver"]] = entry
            elif kind == "checkpoint":
                thread.checkpoints[entry["ns"], entry["id"]] = entry
            elif kind == "write":
                key = (entry["ns"], entry["cp"])
                thread.writes.setdefault(key, {})[entry["task"], entry["idx"]] = entry
            elif kind == "deleted":
                for ns, checkpoint_id in entry["checkpoints"]:
                    thread.checkpoints.pop((ns, checkpoint_id), None)
                    thread.writes.pop((ns, checkpoint_id), None)
        return thread

    def message_ids(self, ns: str, channel: str, version: str) -> list[str]:
        """The message refs of a messages channel at ``version`` (its changes followed)."""
        chain: list[Entry] = []
        key: tuple[str, str, str] | None = (ns, channel, version)
        while key is not None:
            entry = self.blobs[key]
            chain.append(entry)
            base = entry.get("base")
            key = None if base is None else (ns, channel, base)
        refs: list[str] = []
        for entry in reversed(chain):
            refs = refs[: entry.get("keep", 0)] + entry["add"]
        return refs


def _version(value: Any) -> str:
    """A channel version as the text the entries key it by (versions are str, int or float)."""
    return json.dumps(value)


def _typed(serde: Any, value: Any) -> Entry:
    kind, data = serde.dumps_typed(value)
    return {"t": kind, "b": base64.b64encode(data).decode("ascii")}


def _untyped(serde: Any, entry: Entry) -> Any:
    return serde.loads_typed((entry["t"], base64.b64decode(entry["b"])))


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, BaseMessage) and m.id for m in value)
    )


class ConvstoreSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer kept in a convstore store (sync and async).

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore` (its
    ``Store`` is used; the async methods run the sync ones on a worker thread, off the loop).
    """

    def __init__(self, *, store: Store | AsyncStore, serde: Any = None) -> None:
        super().__init__(serde=serde)
        self.store = store.store if isinstance(store, AsyncStore) else store
        self._created: set[UUID] = set()

    # -- the thread's conversation and entries ---------------------------------------------

    def _conversation(self, thread_id: str) -> UUID:
        if not isinstance(thread_id, str) or not thread_id:
            msg = f"a LangGraph thread_id must be a non-empty string, not {thread_id!r}"
            raise InvalidInput(msg)
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
        try:
            entries = self.store.entries(conversation_for(thread_id))
        except InvalidInput:
            entries = None
        return Thread.fold(cast(list[Entry], entries or []))

    def _record(self, thread_id: str, entries: list[Entry]) -> None:
        def carry(fresh: list[dict[str, JsonValue]]) -> EntryBatch:
            carried = [cast(dict[str, Any], e["langchain"]) for e in fresh if "langchain" in e]
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

    def _tuple(
        self, thread_id: str, thread: Thread, ns: str, checkpoint_id: str
    ) -> CheckpointTuple:
        entry = thread.checkpoints[ns, checkpoint_id]
        checkpoint: Checkpoint = _untyped(self.serde, entry["checkpoint"])
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            blob = thread.blobs.get((ns, channel, _version(version)))
            if blob is None or blob.get("empty"):
                continue
            if "add" in blob:
                refs = thread.message_ids(ns, channel, _version(version))
                values[channel] = messages_from_dict([thread.messages[r] for r in refs])
            else:
                values[channel] = _untyped(self.serde, blob)
        writes = thread.writes.get((ns, checkpoint_id), {})
        ordered = sorted(writes.values(), key=lambda w: (w["task"], w["idx"]))
        parent = entry.get("parent")
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint={**checkpoint, "channel_values": values},
            metadata=_untyped(self.serde, entry["metadata"]),
            parent_config=(
                {
                    "configurable": {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": parent,
                    }
                }
                if parent
                else None
            ),
            pending_writes=[(w["task"], w["ch"], _untyped(self.serde, w)) for w in ordered],
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (the newest of its namespace when it names none)."""
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
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
            thread = self._thread(thread_id)
            for ns, checkpoint_id in sorted(thread.checkpoints, key=lambda k: k[1], reverse=True):
                if ns_wanted is not None and ns != ns_wanted:
                    continue
                if id_wanted and checkpoint_id != id_wanted:
                    continue
                if before_id and checkpoint_id >= before_id:
                    continue
                found = self._tuple(thread_id, thread, ns, checkpoint_id)
                if filter and any(found.metadata.get(k) != v for k, v in filter.items()):
                    continue
                if remaining is not None:
                    if remaining <= 0:
                        return
                    remaining -= 1
                yield found

    # -- writing -----------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Record a checkpoint: the values of the channels it changed, each message once."""
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        parent = configurable.get("checkpoint_id")
        thread = self._thread(thread_id)
        values = checkpoint["channel_values"]
        entries: builtins.list[Entry] = []
        base_versions: dict[str, Any] = {}
        if parent and (ns, parent) in thread.checkpoints:
            parent_checkpoint = _untyped(self.serde, thread.checkpoints[ns, parent]["checkpoint"])
            base_versions = parent_checkpoint["channel_versions"]
        for channel, version in new_versions.items():
            key = {"lg": "blob", "ns": ns, "ch": channel, "ver": _version(version)}
            key["uuid"] = f"lg:b:{json.dumps([ns, channel, key['ver']])}"
            if channel not in values:
                entries.append(key | {"empty": True})
            elif _is_messages(values[channel]):
                refs = [self._message(thread, m, entries) for m in values[channel]]
                entries.append(key | self._change(thread, ns, channel, base_versions, refs))
            else:
                entries.append(key | _typed(self.serde, values[channel]))
        saved = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        entries.append(
            {
                "uuid": f"lg:c:{json.dumps([ns, checkpoint['id']])}",
                "lg": "checkpoint",
                "ns": ns,
                "id": checkpoint["id"],
                "parent": parent,
                "checkpoint": _typed(self.serde, saved),
                "metadata": _typed(self.serde, get_checkpoint_metadata(config, metadata)),
            }
        )
        self._record(thread_id, entries)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _message(self, thread: Thread, message: BaseMessage, entries: builtins.list[Entry]) -> str:
        """The ref of ``message``: its id, or its id and a digest when a different message
        was recorded under that id; a message not recorded yet is added to ``entries``."""
        data = message_to_dict(message)
        ref = cast(str, message.id)
        if ref in thread.messages and thread.messages[ref] != data:
            digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
            ref = f"{ref}#{digest[:16]}"
        if ref not in thread.messages:
            thread.messages[ref] = data
            entries.append({"uuid": f"langchain:{ref}", "ref": ref, "langchain": data})
        return ref

    def _change(
        self,
        thread: Thread,
        ns: str,
        channel: str,
        base_versions: dict[str, Any],
        refs: builtins.list[str],
    ) -> Entry:
        """A messages channel's new value as a change from the parent checkpoint's."""
        base = base_versions.get(channel)
        if base is not None and (ns, channel, _version(base)) in thread.blobs:
            before = thread.message_ids(ns, channel, _version(base))
            keep = 0
            while keep < min(len(before), len(refs)) and before[keep] == refs[keep]:
                keep += 1
            return {"base": _version(base), "keep": keep, "add": refs[keep:]}
        return {"add": refs}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Record a task's pending writes for a checkpoint (a regular write once; a special
        channel's write, such as an error or an interrupt, replaces the one before)."""
        configurable = config["configurable"]
        thread_id, ns = configurable["thread_id"], configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        entries: builtins.list[Entry] = []
        for index, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, index)
            entry: Entry = {
                "lg": "write",
                "ns": ns,
                "cp": checkpoint_id,
                "task": task_id,
                "idx": idx,
                "ch": channel,
                "path": task_path,
            } | _typed(self.serde, value)
            if idx >= 0:
                entry["uuid"] = f"lg:w:{json.dumps([ns, checkpoint_id, task_id, idx])}"
            entries.append(entry)
        if entries:
            self._record(thread_id, entries)

    # -- deleting and copying ----------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes, and withdraw its messages from replay
        (the log keeps the bytes; ``convstore erase`` deletes them for good)."""
        conversation = conversation_for(thread_id)
        if self.store.entries(conversation) if self._exists(conversation) else None:
            self.store.delete_entries(conversation)

    def _exists(self, conversation: UUID) -> bool:
        return self.store.last_event(conversation) is not None

    def _forget(self, thread_id: str, keys: builtins.list[tuple[str, str]]) -> None:
        if keys:
            self._record(thread_id, [{"lg": "deleted", "checkpoints": [list(k) for k in keys]}])

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of ``run_ids``,
        in every thread."""
        wanted = set(run_ids)
        if not wanted:
            return
        for thread_id in list(self._thread_ids()):
            thread = self._thread(thread_id)
            doomed = [
                key
                for key, entry in thread.checkpoints.items()
                if _untyped(self.serde, entry["metadata"]).get("run_id") in wanted
            ]
            self._forget(thread_id, doomed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and message of one thread to another."""
        source = conversation_for(source_thread_id)
        entries = self.store.entries(source) if self._exists(source) else None
        if entries:
            self._record(target_thread_id, cast(builtins.list[Entry], entries))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint; ``delete``: delete all.
        Channel values and messages stay (a kept checkpoint may refer to them)."""
        if strategy not in {"keep_latest", "delete"}:
            msg = f"unknown prune strategy {strategy!r} (known: keep_latest, delete)"
            raise InvalidInput(msg)
        for thread_id in thread_ids:
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
