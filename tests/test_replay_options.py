"""One ReplayOptions value for every replay-shaped call, with the old keywords as a shorthand.

``replay``, ``live_request``, ``pressure`` and ``fit_tool_results`` (on Store and AsyncStore,
and the CLI's ``--shape``/``--vision``/``--full``/``--keep-tool-results``) take one
:class:`convstore.ReplayOptions`; a keyword that is given replaces its field.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
from dataclasses import FrozenInstanceError, replace
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner

from convstore import InvalidInput, ReplayOptions, Store, open_async_store, open_store
from convstore.app.demo import tiny_png
from convstore.cli import cli
from convstore.engine.plan import SHAPES
from convstore.engine.plan import replay as replay_events

PNG = base64.b64encode(tiny_png(64, 48)).decode()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "options.db")


def _history(store: Store) -> tuple[UUID, UUID]:
    """A compacted conversation with an image and three tool results, then a live round."""
    conv = store.new_conversation()
    first = store.append_message(conv, "user", [{"type": "text", "text": "Look at this."}])
    store.compact(conv, "The user showed nothing yet.", through=first)
    image = {"type": "image", "media_type": "image/png", "data": PNG}
    store.append_message(conv, "user", [{"type": "text", "text": "And this."}, image])
    for n in range(3):
        call = {"type": "tool_use", "id": f"c{n}", "name": "cat", "input": {"n": n}}
        store.append_message(conv, "assistant", [call])
        result = {"type": "tool_result", "tool_use_id": f"c{n}", "content": f"out{n} " * 50}
        store.append_message(conv, "user", [result])
    call = {"type": "tool_use", "id": "live", "name": "ls", "input": {}}
    live = store.append_message(conv, "assistant", [call])
    store.append_message(
        conv, "user", [{"type": "tool_result", "tool_use_id": "live", "content": "a.txt"}]
    )
    return conv, live


ALL_OPTIONS = [
    ReplayOptions(shape=shape, vision=vision, full=full, keep_tool_results=keep)
    for shape, vision, full, keep in itertools.product(
        SHAPES, (False, True), (False, True), (None, 0, 2)
    )
]


def _keywords(options: ReplayOptions) -> dict[str, Any]:
    return {
        "shape": options.shape,
        "vision": options.vision,
        "full": options.full,
        "keep_tool_results": options.keep_tool_results,
    }


def test_options_and_the_keywords_give_the_same_answers(store: Store) -> None:
    """Every method answers alike for one ReplayOptions and for its fields as keywords, and
    the options really change the answer (so the comparison is not vacuous)."""
    conv, live = _history(store)
    replays = set()
    for options in ALL_OPTIONS:
        keywords = _keywords(options)
        replayed = store.replay(conv, options=options)
        assert replayed == store.replay(conv, **keywords)
        assert replayed == replay_events(store.events(conv), options=options)
        replays.add(json.dumps(replayed, sort_keys=True))
        assert store.pressure(conv, options=options) == store.pressure(conv, **keywords)
        assert store.live_request(conv, live, options=options) == store.live_request(
            conv, live, **keywords
        )
        unkept = replace(options, keep_tool_results=None)
        del keywords["keep_tool_results"]
        assert store.fit_tool_results(conv, 300, options=unkept) == store.fit_tool_results(
            conv, 300, **keywords
        )
    assert len(replays) == len(ALL_OPTIONS)


def test_a_keyword_given_replaces_its_field_of_the_options(store: Store) -> None:
    """The keywords are a shorthand over ``options``: one given wins over its field, one left
    out (``None``) keeps the options' value."""
    conv, _ = _history(store)
    base = ReplayOptions(shape="anthropic", vision=True, keep_tool_results=0)
    assert store.replay(conv, options=base, keep_tool_results=2) == store.replay(
        conv, options=replace(base, keep_tool_results=2)
    )
    assert store.replay(conv, options=base, shape="openai") == store.replay(
        conv, shape="openai", vision=True, keep_tool_results=0
    )
    assert store.replay(conv, options=base, vision=None) == store.replay(conv, options=base)
    assert store.replay(conv) == store.replay(conv, options=ReplayOptions())


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"shape": "gemini"}, "unknown shape 'gemini'"),
        ({"vision": "no"}, "vision must be True or False"),
        ({"full": 1}, "full must be True or False"),
        ({"keep_tool_results": -1}, "keep_tool_results must be 0 or more"),
        ({"keep_tool_results": "3"}, "keep_tool_results must be a whole number"),
    ],
)
def test_options_are_checked_when_made(fields: dict[str, Any], fragment: str) -> None:
    """A wrong field is refused as the value is made (InvalidInput naming it), and again when
    an override would put it in."""
    with pytest.raises(InvalidInput, match=fragment):
        ReplayOptions(**fields)
    with pytest.raises(InvalidInput, match=fragment):
        replace(ReplayOptions(), **fields)


