"""Fleet-wide RPM/TPM pacing and warm-up single-flight (``shared=``): W worker processes over
one rate-limited simulator server with a prefix cache, with and without ``shared=``.

Each row starts a fresh time-scaled ``tier1`` server (an RPM limit far below its capacity,
one replica with a prefix cache) and W worker *processes*. Every worker runs the same job
shape through ``gate.map``: P long system prompts (prefixes, the same in every worker) with
C questions each, interleaved, on a scenario that warms each prefix and ramps behind it.
Rows: ``per-process`` (no ``shared=``: each process paces from the headers it sees and warms
each prefix itself) and ``shared=`` (one budget and one warm-up per prefix for the fleet;
one redis-server on loopback). The concurrency is the same in both (``--concurrency``,
per process without ``shared=``; a fixed limit is fleet-wide with it).

Columns from the server's own ledger: requests, 429s (and their share of requests), the
prefix-cache hit rate (cached over billed input tokens); from the workers: successes, failed
calls, successes per real second, and with ``shared=`` the warm-ups claimed for the fleet.

``--profile spread`` runs the job on a server that spreads hot prefixes over cold replicas
instead (the ramp's case); ``--no-fleet-ramp`` makes the ``shared=`` rows ramp each process
alone, for comparison.

    nice -n 10 python benchmarks/fleet_pacing.py [--workers 4] [--prefixes 8]
        [--calls-per-prefix 10] [--rpm 300] [--time-scale 10] [--concurrency auto] [--seeds 1]
        [--profile tier1] [--no-fleet-ramp]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import gptgate as gg
from gptgate.clock import ScaledClock
from gptgate.shared.server import redis_server
from gptgate.sim import SimProcess

#: generous for 2 shared cores: a late event loop must not read as a Redis outage
OP_BUDGET_S = 0.5
SCENARIO = gg.Scenario(name="job", stream=False, ramp=gg.RampPolicy())


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    requests: int
    rate_limited: int
    hit_rate: float
    ok: int
    failed: int
    goodput: float
    claimed: int
    joined: int


def _prefix(p: int) -> str:
    # about 1,600 tokens: above the 1,024 a provider caches from
    return f"Reference document {p}. " + " ".join(f"fact-{p}-{k} holds." for k in range(400))


def _worker(
    base_url: str, shared_url: str | None, namespace: str, args: dict[str, Any], index: int,
    start_at: float, out: Any,
) -> None:
    asyncio.run(_work(base_url, shared_url, namespace, args, index, start_at, out))


async def _work(
    base_url: str, shared_url: str | None, namespace: str, args: dict[str, Any], index: int,
    start_at: float, out: Any,
) -> None:
    concurrency: int | str = args["concurrency"]
    if concurrency != "auto":
        concurrency = int(concurrency)
    backend = gg.Backend(name="sim", base_url=base_url, model="m", concurrency=concurrency,
                         timeout=120.0)
    shared = (
        gg.Shared(shared_url, namespace=namespace, lease_s=2.0, op_budget_s=OP_BUDGET_S)
        if shared_url else None
    )
    clock = ScaledClock(args["time_scale"])  # the server's minute is the gateway's minute
    async with gg.Gateway([backend], shared=shared, seed=index, clock=clock) as gate:
        if args["no_fleet_ramp"] and gate.cache_gate._fleet_warmup is not None:
            gate.cache_gate._fleet_warmup.on_members = None  # each process ramps alone
        out.put(("hello", index))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        items = [
            {"messages": [{"role": "system", "content": _prefix(p)},
                          {"role": "user", "content": f"worker {index} question {c}"}],
             "max_tokens": 60}
            for c in range(args["calls_per_prefix"])
            for p in range(args["prefixes"])
        ]
        results = await gate.map(items, scenario=SCENARIO)
        warmup = gate.cache_gate._fleet_warmup
        claimed = joined = 0
        if warmup is not None:
            statistics = warmup.statistics()
            claimed, joined = statistics.claimed, statistics.joined
    ok = sum(isinstance(r, gg.ChatResult) for r in results)
    out.put(("done", index, ok, len(results) - ok, time.time(), claimed, joined))


def _run(args: argparse.Namespace, shared_url: str | None, seed: int) -> Row:
    namespace = f"pace{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    options = {
        "concurrency": args.concurrency, "time_scale": args.time_scale,
        "prefixes": args.prefixes, "calls_per_prefix": args.calls_per_prefix,
        "no_fleet_ramp": args.no_fleet_ramp,
    }
    overrides = {"rpm": args.rpm} if args.profile == "tier1" else {}
    with SimProcess(args.profile, time_scale=args.time_scale, seed=seed, **overrides) as server:
        start_at = time.time() + 3.0 + 0.5 * args.workers
        processes = [
            context.Process(target=_worker, args=(server.base_url, shared_url, namespace,
                                                   options, i, start_at, out))
            for i in range(args.workers)
        ]
        for p in processes:
            p.start()
        for _ in range(args.workers):
            out.get(timeout=120)
        done = [out.get(timeout=900) for _ in range(args.workers)]
        for p in processes:
            p.join(timeout=30)
        ledger = server.ledger()
    ok = sum(d[2] for d in done)
    makespan = max(d[4] for d in done) - start_at
    return Row(
        "shared=" if shared_url else "per-process", ledger.requests, ledger.rate_limited,
        ledger.cache_hit_rate, ok, sum(d[3] for d in done), ok / makespan,
        sum(d[5] for d in done), sum(d[6] for d in done),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--prefixes", type=int, default=8)
    parser.add_argument("--calls-per-prefix", type=int, default=10)
    parser.add_argument("--rpm", type=int, default=300, help="tier1's RPM limit")
    parser.add_argument("--profile", default="tier1",
                        help="the server (e.g. spread: a hosted API spreading hot prefixes)")
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--concurrency", default="auto")
    parser.add_argument("--seeds", default="1")
    parser.add_argument("--no-fleet-ramp", action="store_true",
                        help="shared= rows: each process ramps its prefixes alone")
    args = parser.parse_args()
    print(f"{args.workers} worker processes, {args.prefixes} prefixes × "
          f"{args.calls_per_prefix} calls each per worker, {args.profile}"
          f"{f' at {args.rpm} RPM' if args.profile == 'tier1' else ''}, "
          f"concurrency={args.concurrency}, time ×{args.time_scale:g}")
    print(f"{'seed':>4} {'row':<12} {'requests':>8} {'429s':>10} {'hit rate':>8} {'ok':>5} "
          f"{'failed':>6} {'ok/s':>6} {'warm-ups claimed/joined':>24}")
    with redis_server() as redis:
        for seed in (int(s) for s in args.seeds.split(",")):
            for url in (None, redis.url):
                row = _run(args, url, seed)
                share = row.rate_limited / max(1, row.requests)
                fleet = f"{row.claimed}/{row.joined}" if url else "-"
                print(f"{seed:>4} {row.name:<12} {row.requests:>8} "
                      f"{row.rate_limited:>4} {share:>5.1%} {row.hit_rate:>8.1%} {row.ok:>5} "
                      f"{row.failed:>6} {row.goodput:>6.1f} {fleet:>24}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
