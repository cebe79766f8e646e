"""`convstore serve`: opening a 10,000-message conversation, against a raw row read.

Same run, same store: the baseline reads all the conversation's stored rows (the recorder's
select, no decoding). The page (what the browser shows first) reads the log backwards from
its end (Store.tail) and renders the newest 200 messages; the replay pane, which the page
fetches after it, is Store.replay over the whole log, and the pressure chart, fetched after
that, Store.pressure (which tokenizes the whole replay). Each is timed over
HTTP (Starlette's TestClient, in process), as ratios to the raw read and in absolute terms;
an "earlier" page (the 200 messages before the newest 200) and a search are timed too.

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
from convstore.app.projector import catch_up, open_audit
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
            audit_file = Path(scratch) / "bench.audit.db"  # never the user's own read model
            client = TestClient(
                HostGuard(
                    create_app(store, audit=audit_file), allowed_hosts("127.0.0.1", ()), "bench"
                ),
                base_url="http://127.0.0.1",
            )

            def get(path: str) -> Callable[[], None]:
                def run() -> None:
                    response = client.get(path)
                    assert response.status_code == 200, path

                return run

            newest = client.get(f"/c/{conv}").text
            earlier = newest.split("class='earlier' href='", 1)[1].split("'", 1)[0]
            earlier = earlier.replace("&amp;", "&")
            audit = open_audit(store, audit_file)
            catch_up(store, audit)
            audit.close()
            timings = {
                "raw row read": best(lambda: recorder.select_events(conv)),
                "page (newest 200)": best(get(f"/c/{conv}")),
                "replay pane": best(get(f"/c/{conv}/replay")),
                "pressure pane": best(get(f"/c/{conv}/pressure")),
                "earlier page": best(get(earlier)),
                "search": best(get("/?q=lorem+ipsum")),
            }
    print(f"{args.messages:,} messages ({'postgres' if args.db else 'sqlite'})")  # noqa: T201
    rows_best = timings["raw row read"][0]
    for name, (fastest, median) in timings.items():
        ratio = fastest / rows_best
        print(  # noqa: T201
            f"{name:18}: best {fastest * 1000:7.1f} ms  median {median * 1000:7.1f} ms  "
            f"{ratio:5.2f}x the raw read"
        )
    page, replay = timings["page (newest 200)"][0], timings["replay pane"][0]
    print(f"page, then replay : {(page + replay) * 1000:7.1f} ms")  # noqa: T201


if __name__ == "__main__":
    main()
