"""What providers return that has no prose form of its own, and rewinds.

Signed and redacted reasoning, raw tool arguments and images given by URL are recorded as they
came; replay shows each as prose (or natively, for a seeing model), and a live Anthropic round
sends signed reasoning back natively. Every request is checked against the real SDK types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from convstore import InvalidBlock, InvalidInput, MessageClosed, Store, open_store
from convstore.engine.plan import Shape
from tests.sdk import rejections, request_body

URL = "https://example.com/chart.png"


def accepted(shape: Shape, fragment: dict[str, Any]) -> dict[str, Any]:
    """Assert the real SDK request type accepts the fragment as a whole request."""
    problems = rejections(shape, request_body(shape, fragment))
    assert problems == [], "\n".join(problems[:10])
    return fragment


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A fresh SQLite store."""
    return open_store(tmp_path / "s.db")


def _round(store: Store, reasoning: dict[str, Any], tool_input: object) -> tuple[str, str]:
    conv = store.new_conversation()
    store.append_message(conv, "user", [{"type": "text", "text": "Plot it."}])
    call = {"type": "tool_use", "id": "c1", "name": "plot", "input": tool_input}
    turn = store.append_message(conv, "assistant", [reasoning, call])
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "done"}
    store.append_message(conv, "user", [result])
    return str(conv), str(turn)


def test_signed_reasoning_goes_back_natively_in_a_live_anthropic_round(store: Store) -> None:
    """A thinking block's signature rides along and returns in the live round, as the
    Messages API requires with extended thinking; persisted replay stays prose."""
    thinking = {"type": "reasoning", "text": "Need the data.", "signature": "sig-abc"}
    conv, turn = _round(store, thinking, {"x": 1})
    live = accepted("anthropic", store.live_request(conv, turn, shape="anthropic"))
    assistant = live["messages"][-2]["content"]
    assert assistant[0] == {
        "type": "thinking",
        "thinking": "Need the data.",
        "signature": "sig-abc",
    }
    assert assistant[1]["type"] == "tool_use"
    prose = accepted("anthropic", store.replay(conv, shape="anthropic"))
    assert prose["messages"][1]["content"][0]["text"].startswith("[Reasoning]: Need the data.")


def test_redacted_reasoning_is_prose_in_replay_and_native_in_a_live_round(store: Store) -> None:
    """Reasoning returned only encrypted says so in prose, and crosses back as
    ``redacted_thinking`` inside a live Anthropic round."""
    redacted = {"type": "reasoning", "text": "", "encrypted_content": "EnCr", "redacted": True}
    conv, turn = _round(store, redacted, {})
    text = store.replay(conv)["messages"][1]["content"]
    assert text.startswith("[Reasoning]: [encrypted by the provider")
    live = accepted("anthropic", store.live_request(conv, turn, shape="anthropic"))
    assert live["messages"][-2]["content"][0] == {"type": "redacted_thinking", "data": "EnCr"}


def test_raw_tool_arguments_are_kept_and_shown_as_emitted(store: Store) -> None:
    """Arguments that are not a JSON object are recorded as the exact text, replayed as is,
    sent as is in a live OpenAI round, and refused (not repaired) by the Anthropic shape."""
    raw = '{"city": "Par'
    conv, turn = _round(store, {"type": "text", "text": "Calling."}, raw)
    replayed = accepted("openai", store.replay(conv))
    assert replayed["messages"][1]["content"] == f"Calling.\n\nTool use: plot({raw})"
    live = accepted("openai", store.live_request(conv, turn))
    assert live["messages"][-2]["tool_calls"][0]["function"]["arguments"] == raw
    with pytest.raises(InvalidInput, match="raw text"):
        store.live_request(conv, turn, shape="anthropic")


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
def test_image_by_url_is_sent_by_url_or_named_in_a_marker(store: Store, shape: Shape) -> None:
    """An image given by URL crosses natively by URL to a seeing model (never fetched) and
    as the not-seen marker, naming its address, otherwise."""
    conv = store.new_conversation()
    store.append_message(conv, "user", [{"type": "image", "url": URL}])
    seen = accepted(shape, store.replay(conv, shape=shape, vision=True))["messages"][0]
    if shape == "openai":
        assert seen["content"] == [{"type": "image_url", "image_url": {"url": URL}}]
    else:
        assert seen["content"] == [{"type": "image", "source": {"type": "url", "url": URL}}]
    blind = accepted(shape, store.replay(conv, shape=shape, vision=False))["messages"][0]
    text = blind["content"] if shape == "openai" else blind["content"][0]["text"]
    assert (
        text
        == f"[Image not shown: an image (at {URL}) was here, but this model cannot see images.]"
    )
    assert store.pressure(conv, shape=shape, vision=True).by_kind["image"] > 0


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"type": "image", "url": "file:///etc/passwd"}, "http:// or https://"),
        ({"type": "image", "url": URL, "data": "iVBO"}, "exactly one of data"),
        ({"type": "image"}, "exactly one of data"),
        ({"type": "image", "data": "iVBORw0KGgo="}, "needs its media_type"),
    ],
)
def test_bad_images_are_refused_with_nothing_written(
    store: Store, block: dict[str, Any], problem: str
) -> None:
    """An image needs exactly one source: base64 data with its type, or an http(s) URL."""
    conv = store.new_conversation()
    with pytest.raises(InvalidBlock, match=problem):
        store.append_message(conv, "user", [block])
    assert len(store.events(conv)) == 1


def test_rewind_withdraws_later_messages_from_replay_but_not_from_the_log(store: Store) -> None:
    """After a rewind replay shows the history up to its target and what came after the
    rewind; the withdrawn messages stay in the log and take no more blocks."""
    conv = store.new_conversation()
    first = store.append_message(conv, "user", [{"type": "text", "text": "one"}])
    store.append_message(conv, "assistant", [{"type": "text", "text": "two"}])
    stray = store.start_message(conv, "user")
    store.rewind(conv, to=first)
    store.append_message(conv, "assistant", [{"type": "text", "text": "three"}])
    assert [m["content"] for m in store.replay(conv)["messages"]] == ["one", "three"]
    with pytest.raises(MessageClosed, match="withdrawn"):
        store.append_block(conv, stray, {"type": "text", "text": "late"})
    assert [m.withdrawn for m in store.messages(conv)] == [False, True, True, False]
    store.rewind(conv, to=None)
    assert store.replay(conv)["messages"] == []


def test_a_compaction_through_a_withdrawn_message_no_longer_applies(store: Store) -> None:
    """Rewinding past a compaction's boundary undoes the compaction too: replay shows the
    visible messages in full."""
    conv = store.new_conversation()
    first = store.append_message(conv, "user", [{"type": "text", "text": "one"}])
    second = store.append_message(conv, "assistant", [{"type": "text", "text": "two"}])
    store.compact(conv, "they spoke", through=second)
    assert store.replay(conv)["messages"][0]["content"].endswith("they spoke")
    store.rewind(conv, to=first)
    assert [m["content"] for m in store.replay(conv)["messages"]] == ["one"]
