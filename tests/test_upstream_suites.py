"""The frameworks' own tests, run against convstore's adapters (issue 41, item 3).

Each runs an upstream test file unchanged, from the source distribution of the installed
version (:mod:`tests.upstream_suites` says how it is fetched and where it came from), with
the adapter swapped in by a plugin of ``tests/upstream/``. The plugin marks the tests that
assert what convstore does on purpose otherwise, each with its reason, as strict expected
failures; every other test must pass, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import re

import pytest

from tests.upstream_suites import run_upstream, upstream

AGENTS_SESSION_TESTS = ["tests/memory/test_session.py", "tests/memory/test_session_limit.py"]
LANGCHAIN_HISTORY_TESTS = ["tests/unit_tests/runnables/test_history.py"]


def _counts(summary: str) -> dict[str, int]:
    """pytest's last line (``43 passed, 28 xfailed in 9.1s``) as counts by outcome."""
    return {kind: int(n) for n, kind in re.findall(r"(\d+) (\w+)", summary)}


def _suite(
    dist: str, plugin: str, files: list[str], backend: str, request: pytest.FixtureRequest
) -> tuple[dict[str, int], str]:
    """Run ``dist``'s upstream ``files`` with ``plugin`` on ``backend``; the outcome counts
    (the run must exit 0) and where the files came from."""
    tree = upstream(dist)
    env = {}
    if backend == "postgres":
        env["CONVSTORE_UPSTREAM_POSTGRES"] = request.getfixturevalue("postgres_server")
    ran = run_upstream(tree, plugin, files, env)
    summary = ran.stdout.strip().splitlines()[-1] if ran.stdout.strip() else ran.stderr
    assert ran.returncode == 0, (
        f"{tree.origin}: {summary}\n{ran.stdout[-4000:]}{ran.stderr[-2000:]}"
    )
    return _counts(summary), f"{tree.origin}: {summary}"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_agents_sdks_own_session_tests_pass_on_convstore(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The Agents SDK's ``tests/memory/test_session.py`` and ``test_session_limit.py`` with
    ``ConvstoreSession`` for ``SQLiteSession``: every test passes but those marked (their
    reasons are in ``tests/upstream/convstore_agents_swap.py``)."""
    counts, origin = _suite(
        "openai-agents", "convstore_agents_swap", AGENTS_SESSION_TESTS, backend, request
    )
    assert counts.get("passed", 0) >= 40, origin
    assert not {"failed", "error", "errors", "xpassed"} & counts.keys(), origin


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_langchain_cores_own_message_history_tests_pass_on_convstore(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """langchain-core's ``tests/unit_tests/runnables/test_history.py``
    (``RunnableWithMessageHistory``) with ``ConvstoreChatMessageHistory`` for
    ``InMemoryChatMessageHistory``: every test passes, none marked."""
    counts, origin = _suite(
        "langchain-core", "convstore_langchain_swap", LANGCHAIN_HISTORY_TESTS, backend, request
    )
    assert counts.get("passed", 0) >= 20, origin
    assert counts.keys() == {"passed"}, origin
