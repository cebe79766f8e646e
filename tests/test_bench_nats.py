"""The NATS benchmark's wiring, without a cluster: it is in ``bench/run.py``'s registry, one
partition names no URL option (so it runs on every build), three partitions ask for them on a
store of their own, and a build that refuses the option gives a row saying so, not a crash.
The measurements themselves are timings and live in ``bench/``, not in a pass/fail suite."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from bench import nats
from bench.cli import BENCHMARKS
from bench.common import Context
from bench.nats import FULL, _report, store_url
from bench.report import Report

from convstore.infrastructure.nats.location import NatsLocation

SERVERS = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"


def test_the_nats_benchmark_is_in_the_run() -> None:
    assert BENCHMARKS["nats"] is nats.run


def test_one_partition_names_no_option_and_three_a_store_of_their_own(tmp_path: Path) -> None:
    one, three = (
        urlsplit(store_url(SERVERS, tmp_path, 1)),
        urlsplit(store_url(SERVERS, tmp_path, 3)),
    )
    assert "partitions" not in parse_qs(one.query)
    assert parse_qs(three.query)["partitions"] == ["3"]
    assert one.path != three.path
    assert parse_qs(one.query)["replica"] != parse_qs(three.query)["replica"]


def test_a_refused_partitions_option_becomes_a_row_that_says_so(tmp_path: Path) -> None:
    """What an older build answers (this one takes the option): the raw figures, and why not."""
    why = "bad URL option partitions (options: replica, replicas, timeout): nats://…"
    ctx = Context(quick=True, dir=tmp_path, pg_url="", report=Report(mode="quick", machine={}))
    _report(ctx, {"raw": [100.0, 120.0]}, partitions=3, n=4, plan=FULL, unavailable=why)
    (row,) = ctx.report.rows
    assert row.convstore is None
    assert row.baseline == 110.0
    assert "not available on this build" in row.note


def test_this_build_takes_the_partitions_option(tmp_path: Path) -> None:
    """So the benchmark's 3-partition rows measure convstore, not only raw nats-py."""
    assert NatsLocation.parse(store_url(SERVERS, tmp_path, 3)).partitions == 3


@pytest.mark.parametrize("given", ["0", "-5", "many"])
def test_the_costs_script_refuses_a_count_of_appends_below_one(
    given: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m bench.nats_costs N`` with N not a whole number of at least 1 exits 2 with
    one usage error, before it starts a cluster (it used to run, and print per-append costs
    of nothing)."""
    from bench import nats_costs  # noqa: PLC0415 - imports the nats extra's client

    with pytest.raises(SystemExit) as exited:
        nats_costs.main([given])
    assert exited.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1
    assert "argument appends" in errors[0]
