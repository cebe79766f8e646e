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
import base64
import builtins
import contextlib
import copy
import functools
import hashlib
import json
import math
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from uuid import UUID, uuid5

from convstore.ports.extras import missing_extra

try:
    from langchain_core.messages import (
        BaseMessage,
        RemoveMessage,
        message_to_dict,
        messages_from_dict,
    )
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
from convstore.domain.events import EntriesDeleted, EntriesRecorded, Event
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

THREADS_KEPT = 64
"""How many threads' folds a saver keeps in memory (the least recently read goes first)."""

REFS_REMEMBERED = 64
"""How many message-channel values (lists of refs) a thread's fold keeps built."""


def conversation_for(thread_id: str) -> UUID:
    """The conversation that holds LangGraph thread ``thread_id``, in any process."""
    if not isinstance(thread_id, str) or not thread_id:
        msg = f"a LangGraph thread_id must be a non-empty string, not {thread_id!r}"
        raise InvalidInput(msg)
    return uuid5(NAMESPACE, SOURCE_PREFIX + thread_id)


def _plain(value: Any) -> bool:
    """Whether ``value`` is JSON that reads back as exactly itself (no tuple, no int key, no
    str or int subclass, no NaN), so it can be stored as JSON rather than serde bytes."""
    kind = type(value)
    if value is None or kind in {bool, int, str}:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(_plain(v) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def _version(value: Any) -> str:
    """A channel version as the text the fold keys it by (versions are str, int or float)."""
    return json.dumps(value)


def _checkpoint_key(ns: str, checkpoint_id: str) -> str:
    """A checkpoint entry's ``uuid`` (so it is recorded once): ``c:`` and its id in the root
    namespace, else ``c`` and the JSON list of its namespace and id."""
    if not ns:
        return "c:" + checkpoint_id
    return "c" + json.dumps([ns, checkpoint_id], separators=(",", ":"))


def _checkpoint_of(key: str) -> tuple[str, str]:
    """The namespace and id a checkpoint entry's ``uuid`` names."""
    if key.startswith("c:"):
        return "", key[2:]
    ns, checkpoint_id = json.loads(key[1:])
    return ns, checkpoint_id


_DIFFED = ("channel_versions", "versions_seen")
"""The checkpoint's maps stored as their changes from the parent's."""


def _diff(base: dict[str, Any], saved: dict[str, Any]) -> Entry:
    """``saved`` (plain JSON) as its changes from ``base``: a key equal to the base's is left
    out, a map of :data:`_DIFFED` holds only its changed keys, ``-`` lists removed keys."""
    diff: Entry = {}
    for key, value in saved.items():
        old = base.get(key)
        if key in _DIFFED and isinstance(old, dict) and isinstance(value, dict):
            changed = {k: v for k, v in value.items() if k not in old or old[k] != v}
            gone = [k for k in old if k not in value]
            if changed:
                diff[key] = changed
            if gone:
                diff[key + "-"] = gone
        elif key not in base or old != value:
            diff[key] = value
    gone = [k for k in base if k not in saved]
    if gone:
        diff["-"] = gone
    return diff


def _patched(base: dict[str, Any], diff: Entry) -> dict[str, Any]:
    """What :func:`_diff` was given, from its base and its result."""
    full = {k: v for k, v in base.items() if k not in diff.get("-", ())}
    for key, value in diff.items():
        if key == "-" or key.endswith("-"):
            continue
        if key in _DIFFED and isinstance(base.get(key), dict):
            merged = {k: v for k, v in base[key].items() if k not in diff.get(key + "-", ())}
            full[key] = merged | value
        else:
            full[key] = value
    for key in _DIFFED:
        if key + "-" in diff and key not in diff:
            full[key] = {k: v for k, v in base[key].items() if k not in diff[key + "-"]}
    return full


@functools.cache
def _defaults(kind: type[BaseMessage]) -> dict[str, Any]:
    """The defaults of a message class's optional fields (asked once per class: pydantic
    inspects a default factory's signature every time)."""
    return {
        name: info.get_default(call_default_factory=True)
        for name, info in kind.model_fields.items()
        if not info.is_required()
    }


_NO_DEFAULT = object()


def _compact(message: BaseMessage, whole: Entry) -> Entry:
    """``whole`` (``message_to_dict(message)``) without the fields left at their defaults
    (LangChain fills them back in), when that reads back as the same; else ``whole``."""
    defaults = _defaults(type(message))
    data = {k: v for k, v in whole["data"].items() if defaults.get(k, _NO_DEFAULT) != v}
    compact = {"type": whole["type"], "data": data}
    return compact if message_to_dict(messages_from_dict([compact])[0]) == whole else whole


@dataclass
class Thread:
    """A thread's entries folded, caught up entry by entry: what the saver reads.

    Checkpoints are kept after ``prune`` or ``delete_for_runs`` removed them (``saved``), since
    a kept checkpoint may be stored as its changes from them; ``checkpoints`` holds the live
    ones.
    """

    serde: Any
    entries: int = 0
    messages: dict[str, Entry] = field(default_factory=dict)
    values: dict[tuple[str, str, str], Entry] = field(default_factory=dict)
    saved: dict[tuple[str, str], Entry] = field(default_factory=dict)
    checkpoints: dict[tuple[str, str], Entry] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], tuple[str, Entry]]] = field(
        default_factory=dict
    )
    seen: dict[int, tuple[BaseMessage, dict[str, Any], str]] = field(default_factory=dict)
    """Message objects met or handed out, by ``id()``: the object, its fields then, its ref."""
    objects: dict[str, BaseMessage] = field(default_factory=dict)
    """The message object handed out for each ref (again, while nobody changed it)."""
    _whole: dict[str, Entry] = field(default_factory=dict)
    _full: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _refs: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    _child_of: dict[tuple[str, str, str], tuple[tuple[str, str, str], int]] = field(
        default_factory=dict
    )

    def apply(self, entry: Entry) -> None:
        """Fold one entry in (an unknown kind is refused: this saver wrote it, or it is not a
        LangGraph thread)."""
        self.entries += 1
        kind = entry.get("lg")
        if "langchain" in entry:
            ref = str(entry["uuid"]).removeprefix("langchain:")
            data = entry["langchain"]
            if "id" not in data["data"]:  # left out when it is the ref
                data = {**data, "data": {**data["data"], "id": ref}}
            self.messages[ref] = data
        elif kind == "c":
            ns, checkpoint_id = _checkpoint_of(entry["uuid"])
            self.saved[ns, checkpoint_id] = self.checkpoints[ns, checkpoint_id] = entry
            versions = self.checkpoint(ns, checkpoint_id)["channel_versions"]
            parent = entry.get("p")
            for channel, value in entry.get("vals", {}).items():
                version = value.get("ver", versions.get(channel))
                if "more" in value or "keep" in value:  # a change from the parent's value
                    base = self.checkpoint(ns, str(parent))["channel_versions"][channel]
                    value = {  # noqa: PLW2901 - the change, its base found
                        "base": _version(base),
                        "keep": value.get("keep"),
                        "add": value.get("more", value.get("add")),
                    }
                self.values[ns, channel, _version(version)] = value
        elif kind == "w":
            ns, checkpoint_id = entry.get("ns", ""), entry["cp"]
            found = self.writes.setdefault((ns, checkpoint_id), {})
            for channel, idx, value in entry["w"]:
                if idx < 0 or (entry["task"], idx) not in found:
                    found[entry["task"], idx] = (channel, value)
        elif kind == "x":
            for ns, checkpoint_id in entry["checkpoints"]:
                self.checkpoints.pop((ns, checkpoint_id), None)
                self.writes.pop((ns, checkpoint_id), None)
        else:
            msg = f"not a LangGraph checkpointer entry: {json.dumps(entry)[:200]}"
            raise InvalidInput(msg)

    def message(self, ref: str) -> BaseMessage:
        """The message recorded as ``ref``: the object handed out before when it is as it was
        then, else a new one (LangChain's ``messages_from_dict``)."""
        found = self.objects.get(ref)
        if found is not None and self.seen[id(found)][1] == found.__dict__:
            return found
        found = messages_from_dict([self.messages[ref]])[0]
        self.remember(found, ref)
        return found

    def remember(self, message: BaseMessage, ref: str) -> None:
        """Note that ``message``, as it is now, is the one recorded as ``ref``."""
        before = self.objects.get(ref)
        if before is not None and before is not message:
            self.seen.pop(id(before), None)
        self.objects[ref] = message
        self.seen[id(message)] = (message, copy.deepcopy(message.__dict__), ref)

    def whole(self, ref: str) -> Entry:
        """``message_to_dict`` of the message recorded as ``ref`` (built once)."""
        found = self._whole.get(ref)
        if found is None:
            found = self._whole[ref] = message_to_dict(self.message(ref))
        return found

    def checkpoint(self, ns: str, checkpoint_id: str) -> dict[str, Any]:
        """The checkpoint (without values) as LangGraph gave it (built once, then kept)."""
        pending: list[tuple[tuple[str, str], Entry]] = []
        key = (ns, checkpoint_id)
        while key not in self._full:
            entry = self.saved[key]
            pending.append((key, entry))
            if "dk" not in entry:
                break
            key = (ns, entry["p"])
        for key, entry in reversed(pending):
            if "dk" in entry:
                full = _patched(self._full[key[0], entry["p"]], entry["dk"])
            else:
                full = decode(self.serde, entry["ck"])
            self._full[key] = full | {"id": key[1]}
        return self._full[ns, checkpoint_id]

    def message_ids(self, ns: str, channel: str, version: str) -> list[str]:
        """The message refs of a messages channel at ``version``: from a value built before,
        else its changes followed back to one (or to the first), or cut from a later value
        that only added to it (listing newest first). Costs the refs it builds, not the
        thread's length."""
        chain: list[tuple[tuple[str, str, str], Entry]] = []
        key: tuple[str, str, str] | None = (ns, channel, version)
        refs: list[str] = []
        while key is not None:
            if key in self._refs:
                refs = self._refs[key]
                break
            child = self._child_of.get(key)
            if child is not None and child[0] in self._refs:
                later = self._refs[child[0]]
                refs = later[: len(later) - child[1]]
                self._remember(key, refs)
                break
            entry = self.values[key]
            chain.append((key, entry))
            key = (ns, channel, entry["base"]) if "base" in entry else None
        for key, entry in reversed(chain):
            keep = entry.get("keep")
            refs = (refs if keep is None else refs[:keep]) + entry["add"]
            self._remember(key, refs)
            if "base" in entry and keep is None:
                self._child_of[ns, channel, entry["base"]] = (key, len(entry["add"]))
        return refs

    def _remember(self, key: tuple[str, str, str], refs: list[str]) -> None:
        self._refs[key] = refs
        while len(self._refs) > REFS_REMEMBERED:
            del self._refs[next(iter(self._refs))]


