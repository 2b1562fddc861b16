"""Tail hedging on the gpu simulator profile: a 1,000-call batch job with and without it.

The same job (same seed, same prompts) runs twice side by side on the virtual clock: plain,
and with ``hedge=True`` (the default policy: a duplicate once a call has waited past its
backend's p95, at most 5% of calls). Columns: the job's makespan, the p99 of its calls'
latencies, the duplicates sent, and the tokens the simulator billed (its own ledger, the
ground truth). Targets (issue 14 item 4): p99 ≤ 0.8×, makespan ≤ 0.9×, ≤ 5% extra billed.

``--stream`` runs the same job through ``gate.stream`` (all items at once, each read to the
end): hedging is then on time to first token, and the rows add the p99 of the time to first
token as the caller sees it (from the call's send).

    python benchmarks/hedge.py [--calls 1000] [--seeds 11,12,13] [--concurrency 32]
                               [--backends 1] [--stream]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio

import gptgate as gg
from gptgate.sim import LoopClock, SimProfile, run_virtual
from gptgate.testing import sim_backend


@dataclass(frozen=True, slots=True)
class Run:
    makespan_s: float
    p99_s: float
    hedges: int
    billed_tokens: int
    failed: int
    #: streams only: p99 of the time to first token from the call's send
    ttft_p99_s: float = 0.0


def items(calls: int) -> list[dict[str, Any]]:
    return [
        {"messages": [{"role": "user", "content": f"summarise document {i}"}], "max_tokens": 150}
        for i in range(calls)
    ]


def p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


async def streamed(
    gate: gg.Gateway, clock: LoopClock, hedge: bool, calls: int
) -> tuple[list[gg.ChatResult | gg.GateError], list[float]]:
    """Every item through gate.stream at once; per item, the result and the time its first
    token reached the caller (from the call's start)."""
    results: list[gg.ChatResult | gg.GateError] = [gg.GateError("not run")] * calls
    firsts: list[float] = [0.0] * calls

    async def one(index: int, item: dict[str, Any]) -> None:
        start = clock.now()
        try:
            messages, max_tokens = item["messages"], item["max_tokens"]
            async with gate.stream(messages, hedge=hedge, max_tokens=max_tokens) as s:
                async for _ in s:
                    if not firsts[index]:
                        firsts[index] = clock.now() - start
                results[index] = s.result
        except gg.GateError as error:
            results[index] = error

    async with anyio.create_task_group() as tg:
        for index, item in enumerate(items(calls)):
            tg.start_soon(one, index, item)
    return results, firsts


async def job(
    hedge: bool,
    calls: int,
    seed: int,
    concurrency: int,
    backends: int,
    stream: bool,
    profile: str | SimProfile = "gpu",
) -> Run:
    """The job on ``backends`` backends of ``profile`` (benchmarks/family.py passes drawn
    ones)."""
    clock = LoopClock()
    pairs = [
        sim_backend(profile, name=f"sim{n}", clock=clock, seed=seed + n,
                    concurrency=concurrency, timeout=120.0)
        for n in range(backends)
    ]
    firsts: list[float] = []
    async with gg.Gateway([b for b, _ in pairs], clock=clock, seed=seed) as gate:
        start = clock.now()
        if stream:
            results, firsts = await streamed(gate, clock, hedge, calls)
        else:
            results = await gate.map(items(calls), hedge=hedge, max_pending=calls)
        makespan = clock.now() - start
        hedges = sum(s.hedges for s in gate.stats().values())
    ok = [(i, r) for i, r in enumerate(results) if isinstance(r, gg.ChatResult)]
    # a batch call's latency from its send: the queue behind the job's own calls is the same
    # with or without hedging and would hide the tail
    latencies = [r.latency_s - r.queue_s for _, r in ok]
    ttfts = [firsts[i] - r.queue_s for i, r in ok] if stream else []
    billed = 0
    for _, engine in pairs:
        snap = engine.ledger.snapshot()
        billed += snap.input_tokens + snap.output_tokens
    return Run(makespan, p99(latencies), hedges, billed, len(results) - len(ok), p99(ttfts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--seeds", default="11,12,13")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--backends", type=int, default=1)
    parser.add_argument("--stream", action="store_true", help="through gate.stream (TTFT)")
    args = parser.parse_args()
    how = "gate.stream" if args.stream else "gate.map"
    print(f"gpu ×{args.backends}, {args.calls} calls via {how}, concurrency {args.concurrency}")
    extra_column = " | TTFT p99 plain→hedged (×)" if args.stream else ""
    print("seed | makespan plain→hedged (×) | p99 plain→hedged (×) | hedges | extra billed"
          + extra_column)
    ratios: list[tuple[float, float, float]] = []
    for seed in (int(s) for s in args.seeds.split(",")):
        plain, hedged = (
            run_virtual(job, hedge, args.calls, seed, args.concurrency, args.backends, args.stream)
            for hedge in (False, True)
        )
        m = hedged.makespan_s / plain.makespan_s
        p = hedged.p99_s / plain.p99_s
        extra = hedged.billed_tokens / plain.billed_tokens - 1
        ratios.append((m, p, extra))
        print(
            f"{seed:4} | {plain.makespan_s:7.1f}→{hedged.makespan_s:7.1f} s ({m:.2f}×) | "
            f"{plain.p99_s:5.2f}→{hedged.p99_s:5.2f} s ({p:.2f}×) | {hedged.hedges:6} | "
            f"{extra:+.1%}  (failed {plain.failed}/{hedged.failed})"
            + (
                f" | {plain.ttft_p99_s:5.2f}→{hedged.ttft_p99_s:5.2f} s "
                f"({hedged.ttft_p99_s / plain.ttft_p99_s:.2f}×)" if args.stream else ""
            )
        )
    m, p, e = (statistics.median(r[i] for r in ratios) for i in range(3))
    verdict = "holds" if p <= 0.8 and m <= 0.9 and e <= 0.05 else "misses"
    print(f"median: makespan {m:.2f}× (≤0.9), p99 {p:.2f}× (≤0.8), extra billed {e:+.1%} (≤5%)"
          f" → {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
