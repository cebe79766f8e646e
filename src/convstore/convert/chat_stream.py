"""Folding a Chat Completions stream (``ChatCompletionChunk`` deltas) into blocks.

:class:`ChunkAssembler` is pure: :meth:`~ChunkAssembler.feed` takes one chunk (an SDK object or
a dict) and returns the blocks it completed. A block is complete when the stream moves on to
something else: the reasoning when the text (or a tool call) starts, the text when the first
tool call starts, each tool call when the next one starts; :meth:`~ChunkAssembler.finish`
hands out the last one. Any chunking of the same completion gives the same blocks as
:func:`~convstore.convert.openai_chat.assistant_blocks` of the whole message.

OpenRouter-style deltas are read as that converter reads a whole message: the ``reasoning``
text and the ``reasoning_details`` entries (pieces with the same ``index`` are one entry:
their ``text``, ``summary`` and ``data`` joined, a later ``signature`` kept) form the
reasoning, handed to :func:`~convstore.convert.openai_chat.reasoning_blocks` once it is
complete; ``annotations`` ride on the text they arrive with (when they come after the text
was handed out, on an empty text of their own). A delta key the assembler does not read is
refused, naming it, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from convstore.convert.openai_chat import REASONING_DETAILS, reasoning_blocks
from convstore.convert.parts import (
    annotated_text,
    as_dict,
    as_list,
    check_keys,
    checked,
    refuse,
    text_of,
    tool_arguments,
)
from convstore.domain.blocks import Block, ReasoningBlock, TextBlock, ToolUseBlock
from convstore.domain.errors import InvalidInput

CUT_SHORT = {
    "length": "the model reached its output token limit (finish_reason: length)",
    "content_filter": "the provider's content filter stopped the output (finish_reason: "
    "content_filter)",
}
"""Finish reasons that mean the message was cut short, and the reason recorded for each."""

DELTA_KEYS = frozenset(
    {
        "role",
        "content",
        "refusal",
        "tool_calls",
        "function_call",
        "reasoning_content",
        "reasoning",
        "reasoning_details",
        "annotations",
    }
)
"""The keys a chunk's ``delta`` may have (the SDK's ``ChoiceDelta`` and what DeepSeek and
OpenRouter add); any other is refused."""

JOINED = ("text", "summary", "data")
"""The fields of a ``reasoning_details`` entry that arrive in pieces."""


@dataclass(slots=True)
class _Call:
    index: int
    id: str | None = None
    name: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ChunkAssembler:
    """The block in progress, and how the stream finished."""

    finish_reason: str | None = None
    """The first choice's ``finish_reason``, once a chunk has carried it."""
    chunks: int = 0
    _kind: str | None = None
    _text: list[str] = field(default_factory=list)
    _call: _Call | None = None
    _details: list[dict[str, Any]] = field(default_factory=list)
    _annotations: list[object] = field(default_factory=list)

    def feed(self, chunk: object) -> list[Block]:
        """Take one chunk; returns the blocks it completed, in order."""
        where = f"chunk {self.chunks}"
        self.chunks += 1
        done: list[Block] = []
        for raw in as_list(as_dict(chunk, where).get("choices") or [], f"{where} choices"):
            choice = as_dict(raw, f"{where} choice")
            if choice.get("index", 0) != 0:
                msg = (
                    f"{where}: choice {choice.get('index')!r}; "
                    "only streams of one choice (n=1) are recorded"
                )
                raise InvalidInput(msg)
            delta = as_dict(choice.get("delta") or {}, f"{where} delta")
            check_keys(delta, DELTA_KEYS, f"{where} delta")
            if delta.get("function_call") is not None:
                refuse("field", "function_call", f"{where} delta", ("tool_calls",))
            if delta.get("reasoning_content"):
                done += self._switch("reasoning_content")
                self._text.append(text_of(delta["reasoning_content"], f"{where} reasoning_content"))
            if delta.get("reasoning") or delta.get("reasoning_details"):
                done += self._switch("reasoning")
                if delta.get("reasoning"):
                    self._text.append(text_of(delta["reasoning"], f"{where} reasoning"))
                details = as_list(delta.get("reasoning_details") or [], f"{where} details")
                for index, detail in enumerate(details):
                    self._detail(as_dict(detail, f"{where} reasoning_details {index}"), where)
            for kind in ("content", "refusal"):
                piece = delta.get(kind)
                if piece:
                    done += self._switch(kind)
                    self._text.append(text_of(piece, f"{where} {kind}"))
            if delta.get("annotations"):
                done += self._switch("content")
                self._annotations += as_list(delta["annotations"], f"{where} annotations")
            for call in as_list(delta.get("tool_calls") or [], f"{where} tool_calls"):
                done += self._tool_call(as_dict(call, f"{where} tool call"), where)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return done

    @property
    def cut_short(self) -> str | None:
        """Why the output was cut short, when ``finish_reason`` says it was."""
        return CUT_SHORT.get(self.finish_reason or "")

    def finish(self) -> list[Block]:
        """The block still in progress, now complete (none when the stream ended between)."""
        return self._switch(None)

    def pending_text(self) -> list[Block]:
        """The text or reasoning still in progress as a block (for a stream cut short); a
        tool call still streaming is dropped: it never ran."""
        if self._call is not None:
            self._kind, self._call = None, None
            return []
        return self._switch(None)

    def _switch(self, kind: str | None) -> list[Block]:
        """Close the block in progress unless ``kind`` continues it."""
        if kind == self._kind and kind is not None:
            return []
        done: list[Block] = []
        text = "".join(self._text)
        if self._kind == "reasoning_content":
            done.append(ReasoningBlock(text=text))
        elif self._kind == "reasoning":
            whole = {"reasoning": text, "reasoning_details": self._details}
            done += reasoning_blocks(whole, "streamed reasoning")
        elif self._kind == "content":
            done.append(annotated_text(text, self._annotations, "streamed annotations"))
        elif self._kind == "refusal":
            done.append(TextBlock(text=text))
        elif self._call is not None:
            done.append(self._call_block(self._call))
        self._kind, self._text, self._call = kind, [], None
        self._details, self._annotations = [], []
        return done

    def _detail(self, detail: dict[str, Any], where: str) -> None:
        """One piece of a ``reasoning_details`` entry: the start of a new entry, or more of
        the entry with its ``index``."""
        index = detail.get("index")
        known = next(
            (d for d in self._details if index is not None and d.get("index") == index), None
        )
        if known is None:
            kind = detail.get("type")
            if kind not in REASONING_DETAILS:
                refuse(
                    "reasoning detail type", kind, f"{where} reasoning_details", REASONING_DETAILS
                )
            self._details.append(dict(detail))
            return
        for key, value in detail.items():
            if key in JOINED and isinstance(value, str) and isinstance(known.get(key), str):
                known[key] += value
            elif value is not None and key != "type":
                known[key] = value

    def _tool_call(self, delta: dict[str, Any], where: str) -> list[Block]:
        index = delta.get("index", 0)
        done: list[Block] = []
        # A new call starts at a new index, or (for providers that leave ``index`` at 0 or out)
        # at a new call id.
        fresh_id = delta.get("id") and self._call and self._call.id not in (None, delta["id"])
        if self._call is None or self._call.index != index or fresh_id:
            done = self._switch(f"call {index} {delta.get('id')}")
            self._call = _Call(index)
        call = self._call
        if delta.get("id"):
            call.id = text_of(delta["id"], f"{where} id")
        function = as_dict(delta.get("function") or {}, f"{where} function")
        if function.get("name"):
            call.name.append(text_of(function["name"], f"{where} name"))
        if function.get("arguments"):
            call.arguments.append(text_of(function["arguments"], f"{where} arguments"))
        return done

    @staticmethod
    def _call_block(call: _Call) -> ToolUseBlock:
        where = f"streamed tool call {call.index}"
        data = {
            "id": call.id,
            "name": "".join(call.name),
            "input": tool_arguments("".join(call.arguments), f"{where} arguments"),
        }
        return checked(lambda: ToolUseBlock.model_validate(data), where)
