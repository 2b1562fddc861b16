"""Tail hedging on the gpu simulator profile: a 1,000-call batch job with and without it.

The same job (same seed, same prompts) runs twice side by side on the virtual clock: plain,
and with ``hedge=True`` (the default policy: a duplicate once a call has waited past its
backend's p95, at most 5% of calls). Columns: the job's makespan, the p99 of its calls'
latencies, the duplicates sent, and the tokens the simulator billed (its own ledger, the
ground truth). Targets (issue 14 item 4): p99 ≤ 0.8×, makespan ≤ 0.9×, ≤ 5% extra billed.

    python benchmarks/hedge.py [--calls 1000] [--seeds 11,12,13] [--concurrency 32]
                               [--backends 1]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual
from gptgate.testing import sim_backend


@dataclass(frozen=True, slots=True)
class Run:
    makespan_s: float
    p99_s: float
    hedges: int
    billed_tokens: int
    failed: int


def items(calls: int) -> list[dict[str, Any]]:
    return [
        {"messages": [{"role": "user", "content": f"summarise document {i}"}], "max_tokens": 150}
        for i in range(calls)
    ]


async def job(hedge: bool, calls: int, seed: int, concurrency: int, backends: int) -> Run:
    clock = LoopClock()
    pairs = [
        sim_backend("gpu", name=f"gpu{n}", clock=clock, seed=seed + n,
                    concurrency=concurrency, timeout=120.0)
        for n in range(backends)
    ]
    async with gg.Gateway([b for b, _ in pairs], clock=clock, seed=seed) as gate:
        start = clock.now()
        results = await gate.map(items(calls), hedge=hedge, max_pending=calls)
        makespan = clock.now() - start
        hedges = sum(s.hedges for s in gate.stats().values())
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    # a batch call's latency from its send: the queue behind the job's own calls is the same
    # with or without hedging and would hide the tail
    latencies = sorted(r.latency_s - r.queue_s for r in ok)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0.0
    billed = 0
    for _, engine in pairs:
        snap = engine.ledger.snapshot()
        billed += snap.input_tokens + snap.output_tokens
    return Run(makespan, p99, hedges, billed, len(results) - len(ok))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--seeds", default="11,12,13")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--backends", type=int, default=1)
    args = parser.parse_args()
    print(f"gpu ×{args.backends}, {args.calls} calls, concurrency {args.concurrency}")
    print("seed | makespan plain→hedged (×) | p99 plain→hedged (×) | hedges | extra billed")
    ratios: list[tuple[float, float, float]] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        plain = run_virtual(job, False, args.calls, seed, args.concurrency, args.backends)
        hedged = run_virtual(job, True, args.calls, seed, args.concurrency, args.backends)
        m = hedged.makespan_s / plain.makespan_s
        p = hedged.p99_s / plain.p99_s
        extra = hedged.billed_tokens / plain.billed_tokens - 1
        ratios.append((m, p, extra))
        print(
            f"{seed:4} | {plain.makespan_s:7.1f}→{hedged.makespan_s:7.1f} s ({m:.2f}×) | "
            f"{plain.p99_s:5.2f}→{hedged.p99_s:5.2f} s ({p:.2f}×) | {hedged.hedges:6} | "
            f"{extra:+.1%}  (failed {plain.failed}/{hedged.failed})"
        )
    m, p, e = (statistics.median(r[i] for r in ratios) for i in range(3))
    verdict = "holds" if p <= 0.8 and m <= 0.9 and e <= 0.05 else "misses"
    print(f"median: makespan {m:.2f}× (≤0.9), p99 {p:.2f}× (≤0.8), extra billed {e:+.1%} (≤5%)"
          f" → {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
