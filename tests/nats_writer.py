"""One writer process appending to a ``nats://`` store, for the fault tests.

``python -m tests.nats_writer LOCATION CONVERSATION_ID NAME COUNT``

Appends COUNT one-block user messages (text ``NAME-i``) to the conversation, one at a time,
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
    with convstore.open_store(location) as store:
        start = time.monotonic()
        for i in range(int(count)):
            text = f"{name}-{i}"
            try:
                store.append_message(conversation, "user", [{"type": "text", "text": text}])
            except Exception as exc:  # noqa: BLE001 - reported to the test, which fails
                print(f"error {text} {' '.join(str(exc).split())}", flush=True)  # noqa: T201
                return 1
            print(f"ack {text} {time.monotonic() - start:.3f}", flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
