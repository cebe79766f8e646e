"""The LangGraph checkpointer's entries: how a step is stored in a thread's log, and the fold
that reads it back (see :mod:`convstore.integrations.langgraph` and
``docs/integrations/langgraph.md``). No I/O: the saver reads and writes the store.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, assert_never, cast

from convstore.ports.extras import missing_extra

try:
    from langchain_core.messages import (
        BaseMessage,
        RemoveMessage,
        message_to_dict,
        messages_from_dict,
    )
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    _HINT = missing_extra(
        "convstore.integrations.langgraph (langgraph 1.2 and langgraph-checkpoint 4)",
        "langgraph",
        "'langgraph>=1.2' 'langgraph-checkpoint>=4'",
    )
    raise ImportError(_HINT) from None

from convstore.domain.blocks import (
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.events import (
    BlockAppended,
    BlockRecorded,
    EntriesDeleted,
    EntriesRecorded,
    Event,
    MessageEnded,
    MessageStarted,
)
from convstore.domain.limits import Limits
from convstore.integrations.langchain import message_blocks

Entry = dict[str, Any]

Slot = tuple[str, str, str, str]
"""Where a channel value is kept in a thread's fold: namespace, channel, version (as
:func:`version_key`) and the checkpoint whose entry wrote it. The version alone does not name
a value: LangGraph numbers a channel's versions along a branch (``get_next_version`` of the
parent's), so after time travel two branches write different values under one version."""

REFS_REMEMBERED = 64
"""How many message-channel values (lists of refs) a thread's fold keeps built."""


def plain(value: Any) -> bool:
    """Whether ``value`` is JSON that reads back as exactly itself (no tuple, no int key, no
    str or int subclass, no NaN), so it can be stored as JSON rather than serde bytes."""
    kind = type(value)
    if value is None or kind in {bool, int, str}:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list:
        return all(plain(v) for v in value)
    if kind is dict:
        return all(type(k) is str and plain(v) for k, v in value.items())
    return False


def version_key(value: Any) -> str:
    """A channel version as the text the fold keys it by (versions are str, int or float)."""
    return json.dumps(value)


def checkpoint_key(ns: str, checkpoint_id: str) -> str:
    """A checkpoint entry's ``uuid`` (so it is recorded once): ``c:`` and its id in the root
    namespace, else ``c`` and the JSON list of its namespace and id."""
    if not ns:
        return "c:" + checkpoint_id
    return "c" + json.dumps([ns, checkpoint_id], separators=(",", ":"))


def checkpoint_of(key: str) -> tuple[str, str]:
    """The namespace and id a checkpoint entry's ``uuid`` names."""
    if key.startswith("c:"):
        return "", key[2:]
    ns, checkpoint_id = json.loads(key[1:])
    return ns, checkpoint_id


DIFFED = ("channel_versions", "versions_seen")
"""The checkpoint's maps stored as their changes from the parent's."""


def diff(base: dict[str, Any], saved: dict[str, Any]) -> Entry:
    """``saved`` (plain JSON) as its changes from ``base``: a key equal to the base's is left
    out, a map of :data:`DIFFED` holds only its changed keys, ``-`` lists removed keys."""
    diff: Entry = {}
    for key, value in saved.items():
        old = base.get(key)
        if key in DIFFED and isinstance(old, dict) and isinstance(value, dict):
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


def patched(base: dict[str, Any], diff: Entry) -> dict[str, Any]:
    """What :func:`diff` was given, from its base and its result."""
    full = {k: v for k, v in base.items() if k not in diff.get("-", ())}
    for key, value in diff.items():
        if key == "-" or key.endswith("-"):
            continue
        if key in DIFFED and isinstance(base.get(key), dict):
            merged = {k: v for k, v in base[key].items() if k not in diff.get(key + "-", ())}
            full[key] = merged | value
        else:
            full[key] = value
    for key in DIFFED:
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


