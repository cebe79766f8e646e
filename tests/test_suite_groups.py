"""The suite's own arrangement: every PostgreSQL test runs on one worker.

PostgreSQL readers return only rows older than the oldest transaction running anywhere on the
server, so the PostgreSQL tests must not run beside each other (some hold a transaction open
on purpose). ``tests/conftest.py`` puts them in one xdist group; that only works while
pytest-xdist can rename the test's node id, which pytest 9.2 stopped honouring. This test
fails as soon as the grouping no longer takes effect, instead of the suite turning flaky.
"""

from __future__ import annotations

import os

import pytest


@pytest.mark.postgres
def test_postgresql_tests_are_grouped_on_one_worker(request: pytest.FixtureRequest) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("not run by pytest-xdist workers: every test already runs one at a time")
    if not request.config.getvalue("loadgroup"):
        pytest.skip("run without --dist loadgroup, so no groups are asked for")
    assert request.node.nodeid.endswith("@postgres"), (
        "pytest-xdist did not apply the 'postgres' group to this test's node id: the "
        "PostgreSQL tests would run on several workers at once (check the pytest pin)"
    )
