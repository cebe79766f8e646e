"""Hostile input through the CLI: generated blocks, corruptions of them, oversize payloads and
SQL-shaped strings.

The property, for every input: either ``append`` (or ``add-block``) exits 0 and each stored
block is the input block exactly (after JSON parsing; ``is_error: false`` and an absent
``name`` are the only defaults allowed to appear), or it exits 2 with exactly one stderr line
starting ``error: `` and the ``stored_events`` table is byte for byte what it was.

Generation is deterministic (``derandomize=True``). Inputs that fuzzing once found breaking the
property (overflowing floats, lone surrogates, huge integers, deep nesting, line breaks in
names) are kept below as explicit regression cases.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import struct
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convstore import Store, open_store
from convstore.app.demo import tiny_png
from convstore.cli import cli
from convstore.domain.blocks import BLOCK_CLASSES
from tests.formats import events_of

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NO_LIMITS: dict[str, str | None] = {
    "CONVSTORE_MAX_INPUT_BYTES": None,
    "CONVSTORE_MAX_BLOCK_BYTES": None,
    "CONVSTORE_MAX_IMAGE_BYTES": None,
    "CONVSTORE_DEBUG": None,
    "CONVSTORE_DB": None,
    "CONVSTORE_AUDIT_DB": None,
}
KINDS = ("text", "reasoning", "tool_use", "tool_result", "image")
SQL_PAYLOADS = (
    "'); DROP TABLE stored_events; --",
    "x' OR 1=1 --",
    '" OR ""="',
    "1; DELETE FROM blocks WHERE 1=1",
    "Robert'); DROP TABLE blocks;--",
    "' UNION SELECT * FROM sqlite_master --",
)

# -- the CLI and the store ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_limits_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """No size limit comes from the environment (the rest is isolated by tests/conftest.py)."""
    for name in NO_LIMITS:
        monkeypatch.delenv(name, raising=False)


def run(db: Path, args: list[str], stdin: bytes | None = None, **env: str) -> Result:
    """The CLI in-process on ``db``, with only the given size limits set."""
    environment = {**NO_LIMITS, **env}
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=stdin, env=environment)


def dump(db: Path) -> list[Any]:
    """Every stored event row, in insertion order: the store's whole content."""
    with closing(sqlite3.connect(db)) as connection:
        return connection.execute("SELECT rowid, * FROM stored_events ORDER BY rowid").fetchall()


def canonical(value: Any) -> str:
    """JSON that tells 1 from 1.0 and True, object key order ignored."""
    return json.dumps(value, sort_keys=True)


