"""What the model is sent: compaction, microcompact, context pressure and live tool rounds.

Every request built with these options is checked against the real provider SDK request
types (tests/test_replay_sdk.py's validators).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convstore import InvalidInput, MessageNotFound, Store, open_store
from convstore.app.demo import tiny_png
from convstore.domain.conversation import Conversation
from convstore.domain.events import Event
from convstore.engine.live import live_request
from convstore.engine.plan import SHAPES, ReplayOptions, Shape, replay
from convstore.engine.pressure import anthropic_image_tokens, openai_image_tokens
from convstore.projections.messages import collect_messages
from tests.sdk import rejections, request_body
from tests.strategies import histories

PNG = base64.b64encode(tiny_png(800, 600)).decode()


def accepted(shape: Shape, fragment: dict[str, Any]) -> dict[str, Any]:
    """Assert the real SDK request type accepts the fragment as a whole request."""
    problems = rejections(shape, request_body(shape, fragment))
    assert problems == [], "\n".join(problems[:10])
    return fragment


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "context.db")


def _texts(fragment: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in fragment["messages"]]


def _turn_with_unfinished_round(store: Store) -> tuple[UUID, list[UUID]]:
    """system, user, assistant(2 calls), user(1 result), assistant(call, never ended)."""
    conv = store.new_conversation()
    ids = [
        store.append_message(conv, "system", [{"type": "text", "text": "Be careful."}]),
        store.append_message(conv, "user", [{"type": "text", "text": "Run the tests."}]),
        store.append_message(
            conv,
            "assistant",
            [
                {"type": "tool_use", "id": "a", "name": "pytest", "input": {"k": "x"}},
                {"type": "tool_use", "id": "b", "name": "lint", "input": {}},
            ],
        ),
        store.append_message(
            conv, "user", [{"type": "tool_result", "tool_use_id": "a", "content": "1 failed"}]
        ),
    ]
    killed = store.start_message(conv, "assistant")
    store.append_block(conv, killed, {"type": "tool_use", "id": "c", "name": "pytest", "input": {}})
    return conv, [*ids, killed]


# -- compaction -------------------------------------------------------------------------------


@pytest.mark.parametrize("boundary", range(5))
def test_compaction_boundary_anywhere_gives_a_valid_request(store: Store, boundary: int) -> None:
    """A compaction through any message, inside an unfinished tool round too, replays validly."""
    conv, ids = _turn_with_unfinished_round(store)
    store.compact(conv, "Tests were run; one failed.", through=ids[boundary])
    for shape in SHAPES:
        for vision in (False, True):
            fragment = accepted(shape, store.replay(conv, shape=shape, vision=vision))
            after = len(ids) - boundary - 1
            if shape == "openai":
                roles = [m["role"] for m in fragment["messages"]]
                assert roles[:2] == ["system", "user"]
                assert len(fragment["messages"]) == 2 + after
                assert fragment["messages"][0]["content"] == "Be careful."
                assert fragment["messages"][1]["content"].startswith("[Summary of the earlier")
            else:
                assert fragment["system"] == "Be careful."
                assert len(fragment["messages"]) == 1 + after


def test_compaction_keeps_the_log_and_full_ignores_it(store: Store) -> None:
    """The log keeps every message; replay --full sends them all, ignoring the summary."""
    conv, ids = _turn_with_unfinished_round(store)
    before = list(store.raw_events(conv))
    store.compact(conv, "Summary.", through=ids[3])
    assert list(store.raw_events(conv))[: len(before)] == before
    assert len(store.replay(conv, full=True)["messages"]) == len(ids)
    assert "Summary." not in str(store.replay(conv, full=True))


def test_newest_compaction_wins(store: Store) -> None:
    """Several compactions stack: replay uses the newest one's summary and boundary."""
    conv, ids = _turn_with_unfinished_round(store)
    store.compact(conv, "first summary", through=ids[3])
    store.compact(conv, "second summary", through=ids[1])
    texts = _texts(store.replay(conv))
    assert any("second summary" in t for t in texts)
    assert not any("first summary" in t for t in texts)
    assert len(texts) == 2 + len(ids) - 2


