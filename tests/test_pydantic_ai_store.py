"""Pydantic AI's ``ConversationStore`` on convstore, held to ``InMemoryConversationStore``.

The differential test applies the same random operations to Pydantic AI's in-memory reference
store and to :class:`ConvstoreConversationStore` on a real SQLite file and on the PostgreSQL
test server, and compares everything a caller sees. The rest race two writers, resume a real
agent from a fresh process's store, and look for a deleted conversation's bytes in the files.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationStore,
    InMemoryConversationStore,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from convstore import open_store
from convstore.integrations.pydantic_ai_store import ConvstoreConversationStore, conversation_for

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
"""Every generated message's time, so both stores are handed equal messages."""


@pytest.fixture(params=["sqlite", "postgres"])
def make_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes fresh store locations: SQLite files, or schemas of the PostgreSQL test server
    (conftest's ``make_postgres_url``, dropped after the test)."""
    if request.param == "sqlite":
        yield lambda: str(tmp_path / f"{uuid4().hex}.db")
        return
    make: Callable[[], str] = request.getfixturevalue("make_postgres_url")
    yield make


@pytest.fixture
def location(make_location: Callable[[], str]) -> str:
    """A fresh store location: a SQLite file, or a schema of the PostgreSQL test server."""
    return make_location()


def _request(text: str) -> ModelRequest:
    return ModelRequest(parts=[UserPromptPart(text, timestamp=WHEN)], timestamp=WHEN)


def _response(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)], timestamp=WHEN)


# -- the differential test ---------------------------------------------------------------------

IDS = ["a", "b"]
SCOPES = [None, "s1", "s2"]
TEXT = st.text(alphabet="xyz ", min_size=1, max_size=4)
TURN = st.tuples(st.just("turn"), st.sampled_from(IDS), TEXT, st.sampled_from(SCOPES[:2]))

OPERATION = st.one_of(
    TURN,
    TURN,
    st.tuples(st.just("new"), st.sampled_from(IDS), TEXT, st.sampled_from(SCOPES[:2])),
    st.tuples(st.just("load"), st.sampled_from(IDS), st.sampled_from([None, None, 1, 3])),
    st.tuples(st.just("branch"), st.sampled_from(IDS), st.integers(0, 4)),
    st.tuples(st.just("fork"), st.sampled_from(IDS), st.sampled_from([None, 0, 1, 2, 5])),
    st.tuples(st.just("fork_to"), st.sampled_from(IDS), st.sampled_from([*IDS, "c"])),
    st.tuples(
        st.just("update"),
        st.sampled_from(IDS),
        st.sampled_from([None, "T", "U"]),
        st.sampled_from([None, {"k": 1}, {"k": [1, "two"]}]),
        st.sampled_from(["unset", None, "T"]),
    ),
    st.tuples(st.just("delete"), st.sampled_from(IDS), st.sampled_from(SCOPES)),
    st.tuples(st.just("list"), st.sampled_from(SCOPES), st.sampled_from([None, 1, 2])),
    st.tuples(st.just("entries"), st.sampled_from([*IDS, "c"])),
)
"""One operation of one caller; ``a`` and ``b`` are saved to, ``c`` only forked to."""

PRELUDE: list[tuple[int, tuple[Any, ...]]] = [
    (0, ("new", "a", "hi", None)),
    (1, ("new", "b", "yo", "s1")),
]
"""Where every example starts: ``a`` and ``b`` saved, each by one caller."""

STEPS = st.lists(st.tuples(st.integers(0, 1), OPERATION), min_size=3, max_size=16)
"""Operations, each by one of two callers: on convstore, two stores on one location, as two
processes would hold them, so one caller's saves make the other's revisions stale."""


