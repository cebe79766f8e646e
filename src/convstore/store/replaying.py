"""Replay: a conversation as the wire messages a provider takes, and what they cost.

The rules live in :mod:`convstore.projections.replay` (and ``live``, ``pressure``); this part
of the store reads the events and checks the caller's options.
"""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from convstore.domain.blocks import ToolResultBlock
from convstore.domain.events import BlockAppended
from convstore.domain.parsing import (
    describe_value,
    parse_count,
    parse_flag,
    parse_id,
    parse_optional_count,
)
from convstore.errors import ConversationNotFound, InvalidInput
from convstore.infrastructure.memory import paused_gc
from convstore.projections.live import live_request
from convstore.projections.pressure import Pressure, fit_keep, measure
from convstore.projections.replay import (
    SHAPES,
    JSONDict,
    PlannedMessage,
    ReplayOptions,
    Shape,
    plan,
    render,
)
from convstore.store.reading import LogReader


class Replayer(LogReader):
    """Replays conversations as provider requests, and measures them."""

    def replay(
        self,
        conversation: UUID | str,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """The conversation as provider wire messages (see :mod:`convstore.projections.replay`).

        ``vision`` says whether the model can see images. ``full`` ignores compaction;
        ``keep_tool_results`` clears the output of all but the newest N tool results.
        """
        options = _options(vision, full, keep_tool_results)
        checked = _parse_shape(shape)
        conversation_id = parse_id(conversation, "conversation")
        with paused_gc():
            planned = plan(self._stream(conversation_id), options)
            if not planned and not self._exists(conversation_id):
                msg = f"conversation {conversation_id} not found"
                raise ConversationNotFound(msg)
            return render(planned, checked)

    def live_request(
        self,
        conversation: UUID | str,
        live_message: UUID | str,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """Replay of the history before ``live_message``, then its tool round with real
        call-id linkage (see :mod:`convstore.projections.live`)."""
        live = parse_id(live_message, "message")
        options = _options(vision, full, keep_tool_results)
        events = self.events(conversation)
        return live_request(events, live, shape=_parse_shape(shape), options=options)

    def pressure(
        self,
        conversation: UUID | str,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
        keep_tool_results: int | None = None,
    ) -> Pressure:
        """Tokens of exactly what :meth:`replay` sends with these options, with a breakdown."""
        from convstore.infrastructure.tokenizer import ENCODING, count_tokens  # noqa: PLC0415

        options = _options(vision, full, keep_tool_results)
        planned = plan(self.events(conversation), options)
        return measure(planned, _parse_shape(shape), count_tokens, tokenizer=ENCODING)

    def fit_tool_results(
        self,
        conversation: UUID | str,
        max_tokens: int,
        *,
        shape: Shape | str = "openai",
        vision: bool = False,
        full: bool = False,
    ) -> tuple[int | None, Pressure]:
        """Microcompact by budget: the most tool results replay can keep within ``max_tokens``
        (``None`` when everything fits), with the pressure at that setting. Oldest output is
        cleared first; pass the answer as ``keep_tool_results`` to :meth:`replay`."""
        from convstore.infrastructure.tokenizer import ENCODING, count_tokens  # noqa: PLC0415

        max_tokens = parse_count(max_tokens, "max_tokens", 1)
        _options(vision, full, None)
        checked = _parse_shape(shape)
        events = self.events(conversation)
        results = sum(
            1
            for e in events
            if isinstance(e, BlockAppended) and isinstance(e.block, ToolResultBlock)
        )

        def planner(keep: int | None) -> list[PlannedMessage]:
            return plan(events, _options(vision, full, keep))

        keep, pressure = fit_keep(planner, checked, count_tokens, max_tokens, results)
        return keep, replace(pressure, tokenizer=ENCODING)


def _options(vision: bool, full: bool, keep_tool_results: int | None) -> ReplayOptions:
    return ReplayOptions(
        vision=parse_flag(vision, "vision"),
        full=parse_flag(full, "full"),
        keep_tool_results=parse_optional_count(keep_tool_results, "keep_tool_results"),
    )


def _parse_shape(shape: str) -> Shape:
    for known in SHAPES:
        if shape == known:
            return known
    msg = f"unknown shape {describe_value(shape)}; use one of: {', '.join(SHAPES)}"
    raise InvalidInput(msg)