def test_compaction_refuses_unknown_messages_and_blank_summaries(store: Store) -> None:
    """Compacting through an unknown message, or with a blank summary, writes nothing."""
    conv, ids = _turn_with_unfinished_round(store)
    before = list(store.raw_events(conv))
    with pytest.raises(MessageNotFound):
        store.compact(conv, "x", through=UUID(int=7))
    with pytest.raises(InvalidInput, match="blank"):
        store.compact(conv, "  \n", through=ids[0])
    assert list(store.raw_events(conv)) == before


# -- microcompact -----------------------------------------------------------------------------


def test_microcompact_clears_all_but_the_newest_results(store: Store) -> None:
    """keep_tool_results=N clears older outputs (images too) as sized markers; the log is intact."""
    conv = store.new_conversation()
    store.append_message(
        conv,
        "assistant",
        [{"type": "tool_use", "id": f"c{i}", "name": "cat", "input": {}} for i in range(3)],
    )
    image = {"type": "image", "media_type": "image/png", "data": PNG}
    store.append_message(
        conv,
        "user",
        [
            {"type": "tool_result", "tool_use_id": "c0", "content": "zero"},
            {"type": "tool_result", "tool_use_id": "c1", "content": [image], "is_error": True},
            {"type": "tool_result", "tool_use_id": "c2", "content": "two"},
        ],
    )
    before = list(store.raw_events(conv))
    cleared = store.replay(conv, keep_tool_results=1, vision=True)["messages"][-1]["content"]
    size = len(base64.b64decode(PNG))
    assert cleared == (
        "Result (cat): [Output cleared to save context: 4 bytes]\n\n"
        f"Error (cat): [Output cleared to save context: {size:,} bytes]\n\n"
        "Result (cat): two"
    )
    everything = store.replay(conv, keep_tool_results=3)["messages"][-1]["content"]
    assert "zero" in everything
    assert list(store.raw_events(conv)) == before
    for shape in SHAPES:
        for keep in (0, 1, 5):
            accepted(shape, store.replay(conv, shape=shape, keep_tool_results=keep, vision=True))


def test_negative_keep_is_invalid(store: Store) -> None:
    """keep_tool_results below zero is refused as bad input."""
    conv = store.new_conversation()
    with pytest.raises(InvalidInput):
        store.replay(conv, keep_tool_results=-1)


# -- pressure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "block",
    [
        {"type": "tool_result", "tool_use_id": "c1", "content": "lots of output " * 20},
        {"type": "reasoning", "text": "first I will think about it"},
        {"type": "image", "media_type": "image/png", "data": PNG},
    ],
    ids=["tool_result", "reasoning", "image"],
)
@pytest.mark.parametrize("vision", [False, True])
def test_adding_a_block_raises_the_count(store: Store, block: dict[str, Any], vision: bool) -> None:
    """Adding a tool result, a reasoning block or an image raises the token count."""
    conv = store.new_conversation()
    store.append_message(conv, "user", [{"type": "text", "text": "hello"}])
    role = "assistant" if block["type"] == "reasoning" else "user"
    for shape in SHAPES:
        before = store.pressure(conv, shape=shape, vision=vision)
        store.append_message(conv, role, [block])
        after = store.pressure(conv, shape=shape, vision=vision)
        assert after.total > before.total
        assert after.by_kind.get(block["type"], 0) > 0