@dataclass
class _Folded:
    """A thread's fold and the log position it is caught up to."""

    thread: Thread
    version: int = 0
    changes: int = 0


def encode(serde: Any, value: Any) -> Entry:
    """A value as JSON when it reads back as itself, else LangGraph's typed bytes (base64)."""
    if _plain(value):
        return {"j": value}
    kind, data = serde.dumps_typed(value)
    return {"t": kind, "b": base64.b64encode(data).decode("ascii")}


def decode(serde: Any, entry: Entry) -> Any:
    """What :func:`encode` was given (a copy: callers may change it)."""
    if "j" in entry:
        return copy.deepcopy(entry["j"])
    return serde.loads_typed((entry["t"], base64.b64decode(entry["b"])))


def _untree(thread: Thread, tree: Any) -> Any:
    """What :meth:`_Batch.encode` stored as ``m``, its messages read back."""
    if isinstance(tree, list):
        return [_untree(thread, v) for v in tree]
    if isinstance(tree, dict):
        if "$lc" in tree:
            found = tree["$lc"]
            if isinstance(found, str):
                return thread.message(found)
            return messages_from_dict([found])[0]
        return {k: _untree(thread, v) for k, v in tree.items()}
    return tree


def _is_messages(value: Any) -> bool:
    """A channel value stored as refs: a list of messages that all have ids."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, BaseMessage) and m.id and not isinstance(m, RemoveMessage) for m in value
        )
    )


def _with_messages(value: Any) -> bool:
    """Whether ``value`` is JSON (as :func:`_plain`) with LangChain messages among it, and
    no object with a ``$lc`` key (which marks a message when it is stored)."""
    if isinstance(value, BaseMessage):
        return True
    if type(value) is list:
        return all(_with_messages(v) for v in value)
    if type(value) is dict:
        return "$lc" not in value and all(
            type(k) is str and _with_messages(v) for k, v in value.items()
        )
    return _plain(value)


@dataclass
class _Batch:
    """What one ``put`` or ``put_writes`` records: the messages it meets that the thread has
    not recorded (each once), then its own entry."""

    thread: Thread
    serde: Any
    entries: list[Entry] = field(default_factory=list)
    pending: dict[str, Entry] = field(default_factory=dict)

    def ref(self, message: BaseMessage) -> str:
        """The ref of ``message``: its id, or its id and a digest when a different message
        was recorded under that id (``add_messages`` replaced it); a message not recorded
        yet is added to the batch. A message object met before (or handed out by the fold),
        unchanged since, costs one compare."""
        thread = self.thread
        seen = thread.seen.get(id(message))
        if seen is not None and seen[0] is message and seen[1] == message.__dict__:
            return seen[2]
        ref = cast(str, message.id)
        whole = message_to_dict(message)
        if ref in thread.messages:
            if thread.whole(ref) == whole:
                thread.remember(message, ref)
                return ref
        elif ref not in self.pending:
            return self._new(ref, message, whole)
        elif self.pending[ref] == whole:
            return ref
        data = _compact(message, whole)
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        ref = f"{ref}#{digest[:16]}"
        if ref in thread.messages:
            thread.remember(message, ref)
        elif ref not in self.pending:
            self._new(ref, message, whole)
        return ref

    def _new(self, ref: str, message: BaseMessage, whole: Entry) -> str:
        self.pending[ref] = whole
        data = _compact(message, whole)
        if data["data"].get("id") == ref:  # the fold takes it from the uuid
            data = {**data, "data": {k: v for k, v in data["data"].items() if k != "id"}}
        self.entries.append({"uuid": "langchain:" + ref, "langchain": data})
        return ref

    def encode(self, value: Any) -> Entry:
        """A value as JSON; with messages in it, JSON where each message is ``{"$lc": its
        ref}`` (``{"$lc": its dict}`` when it has no id); else LangGraph's typed bytes."""
        if not _plain(value) and _with_messages(value):
            return {"m": self._tree(value)}
        return encode(self.serde, value)

    def _tree(self, value: Any) -> Any:
        if isinstance(value, BaseMessage):
            keep = value.id and not isinstance(value, RemoveMessage)
            return {"$lc": self.ref(value) if keep else _compact(value, message_to_dict(value))}
        if isinstance(value, list):
            return [self._tree(v) for v in value]
        if isinstance(value, dict):
            return {k: self._tree(v) for k, v in value.items()}
        return value


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
            if isinstance(event, EntriesRecorded):
                for entry in event.entries:
                    folded.thread.apply(entry)
            elif isinstance(event, EntriesDeleted):
                folded.thread = Thread(folded.thread.serde)
            folded.version = event.originator_version
        return folded.thread

    def _record(self, thread_id: str, entries: builtins.list[Entry]) -> None:
        def carry(fresh: builtins.list[dict[str, JsonValue]]) -> EntryBatch:
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

    def _value(self, thread: Thread, ns: str, channel: str, version: str, value: Entry) -> Any:
        if "add" in value:
            refs = thread.message_ids(ns, channel, version)
            return [thread.message(r) for r in refs]
        if "m" in value:
            return _untree(thread, value["m"])
        return decode(self.serde, value)

    def _tuple(
        self, thread_id: str, thread: Thread, ns: str, checkpoint_id: str
    ) -> CheckpointTuple:
        entry = thread.checkpoints[ns, checkpoint_id]
        checkpoint = cast(Checkpoint, copy.deepcopy(thread.checkpoint(ns, checkpoint_id)))
        values: dict[str, Any] = {}
        for channel, version in checkpoint["channel_versions"].items():
            key = _version(version)
            value = thread.values.get((ns, channel, key))
            if value is not None:
                values[channel] = self._value(thread, ns, channel, key, value)
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
            metadata=decode(self.serde, entry["m"]),
            parent_config=config(parent) if parent else None,
            pending_writes=[
                (task, channel, self._value(thread, ns, channel, "", value))
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
                    metadata = decode(self.serde, thread.checkpoints[ns, checkpoint_id]["m"])
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
            batch = _Batch(thread, self.serde)
            vals: dict[str, Entry] = {}
            for channel, version in new_versions.items():
                if channel not in values:
                    continue  # no value: nothing to record, the fold finds none
                value = values[channel]
                if _is_messages(value):
                    refs = [batch.ref(m) for m in value]
                    found = self._change(thread, ns, channel, base, refs)
                else:
                    found = batch.encode(value)
                if version != saved["channel_versions"].get(channel):
                    found["ver"] = version
                vals[channel] = found
            entry: Entry = {"uuid": _checkpoint_key(ns, checkpoint["id"]), "lg": "c"}
            if parent:
                entry["p"] = parent
            if base is not None and _plain(saved):
                diffed = _diff({k: v for k, v in base.items() if k != "id"}, saved)
                if _patched(base, diffed) | {"id": checkpoint["id"]} == {
                    **saved,
                    "id": checkpoint["id"],
                }:
                    entry["dk"] = diffed
            if "dk" not in entry:
                entry["ck"] = encode(self.serde, saved)
            entry["m"] = encode(self.serde, get_checkpoint_metadata(config, metadata))
            if vals:
                entry["vals"] = vals
            self._record(thread_id, [*batch.entries, entry])
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
        base: dict[str, Any] | None,
        refs: builtins.list[str],
    ) -> Entry:
        """A messages channel's new value as a change from the parent checkpoint's: the refs
        it adds (``more``), or how many of the parent's it ``keep``s and the refs it ``add``s;
        the whole value (``add``) when the parent has none."""
        version = None if base is None else base["channel_versions"].get(channel)
        if version is None or (ns, channel, _version(version)) not in thread.values:
            return {"add": refs}
        before = thread.message_ids(ns, channel, _version(version))
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
            batch = _Batch(thread, self.serde)
            items = [
                [channel, WRITES_IDX_MAP.get(channel, index), batch.encode(value)]
                for index, (channel, value) in enumerate(writes)
            ]
            entry: Entry = {"lg": "w", "cp": configurable["checkpoint_id"], "task": task_id}
            if ns:
                entry["ns"] = ns
            if task_path:
                entry["path"] = task_path
            self._record(thread_id, [*batch.entries, entry | {"w": items}])

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
                    if decode(self.serde, entry["m"]).get("run_id") in wanted
                ]
                self._forget(thread_id, doomed)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, write and message of one thread to another."""
        source = conversation_for(source_thread_id)
        entries = self.store.entries(source) if self.store.last_event(source) else None
        if entries:
            with self._lock:
                self._record(target_thread_id, cast(builtins.list[Entry], entries))

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
