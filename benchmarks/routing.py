"""One job over two heterogeneous backends: does the prompt-cache gate cost the router its split?

A ``gate.map`` job (bulk copy, a few shared system prompts) runs over ``tpu`` + ``gpu``
simulator backends, once under ``batch_content`` (warm-up, ramp window and turns per backend
and prefix) and once under ``default`` (no cache gate), side by side at each concurrency
setting and seed. Under the gate a call is bound to a backend only when a gate lets it
through (late binding, docs/caching.md); bound on arrival, the whole job went to whichever
backend looked best when it started.

Columns: job time, the split of calls between the backends, cached over input tokens, failed
calls. Targets: the gated job within 1.1× the ungated one's time, both backends used, a higher
hit rate, no failed call. Virtual time: exact and repeatable.

    python benchmarks/routing.py [--calls 1500] [--prompts 3] [--levels 10,30,auto]
                                 [--seeds 1,2,3]

``--tiers`` runs the tiered-serving section instead (issue 17, benchmarks/_tiers.py):
``tier="auto"`` against everything-large and everything-small over a cpu/small and a
tpu/large backend — cost per successful call, p50 latency, hard requests answered small —
then the same requests on a server whose answers fill ``max_tokens`` (issue 31).

    python benchmarks/routing.py --tiers [--calls 600] [--seeds 1,2,3] [--rate 2]
                                 [--hard-share 0.3]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual
from gptgate.testing import sim_backend

BACKENDS = ("tpu", "gpu")


@dataclass(frozen=True, slots=True)
class Job:
    time_s: float
    split: dict[str, int]
    hit_rate: float
    failed: int


def items(calls: int, prompts: int) -> list[dict[str, Any]]:
    guide = "Write product copy in the brand voice, concise and warm. " * 100  # ~1,400 tokens
    return [
        {
            "messages": [
                {"role": "system", "content": f"[brand {i % prompts}] {guide}"},
                {"role": "user", "content": f"Item #{i}: walnut desk, {i % 7} drawers."},
            ],
            "max_tokens": 150,
        }
        for i in range(calls)
    ]


async def job(scenario: str, level: str, calls: int, prompts: int, seed: int) -> Job:
    clock = LoopClock()
    concurrency: int | str = level if level == "auto" else int(level)
    backends = [
        sim_backend(
            profile,
            name=profile,
            clock=clock,
            seed=seed + n,
            concurrency=concurrency,
            max_concurrency=128,
            timeout=120.0,
        )[0]
        for n, profile in enumerate(BACKENDS)
    ]
    async with gg.Gateway(backends, clock=clock, seed=seed) as gate:
        start = clock.now()
        results = await gate.map(items(calls, prompts), scenario=scenario)
        elapsed = clock.now() - start
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    split = {name: sum(r.backend == name for r in ok) for name in BACKENDS}
    cached = sum(r.usage.cached_input_tokens for r in ok)
    billed = sum(r.usage.input_tokens for r in ok) or 1
    return Job(elapsed, split, cached / billed, len(results) - len(ok))


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="1500 (600 with --tiers)")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--levels", default="10,30,auto")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--tiers", action="store_true", help="the tiered-serving section")
    parser.add_argument("--rate", type=float, default=2.0, help="--tiers: calls per second")
    parser.add_argument("--hard-share", type=float, default=0.3, help="--tiers: hard requests")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.tiers:
        from _tiers import main as tiers_main

        return tiers_main(args.calls or 600, seeds, args.rate, args.hard_share)
    args.calls = args.calls or 1500
    print(
        f"$ python benchmarks/routing.py --calls {args.calls} --prompts {args.prompts} "
        f"--levels {args.levels} --seeds {args.seeds}"
    )
    print(f"backends {' + '.join(BACKENDS)}; virtual time (exact)\n")
    head = (
        f"{'limit':>5} {'seed':>4} {'scenario':<14} {'time s':>7} {'vs default':>10} "
        f"{'split ' + '/'.join(BACKENDS):>14} {'hit':>6} {'failed':>6}"
    )
    print(head)
    print("-" * len(head))
    ok = True
    ratios: list[float] = []
    for level in args.levels.split(","):
        for seed in seeds:
            plain = run_virtual(job, "default", level, args.calls, args.prompts, seed)
            gated = run_virtual(job, "batch_content", level, args.calls, args.prompts, seed)
            ratio = gated.time_s / plain.time_s
            ratios.append(ratio)
            for name, j in (("default", plain), ("batch_content", gated)):
                split = "/".join(str(j.split[b]) for b in BACKENDS)
                rel = f"{ratio:.2f}×" if j is gated else ""
                print(
                    f"{level:>5} {seed:>4} {name:<14} {j.time_s:>7.1f} {rel:>10} {split:>14} "
                    f"{j.hit_rate:>6.1%} {j.failed:>6}"
                )
            ok &= ratio <= 1.1 and min(gated.split.values()) > 0
            ok &= gated.hit_rate > plain.hit_rate and gated.failed == 0
    print(
        f"\ngated time / default time: mean {statistics.mean(ratios):.2f}×, "
        f"max {max(ratios):.2f}× — targets {'hold' if ok else 'DO NOT HOLD'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
