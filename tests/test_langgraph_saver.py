"""ConvstoreSaver beyond the conformance suite: a call reads what changed since the last one
(counted in events, not timed), the kept fold equals a fresh one and notices other writers and
erasures, what is stored per step is small and plain, add_messages replacing or removing a
message, and the refusals (one line, nothing written)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

import convstore
from convstore import InvalidInput, Store
from convstore.integrations.langgraph import ConvstoreSaver, conversation_for

ANSWER = "An answer of a few words."
CONFIG: Any = {"configurable": {"thread_id": "t"}}


def graph(saver: ConvstoreSaver, reply: Any = None) -> Any:
    """A one-node agent: it answers each user message (``reply`` decides how)."""

    def agent(state: MessagesState) -> dict[str, list[Any]]:
        if reply is not None:
            return {"messages": reply(state)}
        return {"messages": [AIMessage(ANSWER, id=f"ai-{len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    return builder.compile(checkpointer=saver)


def turn(app: Any, n: int) -> None:
    app.invoke(
        {"messages": [HumanMessage(f"Question {n}?", id=f"h-{n}")]}, CONFIG, durability="sync"
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with convstore.open_store(str(tmp_path / "store.db")) as opened:
        yield opened


def test_a_call_reads_the_events_since_the_last_one_not_the_whole_thread(store: Store) -> None:
    """Turn 20 reads as many events as turn 3 (the ones the turn itself wrote, and the last
    one folded again); a get_tuple with nothing new reads one event."""
    saver = ConvstoreSaver(store=store)
    app = graph(saver)
    read = []
    for n in range(20):
        before = saver.events_read
        turn(app, n)
        read.append(saver.events_read - before)
    assert read[3] == read[19]
    assert read[19] < 40  # a turn writes 5 entries and 2 messages (3 events each)
    saver.get_tuple(CONFIG)  # reads the turn's last write
    before = saver.events_read
    found = saver.get_tuple(CONFIG)
    assert saver.events_read - before == 1
    assert found is not None
    assert len(found.checkpoint["channel_values"]["messages"]) == 40


def test_the_kept_fold_equals_a_fresh_one_and_sees_other_writers(store: Store) -> None:
    """Two savers on one store (two processes, say): each sees the other's steps, and what a
    saver that caught up step by step returns equals what a fresh saver folds from zero."""
    first, second = ConvstoreSaver(store=store), ConvstoreSaver(store=store)
    turn(graph(first), 0)
    turn(graph(second), 1)  # second reads first's checkpoint, adds its own
    turn(graph(first), 2)  # first catches up on second's
    fresh = ConvstoreSaver(store=store)
    kept = [(t.checkpoint, t.metadata, t.pending_writes) for t in first.list(CONFIG)]
    folded = [(t.checkpoint, t.metadata, t.pending_writes) for t in fresh.list(CONFIG)]
    assert kept == folded
    messages = kept[0][0]["channel_values"]["messages"]
    assert [m.id for m in messages] == ["h-0", "ai-1", "h-1", "ai-3", "h-2", "ai-5"]


def test_an_erased_thread_is_noticed_by_a_saver_that_kept_its_fold(store: Store) -> None:
    """After ``Store.erase``, the saver's kept fold is dropped: the thread has no checkpoint."""
    saver = ConvstoreSaver(store=store)
    turn(graph(saver), 0)
    assert saver.get_tuple(CONFIG) is not None
    store.erase(conversation_for("t"), reason="test")
    assert saver.get_tuple(CONFIG) is None


def test_a_step_stores_plain_json_and_each_message_body_once(store: Store) -> None:
    """No base64 for JSON-able values, no entry for an empty channel, checkpoints as their
    changes from the parent, and a message's body once in the whole log (in its block),
    though it is in a write, the input, the channel value and the LangChain entry."""
    app = graph(ConvstoreSaver(store=store))
    turn(app, 0)
    turn(app, 1)
    conversation = conversation_for("t")
    log = b"".join(store.raw_events(conversation)).decode()
    assert log.count("Question 1?") == 1
    assert log.count(ANSWER) == 2  # two answers
    entries = store.entries(conversation) or []
    assert not [e for e in entries if _typed(e)]
    checkpoints = [e for e in entries if str(e.get("uuid")).startswith("c:")]
    assert len(checkpoints) == 6
    assert ["ck" in e for e in checkpoints] == [True] + [False] * 5  # then only changes
    assert ["md" in e for e in checkpoints] == [False] + [True] * 5
    assert all("empty" not in json.dumps(e) for e in entries)
    fresh = ConvstoreSaver(store=store).get_tuple(CONFIG)
    assert fresh is not None
    contents = [m.content for m in fresh.checkpoint["channel_values"]["messages"]]
    assert contents == ["Question 0?", ANSWER, "Question 1?", ANSWER]


