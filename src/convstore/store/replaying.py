"""Replay: a conversation as the wire messages a provider takes, and what they cost.

The rules live in the replay engine (:mod:`convstore.engine`: one fold,
:func:`convstore.engine.model.fold`, and one render, :mod:`convstore.engine.render`, which
``live`` and ``pressure`` read); this part of the store reads the events and checks the
caller's options.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from uuid import UUID

from convstore.domain.blocks import (
    DocumentBlock,
    HostedToolResultBlock,
    ImageBlock,
    ToolResultBlock,
)
from convstore.domain.errors import ConversationNotFound, InvalidInput
from convstore.domain.events import BlockAppended, BlockRecorded
from convstore.domain.parsing import parse_count, parse_id
from convstore.engine.live import live_request
from convstore.engine.model import folded
from convstore.engine.plan import JSONDict, ReplayOptions, Shape, replay_options
from convstore.engine.pressure import Pressure, fit_keep, measure
from convstore.engine.render import plan
from convstore.store.reading import LogReader
from convstore.store.replay_cache import ReplayCache


class Replayer(LogReader):
    """Replays conversations as provider requests, and measures them.

    Each method takes one :class:`~convstore.ReplayOptions` as ``options``; the keywords
    ``shape``, ``vision``, ``full`` and ``keep_tool_results`` are a shorthand that replaces
    the matching field of ``options`` when given (``None`` leaves it as it is).

    :meth:`replay` folds the conversation's log, read once in version order, and keeps the
    fold in memory (:mod:`convstore.store.replay_cache`), extending it on the next call by
    the events appended since.
    """

    _replays: ReplayCache
    """The in-process folds (set by the store, which knows their budget)."""

    def replay(
        self,
        conversation: UUID | str,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """The conversation as provider wire messages (see :mod:`convstore.engine.plan`).

        ``vision`` says whether the model can see images. ``full`` ignores compaction;
        ``keep_tool_results`` clears the output of all but the newest N tool results.
        """
        checked = replay_options(
            options, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
        )
        conversation_id = parse_id(conversation, "conversation")
        found = self._guarded(
            lambda: self._replays.replay(
                conversation_id, checked, checked.shape, partial(self._image, conversation_id)
            )
        )
        if found is None:
            msg = f"conversation {conversation_id} not found"
            raise ConversationNotFound(msg)
        return found

    def _image(
        self, conversation_id: UUID, version: int, index: int | None
    ) -> ImageBlock | DocumentBlock:
        """The image or document recorded at ``version`` (``index`` into a tool result's
        content), read back for a vision replay (a fold keeps no image data)."""
        event = next(self._stream(conversation_id, version - 1))
        assert isinstance(event, BlockAppended | BlockRecorded)
        block = event.block
        if index is not None:
            assert isinstance(block, ToolResultBlock | HostedToolResultBlock)
            assert not isinstance(block.content, str)
            block = block.content[index]
        assert isinstance(block, ImageBlock | DocumentBlock)
        return block

    def live_request(
        self,
        conversation: UUID | str,
        live_message: UUID | str,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
        keep_tool_results: int | None = None,
    ) -> JSONDict:
        """Replay of the history before ``live_message``, then its tool round with real
        call-id linkage (see :mod:`convstore.engine.live`)."""
        live = parse_id(live_message, "message")
        checked = replay_options(
            options, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
        )
        events = self.events(conversation)
        return live_request(events, live, options=checked)

    def pressure(
        self,
        conversation: UUID | str,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
        keep_tool_results: int | None = None,
    ) -> Pressure:
        """Tokens of exactly what :meth:`replay` sends with these options, with a breakdown."""
        from convstore.engine.tokenizer import ENCODING, count_tokens  # noqa: PLC0415

        checked = replay_options(
            options, shape=shape, vision=vision, full=full, keep_tool_results=keep_tool_results
        )
        state, load = folded(self.events(conversation))
        return measure(plan(state, checked, load), checked.shape, count_tokens, ENCODING)

    def fit_tool_results(
        self,
        conversation: UUID | str,
        max_tokens: int,
        *,
        options: ReplayOptions | None = None,
        shape: Shape | str | None = None,
        vision: bool | None = None,
        full: bool | None = None,
    ) -> tuple[int | None, Pressure]:
        """Microcompact by budget: the most tool results replay can keep within ``max_tokens``
        (``None`` when everything fits), with the pressure at that setting. Oldest output is
        cleared first; when no setting fits, the answer is the one whose request is smallest
        (over ``max_tokens``, as its pressure shows). Pass the answer as ``keep_tool_results``
        to :meth:`replay`. The
        options' own ``keep_tool_results`` must be ``None``: this chooses it."""
        from convstore.engine.tokenizer import ENCODING, count_tokens  # noqa: PLC0415

        max_tokens = parse_count(max_tokens, "max_tokens", 1)
        checked = replay_options(options, shape=shape, vision=vision, full=full)
        if checked.keep_tool_results is not None:
            msg = (
                "fit_tool_results chooses keep_tool_results itself; "
                "give options whose keep_tool_results is None"
            )
            raise InvalidInput(msg)
        state, load = folded(self.events(conversation))
        planned = plan(state, checked, load)
        keep, pressure = fit_keep(planned, checked.shape, count_tokens, max_tokens)
        return keep, replace(pressure, tokenizer=ENCODING)
