"""Conversion overhead per block: the OpenAI converters against ``json.loads`` of the same input.

    .venv/bin/python bench/convert.py [--repeats N] [--corpus DIR]

Input: every Chat Completions and Responses body in the transcript corpus (``--corpus``, else
``$CONVSTORE_CORPUS``, else ``../shared/corpus`` beside the checkout). For each format, one
repeat converts every body (``history_from_chat`` / ``history_from_responses``, dicts in,
checked blocks out) and, in the same repeat, parses the same bodies from their JSON text with
``json.loads``: the cost of merely reading the input. A third row converts the Chat bodies'
assistant messages as ``openai`` SDK objects (``ChatCompletionMessage``), and a fourth feeds
a streamed completion chunk by chunk through the stream assembler. Times are per block
produced; the ratio is the median of the per-repeat ratios (converter / json.loads).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletionChunk, ChatCompletionMessage

from convstore.convert.chat_stream import ChunkAssembler
from convstore.convert.openai_chat import assistant_blocks, history_from_chat
from convstore.convert.responses import history_from_responses


def corpus_dir(given: str | None) -> Path:
    for candidate in (given, os.environ.get("CONVSTORE_CORPUS")):
        if candidate:
            return Path(candidate)
    return Path(__file__).resolve().parents[1] / "../shared/corpus"


def timed(work: Callable[[], int], loops: int) -> tuple[float, int]:
    """Seconds for ``loops`` runs of ``work``, and the blocks one run produced."""
    start = time.perf_counter()
    for _ in range(loops):
        blocks = work()
    return time.perf_counter() - start, blocks


def row(
    name: str, convert: Callable[[], int], baseline: Callable[[], int], blocks: int, repeats: int
) -> None:
    loops = 200
    ratios, ours, theirs = [], [], []
    for _ in range(repeats):
        ours_s, produced = timed(convert, loops)
        theirs_s, _ = timed(baseline, loops)
        assert produced == blocks
        ours.append(ours_s / loops / blocks * 1e6)
        theirs.append(theirs_s / loops / blocks * 1e6)
        ratios.append(ours_s / theirs_s)
    print(  # noqa: T201 - a benchmark prints its table
        f"| {name} | {blocks} | {statistics.median(ours):.2f} | "
        f"{statistics.median(theirs):.2f} | {statistics.median(ratios):.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--corpus")
    args = parser.parse_args()
    corpus = corpus_dir(args.corpus)
    chat_texts = [p.read_text() for p in sorted((corpus / "openai-chat").glob("*.json"))]
    resp_texts = [p.read_text() for p in sorted((corpus / "openai-responses").glob("*.json"))]
    if not chat_texts or not resp_texts:
        msg = f"no corpus at {corpus}; pass --corpus or set CONVSTORE_CORPUS"
        raise SystemExit(msg)
    chat_bodies = [json.loads(t) for t in chat_texts]
    resp_bodies = [json.loads(t) for t in resp_texts]

    def chat() -> int:
        return sum(len(m.blocks) for b in chat_bodies for m in history_from_chat(b).messages)

    def responses() -> int:
        return sum(len(m.blocks) for b in resp_bodies for m in history_from_responses(b).messages)

    def parse(texts: list[str]) -> Callable[[], int]:
        def run() -> int:
            for text in texts:
                json.loads(text)
            return 0

        return run

    assistant = [m for b in chat_bodies for m in b["messages"] if m["role"] == "assistant"]
    sdk_messages = [ChatCompletionMessage.model_validate(m) for m in assistant]
    assistant_texts = [json.dumps(m) for m in assistant]

    def sdk() -> int:
        return sum(len(assistant_blocks(m)) for m in sdk_messages)

    stream_message = max(assistant, key=lambda m: len(json.dumps(m)))
    chunks: list[Any] = []
    for index, call in enumerate(stream_message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        for at in range(0, max(len(arguments), 1), 8):
            delta: dict[str, Any] = {
                "index": index,
                "function": {"arguments": arguments[at : at + 8]},
            }
            if at == 0:
                delta |= {
                    "id": call["id"],
                    "function": {**delta["function"], "name": call["function"]["name"]},
                }
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    chunk_objects = [
        ChatCompletionChunk.model_validate(
            {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", **c}
        )
        for c in chunks
    ]
    chunk_texts = [json.dumps(c) for c in chunks]

    def stream() -> int:
        assembler = ChunkAssembler()
        blocks = [b for c in chunk_objects for b in assembler.feed(c)]
        return len(blocks + assembler.finish())

    print("| input | blocks | converter µs/block | json.loads µs/block | ratio |")  # noqa: T201
    print("|---|---|---|---|---|")  # noqa: T201
    row("Chat Completions bodies (dicts)", chat, parse(chat_texts), chat(), args.repeats)
    row("Responses bodies (dicts)", responses, parse(resp_texts), responses(), args.repeats)
    row("assistant messages (SDK objects)", sdk, parse(assistant_texts), sdk(), args.repeats)
    row(f"stream ({len(chunks)} SDK chunks)", stream, parse(chunk_texts), stream(), args.repeats)


if __name__ == "__main__":
    main()
