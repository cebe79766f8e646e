"""``memory``: peak memory of a replay, each side in a fresh subprocess.

``tracemalloc``'s peak during the replay (imports and connection outside the window), and the
whole process's peak RSS (``VmHWM``); the baseline selects and parses the same rows.
"""

from __future__ import annotations

from typing import Any

from bench.common import STATE_JSON_CODE, Context, log, median, run_python
from bench.report import Row

FULL = (10_000, 3)  # messages, repeats
QUICK = (1_000, 2)

_HWM = """
def hwm():
    # Peak RSS in kB from /proc (ru_maxrss would report the parent's: it survives exec).
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1])
"""

CONVSTORE_CODE = (
    "import sys, json, tracemalloc, convstore\n"
    + _HWM
    + """
s = convstore.open_store(sys.argv[1], create=False)
trace = sys.argv[3] == '1'
before = hwm()
if trace: tracemalloc.start()
r = s.replay(sys.argv[2], shape='openai', vision=False)
peak = tracemalloc.get_traced_memory()[1] if trace else 0
after = hwm()
print(json.dumps({'peak': peak, 'rss': after, 'rss_growth': after - before,
                  'n': len(r['messages'])}))
"""
)

RAW_CODE = (
    "import sys, json, sqlite3, tracemalloc, zlib, lz4.block\n"  # noqa: S608 - a fixed query, no input
    + _HWM
    + STATE_JSON_CODE
    + """
c = sqlite3.connect(sys.argv[1])
q = 'SELECT state FROM stored_events WHERE originator_id = ? ORDER BY originator_version'
trace = sys.argv[3] == '1'
before = hwm()
if trace: tracemalloc.start()
rows = [json.loads(state_json(s)) for (s,) in c.execute(q, (sys.argv[2],))]
peak = tracemalloc.get_traced_memory()[1] if trace else 0
after = hwm()
print(json.dumps({'peak': peak, 'rss': after, 'rss_growth': after - before, 'n': len(rows)}))
"""
)


def run(ctx: Context) -> None:
    log("memory: peak memory of a replay, in a fresh subprocess each")
    n_messages, reps = ctx.pick(FULL, QUICK)
    path, conv = ctx.fixture(n_messages)

    def measure(code: str, conv_arg: str, *, trace: bool) -> dict[str, Any]:
        return run_python(code, str(path), conv_arg, "1" if trace else "0")

    samples: dict[str, list[float]] = {k: [] for k in ("cp", "bp", "cr", "br", "cg", "bg")}
    mb = 1024 * 1024
    for _ in range(reps):
        c = measure(CONVSTORE_CODE, str(conv), trace=True)
        b = measure(RAW_CODE, conv.hex, trace=True)
        samples["cp"].append(c["peak"] / mb)
        samples["bp"].append(b["peak"] / mb)
        c = measure(CONVSTORE_CODE, str(conv), trace=False)
        b = measure(RAW_CODE, conv.hex, trace=False)
        samples["cr"].append(c["rss"] / 1024)
        samples["br"].append(b["rss"] / 1024)
        samples["cg"].append(c["rss_growth"] / 1024)
        samples["bg"].append(b["rss_growth"] / 1024)
    size = f"{n_messages:,} msgs"
    med = {k: median(v) for k, v in samples.items()}
    ctx.add(
        Row(
            "memory: tracemalloc peak during replay",
            size,
            reps,
            med["cp"],
            med["bp"],
            "MB",
            med["cp"] / med["bp"],
            "lower",
            note=(
                "convstore: Store.replay after open_store; baseline: SELECT state + "
                "json.loads of each row; imports and connection are outside the window"
            ),
            samples={"convstore": samples["cp"], "baseline": samples["bp"]},
        )
    )
    ctx.add(
        Row(
            "memory: peak RSS (VmHWM) of the whole process",
            size,
            reps,
            med["cr"],
            med["br"],
            "MB",
            med["cr"] / med["br"],
            "lower",
            note=(
                f"includes imports; growth of the peak RSS across the replay itself: "
                f"convstore {med['cg']:.1f} MB, raw {med['bg']:.1f} MB"
            ),
            samples={"convstore": samples["cr"], "baseline": samples["br"]},
        )
    )