def as_stored(stored: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A stored block without the optional fields the input left out, each of which must
    hold its declared default (``is_error``, ``name``, a reasoning block's ``signature`` …)."""
    block = dict(stored)
    kind = next(c for c in BLOCK_CLASSES if c.model_fields["type"].default == block["type"])
    for name, field in kind.model_fields.items():
        if name not in given and name != "type" and not field.is_required():
            assert block.get(name) == field.default, (name, block)
            block.pop(name, None)
    content, given_content = block.get("content"), given.get("content")
    if isinstance(content, list) and isinstance(given_content, list):
        block["content"] = [
            as_stored(part, given_part) if isinstance(given_part, dict) else part
            for part, given_part in zip(content, given_content, strict=True)
        ]
    return block


def stored_blocks(store: Store, conversation: str, message: str) -> list[dict[str, Any]]:
    """The blocks of ``message`` exactly as recorded in the log, in order."""
    events = [json.loads(raw) for raw in store.raw_events(conversation)]
    return [
        e["block"]
        for e in events
        if e["type"] in {"block_appended", "block_recorded"} and e["message_id"] == message
    ]


def assert_round_trip(stored: list[dict[str, Any]], given: list[Any]) -> None:
    """The stored blocks are the given ones: same values and types, tool input key order too."""
    assert len(stored) == len(given), (stored, given)
    for got, want in zip(stored, given, strict=True):
        assert canonical(as_stored(got, want)) == canonical(want), (got, want)
        if want.get("type") == "tool_use":
            assert json.dumps(got["input"]) == json.dumps(want["input"])


def assert_one_line(stderr: str) -> None:
    """One ``error:`` line: no newline or carriage return before the final newline."""
    assert stderr.startswith("error: "), stderr
    assert stderr.endswith("\n"), stderr
    assert "\n" not in stderr[:-1], stderr
    assert "\r" not in stderr, stderr


def assert_refused(result: Result, before: list[Any], after: list[Any]) -> None:
    """Exit 2, nothing on stdout, one ``error:`` line, and not one stored row changed."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    assert_one_line(result.stderr)
    assert after == before


class Target:
    """A store with one conversation, and an open message per role for ``add-block``."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.store = open_store(db)
        self.conversation = str(self.store.new_conversation(title="fuzz"))
        self.open = {
            role: str(self.store.start_message(self.conversation, role))
            for role in ("user", "assistant")
        }

    def close(self) -> None:
        self.store.close()

    def append(
        self,
        role: str,
        payload: bytes,
        env: Mapping[str, str] | None = None,
        *,
        fresh: bool = False,
    ) -> int:
        """``append`` one message; checks the property and returns the exit status.

        With ``fresh`` the message goes to a new conversation, so generated tool call ids
        never collide with earlier examples' ones.
        """
        if fresh:
            self.conversation = str(self.store.new_conversation())
        conversation = self.conversation
        before = dump(self.db)
        result = run(self.db, ["append", conversation, "--role", role], payload, **(env or {}))
        if result.exit_code == 0:
            message = str(UUID(result.stdout.strip()))
            assert result.stderr == ""
            assert_round_trip(stored_blocks(self.store, conversation, message), json.loads(payload))
            [recorded] = [
                m for m in self.store.messages(conversation) if str(m.message_id) == message
            ]
            assert (recorded.role, recorded.status) == (role, "ended")
        else:
            assert_refused(result, before, dump(self.db))
        return result.exit_code

    def add_block(self, role: str, payload: bytes) -> int:
        """``add-block`` to the open message of ``role``; checks the property."""
        message = self.open[role]
        before = dump(self.db)
        result = run(self.db, ["add-block", self.conversation, message], payload)
        if result.exit_code == 0:
            assert (result.stdout, result.stderr) == ("", "")
            last = stored_blocks(self.store, self.conversation, message)[-1:]
            assert_round_trip(last, [json.loads(payload)])
        else:
            assert_refused(result, before, dump(self.db))
        return result.exit_code


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    made = Target(tmp_path / "fuzz.db")
    yield made
    made.close()


# -- valid blocks ----------------------------------------------------------------------------------

TEXTS = st.one_of(
    st.text(max_size=24),
    st.sampled_from(
        [
            "",
            " \n\t",
            "日本語のテキスト",
            "emoji 🚀 and a ZWJ 👩\u200d👧",
            "nul \x00 and controls \x01\x1f\x7f",
            "line\u2028separators\u2029",
            *SQL_PAYLOADS,
        ]
    ),
)
KEYS = st.text(max_size=8)
BIG_NUMBERS = st.sampled_from(
    [10**400, -(10**400), 2**63, -(2**63) - 1, 2**64, 1e308, -0.0, 5e-324]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    BIG_NUMBERS,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXTS,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=10,
)
IDS = st.from_regex(r"call_[a-z0-9]{1,12}", fullmatch=True) | st.text(min_size=1, max_size=8)
NAMES = st.from_regex(r"[a-z_]{1,12}", fullmatch=True) | st.text(min_size=1, max_size=8)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def gif(width: int, height: int) -> bytes:
    """The start of a GIF: signature and logical screen (all that convstore reads)."""
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00\x00\x00;"


IMAGES = st.one_of(
    st.builds(
        lambda w, h, c: {
            "type": "image",
            "media_type": "image/png",
            "data": _b64(tiny_png(w, h, c)),
        },
        st.integers(1, 6),
        st.integers(1, 6),
        st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)),
    ),
    st.builds(
        lambda w, h: {"type": "image", "media_type": "image/gif", "data": _b64(gif(w, h))},
        st.integers(1, 500),
        st.integers(1, 500),
    ),
)
TEXT_PARTS = st.builds(lambda t: {"type": "text", "text": t}, TEXTS)


def prose_blocks(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda t: {"type": kind, "text": t}, TEXTS)


