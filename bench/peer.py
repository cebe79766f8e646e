"""``peer``: a fresh process's first load of a conversation: convstore, the OpenAI Agents SDK's
``SQLiteSession``, and a raw read of one JSON row per message, in the same run.

Each side runs in a new process of this interpreter, imports first; the clock starts after the
imports and stops when the conversation is in memory, so the figure is the first load itself
(opening the file included) and not the import of a framework:

- convstore: ``open_store(path, create=False)`` then ``Store.replay(conv, shape="openai",
  vision=False)`` on the store the other benchmarks read;
- Agents SDK: ``SQLiteSession(session_id, path)`` then ``await session.get_items()`` (the event
  loop is made before the clock starts), on a session file holding the same messages as
  Responses input items (``{"role", "content": [3 input_text parts]}``);
- raw: ``sqlite3.connect`` and ``json.loads`` of each row of a plain table holding one JSON row
  per message (``{"role", "content": [3 text blocks]}``), selected by conversation in order.

Repeats rotate which side goes first. The ratios are paired (same repeat) against raw.
"""

from __future__ import annotations

from bench.baselines import (
    RAW_MESSAGES_SELECT,
    SESSION_ID,
    have_agents_sdk,
    raw_messages_db,
    sdk_session_db,
)
from bench.common import Context, checkpoint, log, median, run_python
from bench.report import Row, verdict
from bench.workload import message_of

TARGET_FIRST_REPLAY = 1.5  # a fresh process's first replay of 10,000 messages <= 1.5 x raw

FULL = (10_000, 7)  # messages, repeats
QUICK = (1_000, 3)

CONVSTORE_CODE = """
import json, sys, time
from convstore import open_store
started = time.perf_counter()
store = open_store(sys.argv[1], create=False)
messages = store.replay(sys.argv[2], shape='openai', vision=False)['messages']
elapsed = time.perf_counter() - started
print(json.dumps({'ms': elapsed * 1000, 'n': len(messages)}))
"""

SDK_CODE = """
import asyncio, json, sys, time
from agents import SQLiteSession
loop = asyncio.new_event_loop()
async def load():
    session = SQLiteSession(sys.argv[2], sys.argv[1])
    return await session.get_items()
started = time.perf_counter()
items = loop.run_until_complete(load())
elapsed = time.perf_counter() - started
print(json.dumps({'ms': elapsed * 1000, 'n': len(items)}))
"""

RAW_CODE = (
    """
import json, sqlite3, sys, time
started = time.perf_counter()
conn = sqlite3.connect(sys.argv[1])
query = """
    + repr(RAW_MESSAGES_SELECT)
    + """
rows = [json.loads(m) for (m,) in conn.execute(query, (sys.argv[2],))]
elapsed = time.perf_counter() - started
print(json.dumps({'ms': elapsed * 1000, 'n': len(rows)}))
"""
)


def run(ctx: Context) -> None:
    log("peer: a fresh process's first load: convstore replay, Agents SDK session, raw rows")
    if not have_agents_sdk():
        ctx.skip("peer", "the OpenAI Agents SDK is not installed (pip install openai-agents)")
        return
    n_messages, reps = ctx.pick(FULL, QUICK)
    store_path, conv = ctx.fixture(n_messages)
    checkpoint(store_path)
    messages = [message_of(i) for i in range(n_messages)]
    raw_path = raw_messages_db(ctx.dir, str(conv), messages, f"{n_messages}")
    sdk_path = sdk_session_db(ctx.dir, messages, f"{n_messages}")
    sides = {
        "convstore": (CONVSTORE_CODE, str(store_path), str(conv)),
        "sdk": (SDK_CODE, str(sdk_path), SESSION_ID),
        "raw": (RAW_CODE, str(raw_path), str(conv)),
    }
    for code, path, key in sides.values():  # warm the page cache and .pyc files; check counts
        assert run_python(code, path, key)["n"] == n_messages
    times: dict[str, list[float]] = {side: [] for side in sides}
    order = list(sides)
    for r in range(reps):
        for side in order[r % 3 :] + order[: r % 3]:
            code, path, key = sides[side]
            times[side].append(run_python(code, path, key)["ms"])
    c, s, b = times["convstore"], times["sdk"], times["raw"]
    c_ratios = [x / y for x, y in zip(c, b, strict=True)]
    s_ratios = [x / y for x, y in zip(s, b, strict=True)]
    cs_ratios = [x / y for x, y in zip(c, s, strict=True)]
    size = f"{n_messages:,} msgs"
    is_target = n_messages == 10_000
    ratio = median(c_ratios)
    ctx.add(
        Row(
            "first load, fresh process: convstore replay vs raw rows",
            size,
            reps,
            median(c),
            median(b),
            "ms",
            ratio,
            "lower",
            f"<= {TARGET_FIRST_REPLAY}x" if is_target else "",
            verdict(ratio <= TARGET_FIRST_REPLAY) if is_target else "",
            note=(
                "after imports: open_store + Store.replay(shape='openai', vision=False); "
                "baseline: sqlite3.connect + json.loads of one JSON row per message"
            ),
            samples={"convstore_ms": c, "baseline_ms": b, "ratios": c_ratios},
        )
    )
    ctx.add(
        Row(
            "first load, fresh process: Agents SDK SQLiteSession vs raw rows",
            size,
            reps,
            median(s),
            median(b),
            "ms",
            median(s_ratios),
            "lower",
            note=(
                "peer, not convstore: the convstore column holds the SDK's time; after imports: "
                "SQLiteSession(...) + await get_items(); baseline as above"
            ),
            samples={"sdk_ms": s, "baseline_ms": b, "ratios": s_ratios},
        )
    )
    ctx.add(
        Row(
            "first load, fresh process: convstore vs Agents SDK",
            size,
            reps,
            median(c),
            median(s),
            "ms",
            median(cs_ratios),
            "lower",
            note="the baseline column is the Agents SDK's SQLiteSession (same repeats)",
            samples={"convstore_ms": c, "sdk_ms": s, "ratios": cs_ratios},
        )
    )
