"""Checking the log: what `convstore verify` reports. It reads and never writes.

The checks, record by record: every column can be read (a TEXT column that is not UTF-8 is
listed, not fatal) and every state decodes; each conversation's versions run 1, 2, 3 … with no
gap; the stored topic, id and version agree with the event inside. Each conversation is then
folded through the writer's own rules (:meth:`Conversation.recheck`, the code that decides what
a writer may record: roles of tool blocks, call ids once per conversation, blocks only in open
messages and in position, tool names as the writer fixes them, compactions through known
messages, JSON values that read back), and the first rule it breaks is reported with its
position. Last, each conversation's stored events are hashed into the chain and compared with
its head (see :mod:`convstore.ports.chain`): a changed, removed or added event, or a
lost last event, shows there. Conversations written before chains are noted, not reported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from uuid import UUID

from convstore.domain.conversation import Conversation
from convstore.domain.errors import InvalidInput
from convstore.domain.events import BlockAppended, BlockRecorded, Event
from convstore.domain.json_values import json_problem
from convstore.ports.chain import (
    CHAIN_SINCE,
    START_MARKER_ID,
    Head,
    genesis,
    link,
)
from convstore.ports.records import Recorded


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the log, and where."""

    position: int | None
    conversation: str
    version: int | None
    problem: str


@dataclass(slots=True)
class _Conversation:
    writer: Conversation
    """The writer's state, folded through the writer's rules."""
    version: int = 0
    last_position: int = 0
    broken: bool = False
    """A rule was broken (or the versions jumped): the fold stops, one report is enough."""
    chain: bytes | None = None
    chain_start: int = 0
    """The version :attr:`chain` starts at (1 for a conversation with no head when scanned)."""
    chained_upto: int = 0


