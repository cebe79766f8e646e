"""Every wrong call is an InvalidInput with one line, and writes nothing.

The main test is generated: it walks every public ``Store`` method's signature and calls it
with each argument in turn replaced by values of the wrong type (and values no argument
accepts: a lone surrogate, a negative count), the others valid. Only ``InvalidInput`` may come
out, as one line, and the log must not move. A method or argument added without a valid value
in :data:`VALID` fails the test, so a new one cannot slip past unchecked.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable as CallableABC
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from convstore import InvalidInput, Limits, ReplayOptions, Store, open_store
from convstore.cli import cli
from convstore.convert.history import History, HistoryMessage
from convstore.domain.blocks import TextBlock

TEXT = {"type": "text", "text": "hello"}
LONE_SURROGATE = "\ud800"

WRONG = [None, 12, -1, 1.5, True, b"x", "1", LONE_SURROGATE, [], {}, object(), 10**5000]
"""Candidates for a wrong argument: each is used where the parameter's annotation does not
admit its type; the lone surrogate (no text may hold one) and -1 (no count is negative)
everywhere."""

ALWAYS_WRONG = (LONE_SURROGATE, -1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s.db") as opened:
        yield opened


def _valid(store: Store) -> dict[str, Any]:
    """A valid value for every parameter of every public method; each call with only these
    succeeds."""
    conv = store.new_conversation(title="valid")
    ended = store.append_message(conv, "user", [TEXT])
    open_message = store.append_message(conv, "assistant", [TEXT], leave_open=True)
    live_conv = store.new_conversation()  # a tool round in flight, for live_request
    call = {"type": "tool_use", "id": "call_1", "name": "ls", "input": {}}
    live = store.append_message(live_conv, "assistant", [call])
    result = {"type": "tool_result", "tool_use_id": "call_1", "content": "a.txt"}
    store.append_message(live_conv, "user", [result])
    return {
        "title": "t",
        "conversation_id": None,
        "conversation": conv,
        "role": "user",
        "message": open_message,
        "block": TEXT,
        "blocks": [TEXT],
        "leave_open": False,
        "last": False,
        "reason": "stopped",
        "summary": "so far",
        "through": ended,
        "options": ReplayOptions(),
        "shape": "openai",
        "vision": False,
        "full": False,
        "keep_tool_results": None,
        "max_tokens": 1000,
        "live_message": live,
        "live_request conversation": live_conv,
        "after": 0,
        "limit": 10,
        "page_size": 10,
        "messages": 10,
        "before": None,
        "parent_id": None,
        "source": None,
        "entries": [{"type": "x"}],
        "carried": None,
        "to": None,
        "expected_version": None,
        # Rewinding and deleting entries withdraw messages: on conversations of their own.
        "rewind conversation": store.new_conversation(),
        "delete_entries conversation": store.new_conversation(),
        "erase conversation": store.new_conversation(),
        "at": ended,
        "undo_rewind conversation": (undo := store.new_conversation()),
        "rewind": store.rewind(undo, to=None),
        "history": History(messages=[HistoryMessage("user", (TextBlock(text="hi"),))]),
        "histories": [History(messages=[HistoryMessage("user", (TextBlock(text="hi"),))])],
        "sources": None,
        "again": False,
        "lines": list(store.dump()),
        "meta": {"model": "m", "usage": {"input_tokens": 1}},
        "labels": {"team": "a"},
        "keys": ["team"],
        "started_after": None,
        "started_before": None,
        "active_after": None,
        "active_before": None,
        "idle_since": None,
        "progress": None,
        "list_conversations after": None,  # the store's own dump: load finds nothing more to write
    }


def _public_methods() -> list[str]:
    return [
        name
        for name, _ in inspect.getmembers(Store, inspect.isfunction)
        if not name.startswith("_") and name != "close"
    ]


def _accepted(annotation: object) -> tuple[type, ...]:
    """The runtime types a parameter's annotation admits (an iterable of blocks: a list)."""
    origin = get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in get_args(annotation) for t in _accepted(arg))
    if origin is typing.Literal:
        return tuple({type(arg) for arg in get_args(annotation)})
    if origin is typing.Annotated:
        return _accepted(get_args(annotation)[0])
    if origin is CallableABC:
        return (CallableABC,)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        return (Mapping,)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Iterable):
        return (list, tuple)
    if annotation is None or annotation is type(None):
        return (type(None),)
    if isinstance(annotation, type):
        return (BaseModel,) if issubclass(annotation, BaseModel) else (annotation,)
    msg = f"no rule for the annotation {annotation!r}"
    raise AssertionError(msg)


