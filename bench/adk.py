"""``adk``: Google ADK's ``list_sessions`` over N sessions, ConvstoreSessionService against
ADK's own DatabaseSessionService on SQLite (``sqlite+aiosqlite``), in the same run.

Both services get the same N sessions of one app, spread over 100 users, each made by the
service's own ``create_session``. Then, taking turns, each lists one user's sessions
(``list_sessions(app_name, user_id)``: N/100 of them) and every session of the app
(``list_sessions(app_name)``: all N); the medians of the paired times are reported with the
median of the paired ratios. convstore answers from its listing index by labels, ADK from its
sessions table (and, for every listed session, its merged state). Creating the N sessions is
timed too (info).

``python -m bench.adk [N]`` runs it alone (N = 10,000 by default).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from google.adk.sessions.base_session_service import BaseSessionService, ListSessionsResponse

import convstore
from bench.common import Context, log
from bench.report import Row
from convstore.integrations.google_adk import ConvstoreSessionService

FULL = 10_000  # sessions
QUICK = 1_000
USERS = 100
APP = "bench"


async def populate(service: BaseSessionService, n: int) -> float:
    """Make n sessions through the service; returns the seconds it took."""
    started = time.perf_counter()
    for i in range(n):
        await service.create_session(app_name=APP, user_id=f"user-{i % USERS}", session_id=f"s{i}")
    return time.perf_counter() - started


async def timed(listing: Awaitable[ListSessionsResponse]) -> tuple[float, ListSessionsResponse]:
    """How long a listing (a coroutine not yet started) takes, and what it lists."""
    started = time.perf_counter()
    result = await listing
    return time.perf_counter() - started, result


async def measure(here: Path, n: int, reps: int) -> dict[str, Any]:
    """Both services on the same sessions: creation time, then listing times taking turns."""
    from google.adk.sessions.database_session_service import (  # noqa: PLC0415 - needs sqlalchemy
        DatabaseSessionService,
    )

    store = convstore.open_store(here / "adk-convstore.db")
    ours = ConvstoreSessionService(store=store)
    theirs = DatabaseSessionService(f"sqlite+aiosqlite:///{here / 'adk-database.db'}")
    made = {"ours_create_s": await populate(ours, n), "theirs_create_s": await populate(theirs, n)}
    samples: dict[str, list[float]] = {"user": [], "user_theirs": [], "app": [], "app_theirs": []}
    for rep in range(reps):
        sides: list[tuple[str, BaseSessionService]] = [("", ours), ("_theirs", theirs)]
        for suffix, service in sides if rep % 2 == 0 else sides[::-1]:
            took, listed = await timed(service.list_sessions(app_name=APP, user_id="user-7"))
            assert len(listed.sessions) == n // USERS
            samples["user" + suffix].append(took)
            took, listed = await timed(service.list_sessions(app_name=APP))
            assert len(listed.sessions) == n
            samples["app" + suffix].append(took)
    await theirs.close()
    store.close()
    return {**made, **samples}


def _paired(ours: list[float], theirs: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def run(ctx: Context) -> None:
    log("adk: list_sessions, ConvstoreSessionService vs ADK's DatabaseSessionService (SQLite)")
    n, reps = ctx.pick((FULL, 5), (QUICK, 3))
    log(f"  {n:,} sessions of {USERS} users ...")
    m = asyncio.run(measure(ctx.dir, n, reps))
    for key, what, listed in (
        ("user", "one user's sessions", n // USERS),
        ("app", "every session of the app", n),
    ):
        ctx.add(
            Row(
                f"adk: list_sessions, {what}",
                f"{listed:,} of {n:,} sessions",
                reps,
                statistics.median(m[key]) * 1000,
                statistics.median(m[key + "_theirs"]) * 1000,
                "ms",
                _paired(m[key], m[key + "_theirs"]),
                "lower",
                note=(
                    f"info: creating the {n:,} sessions took {m['ours_create_s']:.0f} s "
                    f"(DatabaseSessionService {m['theirs_create_s']:.0f} s)"
                ),
                samples=m,
            )
        )


def main(n: int) -> None:
    import tempfile  # noqa: PLC0415 - only when run alone

    with tempfile.TemporaryDirectory() as folder:
        m = asyncio.run(measure(Path(folder), n, 5))
    for key in ("user", "app"):
        ours, theirs = statistics.median(m[key]), statistics.median(m[key + "_theirs"])
        print(  # noqa: T201 - the result
            f"list_sessions ({key}) over {n:,} sessions: convstore {ours * 1000:.1f} ms, "
            f"DatabaseSessionService {theirs * 1000:.1f} ms, ratio "
            f"{_paired(m[key], m[key + '_theirs']):.2f}x"
        )
    print(  # noqa: T201 - the result
        f"creating them: convstore {m['ours_create_s']:.0f} s, "
        f"DatabaseSessionService {m['theirs_create_s']:.0f} s"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else FULL)