def test_pressure_breakdown_sums_and_counts_native_images(store: Store) -> None:
    """Kinds sum to the total; a native image costs the provider's formula for its pixels."""
    conv = store.new_conversation()
    store.append_message(
        conv,
        "user",
        [
            {"type": "text", "text": "look"},
            {"type": "image", "media_type": "image/png", "data": PNG},
        ],
    )
    for shape, formula in (("openai", openai_image_tokens), ("anthropic", anthropic_image_tokens)):
        seen = store.pressure(conv, shape=shape, vision=True)
        assert sum(seen.by_kind.values()) == seen.total
        assert seen.by_kind["image"] == formula(800, 600)
        assert sum(m.tokens for m in seen.by_message) + 3 == seen.total
        unseen = store.pressure(conv, shape=shape, vision=False)
        assert 0 < unseen.by_kind["image"] < formula(800, 600)


def test_image_formulas_match_published_examples() -> None:
    """The formulas give the providers' own worked examples."""
    assert openai_image_tokens(1024, 1024) == 765
    assert openai_image_tokens(2048, 4096) == 1105
    assert anthropic_image_tokens(1000, 1000) == 1334
    assert anthropic_image_tokens(200, 200) == 54


def test_microcompact_lowers_pressure(store: Store) -> None:
    """Clearing old tool output lowers the count by about the cleared text."""
    conv = store.new_conversation()
    store.append_message(
        conv, "assistant", [{"type": "tool_use", "id": "c", "name": "x", "input": {}}]
    )
    store.append_message(
        conv, "user", [{"type": "tool_result", "tool_use_id": "c", "content": "word " * 500}]
    )
    assert store.pressure(conv, keep_tool_results=0).total + 400 < store.pressure(conv).total


# -- live rounds ------------------------------------------------------------------------------


def _live_turn(store: Store, *, answer_all: bool = True) -> tuple[UUID, UUID]:
    conv = store.new_conversation()
    store.append_message(conv, "system", [{"type": "text", "text": "sys"}])
    store.append_message(conv, "user", [{"type": "text", "text": "go"}])
    turn = store.append_message(
        conv,
        "assistant",
        [
            {"type": "reasoning", "text": "two calls"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a"}},
            {"type": "tool_use", "id": "t2", "name": "shot", "input": {}},
        ],
    )
    image = {"type": "image", "media_type": "image/png", "data": PNG}
    results: list[dict[str, Any]] = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "A", "is_error": True}
    ]
    if answer_all:
        results.append({"type": "tool_result", "tool_use_id": "t2", "content": [image]})
    store.append_message(conv, "user", results)
    return conv, turn


