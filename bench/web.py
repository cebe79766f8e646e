"""`convstore serve`: the first page of a 10,000-message conversation against a raw row read.

Same run, same store: the baseline reads the conversation's stored rows (the recorder's
select, no decoding); the page decodes every event, folds the messages, renders 200 of them
and returns them over HTTP (Starlette's TestClient, in process). The ratio is what the page
costs over just reading its rows.

    .venv/bin/python bench/web.py [--messages 10000] [--db postgresql://...]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from starlette.testclient import TestClient

import convstore
from convstore.cli.serve import HostGuard, allowed_hosts
from convstore.web.app import create_app


def best(run: Callable[[], object], rounds: int = 5) -> tuple[float, float]:
    """The best and the median wall time of ``rounds`` runs."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--db", help="a postgresql:// URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        location = args.db or str(Path(scratch) / "bench.db")
        with convstore.open_store(location) as store:
            conv = store.new_conversation(title="bench")
            for i in range(args.messages):
                role = "user" if i % 2 == 0 else "assistant"
                text = f"message {i}: " + "lorem ipsum dolor sit amet " * 8
                store.append_message(conv, role, [{"type": "text", "text": text}])
            recorder = store._log.recorder
            client = TestClient(
                HostGuard(create_app(store), allowed_hosts("127.0.0.1", ()), "bench"),
                base_url="http://127.0.0.1",
            )

            def page() -> None:
                response = client.get(f"/c/{conv}")
                assert response.status_code == 200

            rows_best, rows_median = best(lambda: recorder.select_events(conv))
            page_best, page_median = best(page)
    print(f"{args.messages:,} messages ({'postgres' if args.db else 'sqlite'})")  # noqa: T201
    print(f"raw row read : best {rows_best * 1000:7.1f} ms  median {rows_median * 1000:7.1f} ms")  # noqa: T201
    print(f"first page   : best {page_best * 1000:7.1f} ms  median {page_median * 1000:7.1f} ms")  # noqa: T201
    print(f"ratio page / rows (best): {page_best / rows_best:.1f}x")  # noqa: T201


if __name__ == "__main__":
    main()