def _is_wrong(value: object, accepted: tuple[type, ...]) -> bool:
    if any(value is always for always in ALWAYS_WRONG):
        return True
    if isinstance(value, bool):
        return bool not in accepted
    return not isinstance(value, accepted)


def _arguments(name: str, valid: dict[str, Any]) -> dict[str, Any]:
    """The valid arguments of method ``name`` (a value named "METHOD PARAMETER" wins)."""
    parameters = inspect.signature(getattr(Store, name)).parameters
    return {p: valid.get(f"{name} {p}", valid[p]) for p in parameters if p != "self"}


def _call(store: Store, name: str, kwargs: dict[str, Any]) -> None:
    result = getattr(store, name)(**kwargs)
    if isinstance(result, Iterator):
        list(result)


def test_every_public_method_refuses_wrong_arguments_with_invalid_input(store: Store) -> None:
    """Each argument of each public Store method, given a wrongly typed value, gives one
    InvalidInput line and leaves the log unchanged; with valid values every call works."""
    valid = _valid(store)
    checked = 0
    for name in _public_methods():
        method = getattr(Store, name)
        hints = typing.get_type_hints(method)
        parameters = [p for p in inspect.signature(method).parameters.values() if p.name != "self"]
        for parameter in parameters:
            assert parameter.name in valid, f"add a valid value for {name}({parameter.name})"
            accepted = _accepted(hints[parameter.name])
            for value in WRONG:
                if not _is_wrong(value, accepted):
                    continue
                kwargs = _arguments(name, valid) | {parameter.name: value}
                before = store.log_position()
                with pytest.raises(InvalidInput) as caught:
                    _call(store, name, kwargs)
                message = str(caught.value)
                assert "\n" not in message, (name, parameter.name, message)
                assert len(message) < 300, (name, parameter.name, message)
                assert store.log_position() == before, (name, parameter.name, value)
                checked += 1
    assert checked > 150
    for name in _public_methods():  # the valid values really are valid
        _call(store, name, _arguments(name, _valid(store)))


def test_no_whole_number_argument_overflows_the_driver(store: Store) -> None:
    """A count or position past a 64-bit column (erasures(after=2**64), scan(page_size=…),
    list_conversations(limit=…), notifications(…)) is InvalidInput naming the argument, not
    the driver's OverflowError; a count that never reaches a query (tail's messages) may be
    as large as it likes. Nothing is written either way."""
    valid = _valid(store)
    refused = []
    for name in _public_methods():
        method = getattr(Store, name)
        hints = typing.get_type_hints(method)
        for parameter in inspect.signature(method).parameters.values():
            if parameter.name == "self" or int not in _accepted(hints[parameter.name]):
                continue
            kwargs = _arguments(name, valid) | {parameter.name: 2**64}
            before = store.log_position()
            try:
                _call(store, name, kwargs)
            except InvalidInput:
                refused.append(f"{name}({parameter.name})")
            assert store.log_position() == before, (name, parameter.name)
    for expected in ("erasures(after)", "list_conversations(limit)", "scan(page_size)"):
        assert expected in refused
    assert "notifications(after)" in refused
    assert "notifications(limit)" in refused


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda s, c: s.events(12), "is not a conversation id"),
        (lambda s, c: s.replay(None), "is not a conversation id"),
        (
            lambda s, c: s.compact(c, 5, through=s.append_message(c, "user", [TEXT])),
            "summary must be text",
        ),
        (lambda s, c: s.new_conversation(conversation_id=5), "is not a conversation id"),
        (lambda s, c: s.replay(c, keep_tool_results="1"), "keep_tool_results must be"),
        (lambda s, c: s.append_message(c, "user", None), "blocks must be a list"),
        (lambda s, c: s.append_message(c, "user", TEXT), "blocks must be a list"),
        (lambda s, c: s.new_conversation(title=LONE_SURROGATE), "lone surrogate"),
        (lambda s, c: s.replay(c, vision="no"), "vision must be True or False"),
    ],
    ids=[
        "int id",
        "None id",
        "int summary",
        "int new id",
        "str count",
        "None blocks",
        "one block",
        "surrogate title",
        "str flag",
    ],
)
def test_the_reported_wrong_calls_say_what_is_wrong(store: Store, call: Any, fragment: str) -> None:
    """The calls the hardening issue found escaping the family now name the argument."""
    conv = store.new_conversation()
    with pytest.raises(InvalidInput, match=fragment):
        call(store, conv)


