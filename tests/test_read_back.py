"""Everything the store accepts reads back: values the JSON reader refuses are refused on append.

The case that broke a store: an integer of 4,301 digits or more in a tool call's input was
accepted, then every reader (replay, events, a new writer, the audit projection) failed at that
event. The exact bound was found by experiment: pydantic's JSON reader reads 4,300 digits and
refuses 4,301 ("number out of range"), whatever ``sys.set_int_max_str_digits`` says.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import JsonValue, TypeAdapter, ValidationError

from convstore import Store, open_store
from convstore.cli import cli
from convstore.domain.blocks import ToolUseBlock
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.events import MessageMeta
from convstore.domain.json_values import MAX_INT_DIGITS
from tests.strategies import blocks, texts

HUGE = 10**MAX_INT_DIGITS  # 4,301 digits: the smallest integer the JSON reader refuses
LARGEST = HUGE - 1  # 4,300 digits: still read back


def _nested(value: Any, depth: int) -> dict[str, Any]:
    for _ in range(depth):
        value = {"a": value}
    return {"v": value}


def _call(value: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "c1", "name": "calc", "input": value}


# Each case: how to append, given (store, conversation, open assistant message, open user message).
Append = Callable[[Store, UUID, UUID, UUID], object]
CASES: dict[str, Append] = {
    "tool_use input, top level": lambda s, c, a, u: s.append_block(c, a, _call({"v": HUGE})),
    "tool_use input, negative": lambda s, c, a, u: s.append_block(c, a, _call({"v": -HUGE})),
    "tool_use input, 90 levels deep": lambda s, c, a, u: s.append_block(
        c, a, _call(_nested(HUGE, 90))
    ),
    "tool_use input, inside lists": lambda s, c, a, u: s.append_block(
        c, a, _call({"v": [1, [2.5, {"w": [HUGE]}]]})
    ),
    "tool_use input, a block model": lambda s, c, a, u: s.append_block(
        c, a, ToolUseBlock(id="c1", name="calc", input={"v": [HUGE]})
    ),
    "tool_use input, in a whole message": lambda s, c, a, u: s.append_message(
        c, "assistant", [{"type": "text", "text": "ok"}, _call({"v": HUGE})]
    ),
    "tool_result content": lambda s, c, a, u: s.append_block(
        c, u, {"type": "tool_result", "tool_use_id": "c1", "content": HUGE}
    ),
    "tool_result content part": lambda s, c, a, u: s.append_block(
        c,
        u,
        {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": HUGE}]},
    ),
    "tool_result is_error": lambda s, c, a, u: s.append_block(
        c, u, {"type": "tool_result", "tool_use_id": "c1", "content": "x", "is_error": HUGE}
    ),
    "text": lambda s, c, a, u: s.append_block(c, u, {"type": "text", "text": HUGE}),
    "reasoning": lambda s, c, a, u: s.append_block(c, a, {"type": "reasoning", "text": HUGE}),
}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "store.db")


def _open_messages(store: Store) -> tuple[UUID, UUID, UUID]:
    conv = store.new_conversation()
    assistant = store.start_message(conv, "assistant")
    user = store.start_message(conv, "user")
    return conv, assistant, user


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_an_integer_past_the_readers_range_is_refused_in_every_field(
    store: Store, tmp_path: Path, case: str
) -> None:
    """A 4,301-digit integer anywhere is refused, nothing is written, and every reader works."""
    conv, assistant, user = _open_messages(store)
    before = list(store.raw_events(conv))
    with pytest.raises(InvalidBlock):
        CASES[case](store, conv, assistant, user)
    assert list(store.raw_events(conv)) == before
    store.append_block(conv, assistant, _call({"v": 1}))  # the same writer goes on
    assert len(store.replay(conv)["messages"]) == 3  # the opening marker, then both
    store.close()
    with open_store(tmp_path / "store.db") as again:  # a new writer folds the log
        again.end_message(conv, assistant)
        assert len(again.events(conv)) == len(before) + 2
    projected = CliRunner().invoke(cli, ["--db", str(tmp_path / "store.db"), "project"])
    assert projected.exit_code == 0, projected.output


def test_the_largest_readable_integer_is_kept_exactly(store: Store, tmp_path: Path) -> None:
    """4,300 digits (either sign, at depth) are accepted and read back equal, in every reader."""
    conv, assistant, _ = _open_messages(store)
    value = {"v": [LARGEST, -LARGEST], "deep": _nested(LARGEST, 90)}
    store.append_block(conv, assistant, _call(value))
    block = store.events(conv)[-1].block  # type: ignore[union-attr]
    assert isinstance(block, ToolUseBlock)
    assert block.input == value
    assert str(LARGEST)[:50] in store.replay(conv)["messages"][1]["content"]
    store.close()
    with open_store(tmp_path / "store.db") as again:
        assert again.events(conv)[-1].block == block  # type: ignore[union-attr]
    projected = CliRunner().invoke(cli, ["--db", str(tmp_path / "store.db"), "project"])
    assert projected.exit_code == 0, projected.output


def test_the_bound_is_the_json_readers_own() -> None:
    """pydantic's JSON reader takes 4,300 digits and refuses 4,301, whatever Python's own limit."""
    reader: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert reader.validate_json("9" * MAX_INT_DIGITS) == int("9" * MAX_INT_DIGITS)
        with pytest.raises(ValidationError, match="number out of range"):
            reader.validate_json("1" + "0" * MAX_INT_DIGITS)
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_block_model_built_without_validation_is_checked_as_its_fields(store: Store) -> None:
    """A block made with ``model_construct`` holding what JSON cannot carry exactly (a tuple,
    a key that is not text, NaN) is refused at the edge like the same mapping: the store
    encodes what the edge accepted without reading it back, so the edge is the check."""
    conv, assistant, _ = _open_messages(store)
    before = list(store.raw_events(conv))
    as_tuple = ToolUseBlock.model_construct(id="c1", name="calc", input={"v": (1, 2)})  # type: ignore[dict-item]
    with pytest.raises(InvalidBlock, match=r"tool_use block: input\.v: .*not a valid JSON"):
        store.append_block(conv, assistant, as_tuple)
    int_key = ToolUseBlock.model_construct(id="c1", name="calc", input={1: "one"})  # type: ignore[dict-item]
    with pytest.raises(InvalidBlock, match="tool_use block: input"):
        store.append_block(conv, assistant, int_key)
    not_a_number = ToolUseBlock.model_construct(id="c1", name="calc", input={"v": math.nan})
    with pytest.raises(InvalidBlock, match="not finite"):
        store.append_block(conv, assistant, not_a_number)
    assert list(store.raw_events(conv)) == before


def test_metadata_and_entries_json_cannot_carry_are_refused(store: Store) -> None:
    """NaN, an integer past the reader's range and a lone surrogate in a message's metadata
    (as a mapping or a model built without validation) or in a runtime entry are refused in
    one line with nothing written: pydantic would take them and write NaN as null."""
    conv = store.new_conversation()
    before = list(store.raw_events(conv))
    text = [{"type": "text", "text": "hi"}]
    for value in (math.nan, math.inf, HUGE, "\ud800"):
        with pytest.raises(InvalidInput, match="message metadata: "):
            store.append_message(conv, "user", text, meta={"extra": {"v": value}})
        with pytest.raises(InvalidInput, match="message metadata: "):
            store.append_message(
                conv, "user", text, meta=MessageMeta.model_construct(extra={"v": value})
            )
        with pytest.raises(InvalidInput, match="entry 0: "):
            store.record_entries(conv, [{"uuid": "e1", "v": value}])
    assert list(store.raw_events(conv)) == before


def test_a_huge_integer_on_the_command_line_is_bad_input(tmp_path: Path) -> None:
    """The CLI refuses a 4,301-digit integer with exit 2 and one line; nothing is written."""
    db = str(tmp_path / "cli.db")
    runner = CliRunner()
    conv = runner.invoke(cli, ["--db", db, "new"]).stdout.strip()
    block = '[{"type":"tool_use","id":"c","name":"n","input":{"v":1' + "0" * MAX_INT_DIGITS + "}}]"
    result = runner.invoke(cli, ["--db", db, "append", conv, "--role", "assistant"], input=block)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1
    log = runner.invoke(cli, ["--db", db, "log", conv])
    assert len(log.stdout.splitlines()) == 1


# -- any accepted block reads back equal -------------------------------------------------------

# Edge integers as (sign, power of ten, offset): hypothesis cannot print a 4,301-digit number.
_EDGE_INTEGERS = [
    (1, 4300, -1),
    (-1, 4300, -1),
    (1, 4300, 0),
    (-1, 4300, 0),
    (1, 19, 0),
    (-1, 300, 7),
]


def _edge_integer(spec: tuple[int, int, int]) -> int:
    sign, power, offset = spec
    value: int = sign * (10**power + offset)
    return value


def _hostile_values() -> st.SearchStrategy[Any]:
    """JSON-ish values with the edges readers trip on: huge integers, non-finite floats, lone
    surrogates, deep nesting."""
    edges = st.sampled_from(_EDGE_INTEGERS).map(_edge_integer)
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        edges,
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from([math.inf, -math.inf, math.nan]),
        texts(12),
        st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=2),
    )
    nested = st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(texts(6), children, max_size=3),
            st.tuples(children, children),
            st.dictionaries(st.integers(0, 9), children, min_size=1, max_size=2),
        ),
        max_leaves=10,
    )
    depths = st.sampled_from([50, 98, 99, 100, 101, 150, 250])
    return st.one_of(
        nested,
        edges,
        st.lists(edges, min_size=1, max_size=3),
        st.builds(_nested, st.one_of(edges, nested), depths),
    )


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    block=st.one_of(
        blocks(),
        st.builds(
            lambda i, v: {"type": "tool_use", "id": f"h{i}", "name": "n", "input": {"v": v}},
            st.integers(min_value=0),
            _hostile_values(),
        ),
        st.builds(
            lambda i, v: ToolUseBlock.model_construct(id=f"m{i}", name="n", input={"v": v}),
            st.integers(min_value=0),
            _hostile_values(),
        ),
    )
)
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_any_accepted_block_reads_back_equal(
    tmp_path_factory: pytest.TempPathFactory, block: Any
) -> None:
    """Whatever append accepts, every reader gets back equal; what it refuses leaves no trace.
    Blocks come as mappings, as models, and as models built without validation (tuples and
    keys that are not text among their values): the store does not read what it writes back,
    so this property is what holds it (docs/design/format-3.md)."""
    store_path = tmp_path_factory.mktemp("block") / "store.db"
    store = open_store(store_path)
    conv = store.new_conversation()
    kind = block["type"] if isinstance(block, dict) else block.type
    role = "user" if kind == "tool_result" else "assistant"
    message = store.start_message(conv, role)
    before = list(store.raw_events(conv))
    try:
        store.append_block(conv, message, block)
    except InvalidBlock:
        assert list(store.raw_events(conv)) == before
        store.close()
        return
    stored = store.events(conv)[-1]
    fields = block if isinstance(block, dict) else block.model_dump()
    expected = type(stored.block).model_validate(fields)  # type: ignore[union-attr]
    assert stored.block == expected  # type: ignore[union-attr]
    store.close()
    with open_store(store_path) as again:  # decoded from the file, not kept from the append
        assert again.events(conv)[-1].block == expected  # type: ignore[union-attr]
        again.replay(conv, shape="anthropic", vision=True)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=_hostile_values(), constructed=st.booleans())
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_any_accepted_metadata_or_entry_reads_back_equal(
    tmp_path_factory: pytest.TempPathFactory, value: Any, constructed: bool
) -> None:
    """A message's metadata and a runtime entry holding any JSON-ish value: accepted, they
    decode from the file equal; refused, nothing is written."""
    path = tmp_path_factory.mktemp("meta") / "store.db"
    with open_store(path) as store:
        conv = store.new_conversation()
        meta: Any = (
            MessageMeta.model_construct(extra={"v": value})
            if constructed
            else {"extra": {"v": value}}
        )
        before = list(store.raw_events(conv))
        try:
            store.append_message(conv, "user", [{"type": "text", "text": "t"}], meta=meta)
        except InvalidInput:
            assert list(store.raw_events(conv)) == before
        before = list(store.raw_events(conv))
        try:
            store.record_entries(conv, [{"uuid": "e1", "v": value}])
        except InvalidInput:
            assert list(store.raw_events(conv)) == before
        written = store.events(conv)
    with open_store(path) as again:
        assert again.events(conv) == written
