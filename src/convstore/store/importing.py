"""Importing: histories read from other systems, recorded as conversations, all or nothing.

The converters in :mod:`convstore.convert` read a file into :class:`History` values; this
module records them. Every event is decided by the domain's :class:`Conversation` commands, so
an imported conversation obeys exactly the rules a live one does, and every history of one
input is saved in a single recorder transaction: a refused input leaves the store as it was.
Which converter reads an input is named by one :data:`ImportFormat`, or found by
:func:`detect_format` (the one format that reads it; ambiguous input is refused).

Each imported conversation's ``ConversationStarted`` names its ``source``: ``FORMAT:KEY`` when
the history has a stable key (a Claude Code session or agent id; a key that already starts
with ``FORMAT:`` is kept as it is), else ``sha256:<hex>`` of the input's bytes (``#N`` added
for the Nth history of the input after the first). Importing a source a second time is
refused, naming the conversation that holds it, unless ``again``. The refusal holds under
concurrency as well: an imported conversation's id is derived from its source (a UUID5), so two
imports of one source at once write version 1 of the same id and the recorder admits only one.
"""

from __future__ import annotations

import hashlib
import importlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, assert_never, get_args
from uuid import UUID, uuid4, uuid5

from convstore.convert.history import History, Skipped
from convstore.domain.blocks import (
    BLOCK_CLASSES,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ToolResultBlock,
    ToolUseBlock,
    block_images,
)
from convstore.domain.conversation import Conversation, as_of
from convstore.domain.errors import (
    AlreadyImported,
    ConvstoreError,
    InvalidBlock,
    InvalidInput,
    StoreError,
)
from convstore.domain.events import BlockRecorded, Event, MessageStarted
from convstore.domain.json_values import strict_loads
from convstore.domain.metadata import parse_meta
from convstore.domain.parsing import (
    describe_value,
    parse_block,
    parse_flag,
    parse_optional_name,
)
from convstore.infrastructure.common.gc_pause import paused_gc
from convstore.projections.listing import ListingQuery
from convstore.store.listing import Listing
from convstore.store.writer import Writer

ImportFormat: TypeAlias = Literal[
    "claude-code",
    "openai-chat",
    "anthropic",
    "responses",
    "codex",
    "gemini-cli",
    "pydantic-ai",
    "vercel-ai",
]
IMPORT_FORMATS: tuple[ImportFormat, ...] = get_args(ImportFormat)

LINE_FORMATS: frozenset[ImportFormat] = frozenset({"claude-code", "codex", "gemini-cli"})
"""The formats whose converter reads the text itself (JSON lines, or either Gemini layout);
the others are one JSON document, parsed before conversion."""

IMPORT_NAMESPACE = UUID("0d7e4b9a-3c61-4f52-8e0b-6a2f9c1d5e37")
"""The UUID5 namespace that turns an imported history's source into its conversation id."""

BLOCK_KINDS: tuple[str, ...] = tuple(str(cls.model_fields["type"].default) for cls in BLOCK_CLASSES)


@dataclass(slots=True)
class ImportedConversation:
    """One conversation an import recorded, and what it holds."""

    id: UUID
    title: str | None
    parent_id: UUID | None
    source: str
    messages: int
    blocks: dict[str, int]
    calls_without_result: int
    results_without_call: int
    images_in_results: int = 0
    """Images inside tool results (parts of a result, so not counted in ``blocks``)."""
    previous_response_id: str | None = None
    """The Responses body went on from this stored response, which the input lacks."""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "title": self.title,
            "parent_id": str(self.parent_id) if self.parent_id else None,
            "source": self.source,
            "messages": self.messages,
            "blocks": self.blocks,
            "calls_without_result": self.calls_without_result,
            "results_without_call": self.results_without_call,
            "images_in_results": self.images_in_results,
            "previous_response_id": self.previous_response_id,
        }


@dataclass(slots=True)
class ImportReport:
    """What an import recorded (main conversation first) and what it left out."""

    conversations: list[ImportedConversation]
    skipped: list[Skipped] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)

    @property
    def ids(self) -> list[UUID]:
        return [c.id for c in self.conversations]

    def as_json(self) -> dict[str, Any]:
        blocks: Counter[str] = Counter()
        for conversation in self.conversations:
            blocks.update(conversation.blocks)
        return {
            "conversations": [c.as_json() for c in self.conversations],
            "messages": sum(c.messages for c in self.conversations),
            "blocks": {kind: blocks[kind] for kind in BLOCK_KINDS},
            "calls_without_result": sum(c.calls_without_result for c in self.conversations),
            "results_without_call": sum(c.results_without_call for c in self.conversations),
            "images_in_results": sum(c.images_in_results for c in self.conversations),
            "skipped": [{"line": s.line, "reason": s.reason} for s in self.skipped],
            "ignored": dict(sorted(self.ignored.items())),
        }