TOOL_USES = st.fixed_dictionaries(
    {
        "type": st.just("tool_use"),
        "id": IDS,
        "name": NAMES,
        "input": st.dictionaries(KEYS, JSON_VALUES, max_size=4),
    }
)
TOOL_RESULTS = st.fixed_dictionaries(
    {
        "type": st.just("tool_result"),
        "tool_use_id": IDS,
        "content": TEXTS | st.lists(TEXT_PARTS | IMAGES, max_size=3),
    },
    optional={"is_error": st.booleans(), "name": NAMES},
)
BLOCKS_BY_ROLE: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "user": st.one_of(prose_blocks("text"), IMAGES, TOOL_RESULTS),
    "assistant": st.one_of(prose_blocks("text"), prose_blocks("reasoning"), TOOL_USES, IMAGES),
    "system": st.one_of(prose_blocks("text"), prose_blocks("reasoning"), IMAGES),
}
ANY_BLOCK = st.one_of(*BLOCKS_BY_ROLE.values(), TOOL_USES, TOOL_RESULTS)


@st.composite
def role_and_blocks(draw: st.DrawFn, max_blocks: int = 4) -> tuple[str, list[dict[str, Any]]]:
    """A role and blocks that mostly suit it (a tool call in a user message now and then)."""
    role = draw(st.sampled_from(sorted(BLOCKS_BY_ROLE)))
    suited = BLOCKS_BY_ROLE[role]
    blocks = draw(st.lists(st.one_of(suited, suited, suited, ANY_BLOCK), max_size=max_blocks))
    return role, blocks


# -- corruptions ---------------------------------------------------------------------------------

WRONG_VALUES: tuple[Any, ...] = (0, 1.5, True, None, [], {}, "x", [1, "a"], {"k": "v"})
BAD_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xc0\xaf")
CONTROL_BYTES = tuple(bytes([c]) for c in (*range(0x20), 0x7F))
Mutation = Callable[[st.DrawFn, list[dict[str, Any]]], Any]


