"""Importers stay linear in their input: inputs shaped to make a per-record step that redoes
the whole of what came before quadratic (issue 39, items 12 and 13).

Where the work can be counted (the annotations validated), the count is asserted; where the
repeated work was inside C (a Gemini CLI rewind copying and searching every id), the input is
sized so a linear reader finishes in about half a second and a quadratic one takes over a
minute, and the subprocess's timeout is only the net that turns a hang into a failure.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from convstore.domain import blocks
from convstore.domain.blocks import TextBlock
from convstore.store.importing import read_histories


def test_gemini_rewinds_are_linear_in_the_file(tmp_path: Path) -> None:
    """30,000 messages, then 30,000 rewinds of the last one (each followed by its record
    again), then a rewind to the third: before, every rewind copied and searched the whole id
    list (this file took minutes; a 13 MB one still ran after 25 s); now each record is cut
    at most once."""
    count = 30_000
    lines = [{"sessionId": "s-rewinds", "projectHash": "h", "startTime": "t", "lastUpdated": "t"}]
    lines += [
        {"id": f"m{i}", "type": "user" if i % 2 == 0 else "gemini", "content": f"text {i}"}
        for i in range(count)
    ]
    last = {"id": f"m{count - 1}", "type": "gemini", "content": "again"}
    lines += [{"$rewindTo": last["id"]}, last] * count
    lines += [{"$rewindTo": "m2"}]
    session = tmp_path / "session.jsonl"
    session.write_text("".join(json.dumps(line) + "\n" for line in lines))
    read = (
        "import json, sys\n"
        "from convstore.store.importing import read_histories\n"
        "[history] = read_histories('gemini-cli', open(sys.argv[1]).read())\n"
        "print(json.dumps([[m.role, m.blocks[0].text] for m in history.messages]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", read, str(session)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,  # the net: linear is well under a second here, quadratic minutes
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["user", "text 0"], ["assistant", "text 1"]]


@contextmanager
def _annotations_checked() -> Iterator[list[int]]:
    """The length of every annotation list TextBlock's validator checks while inside."""
    checked: list[int] = []
    code = blocks._annotations_typed.__code__  # the validator whose work is counted

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            checked.append(len(frame.f_locals["value"] or ()))

    sys.setprofile(profile)
    try:
        yield checked
    finally:
        sys.setprofile(None)


def test_vercel_sources_are_put_on_their_text_once(tmp_path: Path) -> None:
    """A message of 2,000 ``source-url`` parts after one text: before, each source rebuilt
    and revalidated the text block with every source so far (2 million annotations checked
    here; 20,000 sources still ran after 25 s), now each text's annotations are checked once.
    Where each source goes is unchanged: onto the nearest text before it in its step, else
    the next one, else an empty text of its own."""
    count = 2_000

    def source(n: int) -> dict[str, Any]:
        return {"type": "source-url", "sourceId": f"s{n}", "url": f"https://example.com/{n}"}

    parts: list[dict[str, Any]] = [
        source(-1),
        {"type": "text", "text": "first"},
        *(source(n) for n in range(count)),
        {"type": "reasoning", "text": "hmm"},
        source(count),
        {"type": "text", "text": "second"},
        {"type": "step-start"},
        source(count + 1),
    ]
    body = [
        {"id": "u", "role": "user", "parts": [{"type": "text", "text": "sources?"}]},
        {"id": "a", "role": "assistant", "parts": parts},
    ]
    with _annotations_checked() as checked:
        [history] = read_histories("vercel-ai", json.dumps(body))
    assert sum(checked) == count + 3  # each source checked once
    first, second = history.messages[1:]
    [text, reasoning, later] = first.blocks
    assert isinstance(text, TextBlock)
    assert isinstance(later, TextBlock)
    assert text.text == "first"
    assert [a["sourceId"] for a in text.annotations or []] == [
        "s-1",
        *(f"s{n}" for n in range(count + 1)),
    ]
    assert reasoning.type == "reasoning"
    assert (later.text, later.annotations) == ("second", None)
    assert second.blocks == (TextBlock(text="", annotations=[source(count + 1)]),)