# -- reading ----------------------------------------------------------------------------------


def read_histories(fmt: ImportFormat | None, text: str, data: Any = None) -> list[History]:
    """The histories an input holds, through the converter for ``fmt`` (``None``: the format
    :func:`detect_format` finds).

    ``text`` is the input as text (the line formats read it themselves); ``data`` is the
    parsed JSON for the other formats, parsed here when not given. A converter's complaint
    about the input's shape is an :class:`InvalidInput` naming the format, since the likeliest
    cause is a wrong --format.
    """
    if fmt is None:
        fmt = detect_format(text)
    if data is None and fmt not in LINE_FORMATS:
        try:
            data = strict_loads(text)
        except ValueError as exc:
            msg = f"not a valid {fmt} history: the input is not JSON ({exc})"
            raise InvalidInput(msg) from None
    try:
        return _read_histories(fmt, text, data)
    except ModuleNotFoundError as exc:
        msg = f"this convstore has no {fmt} reader ({exc.name} is missing)"
        raise InvalidInput(msg) from None


def _read_histories(fmt: ImportFormat, text: str, data: Any) -> list[History]:
    try:
        match fmt:
            case "claude-code":
                module = importlib.import_module("convstore.convert.claude_code")
                histories: list[History] = module.histories_from_transcript(text)
            case "openai-chat":
                module = importlib.import_module("convstore.convert.openai_chat")
                histories = [module.history_from_chat(data)]
            case "anthropic":
                module = importlib.import_module("convstore.convert.anthropic")
                histories = [module.history_from_messages(data)]
            case "responses":
                module = importlib.import_module("convstore.convert.responses")
                histories = [module.history_from_responses(data)]
            case "codex":
                module = importlib.import_module("convstore.convert.codex")
                histories = module.histories_from_rollout(text)
            case "gemini-cli":
                module = importlib.import_module("convstore.convert.gemini_cli")
                histories = module.histories_from_session(text)
            case "pydantic-ai":
                module = importlib.import_module("convstore.convert.pydantic_ai")
                histories = [module.history_from_model_messages(data)]
            case "vercel-ai":
                module = importlib.import_module("convstore.convert.vercel_ai")
                histories = [module.history_from_ui_messages(data)]
            case _:
                assert_never(fmt)
    except InvalidInput as exc:
        msg = f"not a valid {fmt} history (check --format): {exc}"
        raise InvalidInput(msg) from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        msg = f"not a valid {fmt} history (check --format): {type(exc).__name__}: {exc}"
        raise InvalidInput(msg) from None
    if not any(history.messages for history in histories):
        msg = f"found no messages to import: is the input really {fmt}? (--format)"
        raise InvalidInput(msg)
    return histories


def detect_format(text: str) -> ImportFormat:
    """The one format whose converter reads ``text`` into at least one message.

    Every converter is tried (they are pure, and each refuses keys and types it does not
    know, so a foreign input fails them); no reader, or more than one (a list of plain
    ``role``/``content`` messages is both a Chat Completions and a Messages history), is an
    :class:`InvalidInput` naming the candidates, to be settled with an explicit format.
    """
    not_json = ""
    try:
        data: Any = strict_loads(text)
    except ValueError as exc:
        data = _NOT_JSON
        if not _json_lines(text):
            not_json = f"it is neither JSON ({exc}) nor JSON lines, and "
    readers: list[ImportFormat] = []
    for fmt in IMPORT_FORMATS:
        if fmt not in LINE_FORMATS and data is _NOT_JSON:
            continue
        try:
            histories = _read_histories(fmt, text, data)
        except (InvalidInput, ModuleNotFoundError):
            continue
        if any(history.messages for history in histories):
            readers.append(fmt)
    if len(readers) == 1:
        return readers[0]
    if readers:
        msg = (
            f"the input reads as more than one format ({', '.join(readers)}); "
            "choose one with --format"
        )
    else:
        msg = (
            f"cannot tell the input's format: {not_json}none of the importers reads it; "
            f"name one with --format to see why ({', '.join(IMPORT_FORMATS)})"
        )
    raise InvalidInput(msg)


_NOT_JSON = object()


def _json_lines(text: str) -> bool:
    """Whether every line of ``text`` that is not blank is JSON (what the line formats read)."""
    try:
        for line in text.splitlines():
            if line.strip():
                strict_loads(line)
    except ValueError:
        return False
    return True


