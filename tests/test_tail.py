"""Store.tail and collect_history(tail=True): every page of a conversation folded from the end
of its log is exactly that page of the whole fold, through rewinds, undone rewinds,
compactions, interruptions, metadata and tool results that land on a later page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

import convstore
from convstore import InvalidInput, Store
from convstore.domain.errors import ConversationNotFound
from convstore.domain.events import BlockRecorded, ConversationStarted, MessageStarted
from convstore.projections.messages import collect_history
from tests.conftest import format2_store_file


@pytest.fixture(params=["sqlite", "sqlite-format-2", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        location = str(tmp_path / "tail.db")
    elif request.param == "sqlite-format-2":
        location = str(format2_store_file(tmp_path / "tail.db"))
    else:
        location = request.getfixturevalue("postgres_url")
    with convstore.open_store(location) as opened:
        yield opened


def text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def eventful(store: Store) -> UUID:
    """A conversation using every kind of event that changes how a message is shown."""
    conv = store.new_conversation(title="eventful")

    def say(role: str, value: str) -> UUID:
        return store.append_message(conv, role, [text(value)])

    first = say("user", "one")
    call = {"type": "tool_use", "id": "c1", "name": "ls", "input": {}}
    store.append_message(conv, "assistant", [call])
    store.append_message(
        conv, "user", [{"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}]
    )
    fourth = say("assistant", "four")
    store.compact(conv, "summary so far", through=fourth)
    say("user", "five")
    store.append_message(conv, "assistant", [text("six")], meta={"model": "m1"})
    rewind = store.rewind(conv, to=fourth)  # withdraws five and six
    say("user", "seven")
    store.undo_rewind(conv, rewind)  # five and six come back
    open_one = store.start_message(conv, "assistant")
    store.append_block(conv, open_one, text("eight, cut short"))
    store.interrupt_message(conv, open_one, reason="user stopped it")
    say("user", "nine")
    store.rewind(conv, to=first)  # withdraws everything after the first message
    say("user", "ten")
    late = {"type": "tool_use", "id": "c2", "name": "cat", "input": {}}
    store.append_message(conv, "assistant", [late])
    say("user", "eleven")
    store.append_message(
        conv, "user", [{"type": "tool_result", "tool_use_id": "c2", "content": "late answer"}]
    )
    return conv


def test_every_page_of_the_tail_is_that_page_of_the_whole_fold(store: Store) -> None:
    """For each page size and each page end, the tail's page equals the whole fold's."""
    conv = eventful(store)
    events = store.events(conv)
    whole = collect_history(events)
    starts: dict[UUID, int] = {}
    for e in events:  # a message opens with its start, or (format 3) its first block
        if isinstance(e, MessageStarted) or (isinstance(e, BlockRecorded) and e.index == 0):
            starts.setdefault(e.message_id, e.originator_version)
    ends: list[int | None] = [None, *(v + 1 for v in starts.values()), *starts.values()]
    checked = 0
    for size in (1, 2, 3, 5, 50):
        for before in ends:
            tail = store.tail(conv, messages=size, before=before)
            assert tail == events[len(events) - len(tail) :]  # a true suffix, in order
            reached = isinstance(tail[0], ConversationStarted)
            history = collect_history(tail, tail=not reached)
            older = [m for m in whole.messages if before is None or starts[m.message_id] < before]
            wanted = older[-size:]
            got = [m for m in history.messages if m.message_id in {w.message_id for w in wanted}]
            assert got == wanted, (size, before)
            assert reached == (len(older) <= size)
            later = [m for m in whole.messages if m.message_id not in {o.message_id for o in older}]
            assert history.messages == [*wanted, *later]
            shown = {w.message_id for w in wanted}
            assert [c for c in history.compactions if c.through in shown] == [
                c for c in whole.compactions if c.through in shown
            ]
            checked += 1
    assert checked > 50
    assert [m.withdrawn for m in whole.messages].count(True) > 3


def test_tail_reads_only_the_end_of_a_long_log(store: Store) -> None:
    """The newest page of a long conversation is a short suffix of its log."""
    conv = store.new_conversation()
    for i in range(300):
        store.append_message(conv, "user", [text(f"m{i}")])
    tail = store.tail(conv, messages=10)
    if store.store_format >= 3:
        assert len(tail) == 10  # ten messages of one block event each
        assert [e.type for e in tail] == ["block_recorded"] * 10
        assert len(store.tail(conv, messages=1000)) == 301
        assert len(store.tail(conv, messages=10**30)) == 301
        return
    assert len(tail) == 32  # ten messages of three events each, and the end of the one before
    assert [e.type for e in tail[:3]] == ["block_appended", "message_ended", "message_started"]
    assert len(store.tail(conv, messages=1000)) == 901
    assert len(store.tail(conv, messages=10**30)) == 901


def test_tail_refuses_what_it_cannot_read(store: Store) -> None:
    """A missing conversation is not found; a page size below one is refused."""
    with pytest.raises(ConversationNotFound):
        store.tail("00000000-0000-0000-0000-000000000000", messages=5)
    conv = store.new_conversation()
    with pytest.raises(InvalidInput):
        store.tail(conv, messages=0)
    with pytest.raises(InvalidInput):
        store.tail(conv, messages=5, before=0)
    assert [e.type for e in store.tail(conv, messages=5)] == ["conversation_started"]


def test_conversation_info_is_the_listed_row(store: Store) -> None:
    """conversation_info gives what list_conversations lists for that conversation."""
    conv = store.new_conversation(title="first title")
    store.set_labels(conv, {"team": "a"})
    store.rename(conv, "second title")
    info = store.conversation_info(conv)
    assert info == store.list_conversations().conversations[0]
    assert (info.title, info.labels) == ("second title", {"team": "a"})
    with pytest.raises(ConversationNotFound):
        store.conversation_info("00000000-0000-0000-0000-000000000000")
