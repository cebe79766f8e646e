"""What the caller says about a replay: the wire shapes and :class:`ReplayOptions`.

Its own module, below the engine's render (which names these types) and :mod:`.plan` (which
re-exports them beside :func:`~convstore.engine.plan.replay`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from convstore.domain.errors import InvalidInput
from convstore.domain.parsing import describe_value, parse_flag, parse_optional_count

Shape: TypeAlias = Literal["openai", "anthropic"]
SHAPES: tuple[Shape, ...] = ("openai", "anthropic")

JSONDict: TypeAlias = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """What the caller says about the request; everything replay varies on.

    One value for :meth:`Store.replay <convstore.Store.replay>`, ``live_request``,
    ``pressure`` and ``fit_tool_results`` (and the CLI's ``--shape``, ``--vision``, ``--full``
    and ``--keep-tool-results``), so a request and its token count are asked for alike.
    Checked when made: a wrong value is :class:`~convstore.InvalidInput`, naming the field.
    Vary one with :func:`dataclasses.replace`.
    """

    shape: Shape = "openai"
    """The provider wire shape: OpenAI Chat Completions or Anthropic Messages."""
    vision: bool = False
    """Whether the model can see images (else a marker says one was not shown)."""
    full: bool = False
    """Ignore compaction: replay every stored message."""
    keep_tool_results: int | None = None
    """Microcompact: clear the output of every tool result but the newest N."""

    def __post_init__(self) -> None:
        parse_shape(self.shape)
        parse_flag(self.vision, "vision")
        parse_flag(self.full, "full")
        parse_optional_count(self.keep_tool_results, "keep_tool_results")


def parse_shape(shape: object) -> Shape:
    """A wire shape named by the caller, or :class:`InvalidInput` listing the shapes."""
    for known in SHAPES:
        if shape == known:
            return known
    msg = f"unknown shape {describe_value(shape)}; use one of: {', '.join(SHAPES)}"
    raise InvalidInput(msg)


def replay_options(
    options: ReplayOptions | None = None,
    *,
    shape: Shape | str | None = None,
    vision: bool | None = None,
    full: bool | None = None,
    keep_tool_results: int | None = None,
) -> ReplayOptions:
    """``options`` (default :class:`ReplayOptions()`) with each keyword that is given (not
    ``None``) put in place of its field: the keywords are a shorthand kept beside
    ``options=``."""
    if options is None:
        options = ReplayOptions()
    elif not isinstance(options, ReplayOptions):
        msg = f"options must be a ReplayOptions, not {describe_value(options)}"
        raise InvalidInput(msg)
    if shape is None and vision is None and full is None and keep_tool_results is None:
        return options
    return ReplayOptions(
        shape=options.shape if shape is None else parse_shape(shape),
        vision=options.vision if vision is None else vision,
        full=options.full if full is None else full,
        keep_tool_results=(
            options.keep_tool_results if keep_tool_results is None else keep_tool_results
        ),
    )