def test_bodies_kept_in_entries_when_a_block_does_not_hold_them_and_copies_keep_them(
    store: Store,
) -> None:
    """A message whose content is not one text (a list of parts) keeps its body in its entry,
    and so do the other new messages of its write; a tool message's text is its result's.
    A copied thread reads back the same messages, in a fresh saver too."""
    saver = ConvstoreSaver(store=store)
    parts: list[str | dict[Any, Any]] = [
        {"type": "text", "text": "First part."},
        {"type": "text", "text": "Second."},
    ]
    turn(graph(saver, reply=lambda s: [AIMessage(parts, id="ai-parts")]), 0)
    tool = ToolMessage("deleted scratch", tool_call_id="call-1", id="tool-1")
    call = AIMessage(
        "Checking.", id="ai-call", tool_calls=[{"name": "rm", "args": {}, "id": "call-1"}]
    )
    turn(graph(saver, reply=lambda s: [call, tool, AIMessage("Done.", id="ai-done")]), 1)
    bare = AIMessage("", id="ai-bare", tool_calls=[{"name": "ls", "args": {}, "id": "call-2"}])
    turn(graph(saver, reply=lambda s: [bare, AIMessage("After.", id="ai-after")]), 2)
    entries: Any = store.entries(conversation_for("t"))
    bodies = {e["uuid"]: e["langchain"]["data"].get("content") for e in entries if "langchain" in e}
    assert bodies["langchain:ai-parts"] == parts
    assert bodies["langchain:ai-call"] is None  # its text block holds it
    assert bodies["langchain:tool-1"] is None  # its tool_result holds it
    assert bodies["langchain:ai-after"] == "After."  # written beside ai-bare, which has none
    saver.copy_thread("t", "t-copy")
    for reader in (saver, ConvstoreSaver(store=store)):
        for thread in ("t", "t-copy"):
            found = reader.get_tuple({"configurable": {"thread_id": thread}})
            assert found is not None
            messages = found.checkpoint["channel_values"]["messages"]
            assert [m.content for m in messages] == [
                "Question 0?",
                parts,
                "Question 1?",
                "Checking.",
                "deleted scratch",
                "Done.",
                "Question 2?",
                "",
                "After.",
            ]


def _typed(entry: Any) -> bool:
    """Whether LangGraph's typed bytes appear anywhere in ``entry``."""
    if isinstance(entry, dict):
        return ("t" in entry and "b" in entry) or any(_typed(v) for v in entry.values())
    if isinstance(entry, list):
        return any(_typed(v) for v in entry)
    return False


def test_add_messages_replacing_a_message_keeps_both_versions(store: Store) -> None:
    """A node returning a message under an id already in the state replaces it there; the
    thread's conversation records the new version as a new message, the newest checkpoint
    holds the new one, and the checkpoint before still holds the old one (time travel)."""
    saver = ConvstoreSaver(store=store)
    turn(graph(saver), 0)
    fix = graph(saver, reply=lambda s: [AIMessage("A corrected answer.", id="ai-1")])
    turn(fix, 1)
    history = list(saver.list(CONFIG))
    newest = history[0].checkpoint["channel_values"]["messages"]
    assert [(m.id, m.content) for m in newest] == [
        ("h-0", "Question 0?"),
        ("ai-1", "A corrected answer."),
        ("h-1", "Question 1?"),
    ]
    older = next(t for t in history if t.metadata["step"] == 1)
    assert older.checkpoint["channel_values"]["messages"][1].content == ANSWER
    stored = [
        (m.role, m.blocks[0].block.model_dump().get("text"))
        for m in store.messages(conversation_for("t"))
    ]
    assert stored == [
        ("user", "Question 0?"),
        ("assistant", ANSWER),
        ("user", "Question 1?"),
        ("assistant", "A corrected answer."),
    ]
    fresh = ConvstoreSaver(store=store).get_tuple(CONFIG)
    assert fresh is not None
    assert fresh.checkpoint["channel_values"]["messages"] == newest


