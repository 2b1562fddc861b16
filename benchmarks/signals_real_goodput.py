"""Goodput and p99 on a real llama-server: ``auto``, ``auto`` with ``signals=True``, a fixed limit.

Start a server first (``--slots`` and ``--metrics`` make both pages readable)::

    PARALLEL=4 MODEL=slow EXTRA_ARGS="--metrics --slots" \\
        bash ../shared/realserver/start_server.sh 18130
    python benchmarks/signals_real_goodput.py --base-url http://127.0.0.1:18130/v1 \\
        [--calls 200] [--fixed 4] [--rounds 2]

Each run sends ``--calls`` calls of ``max_tokens=48`` through one ``gate.map`` (submitted at
once) to a ``provider="llamacpp"`` backend; runs alternate (the machine is noisy). Columns:
goodput (answers a second over the job), p50 and p99 of ``ChatResult.latency_s`` (admission
to answer: the job's own queue included), failed calls, the limit at the end and the server's
running count at the last read. Not in CI (it needs the real server).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import anyio

import gptgate as gg


async def run(base_url: str, way: str, calls: int, fixed: int) -> str:
    backend = gg.Backend(
        name="llama", provider="llamacpp", base_url=base_url, model="m",
        concurrency=fixed if way == "fixed" else "auto", max_concurrency=64,
        signals=way == "signals", signals_interval_s=0.5, timeout=60.0,
    )
    items = [
        {"messages": [{"role": "user", "content": f"Write one sentence about the sea ({i})."}],
         "max_tokens": 48}
        for i in range(calls)
    ]
    async with gg.Gateway([backend]) as gate:
        start = time.monotonic()
        results = await gate.map(items)
        elapsed = time.monotonic() - start
        ok = sorted(r.latency_s for r in results if isinstance(r, gg.ChatResult))
        stats = gate.stats()["llama"]
    p99 = ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else float("nan")
    running = stats.server.running if stats.server else None
    return (f"{len(ok) / elapsed:>9.2f} {statistics.median(ok) if ok else float('nan'):>6.2f} "
            f"{p99:>6.2f} {calls - len(ok):>6} {stats.limit:>5} {running!s:>7}")


async def main(args: argparse.Namespace) -> None:
    print(f"{'round':>5} {'way':>8} {'goodput':>9} {'p50':>6} {'p99':>6} {'failed':>6} "
          f"{'limit':>5} {'running':>7}")
    for round_ in range(args.rounds):
        for way in ("auto", "signals", "fixed"):
            row = await run(args.base_url, way, args.calls, args.fixed)
            name = f"fixed {args.fixed}" if way == "fixed" else way
            print(f"{round_:>5} {name:>8} {row}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--fixed", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    print(" ".join(["python", *sys.argv]))
    anyio.run(main, parser.parse_args())