def compact(message: BaseMessage, whole: Entry) -> Entry:
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
    ones. A channel value is kept by the checkpoint that wrote it (:data:`Slot`), and each
    checkpoint reads the one its own branch wrote (:meth:`slot`).
    """

    serde: Any
    entries: int = 0
    messages: dict[str, Entry] = field(default_factory=dict)
    values: dict[Slot, Entry] = field(default_factory=dict)
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
    _metadata: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _carried: list[str] = field(default_factory=list)
    _filling: str | None = None
    _full: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _slots: dict[tuple[str, str], dict[str, tuple[str, Slot | None]]] = field(default_factory=dict)
    """Each checkpoint's channels: the version it names and its value there, written by it
    or by a checkpoint before it on its branch (``None``: the channel has no value)."""
    _latest: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """The checkpoint that wrote each namespace, channel and version last (for a checkpoint
    whose parents did not write the value it names)."""
    _refs: dict[Slot, list[str]] = field(default_factory=dict)
    _child_of: dict[Slot, tuple[Slot, int]] = field(default_factory=dict)

    def fold(self, event: Event) -> Thread:
        """Fold one event of the thread's log in; the thread to fold the next one into (a
        new one after the entries were deleted)."""
        if isinstance(event, EntriesRecorded):
            self._carried = []
            for entry in event.entries:
                self.apply(entry)
        elif isinstance(event, EntriesDeleted):
            return Thread(self.serde)
        elif isinstance(event, MessageStarted) and self._carried:
            self._filling = self._carried.pop(0)  # the messages follow their entries, in order
        elif isinstance(event, BlockAppended | BlockRecorded) and event.index == 0:
            if isinstance(event, BlockRecorded) and self._filling is None and self._carried:
                self._filling = self._carried.pop(0)  # a first block opens its message
            if self._filling:
                data = self.messages[self._filling]["data"]
                if "content" not in data:  # left out of the entry: its block holds it
                    data["content"] = _body(event.block)
                self._filling = None
        elif not isinstance(event, BlockAppended | BlockRecorded | MessageEnded):
            self._carried, self._filling = [], None
        return self

    def apply(self, entry: Entry) -> None:
        """Fold one entry in (an unknown kind is refused: this saver wrote it, or it is not a
        LangGraph thread)."""
        self.entries += 1
        kind = entry.get("lg", "c" if is_checkpoint(entry) else None)
        if is_message(entry):
            ref = str(entry["uuid"]).removeprefix("langchain:")
            data = entry["langchain"] if "langchain" in entry else {"type": entry["lc"], "data": {}}
            if "id" not in data["data"]:  # left out when it is the ref
                data = {**data, "data": {**data["data"], "id": ref}}
            self.messages[ref] = copy.deepcopy(data)
            self._carried.append(ref)
        elif kind == "c":
            ns, checkpoint_id = checkpoint_of(entry["uuid"])
            self.saved[ns, checkpoint_id] = self.checkpoints[ns, checkpoint_id] = entry
            versions = self.checkpoint(ns, checkpoint_id)["channel_versions"]
            parent = entry.get("p")
            written: dict[str, str] = {}
            for channel, value in entry.get("vals", {}).items():
                version = version_key(value.get("ver", versions.get(channel)))
                if "more" in value or "keep" in value:  # a change from the parent's value
                    base = self.slot(ns, str(parent), channel)
                    value = {  # noqa: PLW2901 - the change, its base found
                        "base": base or (ns, channel, "", ""),  # none: not found when read
                        "keep": value.get("keep"),
                        "add": value.get("more", value.get("add")),
                    }
                self.values[ns, channel, version, checkpoint_id] = value
                self._latest[ns, channel, version] = checkpoint_id
                written[channel] = version
            self._slots[ns, checkpoint_id] = self._branch(
                ns, checkpoint_id, parent, versions, written
            )
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
        return self._built(ns, checkpoint_id, "ck", "dk", self._full)

    def metadata(self, ns: str, checkpoint_id: str) -> dict[str, Any]:
        """A checkpoint's metadata as LangGraph gave it (built once, then kept)."""
        return self._built(ns, checkpoint_id, "m", "md", self._metadata)

    def _built(
        self,
        ns: str,
        checkpoint_id: str,
        whole: str,
        changes: str,
        built: dict[tuple[str, str], dict[str, Any]],
    ) -> dict[str, Any]:
        """A checkpoint's ``whole`` value, or its ``changes`` from its parent's followed back
        to one built before (or to a whole one)."""
        pending: list[tuple[tuple[str, str], Entry]] = []
        key = (ns, checkpoint_id)
        while key not in built:
            entry = self.saved[key]
            pending.append((key, entry))
            if changes not in entry:
                break
            key = (ns, entry["p"])
        for key, entry in reversed(pending):
            if changes in entry:
                value = patched(built[key[0], entry["p"]], entry[changes])
            else:
                value = decode(self.serde, entry[whole])
            if whole == "ck":
                value["id"] = key[1]
                if "tsu" in entry:
                    value["ts"] = iso_time(entry["tsu"])
            built[key] = value
        return built[ns, checkpoint_id]

    def _branch(
        self,
        ns: str,
        checkpoint_id: str,
        parent: str | None,
        versions: dict[str, Any],
        written: dict[str, str],
    ) -> dict[str, tuple[str, Slot | None]]:
        """Where each channel's value is for a checkpoint just folded, from its branch: the
        value it wrote; its parent's when the version did not move; none when the version
        moved and it wrote no value (``put`` is handed every channel whose version moved
        since the parent's, and records no value for an empty channel). A channel is left
        out, and looked up by its version when read, when no parent was folded, or the
        parent left it out too, or the checkpoint wrote it at another version."""
        before = self._slots.get((ns, parent)) if parent is not None else None
        found: dict[str, tuple[str, Slot | None]] = {}
        for channel, version in versions.items():
            key = version_key(version)
            if written.get(channel) == key:
                found[channel] = (key, (ns, channel, key, checkpoint_id))
            elif before is None or channel in written:
                continue
            elif channel in before:
                found[channel] = before[channel] if before[channel][0] == key else (key, None)
            elif (
                version_key(self.checkpoint(ns, str(parent))["channel_versions"].get(channel))
                != key
            ):
                found[channel] = (key, None)
        return found

    def slot(self, ns: str, checkpoint_id: str, channel: str) -> Slot | None:
        """Where checkpoint ``checkpoint_id`` keeps ``channel``'s value: the one it or a
        checkpoint before it on its branch wrote at the version it names (see
        :meth:`_branch`), else the one written last at that version; ``None`` when it has
        none."""
        found = self._slots.get((ns, checkpoint_id), {}).get(channel)
        if found is not None:
            return found[1]
        version = self.checkpoint(ns, checkpoint_id)["channel_versions"].get(channel)
        if version is None:
            return None
        key = version_key(version)
        writer = self._latest.get((ns, channel, key))
        return None if writer is None else (ns, channel, key, writer)

    def message_ids(self, slot: Slot) -> list[str]:
        """The message refs of the messages channel value kept at ``slot``: from a value
        built before, else its changes followed back to one (or to the first), or cut from a
        later value that only added to it (listing newest first). Costs the refs it builds,
        not the thread's length."""
        chain: list[tuple[Slot, Entry]] = []
        key: Slot | None = slot
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
            key = entry.get("base")
        for key, entry in reversed(chain):
            keep = entry.get("keep")
            refs = (refs if keep is None else refs[:keep]) + entry["add"]
            self._remember(key, refs)
            if "base" in entry and keep is None:
                self._child_of[entry["base"]] = (key, len(entry["add"]))
        return refs

    def _remember(self, key: Slot, refs: list[str]) -> None:
        self._refs[key] = refs
        while len(self._refs) > REFS_REMEMBERED:
            del self._refs[next(iter(self._refs))]