@dataclass(slots=True)
class Verifier:
    """Feed it the log in order with :meth:`check`, call :meth:`finish`, then read
    :attr:`problems` (damage) and :attr:`notes` (facts that are not damage).

    ``heads`` are the stored heads with the start marker under the nil id; ``None`` when the
    backend keeps none (the chain checks are then skipped).
    """

    heads: dict[UUID, Head] | None = None
    key: bytes = b""
    """The chain MAC key the writers used (``CONVSTORE_CHAIN_KEY``), or none."""
    now: Callable[[], tuple[dict[UUID, Head], Callable[[UUID], int]]] | None = None
    """Where the log stands now: the heads read again, and a conversation's newest stored
    version read by its id. Asked only when a head and the scanned events disagree on where a
    conversation ends, which an append made during the check causes too, and on PostgreSQL an
    event committed but not yet settled (a transaction open elsewhere in the cluster holds
    the log's readers back; see :mod:`convstore.infrastructure.postgres.recorder`)."""
    erased: Callable[[UUID], bool] | None = None
    """Whether a conversation is erased now (its tombstone read when asked). Asked only for a
    conversation whose head and scanned events disagree and which the log as it is now does
    not explain: an erasure during the check removes its events and head between the reads,
    which is no damage."""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    events: int = 0
    conversations: dict[str, _Conversation] = field(default_factory=dict)
    _fresh: tuple[dict[UUID, Head], Callable[[UUID], int]] | None = None
    _unseen: int = 0
    _gone: int = 0

    def check_all(self, records: Iterable[Recorded]) -> None:
        for record in records:
            self.check(record)
        self.finish()

    def check(self, record: Recorded) -> None:
        self.events += 1
        conv_id = str(record.originator_id)

        def problem(text: str) -> None:
            self.problems.append(Problem(record.position, conv_id, record.originator_version, text))

        if record.originator_id is None or record.originator_version is None:
            problem(f"cannot be read: {record.error}")
            return
        if not isinstance(record.originator_version, int):
            problem(f"stored version {record.originator_version!r} is not a whole number")
            return
        state = self.conversations.get(conv_id)
        if state is None:
            writer = Conversation(id=_as_uuid(record.originator_id))
            state = self.conversations[conv_id] = _Conversation(writer)
        state.last_position = record.position
        if record.unreadable:
            problem(f"cannot be read: {record.unreadable}")
        self._chain(record, state)
        if record.originator_version != state.version + 1:
            problem(f"version {record.originator_version} follows {state.version} (a gap)")
            state.broken = True
        state.version = record.originator_version
        event = record.event
        if event is None:
            problem(f"does not decode: {record.error}")
            state.broken = True
            return
        if record.topic is not None and record.topic != f"convstore:{event.type}":
            problem(f"stored topic {record.topic!r} disagrees with the event ({event.type})")
        if (str(event.originator_id), event.originator_version) != (
            conv_id,
            record.originator_version,
        ):
            problem("the stored id or version disagrees with the event inside")
            state.broken = True
        if not state.broken and (broken := _rule_broken(state.writer, event)):
            problem(f"breaks a writer rule: {broken}")
            state.broken = True

    def _chain(self, record: Recorded, state: _Conversation) -> None:
        """Hash the stored bytes into the conversation's chain, from its head's first version."""
        head = self._head(record.originator_id)
        version = record.originator_version
        if not isinstance(version, int) or self.heads is None:
            return
        # A conversation without a head in the snapshot is chained from its first version
        # too: if its head appears in the heads read again (it was started during the
        # check), the chain is compared with that one.
        if version < (1 if head is None else head.chained_from):
            return
        if state.chain is None:
            state.chain = genesis(state.writer.id)
            state.chain_start = version
        raw_topic, stored = record.raw_topic or b"", record.state or b""
        state.chain = link(state.chain, version, raw_topic, stored, self.key)
        state.chained_upto = version

    def _head(self, originator_id: UUID | str | None) -> Head | None:
        if self.heads is None or originator_id is None:
            return None
        try:
            return self.heads.get(_as_uuid(originator_id))
        except ValueError:
            return None

    def finish(self) -> None:
        """The checks that need a whole conversation: its head against its events."""
        if self.heads is None:
            return
        marker = self.heads.get(START_MARKER_ID)
        if marker is None:
            self.problems.append(
                Problem(None, "", None, "the hash chains' start marker is missing")
            )
        start = marker.version if marker is not None else 0
        unchained = partly = 0
        for conv_id, state in self.conversations.items():
            head = self._head(conv_id)
            if head is None:
                if state.last_position > start:
                    if self._moved_on(conv_id, state) or self._erased_since(conv_id):
                        continue
                    text = (
                        "has no head, but events written after hash chains began (log "
                        f"position {start}): its head row was removed"
                    )
                    self._conversation_problem(conv_id, state, text)
                else:
                    unchained += 1
                continue
            if head.version != state.version and (
                self._moved_on(conv_id, state) or self._erased_since(conv_id)
            ):
                continue
            if found := _head_problem(head, state, keyed=bool(self.key)):
                self._conversation_problem(conv_id, state, found)
            elif head.chained_from > 1:
                partly += 1
        known = set(self.conversations)
        for head_id, head in self.heads.items():
            if head_id == START_MARKER_ID or str(head_id) in known:
                continue
            if self._moved_on(
                str(head_id), _Conversation(Conversation(id=head_id))
            ) or self._erased_since(str(head_id)):
                continue
            text = f"its head records version {head.version}, but it has no events"
            self.problems.append(Problem(None, str(head_id), head.version, text))
        if self._unseen:
            self.notes.append(
                f"{self._unseen} conversation(s) had events the scan did not reach (appended "
                "during the check, or on PostgreSQL not yet settled): checked up to what the "
                "scan read"
            )
        if self._gone:
            self.notes.append(
                f"{self._gone} conversation(s) erased during the check: nothing of them is "
                "left to check"
            )
        if unchained:
            self.notes.append(
                f"{unchained} conversation(s) unchained (written before {CHAIN_SINCE}): "
                "not covered by a hash chain until their next append"
            )
        if partly:
            self.notes.append(
                f"{partly} conversation(s) chained from a later version: their events written "
                f"before {CHAIN_SINCE} are not covered"
            )

    def _moved_on(self, conv_id: str, state: _Conversation) -> bool:
        """Whether the conversation's head disagrees with the scan only because the log moved
        on past what the scan read: then its chain is compared with the head as it is now if
        that head ends where the scan did, else it is counted in a note."""
        if self.now is None:
            return False
        if self._fresh is None:
            self._fresh = self.now()
        heads, newest = self._fresh
        fresh = heads.get(_as_uuid(conv_id))
        if fresh is not None and fresh.version == state.version and state.version > 0:
            if state.chain is not None and fresh.chained_from != state.chain_start:
                # Chained from its first version while it had no head, but its head starts
                # later (an older conversation appended to during the check): not comparable.
                self._unseen += 1
                return True
            if found := _head_problem(fresh, state, keyed=bool(self.key)):
                self._conversation_problem(conv_id, state, found)
            return True
        if fresh is not None and newest(_as_uuid(conv_id)) >= fresh.version > state.version:
            self._unseen += 1
            return True
        return False

    def _erased_since(self, conv_id: str) -> bool:
        """Whether the conversation is erased now, so its head and events were deleted
        between the reads (then counted in a note)."""
        if self.erased is None or not self.erased(_as_uuid(conv_id)):
            return False
        self._gone += 1
        return True

    def _conversation_problem(self, conv_id: str, state: _Conversation, text: str) -> None:
        self.problems.append(Problem(state.last_position, conv_id, state.version, text))


def _head_problem(head: Head, state: _Conversation, *, keyed: bool) -> str | None:
    """What is wrong between a conversation's head and its stored events, if anything."""
    if head.restarted_after is not None:
        return (
            f"its chain was restarted at version {head.chained_from}: the head was at version "
            f"{head.restarted_after} when it was written (events were removed or added "
            f"outside convstore, or by a convstore before {CHAIN_SINCE})"
        )
    if state.version < head.version:
        return (
            f"the log ends at version {state.version}, but its head records version "
            f"{head.version}: the last event(s) are missing"
        )
    if state.version > head.version:
        return (
            f"versions after {head.version} are not in its head's chain: written outside "
            f"convstore, or by a convstore before {CHAIN_SINCE}"
        )
    if state.chain != head.chain:
        key = "set" if keyed else "unset"
        return (
            f"its stored events from version {head.chained_from} do not match the hash chain "
            "in its head: an event was changed, removed, reordered or inserted (or the "
            f"writers' CONVSTORE_CHAIN_KEY differs from this one, which is {key})"
        )
    return None


def _rule_broken(writer: Conversation, event: Event) -> str | None:
    """The writer rule ``event`` breaks given what came before it, or ``None`` (and then the
    event is folded in)."""
    if isinstance(event, BlockAppended | BlockRecorded) and (
        problem := json_problem(event.block.model_dump())
    ):
        return problem
    try:
        writer.recheck(event)
    except InvalidInput as exc:
        return str(exc)
    writer.apply(event)
    return None


def _as_uuid(value: UUID | str) -> UUID:
    return value if isinstance(value, UUID) else UUID(str(value))