class Client:
    """One caller of a store: the conversations it holds (loaded or saved), so its saves carry
    the revisions it read, and the forks it made, named in order (a fork's generated id is the
    one thing that must differ between the two stores)."""

    def __init__(self, store: ConversationStore, forks: list[str]) -> None:
        self.store = store
        self.held: dict[str, Conversation] = {}
        self.forks = forks

    def name(self, conversation_id: str) -> str:
        """A conversation's id as both stores share it: a generated fork id by its order."""
        if conversation_id in self.forks:
            return f"fork-{self.forks.index(conversation_id)}"
        return conversation_id

    async def entry(self, entry_id: str | None) -> list[ModelMessage] | None:
        """An entry id as both stores share it: the history that ends with it."""
        if entry_id is None:
            return None
        return [entry.message for entry in await self.store.read_history(entry_id)]

    async def seen(self, conversation: Conversation) -> tuple[Any, ...]:
        return (
            self.name(conversation.conversation_id),
            conversation.messages,
            conversation.usage,
            conversation.deferred_tool_requests,
        )

    async def apply(self, operation: tuple[Any, ...]) -> tuple[Any, ...]:
        """Apply one operation; what the caller sees of it (an error by its type and text)."""
        store, kind, target = self.store, operation[0], operation[1]
        try:
            if kind in {"turn", "new"}:
                _, _, text, scope = operation
                held = self.held.get(target) if kind == "turn" else None
                conversation = held or Conversation(conversation_id=target)
                conversation.messages += [_request(text), _response(text.upper())]
                saved = await store.save(conversation, scope=scope)
                self.held[target] = conversation
                return ("saved", [entry.message for entry in saved], await self.seen(conversation))
            if kind == "load":
                loaded = await store.load(target, limit=operation[2])
                if loaded is None:
                    return ("none",)
                if operation[2] is None:
                    self.held[target] = loaded
                return ("loaded", await self.seen(loaded))
            if kind == "branch":
                held = self.held.get(target)
                revision = held.revision if held is not None else None
                branched = await store.branch(target, at=operation[2], expected_revision=revision)
                self.held[target] = branched
                return ("branched", await self.seen(branched))
            if kind in {"fork", "fork_to"}:
                at = operation[2] if kind == "fork" else None
                new_id = operation[2] if kind == "fork_to" else None
                forked = await store.fork(target, at=at, new_conversation_id=new_id)
                if new_id is None:
                    self.forks.append(forked.conversation_id)
                self.held[forked.conversation_id] = forked
                return ("forked", await self.seen(forked))
            if kind == "update":
                _, _, title, metadata, expected = operation
                options: dict[str, Any] = {"title": title, "metadata": metadata}
                if expected != "unset":
                    options["expected_title"] = expected
                record = await store.update(target, **options)
                return ("updated", record.title, record.metadata, record.scope)
            if kind == "delete":
                await store.delete(target, scope=operation[2])
                return ("deleted",)
            if kind == "list":
                records = await store.list_conversations(scope=target, limit=operation[2])
                return ("listed", [await self.record(record) for record in records])
            entries = await store.load_entries(target)
            if entries is None:
                return ("none",)
            for before, entry in zip([None, *entries], entries, strict=False):
                assert entry.parent_id == (before.id if before else entry.parent_id)
                assert await store.read_entry(entry.id) == entry
            return ("entries", [entry.message for entry in entries])
        except UserError as exc:  # ConversationConflict is one
            return (type(exc).__name__, str(exc))

    async def record(self, record: Any) -> tuple[Any, ...]:
        return (
            self.name(record.conversation_id),
            await self.entry(record.head_id),
            record.usage,
            record.scope,
            record.forked_from and self.name(record.forked_from),
            await self.entry(record.forked_at),
            record.title,
            record.metadata,
            [await self.entry(tip) for tip in record.branches],
        )


async def _differences(
    steps: list[tuple[int, tuple[Any, ...]]], ours: list[ConvstoreConversationStore]
) -> list[tuple[int, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]]:
    """The steps whose outcomes differ between the reference and convstore."""
    memory = InMemoryConversationStore()
    forks: tuple[list[str], list[str]] = ([], [])
    reference = [Client(memory, forks[0]), Client(memory, forks[0])]
    tested = [Client(store, forks[1]) for store in ours]
    found = []
    for index, (caller, operation) in enumerate([*PRELUDE, *steps]):
        expected = await reference[caller].apply(copy.deepcopy(operation))
        seen = await tested[caller].apply(copy.deepcopy(operation))
        if expected != seen and not await _tied(reference[0], operation, expected, seen):
            found.append((index, operation, expected, seen))
    return found


