"""The store's contract: one abstract suite, run unchanged against every backend.

A backend's test module subclasses :class:`StoreContract` and provides ``open_store``, which
must return a new, independent :class:`~convstore.Store` on the same backing log each time it
is called (another connection pool and another writer cache, as a second process would have).
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from convstore import (
    ConversationErased,
    ConversationNotFound,
    InvalidBlock,
    InvalidInput,
    MessageClosed,
    MessageNotFound,
    ReplayOptions,
    Store,
    VersionConflict,
    replay,
)
from convstore.app.projector import catch_up, open_audit, rebuild
from convstore.domain.blocks import block_json
from convstore.domain.events import Event
from convstore.engine.tokenizer import ENCODING, count_tokens
from convstore.ports.chain import chain_key
from convstore.store.verify import Verifier
from tests import hosted
from tests.formats import BLOCK_EVENTS, BLOCK_TYPES, events_of
from tests.replay_oracle import measure, plan
from tests.replay_oracle import replay as oracle_replay

TEXT = {"type": "text", "text": "hello"}

PRESSURE_OF_THE_TOOL_ROUND = 76
"""The tokens of the tool round the pressure test records, the same on every backend."""


def interleaved_with(store: Store, conv: UUID) -> UUID:
    """A second conversation, and three messages in each of the two, taking turns (what the
    notification tests page through); the second's id."""
    other_conv = store.new_conversation(title="other")
    for n in range(3):
        store.append_message(conv, "user", [{"type": "text", "text": f"mine {n}"}])
        store.append_message(other_conv, "user", [{"type": "text", "text": f"theirs {n}"}])
    return other_conv