def test_options_are_a_frozen_value() -> None:
    """Equal options are equal and hash alike; none can be changed in place."""
    options = ReplayOptions(vision=True)
    assert options == ReplayOptions(vision=True) != ReplayOptions()
    assert len({options, ReplayOptions(vision=True)}) == 1
    with pytest.raises(FrozenInstanceError):
        options.vision = False  # type: ignore[misc]


def test_options_of_another_type_are_refused(store: Store) -> None:
    """``options`` must be a ReplayOptions (a dict of its fields is not one)."""
    conv, _ = _history(store)
    with pytest.raises(InvalidInput, match="options must be a ReplayOptions, not a dict"):
        store.replay(conv, options={"vision": True})  # type: ignore[arg-type]


def test_fit_tool_results_refuses_options_that_already_keep(store: Store) -> None:
    """fit_tool_results chooses keep_tool_results; options that fix one are refused rather
    than silently ignored."""
    conv, _ = _history(store)
    with pytest.raises(InvalidInput, match="chooses keep_tool_results itself"):
        store.fit_tool_results(conv, 300, options=ReplayOptions(keep_tool_results=1))


def test_the_async_store_takes_the_same_options(tmp_path: Path) -> None:
    """AsyncStore's twins pass ``options`` (and the keywords) through unchanged."""
    with open_store(tmp_path / "a.db") as writer:
        conv, live = _history(writer)
        options = ReplayOptions(shape="anthropic", vision=True, keep_tool_results=1)
        expected = (
            writer.replay(conv, options=options),
            writer.pressure(conv, options=options),
            writer.live_request(conv, live, options=options),
            writer.fit_tool_results(conv, 300, options=replace(options, keep_tool_results=None)),
        )

    async def ask() -> tuple[Any, ...]:
        async with await open_async_store(tmp_path / "a.db") as store:
            return (
                await store.replay(conv, options=options),
                await store.pressure(conv, options=options),
                await store.live_request(conv, live, options=options),
                await store.fit_tool_results(
                    conv, 300, options=replace(options, keep_tool_results=None)
                ),
            )

    assert asyncio.run(ask()) == expected


def test_the_command_line_builds_the_same_options(tmp_path: Path) -> None:
    """``replay`` and ``pressure`` with --shape/--vision/--full/--keep-tool-results answer as
    the store does for the ReplayOptions of those flags."""
    db = tmp_path / "cli.db"
    with open_store(db) as writer:
        conv, _ = _history(writer)
        options = ReplayOptions(shape="anthropic", vision=True, full=True, keep_tool_results=1)
        expected_replay = writer.replay(conv, options=options)
        expected_total = writer.pressure(conv, options=options).total
    flags = ["--shape", "anthropic", "--vision", "--full", "--keep-tool-results", "1"]
    runner = CliRunner()
    replayed = runner.invoke(cli, ["--db", str(db), "replay", str(conv), *flags])
    assert replayed.exit_code == 0, replayed.stderr
    assert json.loads(replayed.stdout) == expected_replay
    measured = runner.invoke(cli, ["--db", str(db), "pressure", str(conv), "--json", *flags])
    assert measured.exit_code == 0, measured.stderr
    assert json.loads(measured.stdout)["total"] == expected_total