def sources_for(fmt: ImportFormat, histories: Sequence[History], raw: bytes) -> list[str]:
    """The ``source`` each history is recorded with (see the module's docstring)."""
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    sources = []
    for n, history in enumerate(histories):
        if history.key:
            prefixed = history.key.startswith(f"{fmt}:")
            sources.append(history.key if prefixed else f"{fmt}:{history.key}")
        else:
            sources.append(digest if n == 0 else f"{digest}#{n}")
    return sources


# -- recording --------------------------------------------------------------------------------


def history_events(
    store: Importing,
    history: History,
    conversation_id: UUID,
    *,
    parent_id: UUID | None,
    source: str | None,
) -> tuple[list[Event], ImportedConversation]:
    """Every event of one history, decided by the domain's commands; nothing is saved."""
    state = Conversation(id=conversation_id, block_events=store._log.block_events)
    known = [message.at for message in history.messages if message.at is not None]
    first = Conversation.start(conversation_id, history.title, parent_id=parent_id, source=source)
    [started] = as_of([first], min(known) if known else None)
    events: list[Event] = [started]
    state.apply(started)

    def record(new: list[Event]) -> None:
        for event in new:
            state.apply(event)
        events.extend(new)

    through: dict[int, list[str]] = {}
    for compaction in history.compactions:
        if not 0 <= compaction.through < len(history.messages):
            msg = f"a compaction names message {compaction.through}, which the history lacks"
            raise InvalidInput(msg)
        through.setdefault(compaction.through, []).append(compaction.summary)
    kinds: Counter[str] = Counter()
    calls: set[str] = set()
    answered: set[str] = set()
    result_images = 0
    for index, message in enumerate(history.messages):
        place = message.where or f"message {index + 1} ({message.role})"
        try:
            meta = None if message.meta is None else parse_meta(message.meta, store.limits)
        except InvalidInput as exc:
            msg = f"{place}: {exc}"
            raise InvalidInput(msg) from None
        try:
            blocks = [parse_block(block, store.limits) for block in message.blocks]
            decided = state.record_message(
                message.role, blocks, leave_open=message.status != "ended", meta=meta
            )
        except InvalidBlock as exc:
            msg = f"{place}: {exc}"
            raise InvalidBlock(msg) from None
        record(as_of(decided, message.at))
        opened = decided[0]
        assert isinstance(opened, MessageStarted | BlockRecorded)
        message_id = opened.message_id
        if message.status == "interrupted":
            record(as_of([state.interrupt_message(message_id, message.reason)], message.at))
        for summary in through.get(index, []):
            record(as_of([state.compact(summary, message_id)], message.at))
        for block in blocks:
            kinds[block.type] += 1
            if isinstance(block, ToolUseBlock | HostedToolUseBlock):
                calls.add(block.id)
            elif isinstance(block, ToolResultBlock | HostedToolResultBlock):
                answered.add(block.tool_use_id)
                result_images += len(block_images(block))
    imported = ImportedConversation(
        id=conversation_id,
        title=history.title,
        parent_id=parent_id,
        source=source or "",
        messages=len(history.messages),
        blocks={kind: kinds[kind] for kind in BLOCK_KINDS},
        calls_without_result=len(calls - answered),
        results_without_call=len(answered - calls),
        images_in_results=result_images,
        previous_response_id=history.previous_response_id,
    )
    return events, imported


def import_histories(
    store: Importing,
    histories: Sequence[History],
    *,
    sources: Sequence[str | None] | None = None,
    again: bool = False,
) -> ImportReport:
    """Record histories as new conversations in one transaction; main first, sidechains
    linked to their parent by ``parent_id``. Refuses (writing nothing) a source the store
    already holds unless ``again``."""
    histories, sources = _checked_arguments(store, histories, sources)
    parse_flag(again, "again")
    known = [s for s in sources if s]
    if not again:
        _refuse_known(store, known)
    ids = [uuid4() for _ in histories] if again else _ids_for(store, sources)
    with paused_gc():  # thousands of small acyclic objects; see infrastructure.gc_pause
        events, report = _decide_all(store, histories, sources, ids)
        # The import service is part of the store's layer. A conversation id already taken
        # is a concurrent import of the same source that committed first.
        store._record_new(events, taken=lambda: _taken(store, known))
    return report


def _ids_for(store: Importing, sources: list[str | None]) -> list[UUID]:
    """The conversation id of each history: derived from its source, so two imports of one
    source at once want the same id and the recorder admits only the first (no check read
    before the write can see the other). An id erased before, or taken by an earlier history
    of this input, moves to the source's next derived id; a history without a source gets a
    random one."""
    erased = {erasure.id for erasure in store.erasures()}
    ids: list[UUID] = []
    for source in sources:
        if source is None:
            ids.append(uuid4())
            continue
        candidate, n = uuid5(IMPORT_NAMESPACE, source), 0
        while candidate in erased or candidate in ids:
            n += 1
            candidate = uuid5(IMPORT_NAMESPACE, f"{source}#{n}")
        ids.append(candidate)
    return ids


