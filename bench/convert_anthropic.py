#!/usr/bin/env python
"""What converting Anthropic shapes and Claude Code transcripts costs per block.

    .venv/bin/python bench/convert_anthropic.py [--corpus DIR] [--rounds 7] [--json]

Over the shared corpus (``$CONVSTORE_CORPUS``, else ``../shared/corpus`` beside the
checkout): every Claude Code transcript through ``histories_from_transcript``, and every
Messages body through ``history_from_messages``. The baseline, timed in the same round, is the
bare parse of the same bytes (``json.loads`` of each line, or of the body), so the ratio is
what converting adds on top of reading the JSON at all. Each round times both sides in
alternating order; the figures are medians over rounds (and the ratio the median of the
paired ratios). Reported per converted block: convstore µs/block, parse µs/block, ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from convstore.convert.anthropic import history_from_messages
from convstore.convert.claude_code import histories_from_transcript
from convstore.convert.history import History


def _corpus(given: str | None) -> Path:
    for candidate in (given, os.environ.get("CONVSTORE_CORPUS")):
        if candidate:
            return Path(candidate)
    return Path(__file__).resolve().parents[2] / "shared" / "corpus"


def _blocks(histories: list[History]) -> int:
    return sum(len(m.blocks) for h in histories for m in h.messages)


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def _parse_lines(texts: list[str]) -> None:
    for text in texts:
        for raw in text.splitlines():
            with contextlib.suppress(ValueError):
                json.loads(raw)


def _measure(
    convert: Callable[[], object], baseline: Callable[[], object], rounds: int
) -> tuple[float, float, float]:
    ours, theirs, ratios = [], [], []
    for index in range(rounds):
        if index % 2:
            b, a = _timed(baseline), _timed(convert)
        else:
            a, b = _timed(convert), _timed(baseline)
        ours.append(a)
        theirs.append(b)
        ratios.append(a / b)
    return statistics.median(ours), statistics.median(theirs), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    corpus = _corpus(args.corpus)
    transcripts = [
        p.read_text(encoding="utf-8") for p in sorted((corpus / "claude-code").glob("*.jsonl"))
    ]
    bodies = [
        p.read_text(encoding="utf-8")
        for p in sorted((corpus / "anthropic-messages").glob("*.json"))
    ]
    parsed_bodies = [json.loads(b) for b in bodies]
    cc_blocks = sum(_blocks(histories_from_transcript(t)) for t in transcripts)
    body_blocks = sum(_blocks([history_from_messages(b)]) for b in parsed_bodies)

    def convert_transcripts() -> None:
        for text in transcripts:
            histories_from_transcript(text)

    def convert_bodies() -> None:
        for body in bodies:
            history_from_messages(json.loads(body))

    def parse_bodies() -> None:
        for body in bodies:
            json.loads(body)

    results: dict[str, Any] = {}
    for name, convert, baseline, blocks in (
        (
            "claude-code transcripts",
            convert_transcripts,
            lambda: _parse_lines(transcripts),
            cc_blocks,
        ),
        ("anthropic bodies", convert_bodies, parse_bodies, body_blocks),
    ):
        ours, theirs, ratio = _measure(convert, baseline, args.rounds)
        results[name] = {
            "blocks": blocks,
            "convstore_us_per_block": ours / blocks * 1e6,
            "parse_us_per_block": theirs / blocks * 1e6,
            "ratio": ratio,
        }
    if args.json:
        print(json.dumps(results, indent=2))  # noqa: T201
        return
    print("| input | blocks | convert µs/block | json parse µs/block | ratio |")  # noqa: T201
    print("|---|---|---|---|---|")  # noqa: T201
    for name, r in results.items():
        print(  # noqa: T201
            f"| {name} | {r['blocks']:,} | {r['convstore_us_per_block']:.1f} "
            f"| {r['parse_us_per_block']:.1f} | {r['ratio']:.2f}x |"
        )


if __name__ == "__main__":
    main()