def encode(serde: Any, value: Any) -> Entry:
    """A value as JSON when it reads back as itself, else LangGraph's typed bytes (base64)."""
    if plain(value):
        return {"j": value}
    kind, data = serde.dumps_typed(value)
    return {"t": kind, "b": base64.b64encode(data).decode("ascii")}


def decode(serde: Any, entry: Entry) -> Any:
    """What :func:`encode` was given (a copy: callers may change it)."""
    if "j" in entry:
        return copy.deepcopy(entry["j"])
    return serde.loads_typed((entry["t"], base64.b64decode(entry["b"])))


def _short(uuid: str, message: Entry) -> Entry:
    """A message entry without its body; ``{"uuid", "lc": its type}`` when nothing else
    is left."""
    data = {k: v for k, v in message["data"].items() if k != "content"}
    if not data:
        return {"uuid": uuid, "lc": message["type"]}
    return {"uuid": uuid, "langchain": {**message, "data": data}}


def is_message(entry: Entry) -> bool:
    """Whether an entry records a LangChain message (``langchain``, or ``lc`` in short)."""
    return "langchain" in entry or "lc" in entry


def is_checkpoint(entry: Entry) -> bool:
    """Whether an entry records a checkpoint (its ``uuid`` says so)."""
    uuid = entry.get("uuid")
    return isinstance(uuid, str) and uuid[:2] in {"c:", "c["}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_time(micros: int) -> str:
    """A UTC time in microseconds since 1970 as LangGraph writes a checkpoint's ``ts``."""
    return (_EPOCH + timedelta(microseconds=micros)).isoformat()


def micros_of(text: Any) -> int | None:
    """``text`` in microseconds since 1970 when :func:`iso_time` gives it back exactly."""
    if not isinstance(text, str):
        return None
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        return None
    if found.tzinfo is None:
        return None
    micros = (found - _EPOCH) // timedelta(microseconds=1)
    return micros if iso_time(micros) == text else None


