"""One writer process appending to a ``nats://`` store, for the fault tests.

``python -m tests.nats_writer LOCATION CONVERSATION_ID NAME COUNT [BLOCKS]``

Appends COUNT user messages to the conversation, one at a time: one block ``NAME-i``, or with
BLOCKS (more than 1) that many text blocks ``NAME-i.j`` (one atomic batch each). It
and prints ``ack NAME-i SECONDS`` (the time since the first append began) once each append has
returned, flushed, so the test knows exactly which appends were acknowledged. An append that
raises prints ``error NAME-i …`` and the process exits 1 (a writer is meant to carry on through
a leader election without seeing an error).
"""

from __future__ import annotations

import sys
import time

import convstore


def main() -> int:
    location, conversation, name, count = sys.argv[1:5]
    blocks = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    with convstore.open_store(location) as store:
        start = time.monotonic()
        for i in range(int(count)):
            text = f"{name}-{i}"
            texts = [text] if blocks == 1 else [f"{text}.{j}" for j in range(blocks)]
            try:
                store.append_message(
                    conversation, "user", [{"type": "text", "text": t} for t in texts]
                )
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails
                print(f"error {text} {' '.join(str(exc).split())}", flush=True)  # noqa: T201
                return 1
            print(f"ack {text} {time.monotonic() - start:.3f}", flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
