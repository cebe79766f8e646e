"""``cold``: ``convstore --db PATH replay CONV`` as a new process against a raw ``python -c``.

Wall time of the whole process, stdout to ``/dev/null``; the baseline is the same interpreter
selecting and ``json.loads``-ing the conversation's rows. An info row gives the import share.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench.common import STATE_JSON_CODE, Context, alternate, event_count, log, median, pc
from bench.report import Row, verdict

TARGET_COLD_RATIO = 3.0  # cold replay of 1,000 messages <= 3 x raw one-process read

FULL = (1_000, 9)  # messages, repeats
QUICK = (1_000, 3)

RAW_CODE = (
    "import sqlite3, json, sys, zlib, lz4.block\n"  # noqa: S608 - a fixed query, no input
    + STATE_JSON_CODE
    + "c = sqlite3.connect(sys.argv[1]); "
    "rows = [json.loads(state_json(s)) for (s,) in c.execute('SELECT state FROM stored_events "
    "WHERE originator_id = ? ORDER BY originator_version', (sys.argv[2],))]; "
    "print(len(rows))"
)


def convstore_script() -> Path:
    """The installed ``convstore`` console script beside this interpreter (or on PATH)."""
    script = Path(sys.executable).with_name("convstore")
    if not script.exists():
        found = shutil.which("convstore")
        assert found, "the convstore console script is not installed"
        script = Path(found)
    return script


def wall_ms(cmd: list[str]) -> float:
    """Milliseconds from starting ``cmd`` to its exit, stdout discarded."""
    a = pc()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)  # noqa: S603 - our own arguments
    return (pc() - a) * 1000


def run(ctx: Context) -> None:
    log("cold: `convstore --db PATH replay CONV` as a new process vs a raw python -c")
    n_messages, reps = ctx.pick(FULL, QUICK)
    path, conv = ctx.fixture(n_messages)
    convstore_cmd = [
        sys.executable,
        str(convstore_script()),
        "--db",
        str(path),
        "replay",
        str(conv),
    ]
    raw_cmd = [sys.executable, "-c", RAW_CODE, str(path), conv.hex]
    import_cmd = [sys.executable, "-c", "import convstore.cli"]
    bare_cmd = [sys.executable, "-c", "pass"]

    # Warm the page cache and .pyc files; check both outputs once.
    out = subprocess.run(  # noqa: S603 - this interpreter, our own arguments
        convstore_cmd, capture_output=True, check=True, text=True
    ).stdout
    assert len(json.loads(out)["messages"]) == n_messages
    out = subprocess.run(  # noqa: S603
        raw_cmd, capture_output=True, check=True, text=True
    ).stdout
    assert int(out) == event_count(path, conv)
    subprocess.run(import_cmd, check=True)  # noqa: S603

    c_t: list[float] = []
    b_t: list[float] = []
    i_t: list[float] = []
    p_t: list[float] = []
    ratios: list[float] = []
    for r in range(reps):
        got = {}
        for who in alternate(r):
            got[who] = wall_ms(convstore_cmd if who == "convstore" else raw_cmd)
        i_t.append(wall_ms(import_cmd))
        p_t.append(wall_ms(bare_cmd))
        c_t.append(got["convstore"])
        b_t.append(got["baseline"])
        ratios.append(got["convstore"] / got["baseline"])
    ratio = median(ratios)
    ctx.add(
        Row(
            "cold replay, new process (wall time)",
            f"{n_messages:,} msgs",
            reps,
            median(c_t),
            median(b_t),
            "ms",
            ratio,
            "lower",
            f"<= {TARGET_COLD_RATIO}x",
            verdict(ratio <= TARGET_COLD_RATIO),
            note=(
                "convstore = `convstore --db PATH replay CONV` (stdout to /dev/null); "
                "baseline = python -c 'import sqlite3, json; SELECT state ...; json.loads "
                "each'; same interpreter"
            ),
            samples={"convstore_ms": c_t, "baseline_ms": b_t, "ratios": ratios},
        )
    )
    ctx.add(
        Row(
            "cold: `python -c 'import convstore.cli'` vs `python -c pass`",
            "-",
            reps,
            median(i_t),
            median(p_t),
            "ms",
            median([a / b for a, b in zip(i_t, p_t, strict=True)]),
            "lower",
            note="info only: the import share of the cold replay above",
            samples={"import_ms": i_t, "bare_ms": p_t},
        )
    )