def _body(block: Block) -> str | None:
    """The text a message's first block holds (a text block's, a tool result's text)."""
    match block:
        case TextBlock():
            return block.text
        case ToolResultBlock():
            return block.content if isinstance(block.content, str) else None
        case (
            ToolUseBlock()
            | ReasoningBlock()
            | ImageBlock()
            | DocumentBlock()
            | HostedToolUseBlock()
            | HostedToolResultBlock()
        ):
            return None
        case _:
            assert_never(block)


def _body_in_block(message: BaseMessage, limits: Limits) -> bool:
    """Whether ``message``'s content is text that its convstore message's first block holds
    as it is (so the message is recorded, and the fold finds the text there)."""
    if not isinstance(message.content, str) or not message.content:
        return False
    try:
        _, blocks = message_blocks(message, limits)
    except (InvalidInput, InvalidBlock):
        return False
    return bool(blocks) and _body(blocks[0]) == message.content


def untree(thread: Thread, tree: Any) -> Any:
    """What :meth:`Batch.encode` stored as ``m``, its messages read back."""
    if isinstance(tree, list):
        return [untree(thread, v) for v in tree]
    if isinstance(tree, dict):
        if "$lc" in tree:
            found = tree["$lc"]
            if isinstance(found, str):
                return thread.message(found)
            return messages_from_dict([found])[0]
        return {k: untree(thread, v) for k, v in tree.items()}
    return tree


def is_messages(value: Any) -> bool:
    """A channel value stored as refs: a list of messages that all have ids."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, BaseMessage) and m.id and not isinstance(m, RemoveMessage) for m in value
        )
    )


def _with_messages(value: Any) -> bool:
    """Whether ``value`` is JSON (as :func:`plain`) with LangChain messages among it, and
    no object with a ``$lc`` key (which marks a message when it is stored)."""
    if isinstance(value, BaseMessage):
        return True
    if type(value) is list:
        return all(_with_messages(v) for v in value)
    if type(value) is dict:
        return "$lc" not in value and all(
            type(k) is str and _with_messages(v) for k, v in value.items()
        )
    return plain(value)


@dataclass
class Batch:
    """What one ``put`` or ``put_writes`` records: the messages it meets that the thread has
    not recorded (each once), then its own entry."""

    thread: Thread
    serde: Any
    limits: Limits
    pending: dict[str, Entry] = field(default_factory=dict)
    _messages: list[Entry] = field(default_factory=list)
    _bodies: bool = True

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
        data = compact(message, whole)
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
        ref = f"{ref}#{digest[:16]}"
        if ref in thread.messages:
            thread.remember(message, ref)
        elif ref not in self.pending:
            self._new(ref, message, whole)
        return ref

    def _new(self, ref: str, message: BaseMessage, whole: Entry) -> str:
        self.pending[ref] = whole
        data = compact(message, whole)
        if data["data"].get("id") == ref:  # the fold takes it from the uuid
            data = {**data, "data": {k: v for k, v in data["data"].items() if k != "id"}}
        self._messages.append({"uuid": "langchain:" + ref, "langchain": data})
        self._bodies = self._bodies and _body_in_block(message, self.limits)
        return ref

    @property
    def entries(self) -> list[Entry]:
        """The batch's message entries. When each one's body (a text ``content``) is the
        first block of the convstore message it carries, every one of them is recorded as
        a message, in order, so the bodies are left out: the fold takes each from its block
        (see :meth:`Thread.fold`)."""
        if not self._bodies:
            return self._messages
        return [_short(e["uuid"], e["langchain"]) for e in self._messages]

    def carried(self) -> dict[str, Entry]:
        """Each new message's whole ``message_to_dict``, by its entry's ``uuid``: what the
        write records as convstore messages."""
        return {"langchain:" + ref: whole for ref, whole in self.pending.items()}

    def encode(self, value: Any) -> Entry:
        """A value as JSON; with messages in it, JSON where each message is ``{"$lc": its
        ref}`` (``{"$lc": its dict}`` when it has no id); else LangGraph's typed bytes."""
        if not plain(value) and _with_messages(value):
            return {"m": self._tree(value)}
        return encode(self.serde, value)

    def _tree(self, value: Any) -> Any:
        if isinstance(value, BaseMessage):
            keep = value.id and not isinstance(value, RemoveMessage)
            return {"$lc": self.ref(value) if keep else compact(value, message_to_dict(value))}
        if isinstance(value, list):
            return [self._tree(v) for v in value]
        if isinstance(value, dict):
            return {k: self._tree(v) for k, v in value.items()}
        return value