async def _tied(
    reference: Client, operation: tuple[Any, ...], expected: tuple[Any, ...], seen: tuple[Any, ...]
) -> bool:
    """Whether a listing differs only in the order of records the reference's own clock gave
    the same ``updated_at`` (each store times its own saves; the order is compared otherwise)."""
    if operation[0] != "list" or expected[0] != "listed" or seen[0] != "listed":
        return False
    times = [r.updated_at for r in await reference.store.read_records(scope=operation[1])]
    return len(set(times)) < len(times) and sorted(map(repr, expected[1])) == sorted(
        map(repr, seen[1])
    )


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=STEPS)
def test_random_operations_see_what_the_in_memory_store_shows(
    make_location: Callable[[], str], steps: list[tuple[int, tuple[Any, ...]]]
) -> None:
    """Saves, loads (whole and windowed), branches, forks, updates, deletes, listings and
    entry reads give the same results, records, histories and conflicts as Pydantic AI's
    ``InMemoryConversationStore``, each example on a fresh store. Normalised, because they are
    generated apart in each store: a fork's generated id (named by its order), and entry ids
    (``head_id``, ``forked_at``, ``branches``), compared as the histories they end;
    revisions and ``updated_at`` are never compared, only what they decide."""
    location = make_location()
    stores = [open_store(location), open_store(location)]
    try:
        ours = [ConvstoreConversationStore(store) for store in stores]
        differences = asyncio.run(_differences(steps, ours))
    finally:
        for store in stores:
            store.close()
    assert differences == []


# -- two writers ---------------------------------------------------------------------------------


def test_of_two_stores_on_one_file_the_second_save_conflicts_and_writes_nothing(
    location: str,
) -> None:
    """Two processes' stores load the same conversation and both save a turn: the first wins,
    the second gets ``ConversationConflict`` and nothing of its turn is stored."""

    async def main(first: ConvstoreConversationStore, second: ConvstoreConversationStore) -> None:
        await first.save(Conversation(conversation_id="shared", messages=[_request("hello")]))
        mine, theirs = await first.load("shared"), await second.load("shared")
        assert mine is not None
        assert theirs is not None
        mine.messages += [_response("first turn")]
        theirs.messages += [_response("SECOND-TURN-MARKER")]
        await first.save(mine)
        with pytest.raises(ConversationConflict):
            await second.save(theirs)
        again = await second.load("shared")
        assert again is not None
        assert again.messages == [_request("hello"), _response("first turn")]
        # Loaded again, the second writer's turn goes in after the first's.
        again.messages += [_response("retried")]
        await second.save(again)
        reloaded = await first.load("shared")
        assert reloaded is not None
        assert reloaded.messages == [
            _request("hello"),
            _response("first turn"),
            _response("retried"),
        ]

    with open_store(location) as one, open_store(location) as two:
        asyncio.run(main(ConvstoreConversationStore(one), ConvstoreConversationStore(two)))
        raw = b"".join(two.raw_events(conversation_for("shared")))
    assert b"first turn" in raw
    assert b"SECOND-TURN-MARKER" not in raw


def test_writers_racing_on_one_revision_exactly_one_wins(location: str) -> None:
    """Four stores on one location, and a second caller of the first, save onto the same
    loaded revision at once: exactly one save is stored, every other raises
    ``ConversationConflict`` and leaves nothing."""
    stores = [open_store(location) for _ in range(4)]

    async def main() -> list[BaseException | list[Any]]:
        adapters = [ConvstoreConversationStore(store) for store in stores]
        adapters.append(adapters[0])  # two callers of one store object
        await adapters[0].save(Conversation(conversation_id="race", messages=[_request("go")]))
        loaded = [await adapter.load("race") for adapter in adapters]
        for index, conversation in enumerate(loaded):
            assert conversation is not None
            conversation.messages.append(_response(f"writer {index}"))
        saves = [a.save(c) for a, c in zip(adapters, loaded, strict=True) if c is not None]
        return list(await asyncio.gather(*saves, return_exceptions=True))

    try:
        outcomes = asyncio.run(main())
        won = [i for i, outcome in enumerate(outcomes) if not isinstance(outcome, BaseException)]
        assert len(won) == 1, outcomes
        assert all(
            isinstance(o, ConversationConflict) for i, o in enumerate(outcomes) if i != won[0]
        )
        texts = [m.blocks[0].block for m in stores[0].messages(conversation_for("race"))]
        assert [getattr(t, "text", None) for t in texts] == ["go", f"writer {won[0]}"]
    finally:
        for store in stores:
            store.close()