def test_remove_message_drops_it_from_the_state_and_the_conversation_keeps_it(
    store: Store,
) -> None:
    """``RemoveMessage`` takes a message out of the state (the checkpoint's value); the
    conversation is a log, and convstore can only withdraw every message after a point
    (rewind), not one message, so the removed message stays there and in replay."""
    saver = ConvstoreSaver(store=store)
    turn(graph(saver), 0)
    turn(graph(saver, reply=lambda s: [RemoveMessage(id="h-0")]), 1)
    found = saver.get_tuple(CONFIG)
    assert found is not None
    ids = [m.id for m in found.checkpoint["channel_values"]["messages"]]
    assert ids == ["ai-1", "h-1"]
    replayed = store.replay(conversation_for("t"))["messages"]
    assert [m["content"] for m in replayed] == ["Question 0?", ANSWER, "Question 1?"]


@pytest.mark.parametrize(
    ("thread_id", "expected"),
    [
        ("", "a LangGraph thread_id must be a non-empty string, not ''"),
        (7, "a LangGraph thread_id must be a non-empty string, not 7"),
    ],
)
def test_a_bad_thread_id_is_refused_in_one_line(
    store: Store, thread_id: Any, expected: str
) -> None:
    """A thread id that is not a non-empty string is refused, naming it; nothing written."""
    saver = ConvstoreSaver(store=store)
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_id": "c-1"}}
    with pytest.raises(InvalidInput) as refused:
        saver.put_writes(config, [("x", 1)], "task")
    assert str(refused.value) == expected
    assert store.list_conversations().conversations == []


def test_an_unknown_prune_strategy_is_refused_in_one_line(store: Store) -> None:
    saver = ConvstoreSaver(store=store)
    turn(graph(saver), 0)
    with pytest.raises(InvalidInput) as refused:
        saver.prune(["t"], strategy="oldest")
    assert str(refused.value) == "unknown prune strategy 'oldest' (known: keep_latest, delete)"
    assert len(list(saver.list(CONFIG))) == 3


