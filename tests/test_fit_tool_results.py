"""Microcompact by budget, from one fold of the events.

``fit_tool_results`` clears tool results oldest first, one at a time, re-rendering and
re-counting only the message that changed. These tests hold it to the definition: the answer
is what a linear search over every ``keep_tool_results`` value, each rendered and counted from
scratch, finds; and the engine's counts to the oracle's (tests/replay_oracle.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import ReplayOptions, open_store
from convstore.domain.events import Event
from convstore.engine.model import folded
from convstore.engine.plan import SHAPES
from convstore.engine.pressure import Pressure, fit_keep, measure
from convstore.engine.render import Plan, plan
from convstore.engine.tokenizer import count_tokens
from tests import replay_oracle as oracle
from tests.strategies import histories

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OPTIONS = st.builds(
    ReplayOptions, shape=st.sampled_from(SHAPES), vision=st.booleans(), full=st.booleans()
)


def _plan(events: list[Event], options: ReplayOptions) -> Plan:
    state, load = folded(events)
    return plan(state, options, load)


def _results(events: list[Event], options: ReplayOptions) -> int:
    return sum(s.results for s in _plan(events, options).window if not isinstance(s, str))


def _linear(
    events: list[Event], options: ReplayOptions, budget: int
) -> tuple[int | None, Pressure]:
    """The definition: ``None`` if keeping everything fits, else the largest keep that fits,
    else the candidate with the fewest tokens (the most kept among equals); each candidate
    planned from the events and counted whole."""

    def pressure(keep: int | None) -> Pressure:
        planned = _plan(events, replace(options, keep_tool_results=keep))
        return measure(planned, options.shape, count_tokens)

    whole = pressure(None)
    if whole.total <= budget:
        return None, whole
    results = _results(events, options)
    best: tuple[int | None, Pressure] = (None, whole)
    for keep in range(results - 1, -1, -1):
        candidate = pressure(keep)
        if candidate.total <= budget:
            return keep, candidate
        if candidate.total < best[1].total:
            best = keep, candidate
    return best


@SETTINGS
@given(histories(), OPTIONS)
def test_the_engine_counts_what_the_oracle_counts_at_every_keep(
    events: list[Event], options: ReplayOptions
) -> None:
    """The engine's pressure (total, breakdown by kind and its order, by message) is the
    oracle's, for every ``keep_tool_results`` the window allows and for none; as is the tool
    result count the clearing steps go through."""
    clearing = oracle.fold(events).clearing(options)
    assert _results(events, options) == clearing.results
    for keep in [None, *range(clearing.results + 1)]:
        each = replace(options, keep_tool_results=keep)
        found = measure(_plan(events, each), options.shape, count_tokens)
        expected = oracle.measure(oracle.plan(events, each), options.shape, count_tokens)
        assert found == expected, keep
        assert list(found.by_kind) == list(expected.by_kind)


@SETTINGS
@given(histories(), OPTIONS, st.data())
def test_fit_keep_gives_the_answer_of_a_linear_search(
    events: list[Event], options: ReplayOptions, data: st.DataObject
) -> None:
    """For budgets at, just under and just over every candidate's count, the answer and its
    pressure (breakdown and order of kinds included) are the linear search's."""
    results = _results(events, options)
    pressures = [
        measure(_plan(events, replace(options, keep_tool_results=k)), options.shape, count_tokens)
        for k in [None, *range(results)]
    ]
    near = data.draw(st.sampled_from(pressures)).total + data.draw(st.sampled_from((-1, 0, 1)))
    budget = max(near, 1)
    found = fit_keep(_plan(events, options), options.shape, count_tokens, budget)
    expected = _linear(events, options, budget)
    assert found == expected
    assert list(found[1].by_kind) == list(expected[1].by_kind)
    oracle_clearing = oracle.fold(events).clearing(options)
    assert found == oracle.fit_keep(oracle_clearing, options.shape, count_tokens, budget)


def test_a_short_output_cleared_can_cost_more_and_the_fit_still_finds_the_keep(
    tmp_path: Path,
) -> None:
    """Clearing a short output adds tokens (its marker is longer), so the count is not
    monotone in keep. With one long old output and three short newer ones, keeping the three
    short ones fits a budget that keeping fewer does not; the fit finds 3, not 0."""
    with open_store(tmp_path / "fit.db") as store:
        conv = store.new_conversation()
        outputs = ["word " * 400, "ok", "ok", "ok"]
        for n, output in enumerate(outputs):
            call = {"type": "tool_use", "id": f"c{n}", "name": "cat", "input": {}}
            store.append_message(conv, "assistant", [call])
            result = {"type": "tool_result", "tool_use_id": f"c{n}", "content": output}
            store.append_message(conv, "user", [result])
        totals = {k: store.pressure(conv, keep_tool_results=k).total for k in range(5)}
        assert totals[0] > totals[1] > totals[2] > totals[3] < totals[4]
        keep, fitted = store.fit_tool_results(conv, totals[3])
        assert keep == 3
        assert fitted == store.pressure(conv, keep_tool_results=3)


def test_over_budget_the_fit_gives_the_smallest_request_not_every_output_cleared(
    tmp_path: Path,
) -> None:
    """When no keep fits, the answer is the smallest request: with only short outputs (each
    shorter than its marker) that is keeping them all, not clearing them all."""
    with open_store(tmp_path / "fit.db") as store:
        conv = store.new_conversation()
        for n in range(3):
            call = {"type": "tool_use", "id": f"c{n}", "name": "cat", "input": {}}
            store.append_message(conv, "assistant", [call])
            result = {"type": "tool_result", "tool_use_id": f"c{n}", "content": "ok"}
            store.append_message(conv, "user", [result])
        totals = {k: store.pressure(conv, keep_tool_results=k).total for k in range(3)}
        whole = store.pressure(conv)
        assert whole.total < min(totals.values())
        keep, fitted = store.fit_tool_results(conv, 1)
        assert keep is None
        assert fitted == whole
