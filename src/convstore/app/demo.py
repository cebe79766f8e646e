"""The demo conversation: a realistic agent turn, recorded the way a runtime records one.

It has a system prompt, a user message with a screenshot, reasoning, two parallel tool calls,
an error result, a tool round killed mid-turn (the call landed, its result never did), and the
agent's recovery after the user asks again.
"""

from __future__ import annotations

import base64
import struct
import zlib
from uuid import UUID

from convstore.store import Store


def tiny_png(width: int = 4, height: int = 3, rgb: tuple[int, int, int] = (220, 40, 40)) -> bytes:
    """A valid, solid-colour PNG image, built without any imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + bytes(rgb) * width
    pixels = zlib.compress(row * height)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def record_demo(store: Store) -> UUID:
    """Record the demo conversation in ``store``; returns its id."""
    screenshot = base64.b64encode(tiny_png()).decode()
    conv = store.new_conversation(title="Why is the build red?")
    store.append_message(
        conv,
        "system",
        [{"type": "text", "text": "You are a careful build engineer. Use tools to look."}],
    )
    store.append_message(
        conv,
        "user",
        [
            {"type": "text", "text": "CI went red after my last push. Screenshot attached."},
            {"type": "image", "media_type": "image/png", "data": screenshot},
        ],
    )

    # Round 1: the assistant streams reasoning, text and two parallel tool calls.
    turn = store.start_message(conv, "assistant")
    store.append_block(
        conv, turn, {"type": "reasoning", "text": "Check the CI log and the last commit first."}
    )
    store.append_block(conv, turn, {"type": "text", "text": "Let me look at the log and the diff."})
    store.append_block(
        conv,
        turn,
        {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "ci.log"}},
    )
    store.append_block(
        conv,
        turn,
        {"type": "tool_use", "id": "call_2", "name": "git_diff", "input": {"rev": "HEAD~1"}},
    )
    store.end_message(conv, turn)
    store.append_message(
        conv,
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "call_1",
                "content": "FAILED tests/test_api.py::test_login - KeyError: 'token'",
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_2",
                "content": "fatal: ambiguous argument 'HEAD~1': unknown revision",
                "is_error": True,
            },
        ],
    )

    # Round 2: a call lands, then the process is killed before its result is recorded.
    killed = store.start_message(conv, "assistant")
    store.append_block(
        conv,
        killed,
        {"type": "tool_use", "id": "call_3", "name": "run_tests", "input": {"k": "test_login"}},
    )

    # The user asks again; the agent recovers in a fresh turn.
    store.append_message(conv, "user", [{"type": "text", "text": "Still there? What broke?"}])
    store.append_message(
        conv,
        "assistant",
        [
            {"type": "reasoning", "text": "The test run was cut off; the log already names it."},
            {
                "type": "tool_use",
                "id": "call_4",
                "name": "grep",
                "input": {"pattern": "token", "path": "src/api.py"},
            },
        ],
    )
    store.append_message(
        conv,
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "call_4",
                "content": [
                    {"type": "text", "text": "src/api.py:42: return resp['access_token']"},
                    {"type": "image", "media_type": "image/png", "data": screenshot},
                ],
            }
        ],
    )
    store.append_message(
        conv,
        "assistant",
        [
            {
                "type": "text",
                "text": "The login handler now returns `access_token`, but the test reads "
                "`token`. Rename the key in the test (or keep both keys for one release).",
            }
        ],
    )
    return conv
