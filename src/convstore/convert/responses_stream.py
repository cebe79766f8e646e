"""Folding a Responses API stream (``ResponseStreamEvent`` s) into blocks.

:class:`ResponseEventAssembler` is pure: :meth:`~ResponseEventAssembler.feed` takes one event
(an SDK object or a dict) and returns the blocks it completed. An output item is complete at
its ``response.output_item.done``, which carries the whole item: it becomes the blocks
:func:`~convstore.convert.responses.item_blocks` makes of it (hosted tool calls with their
results, annotated text, reasoning, calls), so a stream records what the finished response's
``output`` would. ``response.output_text.delta`` and ``response.output_text.annotation.added``
are kept only for a stream cut short (:meth:`~ResponseEventAssembler.pending_text`: the text so
far with its annotations). ``response.incomplete`` and ``response.failed`` say why the message
was cut short; every other event is progress that the done item repeats.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from convstore.convert.parts import annotated_text, as_dict, text_of
from convstore.convert.responses import item_blocks
from convstore.domain.blocks import Block
from convstore.domain.errors import InvalidInput


@dataclass(slots=True)
class ResponseEventAssembler:
    """The text in progress, and how the stream finished."""

    cut_short: str | None = None
    """Why the response stopped early (``response.incomplete`` / ``response.failed``)."""
    events: int = 0
    _text: list[str] = field(default_factory=list)
    _annotations: list[Any] = field(default_factory=list)

    def feed(self, event: object) -> list[Block]:
        """Take one event; returns the blocks it completed, in order."""
        where = f"event {self.events}"
        self.events += 1
        fields = as_dict(event, where)
        kind = fields.get("type")
        where = f"{where} ({kind})"
        match kind:
            case "response.output_item.done":
                self._text, self._annotations = [], []
                side, blocks = item_blocks(fields.get("item"), f"{where} item")
                if side != "assistant":
                    msg = f"{where}: a {side} item cannot be part of the model's output"
                    raise InvalidInput(msg)
                return blocks
            case "response.output_text.delta":
                self._text.append(text_of(fields.get("delta"), f"{where} delta"))
            case "response.output_text.annotation.added":
                self._annotations.append(fields.get("annotation"))
            case "response.incomplete" | "response.failed":
                response = as_dict(fields.get("response") or {}, f"{where} response")
                why = response.get("incomplete_details") or response.get("error") or {}
                detail = as_dict(why, f"{where} details")
                said = detail.get("reason") or detail.get("message") or kind.split(".")[1]
                self.cut_short = f"the response stopped early ({kind}: {said})"
            case "error":
                self.cut_short = f"the stream reported an error: {fields.get('message')}"
            case str() if kind.startswith("response."):
                pass  # progress: the done item holds what it streamed
            case _:
                msg = f"{where}: not a Responses stream event (its type is {kind!r})"
                raise InvalidInput(msg)
        return []

    def finish(self) -> list[Block]:
        """Nothing is left when the stream ends whole: every item came with its done event."""
        self._text, self._annotations = [], []
        return []

    def pending_text(self) -> list[Block]:
        """The text still streaming when the stream broke off, with its annotations so far."""
        if not self._text:
            return []
        text = "".join(self._text)
        self._text, annotations, self._annotations = [], self._annotations, []
        return [annotated_text(text, annotations, "streamed text")]