def test_a_message_convstore_cannot_keep_refuses_the_step_whole(store: Store) -> None:
    """A message with a part convstore cannot keep (audio) is refused in one line naming it,
    and nothing of that step is written: the thread's newest checkpoint is the one before."""
    saver = ConvstoreSaver(store=store)
    turn(graph(saver), 0)
    before = saver.get_tuple(CONFIG)
    assert before is not None
    audio = {"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}
    app = graph(saver, reply=lambda s: [AIMessage([audio], id="ai-audio")])
    with pytest.raises(InvalidInput) as refused:
        turn(app, 1)
    assert "message 0:" in str(refused.value)
    assert "audio" in str(refused.value)
    assert "\n" not in str(refused.value)
    after = ConvstoreSaver(store=store).get_tuple(CONFIG)
    assert after is not None
    assert "ai-audio" not in json.dumps(store.entries(conversation_for("t")))


def test_a_conversation_that_is_not_a_thread_is_refused_in_one_line(store: Store) -> None:
    """Runtime entries the saver did not write (another integration's) are named, not
    misread."""
    conversation = conversation_for("t")
    store.new_conversation("not a thread", conversation_id=conversation)
    store.record_entries(conversation, [{"uuid": "u-1", "kind": "something else"}])
    with pytest.raises(InvalidInput) as refused:
        ConvstoreSaver(store=store).get_tuple(CONFIG)
    assert str(refused.value) == (
        'not a LangGraph checkpointer entry: {"uuid": "u-1", "kind": "something else"}'
    )


def branching_graph(saver: Any) -> Any:
    """Two nodes, each answering with a call counter in its text, so a step run again after
    time travel writes a message the old branch does not have. ``second`` reuses the id of
    the message at its position, as a node that derives ids from the state would: the new
    branch holds a different message under an id the old branch holds."""
    calls = {"first": 0, "second": 0}

    def first(state: MessagesState) -> dict[str, list[Any]]:
        calls["first"] += 1
        return {"messages": [AIMessage(f"first, call {calls['first']}")]}

    def second(state: MessagesState) -> dict[str, list[Any]]:
        calls["second"] += 1
        n = len(state["messages"])
        return {"messages": [AIMessage(f"second, call {calls['second']}", id=f"second-{n}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    return builder.compile(checkpointer=saver)


def time_travel(app: Any, durability: str) -> list[Any]:
    """Three turns, then: replay from the checkpoint before the second turn's ``second``
    ran (``durability="exit"`` keeps only each run's end: from a fork of the second turn's
    end as if ``first`` had just run), one more turn, an edit (``update_state``) of the
    first turn's end and a replay from it, one more turn. What ``get_state`` returns after
    each time travel and at the end."""

    def turn(n: int) -> None:
        question = HumanMessage(f"Question {n}?", id=f"h-{n}")
        app.invoke({"messages": [question]}, CONFIG, durability=durability)

    states = []
    for n in range(3):
        turn(n)
    history = list(app.get_state_history(CONFIG))
    older = next(
        (s.config for s in history if s.next == ("second",) and len(s.values["messages"]) == 5),
        None,
    )
    if older is None:
        end = next(s for s in history if len(s.values["messages"]) == 6)
        older = app.update_state(end.config, None, as_node="first")
    app.invoke(None, older, durability=durability)
    states.append(app.get_state(CONFIG))
    turn(3)
    history = list(app.get_state_history(CONFIG))
    first_turn_end = next(s for s in history if not s.next and len(s.values["messages"]) == 3)
    edited = app.update_state(
        first_turn_end.config, {"messages": [HumanMessage("An edit.", id="h-edit")]}
    )
    app.invoke(None, edited, durability=durability)
    states.append(app.get_state(CONFIG))
    turn(4)
    states.append(app.get_state(CONFIG))
    return states


def _snapshot(state: Any) -> Any:
    """A state without its checkpoint ids and times: each message's type and content, the
    nodes to run next, the step and the source."""
    return (
        [(m.type, m.content) for m in state.values.get("messages", [])],
        state.next,
        state.metadata["step"],
        state.metadata["source"],
    )


def _history(app: Any) -> list[Any]:
    """The thread's history newest first, each parent as its position in that list."""
    history = list(app.get_state_history(CONFIG))
    position = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(history)}
    return [
        (
            _snapshot(s),
            position[s.parent_config["configurable"]["checkpoint_id"]] if s.parent_config else None,
        )
        for s in history
    ]


@pytest.mark.parametrize(("durability", "checkpoints"), [("sync", 23), ("exit", 8)])
def test_time_travel_forks_and_the_thread_reads_as_in_langgraphs_own_saver(
    store: Store, durability: str, checkpoints: int
) -> None:
    """Replaying from an older checkpoint, or from an edit of one, forks the thread: the new
    checkpoints' parent is the older one, and LangGraph numbers their channel versions on
    from its. ``get_state`` then returns the new branch, and the whole history (the old
    branch included, each checkpoint's values, next nodes and parent) is what LangGraph's
    ``InMemorySaver`` gives for the same graph, for the saver that wrote it and for a fresh
    one folding the store from zero."""
    reference = branching_graph(InMemorySaver())
    expected = time_travel(reference, durability)
    app = branching_graph(ConvstoreSaver(store=store))
    got = time_travel(app, durability)
    assert [_snapshot(s) for s in got] == [_snapshot(s) for s in expected]
    # After the second question, where the branches part: the old branch answered "second,
    # call 2"; at sync the replay answers in its place, at exit the fork after it.
    forked = {
        "sync": [("ai", "first, call 2"), ("ai", "second, call 4")],
        "exit": [("ai", "first, call 2"), ("ai", "second, call 2"), ("ai", "second, call 4")],
    }
    assert _snapshot(got[0])[0][4:] == forked[durability]
    history = _history(reference)
    assert len(history) == checkpoints
    assert _history(app) == history
    assert _history(branching_graph(ConvstoreSaver(store=store))) == history