def _encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def _pick_block(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    if not blocks:
        blocks.append({"type": "text", "text": "hi"})
    return blocks[draw(st.integers(0, len(blocks) - 1))]


def _valid(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    indent = draw(st.sampled_from([None, 2]))
    ascii_only = draw(st.booleans())
    return json.dumps(blocks, indent=indent, ensure_ascii=ascii_only).encode()


def _truncated(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    raw = _encode(blocks)
    return raw[: draw(st.integers(0, len(raw) - 1))]


def _wrong_type(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    block = _pick_block(draw, blocks)
    field = draw(st.sampled_from(sorted(block)))
    block[field] = draw(
        st.sampled_from([v for v in WRONG_VALUES if type(v) is not type(block[field])])
    )
    return _encode(blocks)


def _extra_field(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    block = _pick_block(draw, blocks)
    names = st.text(min_size=1, max_size=10)
    name = draw(names.filter(lambda k: k not in block))
    block[name] = draw(JSON_VALUES)
    return _encode(blocks)


def _missing_field(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    block = _pick_block(draw, blocks)
    del block[draw(st.sampled_from(sorted(block)))]
    return _encode(blocks)


def _unknown_kind(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    block = _pick_block(draw, blocks)
    block["type"] = draw(st.text(max_size=10).filter(lambda k: k not in KINDS) | st.just("Text"))
    return _encode(blocks)


def _invalid_utf8(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    raw = _encode(blocks)
    at = draw(st.integers(0, len(raw)))
    return raw[:at] + draw(st.sampled_from(BAD_UTF8)) + raw[at:]


def _raw_control(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    raw = json.dumps(blocks, ensure_ascii=False).encode()
    at = draw(st.integers(0, len(raw)))
    return raw[:at] + draw(st.sampled_from(CONTROL_BYTES)) + raw[at:]


def _big_number(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    call = {"type": "tool_use", "id": draw(IDS), "name": "n", "input": {"v": draw(BIG_NUMBERS)}}
    blocks.append(call)
    return _encode(blocks)


def _bad_image(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    png = _b64(tiny_png())
    broken: list[dict[str, Any]] = [
        {"media_type": "image/png", "data": "%%% not base64 %%%"},
        {"media_type": "image/png", "data": png[:-1]},  # broken padding
        {"media_type": "image/png", "data": png[:40] + "\n" + png[40:]},
        {"media_type": "image/png", "data": ""},
        {"media_type": "image/png", "data": _b64(b"plain bytes, no image")},
        {"media_type": "image/gif", "data": png},  # mismatched type
        {"media_type": "image/jpeg", "data": _b64(gif(2, 2))},
        {"media_type": "image/bmp", "data": png},
        {"media_type": "IMAGE/PNG", "data": png},
        {"media_type": "image/png", "data": 12345},
        {"media_type": "image/png"},
    ]
    image = draw(st.sampled_from(broken))
    blocks.insert(draw(st.integers(0, len(blocks))), {"type": "image", **image})
    return _encode(blocks)


def _not_an_array(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    return _encode(draw(st.sampled_from([{"type": "text", "text": "x"}, "text", 3, None, True])))


def _duplicate_key(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    return draw(
        st.sampled_from(
            [
                b'[{"type":"text","text":"a","text":"b"}]',
                b'[{"type":"text","type":"text","text":"a"}]',
                b'[{"type":"tool_use","id":"d","name":"n","input":{"k":1,"k":2}}]',
            ]
        )
    )


def _json_constant(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    constant = draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity"]))
    return b'[{"type":"tool_use","id":"k","name":"n","input":{"v":' + constant + b"}}]"


def _deep_nesting(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    depth = draw(st.sampled_from([1, 10, 99, 100, 101, 198, 256, 400, 1200, 5000]))
    nested = b"[" * depth + b"]" * depth
    return b'[{"type":"tool_use","id":"deep","name":"n","input":{"v":' + nested + b"}}]"


def _framing(draw: st.DrawFn, blocks: list[dict[str, Any]]) -> bytes:
    valid = _encode(blocks)
    return draw(
        st.sampled_from([b"", b"   \n", b"\xef\xbb\xbf" + valid, valid + b" trailing", valid * 2])
    )


MUTATIONS: dict[str, Mutation] = {
    "valid": _valid,
    "truncated": _truncated,
    "wrong type": _wrong_type,
    "extra field": _extra_field,
    "missing field": _missing_field,
    "unknown kind": _unknown_kind,
    "invalid utf-8": _invalid_utf8,
    "raw control character": _raw_control,
    "big number": _big_number,
    "bad image": _bad_image,
    "not an array": _not_an_array,
    "duplicate key": _duplicate_key,
    "JSON constant": _json_constant,
    "deep nesting": _deep_nesting,
    "framing": _framing,
}


TOOL_CALL_MUTATIONS = frozenset({"big number", "JSON constant", "deep nesting"})
"""Mutations that add a tool call, so they go to an assistant message."""


@st.composite
def cli_inputs(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """A role, the mutation applied, and the bytes ``append`` reads on stdin."""
    role, blocks = draw(role_and_blocks())
    # Some kinds are drawn twice as often: they reach the most validation code.
    name = draw(st.sampled_from([*MUTATIONS, "valid", "bad image", "big number", "wrong type"]))
    if name in TOOL_CALL_MUTATIONS:
        role = "assistant"
        blocks = [b for b in blocks if b["type"] != "tool_result"]
    payload: bytes = MUTATIONS[name](draw, blocks)
    return role, name, payload


# -- the properties --------------------------------------------------------------------------------


def test_append_either_round_trips_or_refuses_cleanly(target: Target) -> None:
    """200 generated and corrupted inputs: each is stored exactly or refused with exit 2."""
    outcomes: Counter[tuple[str, int]] = Counter()

    @settings(FUZZ, max_examples=200)
    @given(cli_inputs())
    def check(case: tuple[str, str, bytes]) -> None:
        role, mutation, payload = case
        outcomes[mutation, target.append(role, payload, fresh=True)] += 1

    check()
    accepted = sum(n for (_, code), n in outcomes.items() if code == 0)
    refused = sum(n for (_, code), n in outcomes.items() if code == 2)
    assert accepted >= 20, outcomes  # the property was tried on both sides
    assert refused >= 60, outcomes


@st.composite
def add_block_inputs(draw: st.DrawFn) -> tuple[str, bytes]:
    """A role and one block object (valid or corrupted) for ``add-block``."""
    role = draw(st.sampled_from(["user", "assistant"]))
    block = draw(BLOCKS_BY_ROLE[role] | ANY_BLOCK)
    payload: bytes = MUTATIONS[draw(st.sampled_from(list(MUTATIONS)))](draw, [block])
    # add-block takes one object: unwrap the array the mutations work on when it is one.
    # (Decode strictly first: json.loads on bytes would let an encoded surrogate through.)
    try:
        parsed = json.loads(payload.decode("utf-8"))
    except ValueError:
        return role, payload
    if isinstance(parsed, list) and len(parsed) == 1:
        return role, _encode(parsed[0])
    return role, payload


def test_add_block_either_round_trips_or_refuses_cleanly(target: Target) -> None:
    """120 single blocks, valid or corrupted, streamed into open messages with add-block."""
    outcomes: Counter[int] = Counter()

    @settings(FUZZ, max_examples=120)
    @given(add_block_inputs())
    def check(case: tuple[str, bytes]) -> None:
        role, payload = case
        outcomes[target.add_block(role, payload)] += 1

    check()
    assert outcomes[0] >= 10, outcomes
    assert outcomes[2] >= 30, outcomes


# -- size limits -----------------------------------------------------------------------------------

SMALL_LIMITS = {
    "CONVSTORE_MAX_INPUT_BYTES": "3000",
    "CONVSTORE_MAX_BLOCK_BYTES": "1500",
    "CONVSTORE_MAX_IMAGE_BYTES": "300",
}


def padded_png(size: int) -> bytes:
    """A PNG file of exactly ``size`` bytes (a valid image followed by zero bytes)."""
    png = tiny_png(1, 1)
    assert size >= len(png)
    return png + b"\0" * (size - len(png))


@st.composite
def sized_inputs(draw: st.DrawFn) -> tuple[str, bytes, bool]:
    """A text or image message sized around the small limits, and whether it is clearly over."""
    if draw(st.booleans()):
        length = draw(st.integers(0, 4000))
        block: dict[str, Any] = {"type": "text", "text": "a" * length}
        over = length + 24 > 1500  # {"type":"text","text":""} is 24 bytes
    else:
        size = draw(st.integers(len(tiny_png(1, 1)), 900))
        block = {"type": "image", "media_type": "image/png", "data": _b64(padded_png(size))}
        over = size > 300
    payload = _encode([block])
    return "user", payload, over or len(payload) > 3000


def test_small_limits_refuse_what_is_over_and_keep_the_rest(target: Target) -> None:
    """With small CONVSTORE_MAX_* limits, anything over one is refused (exit 2), unchanged."""

    @settings(FUZZ, max_examples=60)
    @given(sized_inputs())
    def check(case: tuple[str, bytes, bool]) -> None:
        role, payload, over = case
        code = target.append(role, payload, SMALL_LIMITS)
        if over:
            assert code == 2

    check()


@pytest.mark.parametrize(
    ("variable", "limit", "payload"),
    [
        pytest.param(
            "CONVSTORE_MAX_INPUT_BYTES", "4096", b" " * (5 * 1024 * 1024) + b"[]", id="input 5 MB"
        ),
        pytest.param(
            "CONVSTORE_MAX_BLOCK_BYTES",
            "2048",
            _encode([{"type": "text", "text": "z" * (2 * 1024 * 1024)}]),
            id="text block 2 MB",
        ),
        pytest.param(
            "CONVSTORE_MAX_IMAGE_BYTES",
            "1024",
            _encode(
                [{"type": "image", "media_type": "image/png", "data": _b64(padded_png(3 << 20))}]
            ),
            id="image 3 MB",
        ),
        pytest.param(
            "CONVSTORE_MAX_BLOCK_BYTES",
            "2048",
            _encode(
                [{"type": "tool_use", "id": "big", "name": "n", "input": {"k": ["v" * 99] * 30000}}]
            ),
            id="tool input 3 MB",
        ),
    ],
)
def test_enormous_payloads_over_a_small_limit_are_refused(
    target: Target, variable: str, limit: str, payload: bytes
) -> None:
    """A payload megabytes over a small limit is refused in one line naming the limit."""
    before = dump(target.db)
    result = run(
        target.db, ["append", target.conversation, "-r", "assistant"], payload, **{variable: limit}
    )
    assert_refused(result, before, dump(target.db))
    assert "limit" in result.stderr or variable in result.stderr, result.stderr


def test_limits_are_exact_at_the_boundary(target: Target) -> None:
    """Input and block sizes exactly at their limit are accepted; one byte more is refused."""
    block_limit = 1500
    text = "a" * (block_limit - len('{"type":"text","text":""}'))
    at = _encode([{"type": "text", "text": text}])
    assert target.append("user", at, {"CONVSTORE_MAX_BLOCK_BYTES": str(block_limit)}) == 0
    over = _encode([{"type": "text", "text": text + "a"}])
    assert target.append("user", over, {"CONVSTORE_MAX_BLOCK_BYTES": str(block_limit)}) == 2
    payload = _encode([{"type": "text", "text": "b" * 100}])
    exact = {"CONVSTORE_MAX_INPUT_BYTES": str(len(payload))}
    assert target.append("user", payload, exact) == 0
    assert target.append("user", payload, {"CONVSTORE_MAX_INPUT_BYTES": str(len(payload) - 1)}) == 2
    # An image whose base64 has no padding is accepted at exactly its limit.
    size = next(n for n in range(len(tiny_png(1, 1)), 200) if n % 3 == 0)
    image = _encode([{"type": "image", "media_type": "image/png", "data": _b64(padded_png(size))}])
    assert target.append("user", image, {"CONVSTORE_MAX_IMAGE_BYTES": str(size)}) == 0
    assert target.append("user", image, {"CONVSTORE_MAX_IMAGE_BYTES": str(size - 1)}) == 2


@pytest.mark.parametrize("padding", [1, 2])
def test_an_image_of_exactly_the_limit_is_accepted(target: Target, padding: int) -> None:
    """An image whose decoded size equals CONVSTORE_MAX_IMAGE_BYTES is accepted."""
    size = next(n for n in range(len(tiny_png(1, 1)), 200) if n % 3 == 3 - padding)
    data = _b64(padded_png(size))
    assert data.endswith("=" * padding)
    image = _encode([{"type": "image", "media_type": "image/png", "data": data}])
    assert target.append("user", image, {"CONVSTORE_MAX_IMAGE_BYTES": str(size)}) == 0


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", " ", "10kb"])
@pytest.mark.parametrize("variable", ["CONVSTORE_MAX_BLOCK_BYTES", "CONVSTORE_MAX_INPUT_BYTES"])
def test_a_bad_limit_setting_is_bad_input(target: Target, variable: str, value: str) -> None:
    """A limit variable that is not a positive whole number is refused in one line (exit 2)."""
    before = dump(target.db)
    payload = b'[{"type":"text","text":"x"}]'
    result = run(
        target.db, ["append", target.conversation, "-r", "user"], payload, **{variable: value}
    )
    assert_refused(result, before, dump(target.db))
    assert variable in result.stderr


def test_a_superscript_digit_limit_setting_is_bad_input(target: Target) -> None:
    """CONVSTORE_MAX_BLOCK_BYTES=² is refused as bad input like any other non-number."""
    before = dump(target.db)
    payload = b'[{"type":"text","text":"x"}]'
    env = {"CONVSTORE_MAX_BLOCK_BYTES": "\u00b2"}
    result = run(target.db, ["append", target.conversation, "-r", "user"], payload, **env)
    assert_refused(result, before, dump(target.db))


# -- inputs that once broke the property (regression cases, each a minimal reproducer) --------


KNOWN_BAD: list[Any] = [
    pytest.param(
        "assistant",
        b'[{"type":"tool_use","id":"a","name":"n","input":{"x":1e999}}]',
        id="1e999 stored as null",
    ),
    pytest.param(
        "user",
        b'[{"type":"text","text":"\\ud800"}]',
        id="lone surrogate in text",
    ),
    pytest.param(
        "assistant",
        b'[{"type":"tool_use","id":"s","name":"n","input":{"\\udc80":1}}]',
        id="lone surrogate in a tool input key",
    ),
    pytest.param(
        "assistant",
        b'[{"type":"tool_use","id":"i","name":"n","input":{"x":1' + b"0" * 5000 + b"}}]",
        id="5001-digit integer",
    ),
]


KNOWN_BAD += [
    pytest.param(
        "user",
        b'[{"type":"text","text":"","\\n":1}]',
        id="line break in an unknown field name",
    ),
]


@pytest.mark.parametrize(("role", "payload"), KNOWN_BAD)
def test_known_bad_inputs(target: Target, role: str, payload: bytes) -> None:
    """Inputs fuzzing found breaking the property hold it now: accepted exactly or refused."""
    target.append(role, payload)


def _nested_call(call_id: str, depth: int) -> bytes:
    nested = b"[" * depth + b"]" * depth
    return (
        b'[{"type":"tool_use","id":"'
        + call_id.encode()
        + b'","name":"n","input":{"v":'
        + (nested + b"}}]")
    )


def test_deep_nesting_round_trips_or_is_refused(target: Target) -> None:
    """A tool input nested 98 deep is kept exactly; 102, 256 and 1200 deep are refused."""
    assert target.append("assistant", _nested_call("d98", 98)) == 0
    assert target.append("assistant", _nested_call("d102", 102)) == 2
    assert target.append("assistant", _nested_call("d256", 256)) == 2
    assert target.append("assistant", _nested_call("d1200", 1200)) == 2
    assert target.store.replay(target.conversation)["messages"]


def test_an_accepted_deep_tool_input_leaves_the_conversation_readable(target: Target) -> None:
    """After a 200-deep tool input is appended, the conversation still replays and takes more."""
    result = run(
        target.db, ["append", target.conversation, "-r", "assistant"], _nested_call("d", 200)
    )
    assert result.exit_code in (0, 2), result.stderr
    target.store.replay(target.conversation)
    again = run(
        target.db, ["append", target.conversation, "-r", "user"], b'[{"type":"text","text":"more"}]'
    )
    assert again.exit_code == 0, again.stderr


def test_a_tool_input_nested_254_deep_is_refused_as_bad_input(target: Target) -> None:
    """A 254-deep tool input is refused with exit 2 and nothing written."""
    assert target.append("assistant", _nested_call("d254", 254)) == 2


# -- SQL-shaped strings and the audit read model ---------------------------------------------------


def _rows(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    parsed: list[dict[str, Any]] = json.loads(result.stdout)
    return parsed


def test_sql_shaped_strings_are_stored_searched_and_filtered_literally(tmp_path: Path) -> None:
    """Titles, text, tool names and inputs holding SQL come back literally; filters stay exact."""
    db = tmp_path / "sql.db"
    conversations = []
    for payload in SQL_PAYLOADS:
        created = run(db, ["new", "--title", payload])
        assert created.exit_code == 0, created.stderr
        conv = created.stdout.strip()
        conversations.append(conv)
        call = {"type": "tool_use", "id": payload, "name": payload, "input": {payload: payload}}
        blocks = [{"type": "text", "text": f"note {payload}"}, call]
        assert run(db, ["append", conv, "-r", "assistant"], _encode(blocks)).exit_code == 0
        answer = {"type": "tool_result", "tool_use_id": payload, "content": payload}
        assert run(db, ["append", conv, "-r", "user"], _encode([answer])).exit_code == 0
    listed = run(db, ["list", "--json", "--limit", "1000"])
    assert listed.exit_code == 0, listed.stderr
    titles = {c["id"]: c["title"] for c in json.loads(listed.stdout)["conversations"]}
    assert [titles[c] for c in conversations] == list(SQL_PAYLOADS)
    for payload, conv in zip(SQL_PAYLOADS, conversations, strict=True):
        # The listing's title filter is a value too: each payload finds its own conversation.
        found = run(db, ["list", "--json", "--limit", "1000", "--title", payload])
        assert conv in {c["id"] for c in json.loads(found.stdout)["conversations"]}
    for payload, conv in zip(SQL_PAYLOADS, conversations, strict=True):
        # Exactly the one call of that name: the filter is a value, not SQL.
        [call] = _rows(run(db, ["audit", "tools", "--name", payload, "--json"]))
        assert (call["name"], call["call_id"], call["conversation_id"]) == (payload, payload, conv)
        assert call["input"] == json.dumps({payload: payload}, separators=(",", ":"))
        assert call["outcome"] == "ok"
        only = _rows(run(db, ["audit", "tools", "--conversation", conv, "--json"]))
        assert [r["name"] for r in only] == [payload]
        # The log keeps every string as given.
        log = run(db, ["log", conv])
        events = [json.loads(line) for line in log.stdout.splitlines()]
        assert events[0]["title"] == payload
        logged = [e["block"] for e in events if "block" in e]
        assert logged[0]["text"] == f"note {payload}"
        assert logged[1]["input"] == {payload: payload}
    for injected in ("nothing' OR '1'='1", "x' OR 1=1 --x", "%", "_", "*"):
        assert _rows(run(db, ["audit", "tools", "--name", injected, "--json"])) == []
        assert _rows(run(db, ["audit", "tools", "--conversation", injected, "--json"])) == []
    hits = _rows(run(db, ["audit", "search", "DROP TABLE stored_events", "--json"]))
    assert hits
    assert all("DROP" in h["snippet"] for h in hits)
    hits = _rows(run(db, ["audit", "search", "Robert'); DROP TABLE blocks;--", "--json"]))
    assert {h["kind"] for h in hits} >= {"text"}
    for text in ('" OR "', "NEAR(", "*", "--", "'", "^", ""):
        result = run(db, ["audit", "search", "--json", "--", text])
        assert result.exit_code == 0, (text, result.stderr)
        json.loads(result.stdout)
    raw = run(db, ["audit", "search", "--raw", 'AND OR "'])  # a malformed FTS query
    assert raw.exit_code == 2
    assert len(raw.stderr.splitlines()) == 1
    # Every table survived every payload: each conversation's start and its two messages.
    with open_store(db) as store:
        each = 1 + events_of(store, 2) + events_of(store, 1)
    assert len(dump(db)) == len(SQL_PAYLOADS) * each
    audit = db.with_name("sql.audit.db")
    with closing(sqlite3.connect(audit)) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"blocks", "tool_calls", "conversations", "messages"} <= tables


@pytest.mark.parametrize(
    "query",
    [
        "DELETE FROM blocks",
        "UPDATE tool_calls SET outcome = 'ok'",
        "INSERT INTO conversations (id) VALUES ('x')",
        "DROP TABLE blocks",
        "CREATE TABLE evil (x)",
        "ATTACH DATABASE '{attached}' AS evil",
        "SELECT load_extension('{attached}')",
        "VACUUM INTO '{attached}'",
        "PRAGMA writable_schema = 1",
        "SELECT 1; DELETE FROM blocks",
    ],
)
def test_audit_sql_cannot_write_attach_or_load(tmp_path: Path, query: str) -> None:
    """audit sql refuses writes, ATTACH, VACUUM INTO and extensions; nothing changes."""
    db = tmp_path / "ro.db"
    conv = run(db, ["new"]).stdout.strip()
    assert run(db, ["append", conv, "-r", "user"], b'[{"type":"text","text":"x"}]').exit_code == 0
    assert run(db, ["audit", "stats"]).exit_code == 0
    audit = db.with_name("ro.audit.db")
    before = audit.read_bytes()
    attached = tmp_path / "attached.db"
    result = run(db, ["audit", "--stale", "sql", query.format(attached=attached)])
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("error: audit sql: ")
    assert audit.read_bytes() == before
    assert not attached.exists()


def test_a_live_round_error_naming_an_odd_call_id_is_one_line(tmp_path: Path) -> None:
    """replay --live refusing a result for an unknown call id says so in one line."""
    db = tmp_path / "live.db"
    conv = run(db, ["new"]).stdout.strip()
    call = _encode([{"type": "tool_use", "id": "c1", "name": "ls", "input": {}}])
    turn = run(db, ["append", conv, "-r", "assistant"], call).stdout.strip()
    results = [
        {"type": "tool_result", "tool_use_id": "c1", "content": "ok"},
        {"type": "tool_result", "tool_use_id": "evil\nid", "content": "x"},
    ]
    assert run(db, ["append", conv, "-r", "user"], _encode(results)).exit_code == 0
    result = run(db, ["replay", conv, "--live", turn])
    assert result.exit_code == 2
    assert_one_line(result.stderr)