def test_a_lone_surrogate_title_or_reason_exits_2_on_the_cli(tmp_path: Path) -> None:
    """A title or reason holding a lone surrogate (an undecodable argv byte) is bad input:
    exit 2 with one line, not exit 1."""
    db = str(tmp_path / "s.db")
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", db, "new", "--title", "bad \udcff title"])
    assert result.exit_code == 2, result.output
    assert "lone surrogate" in result.stderr
    assert len(result.stderr.splitlines()) == 1


# -- item 12: sizes of titles, reasons and summaries -----------------------------------------------


def test_titles_reasons_and_summaries_have_limits(tmp_path: Path) -> None:
    """A summary past the block limit, a title or reason past the note limit, is refused before
    anything is written; at the limit it is accepted."""
    limits = Limits(max_block_bytes=2000, max_note_bytes=100)
    with open_store(tmp_path / "s.db", limits=limits) as store:
        conv = store.new_conversation(title="é" * 50)  # 100 bytes in UTF-8
        message = store.append_message(conv, "user", [TEXT], leave_open=True)
        before = store.log_position()
        with pytest.raises(InvalidInput, match="title is 101 bytes; the limit is 100"):
            store.new_conversation(title="x" * 101)
        with pytest.raises(InvalidInput, match="summary is 2,001 bytes; the limit is 2,000"):
            store.compact(conv, "s" * 2001, through=message)
        with pytest.raises(InvalidInput, match="reason is 102 bytes"):
            store.interrupt_message(conv, message, reason="é" * 51)
        assert store.log_position() == before
        store.compact(conv, "s" * 2000, through=message)
        store.interrupt_message(conv, message, reason="r" * 100)


def test_the_default_limits_refuse_a_summary_past_the_block_limit(tmp_path: Path) -> None:
    """With the default limits a 33 MiB summary (over the 32 MiB block limit) is refused."""
    with open_store(tmp_path / "s.db") as store:
        conv = store.new_conversation()
        message = store.append_message(conv, "user", [TEXT])
        with pytest.raises(InvalidInput, match="the limit is 33,554,432"):
            store.compact(conv, "s" * (33 * 1024 * 1024), through=message)
        with pytest.raises(InvalidInput, match="the limit is 65,536"):
            store.new_conversation(title="t" * 65537)


def test_the_note_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """CONVSTORE_MAX_NOTE_BYTES sets the title and reason limit, checked like the others."""
    monkeypatch.setenv("CONVSTORE_MAX_NOTE_BYTES", "10")
    assert Limits.from_env().max_note_bytes == 10
    monkeypatch.setenv("CONVSTORE_MAX_NOTE_BYTES", "ten")
    with pytest.raises(InvalidInput, match="CONVSTORE_MAX_NOTE_BYTES"):
        Limits.from_env()


def test_open_store_refuses_wrongly_typed_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open_store itself: a location that is neither text nor a path, a create flag that is not
    a bool, limits that are not Limits, a cache budget that is not a whole number of bytes, and
    bytes are InvalidInput; nothing is created."""
    monkeypatch.chdir(tmp_path)
    for kwargs in (
        {"location": 5},
        {"location": b"x.db"},
        {"location": tmp_path / "a.db", "create": "no"},
        {"location": tmp_path / "a.db", "limits": {"max_block_bytes": 1}},
        {"location": tmp_path / "a.db", "replay_cache_bytes": "64 MiB"},
        {"location": tmp_path / "a.db", "replay_cache_bytes": -1},
        {"location": tmp_path / "a.db", "replay_cache_bytes": True},
        {"location": str(tmp_path / "a\x00.db")},
        {"location": str(tmp_path / "\ud800.db")},
    ):
        with pytest.raises(InvalidInput):
            open_store(**kwargs)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