def test_listing_reads_the_listing_index_not_a_log(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``list_conversations`` on a fresh store object reads no conversation's events: every
    record it returns (scope, title, metadata, head) comes from convstore's listing index."""

    async def fill(conversations: ConvstoreConversationStore) -> None:
        for name, scope in [("one", "team"), ("two", None), ("three", "team")]:
            await conversations.save(
                Conversation(conversation_id=name, messages=[_request(name)]), scope=scope
            )
        await conversations.update("three", title="Third", metadata={"model": "m"})

    def no_log(*args: object, **kwargs: object) -> None:
        msg = "a log was read"
        raise AssertionError(msg)

    with open_store(location) as store:
        asyncio.run(fill(ConvstoreConversationStore(store)))
        fresh = ConvstoreConversationStore(store)
        for name in ["events", "events_after", "tail", "messages", "entries", "replay"]:
            monkeypatch.setattr(fresh.store, name, no_log)
        listed = asyncio.run(fresh.list_conversations(scope="team"))
    assert [(r.conversation_id, r.title, r.metadata) for r in listed] == [
        ("three", "Third", {"model": "m"}),
        ("one", None, None),
    ]
    assert all(r.head_id is not None and r.scope == "team" for r in listed)


# -- a real agent ------------------------------------------------------------------------------


def test_an_agent_resumed_from_a_fresh_store_sees_its_earlier_turn(location: str) -> None:
    """A Pydantic AI agent (scripted by a FunctionModel) runs on a conversation the store
    loads and saves; a fresh store object on the same location, as a new process opens it,
    loads it and the next run's model sees the earlier turn. convstore's replay shows it."""
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(f"answer {len(seen)}")])

    agent = Agent(FunctionModel(model), instructions="Be terse.")

    async def turn(location: str, prompt: str) -> None:
        with open_store(location) as store:
            conversations = ConvstoreConversationStore(store)
            conversation = await conversations.load("chat") or Conversation(conversation_id="chat")
            result = await agent.run(prompt, conversation=conversation)
            await conversations.save(result)

    asyncio.run(turn(location, "My name is Ada."))
    asyncio.run(turn(location, "What is my name?"))
    prompts = [p.content for m in seen[1] for p in m.parts if isinstance(p, UserPromptPart)]
    assert prompts == ["My name is Ada.", "What is my name?"]
    assert [p.content for p in seen[1][1].parts if isinstance(p, TextPart)] == ["answer 1"]
    with open_store(location) as store:
        replayed = store.replay(conversation_for("chat"))["messages"]
    assert [m["content"] for m in replayed] == [
        "My name is Ada.",
        "answer 1",
        "What is my name?",
        "answer 2",
    ]


# -- delete is an erasure ----------------------------------------------------------------------


def test_delete_leaves_no_byte_of_the_conversation_in_the_sqlite_files(tmp_path: Path) -> None:
    """After ``delete``, the conversation's unique text is in neither the database file nor
    its write-ahead log (convstore's erase); the other conversation stays."""
    marker = f"MARKER-{uuid4().hex}"
    path = tmp_path / "store.db"

    def in_files() -> list[str]:
        files = [p for p in tmp_path.iterdir() if p.name.startswith("store.db")]
        assert path in files
        return [file.name for file in files if marker.encode() in file.read_bytes()]

    async def save(conversations: ConvstoreConversationStore) -> None:
        await conversations.save(
            Conversation(conversation_id="secret", messages=[_request(marker), _response("ok")])
        )
        await conversations.save(
            Conversation(conversation_id="kept", messages=[_request("nothing to hide")])
        )

    async def delete(conversations: ConvstoreConversationStore) -> None:
        await conversations.delete("secret")
        assert await conversations.load("secret") is None
        assert [r.conversation_id for r in await conversations.list_conversations()] == ["kept"]

    with open_store(str(path)) as store:
        conversations = ConvstoreConversationStore(store)
        asyncio.run(save(conversations))
        assert in_files() != []  # written (to the database or its write-ahead log)
        asyncio.run(delete(conversations))
        assert in_files() == []