class StoreContract(ABC):
    """Behaviour every backend must show."""

    @abstractmethod
    def open_store(self) -> Store:
        """A new store on this test's backing log."""

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        store = self.open_store()
        yield store
        store.close()

    @pytest.fixture
    def conv(self, store: Store) -> UUID:
        return store.new_conversation(title="contract")

    # -- conversations -------------------------------------------------------------------

    def test_new_conversation_is_listed_with_its_title(self, store: Store) -> None:
        """A started conversation shows up in the list with its title."""
        conv = store.new_conversation(title="first")
        listed = {c.id: c.title for c in store.conversations()}
        assert listed[conv] == "first"

    def test_unknown_conversation_is_not_found(self, store: Store) -> None:
        """Reading or writing an id that was never started raises ConversationNotFound."""
        missing = uuid4()
        with pytest.raises(ConversationNotFound):
            store.replay(missing)
        with pytest.raises(ConversationNotFound):
            store.start_message(missing, "user")

    def test_malformed_ids_are_invalid_input(self, store: Store, conv: UUID) -> None:
        """Ids that are not UUIDs are refused as bad input, not looked up."""
        with pytest.raises(InvalidInput, match="not a conversation id"):
            store.events("not-an-id")
        with pytest.raises(InvalidInput, match="not a message id"):
            store.end_message(conv, "nope")

    # -- appending -----------------------------------------------------------------------

    def test_whole_message_lands_in_order(self, store: Store, conv: UUID) -> None:
        """append_message records start, each block in order, and end."""
        msg = store.append_message(conv, "user", [TEXT, {"type": "text", "text": "again"}])
        [message] = store.messages(conv)
        assert message.message_id == msg
        assert message.status == "ended"
        assert [b.block.model_dump()["text"] for b in message.blocks] == ["hello", "again"]

    def test_streaming_appends_one_block_at_a_time(self, store: Store, conv: UUID) -> None:
        """Blocks appended to an open message get indexes 0, 1, 2 and stay in order."""
        msg = store.start_message(conv, "assistant")
        indexes = [
            store.append_block(conv, msg, {"type": "reasoning", "text": "plan"}),
            store.append_block(conv, msg, TEXT),
            store.append_block(
                conv, msg, {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
            ),
        ]
        store.end_message(conv, msg)
        assert indexes == [0, 1, 2]
        [message] = store.messages(conv)
        assert [b.block.type for b in message.blocks] == ["reasoning", "text", "tool_use"]

    def test_versions_are_gapless_from_one(self, store: Store, conv: UUID) -> None:
        """Every event gets the next version of its conversation."""
        store.append_message(conv, "user", [TEXT, TEXT])
        msg = store.start_message(conv, "assistant")
        store.append_block(conv, msg, TEXT)
        versions = [e.originator_version for e in store.events(conv)]
        assert versions == list(range(1, len(versions) + 1))

    def test_closed_messages_take_no_more_blocks(self, store: Store, conv: UUID) -> None:
        """Ended and interrupted messages refuse blocks, ends and interrupts."""
        ended = store.append_message(conv, "user", [TEXT])
        cut = store.start_message(conv, "assistant")
        store.interrupt_message(conv, cut, reason="user pressed stop")
        for msg in (ended, cut):
            with pytest.raises(MessageClosed):
                store.append_block(conv, msg, TEXT)
            with pytest.raises(MessageClosed):
                store.end_message(conv, msg)
            with pytest.raises(MessageClosed):
                store.interrupt_message(conv, msg)

    def test_unknown_message_is_not_found(self, store: Store, conv: UUID) -> None:
        """A message id that was never started in this conversation is refused."""
        with pytest.raises(MessageNotFound):
            store.append_block(conv, uuid4(), TEXT)

    def test_rejected_input_writes_nothing(self, store: Store, conv: UUID) -> None:
        """A message whose last block is bad leaves the log exactly as it was."""
        store.append_message(conv, "user", [TEXT])
        before = list(store.raw_events(conv))
        bad = {"type": "image", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"}
        with pytest.raises(InvalidBlock, match="block 1"):
            store.append_message(conv, "user", [TEXT, bad])
        with pytest.raises(InvalidBlock, match="tool_use blocks belong in assistant"):
            store.append_message(
                conv, "user", [{"type": "tool_use", "id": "x", "name": "n", "input": {}}]
            )
        assert list(store.raw_events(conv)) == before

    def test_tool_result_names_are_resolved_and_fixed(self, store: Store, conv: UUID) -> None:
        """A result takes its call's name, an explicit name, or 'unknown' when no call exists."""
        store.append_message(
            conv, "assistant", [{"type": "tool_use", "id": "c1", "name": "grep", "input": {}}]
        )
        store.append_message(
            conv,
            "user",
            [
                {"type": "tool_result", "tool_use_id": "c1", "content": "found"},
                {"type": "tool_result", "tool_use_id": "c9", "content": "?", "name": "cat"},
                {"type": "tool_result", "tool_use_id": "c7", "content": "lost", "is_error": True},
            ],
        )
        names = [e.tool_name for e in store.events(conv) if isinstance(e, BLOCK_EVENTS)]
        assert names == [None, "grep", "cat", "unknown"]
        text = store.replay(conv)["messages"][2]["content"]  # after the opening marker
        assert text == "Result (grep): found\n\nResult (cat): ?\n\nError (unknown): lost"

    def test_duplicate_tool_use_id_is_refused(self, store: Store, conv: UUID) -> None:
        """A call id may be recorded once per conversation."""
        call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
        store.append_message(conv, "assistant", [call])
        with pytest.raises(InvalidBlock, match="already recorded"):
            store.append_message(conv, "assistant", [call])

    # -- metadata and listing --------------------------------------------------------------

    def test_rename_and_labels_show_in_the_listing(self, store: Store, conv: UUID) -> None:
        """A rename and set or removed labels are what conversations() and a page show."""
        store.rename(conv, "renamed")
        store.set_labels(conv, {"team": "search", "env": "prod"})
        store.set_labels(conv, {"env": "dev"})
        store.remove_labels(conv, ["team", "never-set"])
        [listed] = [c for c in store.conversations() if c.id == conv]
        assert (listed.title, listed.labels) == ("renamed", {"env": "dev"})
        [paged] = store.list_conversations(labels={"env": "dev"}).conversations
        assert paged == listed
        assert listed.events == len(store.events(conv))
        assert store.list_conversations(labels={"team": "search"}).conversations == []

    def test_pages_by_a_rare_label_and_a_common_one_hold_every_match_once(
        self, store: Store
    ) -> None:
        """A label two conversations of forty carry (read from the labels' index) and one they
        all carry (the index walked in page order) page through exactly their matches, in
        order, each once, whichever way the backend reads them."""
        made = []
        for n in range(40):
            conversation = store.new_conversation(f"paged {n}")
            store.set_labels(conversation, {"tenant": "paged", "user": f"u{n % 20}"})
            made.append(conversation)
        # The page order (newest activity first, ties by id) as an unfiltered page gives it.
        order = [c.id for c in store.list_conversations(limit=100).conversations]
        for labels, matching in (
            ({"user": "u3"}, {made[3], made[23]}),
            ({"user": "u3", "tenant": "paged"}, {made[3], made[23]}),
            ({"tenant": "paged"}, set(made)),
            ({"user": "nobody"}, set()),
        ):
            expected = [c for c in order if c in matching]
            seen: list[UUID] = []
            after = None
            while True:
                page = store.list_conversations(labels=labels, limit=3, after=after)
                seen += [c.id for c in page.conversations]
                if page.next is None:
                    break
                after = page.next
            assert seen == expected, labels

    def test_message_meta_is_kept_but_never_replayed(self, store: Store, conv: UUID) -> None:
        """Metadata given on append and on end reaches messages() merged, not replay."""
        plain = store.new_conversation()
        for target, meta in ((conv, True), (plain, False)):
            store.append_message(
                target, "user", [TEXT], meta={"model": "m1", "latency_ms": 12.5} if meta else None
            )
            msg = store.append_message(target, "assistant", [TEXT], leave_open=True)
            extra = {"stop_reason": "stop", "usage": {"output_tokens": 7}, "extra": {"k": [1]}}
            store.end_message(target, msg, meta=extra if meta else None)
        assert store.replay(conv) == store.replay(plain)
        assert store.replay(conv, shape="anthropic") == store.replay(plain, shape="anthropic")
        first, second = store.messages(conv)
        assert first.meta is not None
        assert first.meta.model == "m1"
        assert first.meta.latency_ms == 12.5
        assert second.meta is not None
        assert second.meta.stop_reason == "stop"
        assert second.meta.usage is not None
        assert second.meta.usage.output_tokens == 7
        assert second.meta.extra == {"k": [1]}

    def test_bad_labels_and_meta_write_nothing(self, store: Store, conv: UUID) -> None:
        """A bad label key, an oversized label set or bad metadata is refused; nothing lands."""
        before = len(store.events(conv))
        msg = store.append_message(conv, "user", [TEXT])
        with pytest.raises(InvalidInput, match="label key"):
            store.set_labels(conv, {"no spaces": "x"})
        with pytest.raises(InvalidInput, match="at most"):
            store.set_labels(conv, {f"k{i}": "v" for i in range(store.limits.max_labels + 1)})
        with pytest.raises(InvalidInput, match="usage"):
            store.end_message(conv, msg, meta={"usage": {"input_tokens": -1}})
        with pytest.raises(InvalidInput, match="metadata"):
            store.append_message(conv, "user", [TEXT], meta={"nope": 1})
        assert len(store.events(conv)) == before + events_of(store)

    def test_names_with_nul_are_refused_alike_and_write_nothing(
        self, store: Store, conv: UUID
    ) -> None:
        """Titles, sources, label values, title filters and erasure reasons are kept in index
        columns too, and PostgreSQL's text cannot hold NUL: both backends refuse it as bad
        input (not a store failure), and nothing lands."""
        before = len(store.events(conv))
        listed = store.conversations()
        with pytest.raises(InvalidInput, match="NUL"):
            store.new_conversation(title="a\x00b")
        with pytest.raises(InvalidInput, match="NUL"):
            store.new_conversation(source="x\x00")
        with pytest.raises(InvalidInput, match="NUL"):
            store.rename(conv, "\x00")
        with pytest.raises(InvalidInput, match="NUL"):
            store.set_labels(conv, {"team": "red\x00"})
        with pytest.raises(InvalidInput, match="NUL"):
            store.list_conversations(title="\x00")
        with pytest.raises(InvalidInput, match="NUL"):
            store.erase(conv, reason="gone\x00")
        assert len(store.events(conv)) == before
        assert store.conversations() == listed

    def test_message_text_may_hold_nul_on_every_backend(self, store: Store) -> None:
        """A NUL in message text is content, not a name: it is stored and replayed as given
        on every backend, and the listing's preview (an index column, which PostgreSQL's text
        cannot hold NUL in) shows it as U+FFFD, the same on each."""
        conv = store.new_conversation()
        store.append_message(conv, "user", [{"type": "text", "text": "bin\x00ary"}])
        streamed = store.start_message(conv, "assistant")
        store.append_block(conv, streamed, {"type": "text", "text": "\x00"})
        store.end_message(conv, streamed)
        assert [m["content"] for m in store.replay(conv)["messages"]] == ["bin\x00ary", "\x00"]
        (listed,) = [c for c in store.conversations() if c.id == conv]
        assert listed.preview == "bin\ufffdary"

    def test_the_nil_uuid_is_refused_as_a_conversation_id(self, store: Store, conv: UUID) -> None:
        """The all-zeros id is the hash chains' start marker's: given as a new conversation's
        id (a UUID or its text, either spelling) it is bad input, nothing lands, and verify
        still finds an untouched store whole."""
        listed = store.conversations()
        nil = UUID(int=0)
        for given in (nil, str(nil), nil.hex):
            with pytest.raises(InvalidInput, match="nil UUID"):
                store.new_conversation(title="zero", conversation_id=given)
        assert store.conversations() == listed
        verifier = Verifier()
        verifier.check_all(store.scan())
        assert verifier.problems == []
        assert not [note for note in verifier.notes if "unchained" in note]

    def test_pages_run_newest_activity_first_and_cover_everything_once(self, store: Store) -> None:
        """Cursor paging lists every conversation once, the most recently active first."""
        made = [store.new_conversation(title=f"c{i}") for i in range(7)]
        store.append_message(made[2], "user", [TEXT])  # now the most recently active
        seen: list[UUID] = []
        after = None
        while True:
            page = store.list_conversations(limit=3, after=after)
            seen += [c.id for c in page.conversations]
            if page.next is None:
                break
            after = page.next
        assert seen[0] == made[2]
        assert sorted(seen) == sorted(made)
        assert seen[1:] == [c for c in reversed(made) if c != made[2]]

    def test_listing_filters_by_title_and_time(self, store: Store) -> None:
        """Title text (case-blind, % and _ literal) and start/activity bounds narrow the page."""
        old = store.new_conversation(title="Parser 100% done")
        middle = store.last_event(old)
        assert middle is not None
        new = store.new_conversation(title="parser_v2")
        store.new_conversation(title="other")
        found = store.list_conversations(title="PARSER").conversations
        assert {c.id for c in found} == {old, new}
        assert [c.id for c in store.list_conversations(title="100%").conversations] == [old]
        assert [c.id for c in store.list_conversations(title="r_v").conversations] == [new]
        later = store.list_conversations(started_after=middle.timestamp, title="parser")
        assert [c.id for c in later.conversations] == [new]
        earlier = store.list_conversations(active_before=middle.timestamp + timedelta(0, 0, 1))
        assert [c.id for c in earlier.conversations] == [old]

    def test_listing_reads_another_stores_writes_at_once(self, store: Store) -> None:
        """The index is written with the events: a second store's append lists at once."""
        first = store.new_conversation()
        second = store.new_conversation()
        other = self.open_store()
        try:
            other.append_message(first, "user", [TEXT])
            assert store.list_conversations(limit=1).conversations[0].id == first
        finally:
            other.close()
        assert {first, second} <= {c.id for c in store.conversations()}

    def test_rebuilt_listing_equals_the_incremental_one(self, store: Store, conv: UUID) -> None:
        """Refilling the index from the log gives exactly what the writes kept."""
        store.set_labels(conv, {"a": "1"})
        store.rename(conv, None)
        store.new_conversation(title="second", parent_id=conv, source="test:1")
        before = store.conversations()
        assert store.rebuild_listing() == len(before)
        assert store.conversations() == before

    def test_malformed_cursor_and_naive_bounds_are_invalid_input(self, store: Store) -> None:
        """A cursor that no page gave, or a bound without a time zone, is refused."""
        with pytest.raises(InvalidInput, match="cursor"):
            store.list_conversations(after="not-a-cursor")
        with pytest.raises(InvalidInput, match="timezone"):
            store.list_conversations(active_after=datetime(2026, 1, 1))

    # -- replay and reading ----------------------------------------------------------------

    def test_killed_round_replays_as_what_landed(self, store: Store, conv: UUID) -> None:
        """A message never ended (the process died) replays as its blocks, with no call ids."""
        msg = store.start_message(conv, "assistant")
        store.append_block(
            conv, msg, {"type": "tool_use", "id": "c1", "name": "run", "input": {"n": 1}}
        )
        for shape in ("openai", "anthropic"):
            [opening, wire] = store.replay(conv, shape=shape)["messages"]
            assert opening["role"] == "user"  # the marker: the history opens with the assistant
            assert "tool_call" not in str(wire)
            assert 'Tool use: run({"n":1})' in str(wire)

    def test_store_replay_is_the_pure_projection(self, store: Store, conv: UUID) -> None:
        """Store.replay is exactly the pure replay of the recorded events."""
        store.append_message(conv, "system", [TEXT])
        store.append_message(conv, "user", [TEXT])
        events = store.events(conv)
        for shape in ("openai", "anthropic"):
            for vision in (False, True):
                assert store.replay(conv, shape=shape, vision=vision) == replay(
                    events, shape=shape, vision=vision
                )

    def test_a_hosted_round_replays_and_round_trips_exactly(self, store: Store, conv: UUID) -> None:
        """Calls the provider ran, their results (the provider's payload kept aside), a cited
        text and a PDF in a tool result: replayed as the oracle does in both shapes, vision on
        and off, from this store and from another reading the stored model; and the events
        give back every block as it was recorded, provider_data and annotations key for key."""
        for role, blocks in hosted.ROUND:
            store.append_message(conv, role, blocks)
        events = store.events(conv)
        other = self.open_store()
        try:
            for shape in ("openai", "anthropic"):
                for vision in (False, True):
                    expected = oracle_replay(events, shape=shape, vision=vision)
                    assert store.replay(conv, shape=shape, vision=vision) == expected
                    assert other.replay(conv, shape=shape, vision=vision) == expected
                    content = expected["messages"][1]["content"]
                    text = content if shape == "openai" else content[0]["text"]
                    assert text == hosted.ASSISTANT_TEXT
                    result = json.dumps(expected["messages"][2])
                    assert ('"document"' in result or '"file"' in result) == vision
        finally:
            other.close()
        recorded = [block for _, blocks in hosted.ROUND for block in blocks]
        stored = [e.block for e in events if isinstance(e, BLOCK_EVENTS)]
        assert [block_json(b) for b in stored] == [block_json(b) for b in recorded]
        raw = [json.loads(line) for line in store.raw_events(conv)]
        raw_blocks = [e["block"] for e in raw if e["type"] in BLOCK_TYPES]
        search_result = raw_blocks[3]
        assert search_result["provider_data"] == hosted.SEARCH_RESULT
        assert json.dumps(search_result["provider_data"]) == json.dumps(hosted.SEARCH_RESULT)
        cited = raw_blocks[7]
        assert json.dumps(cited["annotations"]) == json.dumps(hosted.CITATIONS)

    def test_unknown_shape_is_invalid_input(self, store: Store, conv: UUID) -> None:
        """Replay names the shapes it knows when given another."""
        with pytest.raises(InvalidInput, match="openai, anthropic"):
            store.replay(conv, shape="gemini")

    def test_raw_events_are_the_recorded_json(self, store: Store, conv: UUID) -> None:
        """The raw log decodes to the same events the store returns."""
        store.append_message(conv, "user", [TEXT])
        raw = list(store.raw_events(conv))
        assert len(raw) == len(store.events(conv))
        assert all(line.startswith(b"{") for line in raw)

    # -- several writers -----------------------------------------------------------------

    def test_read_your_writes_across_stores(self, store: Store, conv: UUID) -> None:
        """Once an append returns, another store on the same log replays it."""
        other = self.open_store()
        try:
            for n in range(3):
                store.append_message(conv, "user", [{"type": "text", "text": f"m{n}"}])
                assert len(other.replay(conv)["messages"]) == n + 1
        finally:
            other.close()

    def test_stale_writer_catches_up_instead_of_overwriting(self, store: Store, conv: UUID) -> None:
        """A writer whose cached state is behind retries at the next version; nothing is lost."""
        other = self.open_store()
        try:
            msg = store.start_message(conv, "assistant")
            other.append_block(conv, msg, {"type": "text", "text": "from other"})
            store.append_block(conv, msg, {"type": "text", "text": "from store"})
            other.append_block(conv, msg, {"type": "text", "text": "other again"})
            [message] = store.messages(conv)
            texts = [b.block.model_dump()["text"] for b in message.blocks]
            assert texts == ["from other", "from store", "other again"]
            versions = [e.originator_version for e in store.events(conv)]
            assert versions == list(range(1, len(versions) + 1))
        finally:
            other.close()

    def test_stale_writer_finds_a_message_another_store_started(
        self, store: Store, conv: UUID
    ) -> None:
        """A writer whose cached state predates a message started elsewhere catches up and
        appends to it, instead of calling it unknown."""
        other = self.open_store()
        try:
            other.append_message(conv, "user", [TEXT])  # other caches the conversation now
            msg = store.start_message(conv, "assistant")
            assert other.append_block(conv, msg, {"type": "text", "text": "late"}) == 0
            other.end_message(conv, msg)
            with pytest.raises(MessageNotFound):
                other.append_block(conv, uuid4(), TEXT)
            assert [m.status for m in store.messages(conv)] == ["ended", "ended"]
        finally:
            other.close()

    def test_a_whole_message_has_one_timestamp(self, store: Store, conv: UUID) -> None:
        """A message recorded whole is one write: its start, blocks and end share one time, so
        nothing (the audit's closed_at included) shows it ending before its own blocks."""
        store.append_message(conv, "user", [TEXT, TEXT, TEXT])
        assert len({e.timestamp for e in store.events(conv)[1:]}) == 1

    def test_stale_writer_sees_the_message_was_closed(self, store: Store, conv: UUID) -> None:
        """A command decided on stale state is re-checked against what other writers did."""
        other = self.open_store()
        try:
            msg = store.start_message(conv, "assistant")
            other.end_message(conv, msg)
            with pytest.raises(MessageClosed):
                store.append_block(conv, msg, TEXT)
        finally:
            other.close()

    def test_threads_and_stores_interleave_without_loss(self, store: Store, conv: UUID) -> None:
        """Threads on two stores append to one message; every block lands exactly once."""
        other = self.open_store()
        msg = store.start_message(conv, "user")
        per_thread = 15

        def write(target: Store, name: str) -> None:
            for n in range(per_thread):
                target.append_block(conv, msg, {"type": "text", "text": f"{name}-{n}"})

        threads = [
            threading.Thread(target=write, args=(target, f"t{i}"))
            for i, target in enumerate([store, store, other, other])
        ]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            other.close()
        [message] = store.messages(conv)
        texts = [b.block.model_dump()["text"] for b in message.blocks]
        assert sorted(texts) == sorted(f"t{i}-{n}" for i in range(4) for n in range(per_thread))
        for i in range(4):
            mine = [t for t in texts if t.startswith(f"t{i}-")]
            assert mine == [f"t{i}-{n}" for n in range(per_thread)]

    # -- erasure ---------------------------------------------------------------------------

    def test_erase_leaves_only_a_tombstone(self, store: Store, conv: UUID) -> None:
        """Erasing deletes every event of the conversation, keeps others whole, and records
        a tombstone with the reason and the number of events."""
        other = store.new_conversation(title="kept")
        store.append_message(other, "user", [TEXT])
        store.append_message(conv, "user", [{"type": "text", "text": "my secret"}])
        erased = store.erase(conv, reason="user asked")
        count = 1 + events_of(store)
        assert (erased.id, erased.reason, erased.events) == (conv, "user asked", count)
        assert [(e.id, e.reason, e.events) for e in store.erasures()] == [
            (conv, "user asked", count)
        ]
        with pytest.raises(ConversationNotFound):
            store.events(conv)
        with pytest.raises(ConversationNotFound):
            store.replay(conv)
        assert [c.id for c in store.conversations()] == [other]
        assert len(store.events(other)) == 1 + events_of(store)
        assert all(e.originator_id != conv for _, e in store.notifications(0, 1000))

    def test_an_erased_id_takes_no_more_writes(self, store: Store, conv: UUID) -> None:
        """A writer whose cache still knows the conversation, or one starting it afresh, is
        refused with ConversationErased: nothing lands under an erased id."""
        stale = self.open_store()
        try:
            message = stale.append_message(conv, "assistant", [TEXT], leave_open=True)
            store.erase(conv, reason="gone")
            with pytest.raises(ConversationErased):
                stale.append_block(conv, message, TEXT)
            with pytest.raises(ConversationErased):
                stale.new_conversation(conversation_id=conv)
            with pytest.raises(ConversationErased):
                store.erase(conv, reason="again")
        finally:
            stale.close()
        with pytest.raises(ConversationNotFound):
            store.erase(uuid4(), reason="never existed")
        assert store.last_event(conv) is None

    def test_erase_keeps_verify_clean_and_dump_without_it(self, store: Store, conv: UUID) -> None:
        """After an erasure verify reports nothing (no gap, no missing head) and a dump holds
        none of its events; a child naming it as parent keeps its own events."""
        store.append_message(conv, "user", [{"type": "text", "text": "erase me"}])
        child = store.new_conversation(title="sidechain", parent_id=conv)
        store.append_message(child, "user", [TEXT])
        store.erase(conv, reason="retention")
        heads = store.heads()
        assert heads is not None
        assert conv not in heads
        verifier = Verifier(heads=heads, key=chain_key())
        verifier.check_all(store.scan())
        assert verifier.problems == []
        dumped = b"".join(store.dump())
        assert all(
            json.loads(line).get("conversation") != str(conv) for line in dumped.splitlines()
        )
        assert b"erase me" not in dumped
        assert [c.parent_id for c in store.conversations() if c.id == child] == [conv]
        assert len(store.events(child)) == 1 + events_of(store)

    def test_the_audit_read_model_forgets_an_erased_conversation(
        self, store: Store, conv: UUID, tmp_path: Path
    ) -> None:
        """A read model that had projected the conversation deletes its rows (full-text index
        included) at its next catch-up, and a rebuild never brings them back."""
        store.append_message(conv, "user", [{"type": "text", "text": "zanzibar password"}])
        kept = store.new_conversation()
        store.append_message(kept, "user", [TEXT])
        path = tmp_path / "audit.db"
        audit = open_audit(store, path)
        try:
            catch_up(store, audit)
            assert (
                audit.query(
                    "SELECT count(*) AS n FROM blocks_fts WHERE blocks_fts MATCH 'zanzibar'"
                )[0]["n"]
                == 1
            )
            store.erase(conv, reason="user asked")
            catch_up(store, audit)
            for table in ("messages", "blocks", "tool_calls", "images", "compactions"):
                rows = audit.query(
                    f"SELECT count(*) AS n FROM {table} WHERE conversation_id = ?",  # noqa: S608
                    [str(conv)],
                )
                assert rows[0]["n"] == 0, table
            assert audit.query("SELECT id FROM conversations") == [{"id": str(kept)}]
            assert (
                audit.query(
                    "SELECT count(*) AS n FROM blocks_fts WHERE blocks_fts MATCH 'zanzibar'"
                )[0]["n"]
                == 0
            )
        finally:
            audit.close()
        assert b"zanzibar" not in path.read_bytes()
        rebuild(store, path)
        audit = open_audit(store, path)
        try:
            assert audit.query("SELECT id FROM conversations") == [{"id": str(kept)}]
            later = store.new_conversation()  # positions after the erasure still project
            catch_up(store, audit)
            assert {r["id"] for r in audit.query("SELECT id FROM conversations")} == {
                str(kept),
                str(later),
            }
        finally:
            audit.close()

    def test_erasing_the_newest_events_never_reuses_their_positions(
        self, store: Store, conv: UUID, tmp_path: Path
    ) -> None:
        """When the erased events were the last in the log, the next event still gets a
        position past them, so a projection that saw them misses nothing written after."""
        store.append_message(conv, "user", [TEXT])
        high = store.log_position()
        audit = open_audit(store, tmp_path / "audit.db")
        try:
            catch_up(store, audit)
            store.erase(conv, reason="tail")
            after = store.new_conversation()
            assert store.log_position() > high
            catch_up(store, audit)
            assert audit.query("SELECT id FROM conversations") == [{"id": str(after)}]
        finally:
            audit.close()

    # -- rewind and its undo -----------------------------------------------------------------

    def test_a_rewind_is_undone_by_a_later_event(
        self, store: Store, conv: UUID, tmp_path: Path
    ) -> None:
        """Undoing a rewind brings its messages back to replay (for a fresh store too), the
        audit marks them withdrawn and then not, and a rewind is undone only once."""
        first = store.append_message(conv, "user", [{"type": "text", "text": "one"}])
        store.append_message(conv, "assistant", [{"type": "text", "text": "two"}])
        store.append_message(conv, "user", [{"type": "text", "text": "three"}])
        audit = open_audit(store, tmp_path / "audit.db")
        try:
            version = store.rewind(conv, to=first)
            assert len(store.replay(conv)["messages"]) == 1
            catch_up(store, audit)
            flags = "SELECT withdrawn FROM messages ORDER BY position"
            assert [r["withdrawn"] for r in audit.query(flags)] == [0, 1, 1]
            store.undo_rewind(conv, version)
            assert len(store.replay(conv)["messages"]) == 3
            catch_up(store, audit)
            assert [r["withdrawn"] for r in audit.query(flags)] == [0, 0, 0]
        finally:
            audit.close()
        other = self.open_store()
        try:
            assert len(other.replay(conv)["messages"]) == 3
            with pytest.raises(InvalidInput, match="not a rewind in force"):
                other.undo_rewind(conv, version)
            with pytest.raises(InvalidInput, match="not a rewind in force"):
                other.undo_rewind(conv, 2)
        finally:
            other.close()
        assert all(not m.withdrawn for m in store.messages(conv))

    def test_a_conditional_rewind_is_refused_once_the_conversation_moved(
        self, store: Store, conv: UUID
    ) -> None:
        """rewind(expected_version=V) lands only while V is the newest version, also when
        another store (a cache that is behind, or ahead) recorded the newer event."""
        first = store.append_message(conv, "user", [{"type": "text", "text": "one"}])
        read = store.last_event(conv)
        assert read is not None
        other = self.open_store()
        try:
            other.append_message(conv, "assistant", [{"type": "text", "text": "two"}])
            for writer in (store, other):
                with pytest.raises(VersionConflict, match="changed since it was read"):
                    writer.rewind(conv, to=first, expected_version=read.originator_version)
            assert [m.withdrawn for m in store.messages(conv)] == [False, False]
            head = other.last_event(conv)
            assert head is not None
            version = store.rewind(conv, to=first, expected_version=head.originator_version)
            assert version == head.originator_version + 1
            assert [m.withdrawn for m in other.messages(conv)] == [False, True]
        finally:
            other.close()

    def test_conditional_entries_are_refused_once_the_conversation_moved(
        self, store: Store, conv: UUID
    ) -> None:
        """record_entries(expected_version=V) lands only while V is the newest version, also
        when another store recorded the newer event; nothing of a refused batch is written."""
        read = store.last_event(conv)
        assert read is not None
        other = self.open_store()
        try:
            other.record_entries(conv, [{"uuid": "a"}], expected_version=read.originator_version)
            for writer in (store, other):
                with pytest.raises(VersionConflict, match="changed since it was read"):
                    writer.record_entries(
                        conv, [{"uuid": "b"}], expected_version=read.originator_version
                    )
            assert store.entries(conv) == [{"uuid": "a"}]
            assert store.record_entries(
                conv, [{"uuid": "b"}], expected_version=read.originator_version + 1
            )
            assert other.entries(conv) == [{"uuid": "a"}, {"uuid": "b"}]
        finally:
            other.close()

    # -- fork ----------------------------------------------------------------------------------

    def test_a_fork_replays_as_the_parents_prefix_then_its_own(
        self, store: Store, conv: UUID
    ) -> None:
        """A fork at a message replays as the parent's replay up to it, then its own messages;
        the parent is unchanged, the fork names its parent and the fork point, a withdrawn
        message cannot be forked at, and erasing the parent leaves the fork whole."""
        call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
        first = store.append_message(conv, "user", [{"type": "text", "text": "list it"}])
        store.append_message(conv, "assistant", [call])
        point = store.append_message(
            conv, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}]
        )
        store.compact(conv, "the user asked for a listing", through=first)
        after = store.append_message(conv, "assistant", [{"type": "text", "text": "parent"}])
        fork = store.fork(conv, at=point, title="fork")
        parent_replay = store.replay(conv)["messages"]
        fork_replay = store.replay(fork)["messages"]
        assert fork_replay == parent_replay[: len(fork_replay)]
        assert len(fork_replay) == len(parent_replay) - 1
        store.append_message(fork, "assistant", [{"type": "text", "text": "fork's own"}])
        assert store.replay(fork)["messages"][-1]["content"] == "fork's own"
        assert store.replay(conv)["messages"] == parent_replay
        started = store.events(fork)[0]
        assert started.type == "conversation_started"
        assert (started.parent_id, started.forked_at) == (conv, point)
        store.rewind(conv, to=first)
        with pytest.raises(MessageNotFound, match="withdrawn"):
            store.fork(conv, at=after)
        store.erase(conv, reason="parent goes")
        assert store.replay(fork)["messages"][: len(fork_replay)] == fork_replay

    def test_a_fork_keeps_the_tool_name_of_a_call_a_rewind_withdrew(
        self, store: Store, conv: UUID
    ) -> None:
        """A result whose call's message a rewind withdrew still replays under the call's tool
        name in the parent, and the fork, which copies no withdrawn message, replays it the
        same; a result whose call no one recorded stays ``unknown`` in both."""
        first = store.append_message(conv, "user", [{"type": "text", "text": "list it"}])
        call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
        store.append_message(conv, "assistant", [call])
        store.rewind(conv, to=first)
        results = [
            {"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"},
            {"type": "tool_result", "tool_use_id": "c9", "content": "b.txt"},
        ]
        point = store.append_message(conv, "user", results)
        parent_replay = store.replay(conv)["messages"]
        assert "Result (ls): a.txt" in parent_replay[-1]["content"]
        assert "Result (unknown): b.txt" in parent_replay[-1]["content"]
        fork = store.fork(conv, at=point)
        assert store.replay(fork)["messages"] == parent_replay
        assert store.replay(fork, shape="anthropic") == store.replay(conv, shape="anthropic")

    def test_a_fork_keeps_the_tool_name_of_a_hosted_call_a_rewind_withdrew(
        self, store: Store, conv: UUID
    ) -> None:
        """The same for a hosted round: a hosted result whose call's message a rewind withdrew
        replays under the call's name in the parent and in the fork; one whose call no one
        recorded stays ``unknown`` in both; one whose call is in its own message keeps it."""
        first = store.append_message(conv, "user", [{"type": "text", "text": "look it up"}])
        call = {"type": "hosted_tool_use", "id": "h1", "name": "web_search", "input": {}}
        store.append_message(conv, "assistant", [call])
        store.rewind(conv, to=first)
        again = {"type": "hosted_tool_use", "id": "h2", "name": "code_execution", "input": "1+1"}
        results = [
            {"type": "hosted_tool_result", "tool_use_id": "h1", "content": "a page"},
            {"type": "hosted_tool_result", "tool_use_id": "h9", "content": "b page"},
            again,
            {"type": "hosted_tool_result", "tool_use_id": "h2", "content": "2"},
        ]
        point = store.append_message(conv, "assistant", results)
        said = store.replay(conv)["messages"][-1]["content"]
        assert "Result (web_search, run by the provider): a page" in said
        assert "Result (unknown, run by the provider): b page" in said
        assert "Result (code_execution, run by the provider): 2" in said
        fork = store.fork(conv, at=point)
        assert store.replay(fork)["messages"] == store.replay(conv)["messages"]
        assert store.replay(fork, shape="anthropic") == store.replay(conv, shape="anthropic")

    # -- what the model is sent, and reading the whole log -------------------------------------

    def _tool_round(self, store: Store, conv: UUID, outputs: list[str]) -> list[UUID]:
        """A system and a user message, then one call and its result per output; the ids of
        the messages, in order."""
        ids = [
            store.append_message(conv, "system", [{"type": "text", "text": "Be brief."}]),
            store.append_message(conv, "user", [{"type": "text", "text": "Read the files."}]),
        ]
        for n, output in enumerate(outputs):
            call = {"type": "tool_use", "id": f"c{n}", "name": "cat", "input": {"n": n}}
            ids.append(store.append_message(conv, "assistant", [call]))
            result = {"type": "tool_result", "tool_use_id": f"c{n}", "content": output}
            ids.append(store.append_message(conv, "user", [result]))
        return ids

    def test_compact_replaces_the_prefix_and_full_ignores_it(
        self, store: Store, conv: UUID
    ) -> None:
        """After compact, replay sends the system message, the summary, then what follows the
        boundary; full replay sends everything; another store reads it; a bad compaction
        writes nothing."""
        ids = self._tool_round(store, conv, ["one"])
        store.compact(conv, "The user wants the files read.", through=ids[2])
        assert store.replay(conv)["messages"] == [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": "[Summary of the earlier conversation, which it replaces]: "
                "The user wants the files read.",
            },
            {"role": "user", "content": "Result (cat): one"},
        ]
        assert [m["role"] for m in store.replay(conv, full=True)["messages"]] == [
            "system",
            "user",
            "assistant",
            "user",
        ]
        other = self.open_store()
        try:
            assert other.replay(conv) == store.replay(conv)
        finally:
            other.close()
        before = store.log_position()
        with pytest.raises(MessageNotFound):
            store.compact(conv, "summary", through=uuid4())
        with pytest.raises(InvalidInput):
            store.compact(conv, "   ", through=ids[3])
        assert store.log_position() == before

    def test_pressure_counts_exactly_what_replay_sends(self, store: Store, conv: UUID) -> None:
        """pressure is the oracle's count of its plan of the stored events, one entry
        per replayed message, its kinds summing to the total; clearing output lowers it."""
        self._tool_round(store, conv, ["hello world " * 20])
        pressure = store.pressure(conv)
        expected = measure(plan(store.events(conv)), "openai", count_tokens, tokenizer=ENCODING)
        assert pressure == expected
        assert pressure.total == PRESSURE_OF_THE_TOOL_ROUND
        assert [m.role for m in pressure.by_message] == [
            m["role"] for m in store.replay(conv)["messages"]
        ]
        assert sum(pressure.by_kind.values()) == pressure.total
        cleared = store.pressure(conv, options=ReplayOptions(keep_tool_results=0))
        assert cleared.total < pressure.total
        anthropic = store.pressure(conv, shape="anthropic")
        events = store.events(conv)
        assert anthropic == measure(plan(events), "anthropic", count_tokens, tokenizer=ENCODING)

    def test_live_request_links_the_round_in_progress(self, store: Store, conv: UUID) -> None:
        """The request made inside a running turn carries the real call ids in both shapes;
        once the turn has moved on it is refused."""
        ids = self._tool_round(store, conv, ["a.txt"])
        openai = store.live_request(conv, ids[2])
        assert openai["messages"][:2] == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Read the files."},
        ]
        assert openai["messages"][2]["tool_calls"][0]["id"] == "c0"
        assert openai["messages"][3] == {"role": "tool", "tool_call_id": "c0", "content": "a.txt"}
        anthropic = store.live_request(conv, ids[2], shape="anthropic")
        assert anthropic["system"] == "Be brief."
        [answer] = anthropic["messages"][-1]["content"]
        assert (answer["type"], answer["tool_use_id"]) == ("tool_result", "c0")
        store.append_message(conv, "assistant", [{"type": "text", "text": "done"}])
        with pytest.raises(InvalidInput, match="moved on"):
            store.live_request(conv, ids[2])

    def test_fit_tool_results_keeps_the_most_that_fit(self, store: Store, conv: UUID) -> None:
        """The budget of keeping two results gives 2 and that pressure; a budget everything
        fits in gives None; one nothing fits in gives 0, over budget."""
        self._tool_round(store, conv, [f"word{n} " * 100 for n in range(5)])
        budget = store.pressure(conv, keep_tool_results=2).total
        assert store.fit_tool_results(conv, budget) == (
            2,
            store.pressure(conv, keep_tool_results=2),
        )
        assert store.fit_tool_results(conv, store.pressure(conv).total)[0] is None
        keep, fitted = store.fit_tool_results(conv, 10)
        assert (keep, fitted.total) == (0, store.pressure(conv, keep_tool_results=0).total)
        assert fitted.total > 10

    def test_notifications_page_through_every_conversation_in_commit_order(
        self, store: Store, conv: UUID
    ) -> None:
        """Notifications are every event of every conversation, positions increasing, each
        conversation's in version order, the same in pages of any size and from another
        store; none after the newest position."""
        other_conv = interleaved_with(store, conv)
        everything = store.notifications(0, 1000)
        positions = [position for position, _ in everything]
        assert positions == sorted(set(positions))
        assert positions[-1] == store.log_position()
        for conversation in (conv, other_conv):
            mine = [e for _, e in everything if e.originator_id == conversation]
            assert mine == store.events(conversation)
        paged: list[tuple[int, Event]] = []
        while page := store.notifications(paged[-1][0] if paged else 0, 3):
            assert len(page) <= 3
            paged += page
        assert paged == everything
        assert store.notifications(store.log_position(), 10) == []
        other = self.open_store()
        try:
            assert other.notifications(0, 1000) == everything
        finally:
            other.close()

    def test_scan_reads_every_record_as_notifications_do(self, store: Store, conv: UUID) -> None:
        """scan yields every stored record in log order, decoded, at the positions
        notifications give, in pages of any size; a sound log has no unreadable record."""
        self._tool_round(store, conv, ["one", "two"])
        store.new_conversation(title="second")
        notified = store.notifications(0, 1000)
        for page_size in (1, 3, 1000):
            scanned = list(store.scan(page_size=page_size))
            assert [(r.position, r.event) for r in scanned] == notified
            assert all(r.unreadable is None and r.error is None for r in scanned)
            assert [r.originator_id for r in scanned] == [e.originator_id for _, e in notified]
            assert [r.originator_version for r in scanned] == [
                e.originator_version for _, e in notified
            ]