def _taken(store: Importing, sources: list[str]) -> ConvstoreError:
    """The error for an import whose conversation id another writer took first."""
    try:
        _refuse_known(store, sources)
    except AlreadyImported as exc:
        return exc
    msg = "a conversation being created already exists (the import was not recorded)"
    return StoreError(msg)


def _decide_all(
    store: Importing, histories: Sequence[History], sources: list[str | None], ids: list[UUID]
) -> tuple[list[Event], ImportReport]:
    events: list[Event] = []
    report = ImportReport([])
    for history, conversation_id, source in zip(histories, ids, sources, strict=True):
        parent = history.parent
        if parent is not None and not 0 <= parent < len(histories):
            msg = f"a history names parent {parent}, which the input lacks"
            raise InvalidInput(msg)
        parent_id = ids[parent] if parent is not None else _imported_as(store, history.parent_key)
        new, imported = history_events(
            store, history, conversation_id, parent_id=parent_id, source=source
        )
        events.extend(new)
        report.conversations.append(imported)
        report.skipped.extend(s for s in history.skipped if s not in report.skipped)
        report.ignored.update(history.ignored)
    return events, report


PARENT_CANDIDATES = 8
"""How many of a source's derived ids are tried when looking for the conversation an earlier
import recorded from it (the id moves on only past erased ones)."""


def _imported_as(store: Importing, source: str | None) -> UUID | None:
    """The conversation an earlier import recorded from ``source`` (by its derived ids: one
    indexed read, no scan), if the store holds one."""
    if source is None:
        return None
    candidates = [uuid5(IMPORT_NAMESPACE, source)]
    candidates += [uuid5(IMPORT_NAMESPACE, f"{source}#{n}") for n in range(1, PARENT_CANDIDATES)]
    query = ListingQuery(ids=tuple(candidates), limit=PARENT_CANDIDATES)
    rows, _ = store._select_listing(query)
    held = {row.id for row in rows if row.source == source}
    return next((candidate for candidate in candidates if candidate in held), None)


def _checked_arguments(
    store: Importing, histories: Sequence[History], sources: Sequence[str | None] | None
) -> tuple[list[History], list[str | None]]:
    """The histories and their sources, type-checked (a wrong call is an InvalidInput)."""
    if not isinstance(histories, list | tuple) or not all(
        isinstance(h, History) for h in histories
    ):
        msg = f"histories must be a list of History values, not {describe_value(histories)}"
        raise InvalidInput(msg)
    if sources is None:
        sources = [h.key for h in histories]
    if not isinstance(sources, list | tuple):
        given = describe_value(sources)
        msg = f"sources must be a list (one source or None per history), not {given}"
        raise InvalidInput(msg)
    if len(sources) != len(histories):
        msg = f"give one source per history ({len(histories)}), not {len(sources)}"
        raise InvalidInput(msg)
    limit = store.limits.max_block_bytes
    checked = [parse_optional_name(source, "source", limit) for source in sources]
    return list(histories), checked


def _refuse_known(store: Importing, sources: list[str]) -> None:
    wanted = set(sources)
    for conversation in store.conversations():
        if conversation.source in wanted:
            msg = (
                f"already imported as conversation {conversation.id} (source "
                f"{conversation.source}); use --again (again=True) to record another copy"
            )
            raise AlreadyImported(msg)


class Importing(Writer, Listing):
    """The store's part that records converted histories (see :mod:`convstore.convert`)."""

    def import_history(
        self, history: History, *, source: str | None = None, again: bool = False
    ) -> UUID:
        """Record a history read by a converter (:mod:`convstore.convert`) as one new
        conversation, all or nothing; returns its id. A ``source`` (default: the history's
        key) already in the store is refused unless ``again``."""
        if not isinstance(history, History):
            msg = f"history must be a History (convstore.convert), not {type(history).__name__}"
            raise InvalidInput(msg)
        sources = [history.key if source is None else source]
        return self.import_histories([history], sources=sources, again=again).ids[0]

    def import_histories(
        self,
        histories: Sequence[History],
        *,
        sources: Sequence[str | None] | None = None,
        again: bool = False,
    ) -> ImportReport:
        """Record several histories of one input (a session and its subagents) in one
        transaction: main first, sidechains linked to their parent by ``parent_id``. A source
        the store already holds is refused (nothing written) unless ``again``."""
        return import_histories(self, histories, sources=sources, again=again)
