"""Replay: the recorded conversation as provider wire messages.

A pure function of the events and of what the caller says about the request: whether the
model can see images, and (optionally) how much to compact. Exactly one wire message per
stored message in the replayed window, in order, with one exception: when the first
non-system message is the assistant's, a user message saying so (``HISTORY_STARTS``) goes
before it, as Bedrock, Mistral and chat templates refuse a first turn that is not the
user's. Every block crosses as prose; no tool roles, no tool-call ids and no tool blocks
appear, so a tool round cut off mid-turn is a plain recorded fact that can never make a
request fail.

This module holds what the caller says (:class:`ReplayOptions`, the shapes) and
:func:`replay` over events. The engine itself is one fold and one render: events fold into a
:class:`~convstore.engine.state.ReplayState` (:func:`convstore.engine.model.fold`, the same
fold a store's replay extends in memory), and :mod:`convstore.engine.render` turns a state
and the options into what is sent, which the store's replay, live rounds, context pressure
and ``fit_tool_results`` all read.
"""

from __future__ import annotations

from collections.abc import Iterable

from convstore.domain.events import Event
from convstore.engine.model import folded
from convstore.engine.options import SHAPES as SHAPES  # noqa: PLC0414 - re-exported
from convstore.engine.options import JSONDict as JSONDict  # noqa: PLC0414 - re-exported
from convstore.engine.options import ReplayOptions as ReplayOptions  # noqa: PLC0414 - re-exported
from convstore.engine.options import Shape as Shape  # noqa: PLC0414 - re-exported
from convstore.engine.options import parse_shape as parse_shape  # noqa: PLC0414 - re-exported
from convstore.engine.options import replay_options as replay_options  # noqa: PLC0414 - re-exported
from convstore.engine.render import render
from convstore.projections.wording import BLANK_MESSAGE as BLANK_MESSAGE  # noqa: PLC0414 - re-exported
from convstore.projections.wording import CANNOT_SEE as CANNOT_SEE  # noqa: PLC0414 - re-exported
from convstore.projections.wording import HISTORY_STARTS as HISTORY_STARTS  # noqa: PLC0414 - re-exported
from convstore.projections.wording import NO_RESULT as NO_RESULT  # noqa: PLC0414 - re-exported
from convstore.projections.wording import NOTHING_RECORDED as NOTHING_RECORDED  # noqa: PLC0414 - re-exported
from convstore.projections.wording import SUMMARY_HEAD as SUMMARY_HEAD  # noqa: PLC0414 - re-exported
from convstore.projections.wording import interruption_marker as interruption_marker  # noqa: PLC0414 - re-exported


def replay(
    events: Iterable[Event],
    *,
    options: ReplayOptions | None = None,
    shape: Shape | None = None,
    vision: bool | None = None,
    full: bool | None = None,
    keep_tool_results: int | None = None,
) -> JSONDict:
    """The conversation recorded in ``events`` as a request body fragment in the options'
    shape (see :class:`ReplayOptions`; each keyword given replaces its field of ``options``).
    """
    checked = replay_options(
        options, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
    )
    state, load = folded(events)
    return render(state, checked, checked.shape, load)
