"""The test cluster itself: three servers, one replicated stream with a leader and two
followers, and the two JetStream behaviours the NATS backend is built on."""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import uuid4

import pytest

from tests.nats_cluster import Cluster

pytestmark = pytest.mark.slow


async def _replicated_stream(cluster: Cluster) -> tuple[str | None, list[str], list[str]]:
    import nats  # noqa: PLC0415 - a dev dependency
    from nats.js.api import StreamConfig  # noqa: PLC0415
    from nats.js.errors import BadRequestError  # noqa: PLC0415

    nc = await nats.connect([f"nats://{s}" for s in cluster.url.split(",")])
    try:
        js = nc.jetstream()
        name = f"T{uuid4().hex[:8]}"
        info = await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"], num_replicas=3))
        assert info.cluster is not None
        followers = [str(peer.name) for peer in info.cluster.replicas or []]
        headers = {"Nats-Expected-Last-Subject-Sequence": "0", "Nats-Msg-Id": "m1"}
        first = await _first_publish(js, f"{name}.a", headers)
        again = await js.publish(f"{name}.a", b"1", headers=headers)  # a retried publish
        refused = []
        try:
            await js.publish(f"{name}.a", b"2", headers={**headers, "Nats-Msg-Id": "m2"})
        except BadRequestError as exc:
            refused.append(str(exc.err_code))
        await js.delete_stream(name)
        assert (first.seq, again.seq, again.duplicate) == (1, 1, True)
        return info.cluster.leader, followers, refused
    finally:
        await nc.close()


async def _first_publish(js: Any, subject: str, headers: dict[str, str]) -> Any:
    """The first publish to a stream just made: a server may not know of the stream's
    subjects yet ("no responders", seen in CI on a busy machine), so it is tried again for up
    to 10 s, as convstore's own link does. nats-py's JetStream publish reports that as
    ``NoStreamResponseError``, which does not derive from ``NoRespondersError``: catching the
    latter alone let CI's second sighting through."""
    from nats.errors import NoRespondersError  # noqa: PLC0415 - a dev dependency
    from nats.js.errors import NoStreamResponseError  # noqa: PLC0415

    deadline = time.monotonic() + 10
    while True:
        try:
            return await js.publish(subject, b"1", headers=headers)
        except (NoRespondersError, NoStreamResponseError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def test_the_cluster_replicates_a_stream_over_three_servers(nats_cluster: Cluster) -> None:
    """A stream with 3 replicas has a leader and two followers among the three servers; a
    retried publish (same Nats-Msg-Id) is stored once, and a publish expecting a subject
    to be empty is refused once it is not (err_code 10071)."""
    leader, followers, refused = asyncio.run(_replicated_stream(nats_cluster))
    assert sorted([str(leader), *followers]) == ["n1", "n2", "n3"]
    assert refused == ["10071"]