@pytest.mark.parametrize("vision", [False, True])
def test_live_round_links_calls_to_results(store: Store, vision: bool) -> None:
    """The live round carries real call ids in both shapes, and the SDKs accept the request."""
    conv, turn = _live_turn(store)
    openai = accepted("openai", store.live_request(conv, turn, shape="openai", vision=vision))
    assistant, first, second = openai["messages"][2:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["t1", "t2"]
    assert assistant["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"p": "a"}'}
    assert first == {"role": "tool", "tool_call_id": "t1", "content": "Error: A"}
    assert second["tool_call_id"] == "t2"
    anthropic = accepted(
        "anthropic", store.live_request(conv, turn, shape="anthropic", vision=vision)
    )
    calls, answers = anthropic["messages"][1:]
    assert [b["type"] for b in calls["content"]] == ["text", "tool_use", "tool_use"]
    assert [a["tool_use_id"] for a in answers["content"]] == ["t1", "t2"]
    assert answers["content"][0]["is_error"] is True
    image_parts = [p for p in answers["content"][1]["content"] if p["type"] == "image"]
    assert len(image_parts) == (1 if vision else 0)


def test_live_round_refuses_calls_without_results(store: Store) -> None:
    """A round whose calls do not all have results is refused with a clear error."""
    conv, turn = _live_turn(store, answer_all=False)
    with pytest.raises(InvalidInput, match="t2 have no result"):
        store.live_request(conv, turn)


def test_live_round_of_an_unknown_message_is_message_not_found(store: Store) -> None:
    """A live message the conversation does not hold is MessageNotFound, as every other call
    naming a missing message raises, so a caller catching NotFound catches it too."""
    conv, _ = _live_turn(store)
    other = store.new_conversation()
    stranger = store.append_message(other, "user", [{"type": "text", "text": "elsewhere"}])
    with pytest.raises(MessageNotFound, match="not found"):
        store.live_request(conv, stranger)


def test_ended_turn_replays_as_prose(store: Store) -> None:
    """Once the turn has moved on, live_request refuses and replay shows the round as prose."""
    conv, turn = _live_turn(store)
    store.append_message(conv, "assistant", [{"type": "text", "text": "done"}])
    with pytest.raises(InvalidInput, match="moved on"):
        store.live_request(conv, turn)
    wire = accepted("openai", store.replay(conv))
    assert "tool_calls" not in str(wire)
    assert wire["messages"][2]["content"].endswith("Tool use: shot({})")


# -- every option, every generated history ------------------------------------------------------


@st.composite
def _requests(draw: st.DrawFn) -> tuple[list[Event], ReplayOptions, Shape]:
    events = draw(histories())
    visible = [m.message_id for m in collect_messages(events) if not m.withdrawn]
    compacted: bool = draw(st.booleans())
    if visible and compacted:
        state = Conversation.from_events(events[0].originator_id, events)
        through = draw(st.sampled_from(visible))
        events = [*events, state.compact(draw(st.text(min_size=1).filter(str.strip)), through)]
    options = ReplayOptions(
        vision=draw(st.booleans()),
        full=draw(st.booleans()),
        keep_tool_results=draw(st.none() | st.integers(0, 3)),
    )
    return events, options, draw(st.sampled_from(SHAPES))


@settings(max_examples=80, deadline=None)
@given(_requests())
def test_sdk_accepts_every_option_combination(
    request: tuple[list[Event], ReplayOptions, Shape],
) -> None:
    """Replay with any compaction, --full, keep_tool_results and vision is a valid request."""
    events, options, shape = request
    accepted(shape, replay(events, options=options, shape=shape))


@settings(max_examples=60, deadline=None)
@given(histories())
def test_live_requests_are_valid_or_refused(events: list[Event]) -> None:
    """A live request from any assistant message is accepted by the SDK or clearly refused."""
    for message in collect_messages(events):
        if message.role != "assistant":
            continue
        for shape in SHAPES:
            try:
                fragment = live_request(events, message.message_id, shape=shape)
            except InvalidInput:
                continue
            accepted(shape, fragment)


def test_anthropic_final_assistant_turn_has_no_trailing_whitespace(store: Store) -> None:
    """A history ending in an assistant message with trailing whitespace is trimmed there only."""
    conv = store.new_conversation()
    store.append_message(conv, "user", [{"type": "text", "text": "hi  "}])
    store.append_message(conv, "assistant", [{"type": "text", "text": "Done. \n"}])
    messages = store.replay(conv, shape="anthropic")["messages"]
    assert messages[0]["content"][0]["text"] == "hi  "
    assert messages[1]["content"][-1]["text"] == "Done."
    assert store.replay(conv, shape="openai")["messages"][1]["content"] == "Done. \n"


def test_fit_tokens_keeps_as_many_results_as_fit(store: Store) -> None:
    """Budget microcompact keeps the most tool results that fit, clearing the oldest first."""
    conv = store.new_conversation()
    for n in range(6):
        store.append_message(
            conv, "assistant", [{"type": "tool_use", "id": f"c{n}", "name": "cat", "input": {}}]
        )
        store.append_message(
            conv,
            "user",
            [{"type": "tool_result", "tool_use_id": f"c{n}", "content": f"word{n} " * 200}],
        )
    whole = store.pressure(conv).total
    assert store.fit_tool_results(conv, whole)[0] is None
    budget = store.pressure(conv, keep_tool_results=2).total
    keep, fitted = store.fit_tool_results(conv, budget)
    assert keep == 2
    assert fitted.total == budget
    assert store.pressure(conv, keep_tool_results=3).total > budget
    keep, fitted = store.fit_tool_results(conv, 5)
    assert keep == 0
    assert fitted.total > 5
    accepted("openai", store.replay(conv, keep_tool_results=keep))
    with pytest.raises(InvalidInput):
        store.fit_tool_results(conv, 0)


def test_fit_tokens_on_the_command_line(tmp_path: Path) -> None:
    """replay --fit-tokens clears output to fit, and refuses to be combined with --keep."""
    from click.testing import CliRunner  # noqa: PLC0415

    from convstore.cli import cli  # noqa: PLC0415

    db = tmp_path / "fit.db"
    with open_store(db) as writer:
        conv = writer.new_conversation()
        writer.append_message(
            conv, "assistant", [{"type": "tool_use", "id": "c", "name": "cat", "input": {}}]
        )
        writer.append_message(
            conv, "user", [{"type": "tool_result", "tool_use_id": "c", "content": "x " * 900}]
        )
    runner = CliRunner()
    fitted = runner.invoke(cli, ["--db", str(db), "replay", str(conv), "--fit-tokens", "200"])
    assert fitted.exit_code == 0, fitted.stderr
    assert "[Output cleared to save context: 1,800 bytes]" in fitted.stdout
    both = ["--fit-tokens", "200", "--keep-tool-results", "1"]
    refused = runner.invoke(cli, ["--db", str(db), "replay", str(conv), *both])
    assert refused.exit_code == 2
    assert len(refused.stderr.splitlines()) == 1


def test_a_call_without_a_result_is_named_once_the_history_moves_on(store: Store) -> None:
    """A call whose result never landed is followed, in the same wire message, by a marker
    saying so once a later message exists; pressure counts it; a turn still streaming is not
    marked."""
    conv = store.new_conversation()
    store.append_message(conv, "user", [{"type": "text", "text": "Fetch it."}])
    call = {"type": "tool_use", "id": "c1", "name": "http_get", "input": {"url": "x"}}
    store.append_message(conv, "assistant", [call])
    assert store.replay(conv)["messages"][1]["content"] == 'Tool use: http_get({"url":"x"})'
    store.append_message(conv, "user", [{"type": "text", "text": "Well?"}])
    for shape in SHAPES:
        replayed = accepted(shape, store.replay(conv, shape=shape))
        turn = replayed["messages"][1]["content"]
        text = turn if shape == "openai" else turn[0]["text"]
        assert text == (
            'Tool use: http_get({"url":"x"})\n\n[No result was recorded for this call.]'
        )
    assert store.pressure(conv).by_kind["marker"] > 0


def test_pressure_numbers_messages_alike_in_text_and_json(tmp_path: Path) -> None:
    """`pressure` lists message #n counting from 1, as `show` numbers the same message
    (issue 39 item 22: it counted from 0), for the message --json gives index n - 1 (a
    0-based index: the request's own ``messages[index]``)."""
    import json  # noqa: PLC0415

    from click.testing import CliRunner  # noqa: PLC0415

    from convstore.cli import cli  # noqa: PLC0415

    db = tmp_path / "p.db"
    with open_store(db) as writer:
        conv = writer.new_conversation()
        writer.append_message(conv, "user", [{"type": "text", "text": "hi"}])
        writer.append_message(conv, "assistant", [{"type": "text", "text": "word " * 300}])
        request = writer.replay(conv)
    base = ["--db", str(db), "pressure", str(conv)]
    as_json = json.loads(CliRunner().invoke(cli, [*base, "--json"]).stdout)
    biggest = max(as_json["by_message"], key=lambda m: m["tokens"])
    assert biggest["index"] == 1
    assert request["messages"][biggest["index"]]["role"] == "assistant"
    text = CliRunner().invoke(cli, [*base, "--top", "1"]).stdout
    assert "#2     assistant" in text
    shown = CliRunner().invoke(cli, ["--db", str(db), "show", str(conv)]).stdout
    assert "[2] assistant" in shown  # the same message, the same number


def test_pressure_lines_up_the_hosted_kinds_with_the_others(tmp_path: Path) -> None:
    """`pressure` names each kind in one column as wide as the longest (a hosted result's),
    so every count ends in the same place."""
    from click.testing import CliRunner  # noqa: PLC0415

    from convstore.cli import cli  # noqa: PLC0415

    db = tmp_path / "h.db"
    with open_store(db) as writer:
        conv = writer.new_conversation()
        writer.append_message(conv, "user", [{"type": "text", "text": "search it"}])
        call = {"type": "hosted_tool_use", "id": "s1", "name": "web_search", "input": {}}
        result = {"type": "hosted_tool_result", "tool_use_id": "s1", "content": "found"}
        writer.append_message(conv, "assistant", [call, result, {"type": "text", "text": "ok"}])
    text = CliRunner().invoke(cli, ["--db", str(db), "pressure", str(conv), "--top", "0"]).stdout
    rows = text.splitlines()[1:]
    assert {row.split()[0] for row in rows} >= {"hosted_tool_result", "hosted_tool_use", "text"}
    assert len({len(row) for row in rows}) == 1, rows


def test_fit_tokens_that_cannot_be_met_exits_3_with_the_best_request(tmp_path: Path) -> None:
    """replay --fit-tokens N below what even clearing every output reaches prints that request
    and exits 3 (a budget that fits exits 0, as above)."""
    import json  # noqa: PLC0415

    from click.testing import CliRunner  # noqa: PLC0415

    from convstore.cli import cli  # noqa: PLC0415

    db = tmp_path / "over.db"
    with open_store(db) as writer:
        conv = writer.new_conversation()
        writer.append_message(conv, "user", [{"type": "text", "text": "long " * 500}])
        writer.append_message(
            conv, "user", [{"type": "tool_result", "tool_use_id": "c", "content": "x " * 900}]
        )
    result = CliRunner().invoke(cli, ["--db", str(db), "replay", str(conv), "--fit-tokens", "5"])
    assert result.exit_code == 3, result.stderr
    request = json.loads(result.stdout)
    assert "[Output cleared to save context: 1,800 bytes]" in json.dumps(request)
    assert "still over 5" in result.stderr


def test_fit_tokens_over_budget_prints_the_smallest_request_it_found(tmp_path: Path) -> None:
    """When no keep meets N, replay --fit-tokens prints the smallest request of all keeps:
    with outputs shorter than microcompact's marker, that is keeping every output (exit 3,
    the note naming its count)."""
    import json  # noqa: PLC0415

    from click.testing import CliRunner  # noqa: PLC0415

    from convstore.cli import cli  # noqa: PLC0415

    db = tmp_path / "short.db"
    with open_store(db) as writer:
        conv = writer.new_conversation()
        for n in range(3):
            call = {"type": "tool_use", "id": f"c{n}", "name": "cat", "input": {}}
            writer.append_message(conv, "assistant", [call])
            output = {"type": "tool_result", "tool_use_id": f"c{n}", "content": "ok"}
            writer.append_message(conv, "user", [output])
        totals = {k: writer.pressure(conv, keep_tool_results=k).total for k in (None, 0, 1, 2)}
        smallest = min(totals.values())
        assert totals[None] == smallest < min(totals[k] for k in (0, 1, 2))
        whole = writer.replay(conv)
    result = CliRunner().invoke(cli, ["--db", str(db), "replay", str(conv), "--fit-tokens", "5"])
    assert result.exit_code == 3, result.stderr
    assert json.loads(result.stdout) == whole
    assert f"{smallest:,} tokens" in result.stderr
    assert "still over 5" in result.stderr
