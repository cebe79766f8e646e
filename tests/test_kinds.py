"""Every list of kinds comes from its union, and every dispatch over kinds is exhaustive.

mypy --strict catches a ``match`` that misses a kind only when the match ends in
``assert_never``; these tests catch the rest: a hand-kept list, or a dispatch without it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from convstore.audit.db import BLOCK_COUNTERS
from convstore.domain.blocks import BLOCK_CLASSES, BLOCK_TYPES, AnyToolResult, AnyToolUse, Block
from convstore.domain.events import EVENT_CLASSES, Event
from convstore.engine.render import KINDS
from convstore.engine.state import CALL_CODES, RESULT_CODES
from convstore.infrastructure.common.mapper import TOPICS, topic_of

SOURCE = Path(__file__).parents[1] / "src" / "convstore"
KIND_NAMES = {cls.__name__ for cls in (*BLOCK_CLASSES, *EVENT_CLASSES)}


def test_kind_lists_match_their_unions() -> None:
    """Block and event class lists, block types and stored topics cover exactly the unions."""
    assert set(BLOCK_CLASSES) == set(get_args(get_args(Block)[0]))
    assert set(EVENT_CLASSES) == set(get_args(get_args(Event)[0]))
    assert {c.model_fields["type"].default for c in BLOCK_CLASSES} == BLOCK_TYPES
    assert {topic_of(c) for c in EVENT_CLASSES} == TOPICS
    assert set(BLOCK_COUNTERS) == BLOCK_TYPES
    assert set(KINDS.values()) == BLOCK_TYPES  # the replay engine's part codes


def test_the_engines_call_and_result_codes_are_every_kind_of_call_and_result() -> None:
    """What the engine treats as a call (answered or not, counted in ``calls``) and as a
    result (cleared by microcompact, counted in ``results``) is exactly the kinds of
    ``AnyToolUse`` and ``AnyToolResult``: the caller's and the provider's."""

    def types(union: object) -> set[str]:
        return {str(cls.model_fields["type"].default) for cls in get_args(union)}

    assert {KINDS[code] for code in CALL_CODES} == types(AnyToolUse)
    assert {KINDS[code] for code in RESULT_CODES} == types(AnyToolResult)


def _kind_matches(tree: ast.AST) -> list[ast.Match]:
    """``match`` statements whose case patterns name a block or event class."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Match):
            continue
        names = {
            n.id
            for case in node.cases
            for n in ast.walk(case.pattern)
            if isinstance(n, ast.Name) and n.id in KIND_NAMES
        }
        if names:
            found.append(node)
    return found


def _ends_in_assert_never(match: ast.Match) -> bool:
    last = match.cases[-1]
    if not (isinstance(last.pattern, ast.MatchAs) and last.pattern.pattern is None):
        return False
    calls = [n for n in ast.walk(last.body[0]) if isinstance(n, ast.Call)]
    return any(isinstance(c.func, ast.Name) and c.func.id == "assert_never" for c in calls)


def test_every_dispatch_over_kinds_ends_in_assert_never() -> None:
    """Each ``match`` over block or event kinds in the package ends ``case _: assert_never``."""
    checked = 0
    offenders = []
    for path in sorted(SOURCE.rglob("*.py")):
        for match in _kind_matches(ast.parse(path.read_text(), str(path))):
            checked += 1
            if not _ends_in_assert_never(match):
                offenders.append(f"{path.relative_to(SOURCE)}:{match.lineno}")
    assert checked >= 10, "the scan found too few dispatches to be looking at the right code"
    assert offenders == []
