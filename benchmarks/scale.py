"""100,000 calls through ``gate.map`` against the in-process simulator (time-scaled).

Each size runs in a fresh child process so its peak RSS is its own. Targets: peak RSS ≤ 300 MB
at 100k calls, and CPU per call flat from 1k to 100k (no hidden O(n²) in queues or
bookkeeping: the 100k row's CPU/call within ~1.25× of the 1k row's).

    python benchmarks/scale.py [--sizes 1000,10000,100000] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

CHILD = "--child"


def items(n: int) -> Iterator[dict[str, Any]]:
    """A generator: map must not need the whole input in memory."""
    system = {"role": "system", "content": "You summarise support tickets in one line."}
    for i in range(n):
        yield {
            "messages": [system, {"role": "user", "content": f"Ticket {i}: printer jams."}],
            "max_tokens": 30,
        }


def child(n: int, concurrency: int) -> None:
    import anyio

    import gptgate as gg
    from gptgate.sim import SimEngine, SimTransport, get_profile

    async def run() -> dict[str, float]:
        clock = gg.ScaledClock(2000.0)
        profile = get_profile("gpu").model_copy(
            update={
                "name": "scale", "slots": 4096, "max_queue": None, "rpm": None, "tpm": None,
                "jitter_sigma": 0.0, "load_jitter_sigma": 0.0, "overload_error_rate": 0.0,
                "output_tokens_mean": 20, "output_tokens_sigma": 0.0,
            }
        )
        engine = SimEngine(profile, clock=clock, seed=3)
        backend = gg.Backend(
            name="sim", base_url="http://127.0.0.1:8000/v1", model="m",
            concurrency=concurrency, transport=SimTransport(engine),
        )
        async with gg.Gateway([backend], clock=clock) as gate:
            cpu, wall = time.process_time(), time.perf_counter()
            results = await gate.map(items(n))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        failed = sum(1 for r in results if not isinstance(r, gg.ChatResult))
        return {"cpu_s": cpu, "wall_s": wall, "failed": failed}

    out = anyio.run(run)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(CHILD, type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.concurrency)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, CHILD, str(n), "--concurrency", str(args.concurrency)],
            check=True, capture_output=True, text=True,
        )
        rows.append((n, json.loads(out.stdout.strip().splitlines()[-1])))
    print(f"$ python benchmarks/scale.py --sizes {args.sizes} --concurrency {args.concurrency}")
    print("gate.map over a generator, in-process simulator (ScaledClock 2000), fresh process per"
          " row\n")
    print(f"{'calls':>8} {'failed':>7} {'wall s':>8} {'CPU s':>8} {'CPU µs/call':>12} "
          f"{'peak RSS MB':>12}")
    print("-" * 62)
    for n, r in rows:
        print(f"{n:>8} {int(r['failed']):>7} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} "
              f"{r['cpu_s'] / n * 1e6:>12.0f} {r['peak_rss_mb']:>12.0f}")
    first, last = rows[0], rows[-1]
    drift = (last[1]["cpu_s"] / last[0]) / (first[1]["cpu_s"] / first[0])
    print(f"\nCPU per call, {last[0]:,} vs {first[0]:,} calls: {drift:.2f}x "
          f"(flat ≤ 1.25x: {'yes' if drift <= 1.25 else 'NO'}); "
          f"peak RSS at {last[0]:,}: {last[1]['peak_rss_mb']:.0f} MB "
          f"(≤ 300 MB: {'yes' if last[1]['peak_rss_mb'] <= 300 else 'NO'})")


if __name__ == "__main__":
    main()
