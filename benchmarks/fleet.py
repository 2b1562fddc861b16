"""Many processes, one backend: W worker processes over one simulator server, with and without
``shared=`` (issue 15).

Each row starts a fresh ``gptgate sim serve``-like server (``SimProcess``, time-scaled) and W
worker *processes*, each running its share of one batch job through ``gate.map``. Rows:
``per-process auto`` (today without ``shared=``: each process learns its own limit), and
``shared= fixed N`` for each fleet-wide limit N of the grid (one redis-server on loopback).
``shared=`` with ``concurrency="auto"`` is not built yet (auto stays per process), so it has
no row. Columns: goodput (successes per real second), p99 latency, 429s and billed tokens per
success from the server's own ledger (p99 from each call's send: the job's queue at the
gateway left out), failed calls, and the fleet's real concurrency at the
server (``peak_in_flight``) against the fleet limit.

Then ``--kill``: the best fixed row again with one worker SIGKILLed a third of the way in —
the survivors must lose no call, and the dead worker's permits must be back within
``lease_s`` (read from Redis).

    python benchmarks/fleet.py [--workers 4,8] [--calls 1200] [--levels 8,16,32,48]
                               [--profile gpu] [--time-scale 20] [--kill]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import gptgate as gg
from gptgate.shared.server import redis_server
from gptgate.sim import SimProcess

LEASE_S = 2.0
#: Redis's budget per operation. The default (50 ms) is for a server with cores to spare; here
#: W workers, the simulator and redis-server share 2 cores, and a worker whose event loop is
#: late by more than the budget declares a (false) outage and admits on its local share while
#: the others still count in Redis — the fleet's peak then passes its limit. `--op-budget-s
#: 0.05` shows it; the table's `outages` column counts them.
OP_BUDGET_S = 0.5


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    limit: int | None
    goodput: float
    p99_s: float
    rate_limited: int
    failed: int
    tokens_per_success: float
    peak: int
    outages: int


def _worker(
    base_url: str, shared_url: str | None, namespace: str, concurrency: int | str, calls: int,
    index: int, start_at: float, out: Any, op_budget_s: float,
) -> None:
    asyncio.run(_work(base_url, shared_url, namespace, concurrency, calls, index, start_at, out,
                      op_budget_s))


async def _work(
    base_url: str, shared_url: str | None, namespace: str, concurrency: int | str, calls: int,
    index: int, start_at: float, out: Any, op_budget_s: float,
) -> None:
    backend = gg.Backend(name="sim", base_url=base_url, model="m", concurrency=concurrency,
                         timeout=120.0, max_concurrency=128)
    shared = (
        gg.Shared(shared_url, namespace=namespace, lease_s=LEASE_S, op_budget_s=op_budget_s)
        if shared_url else None
    )
    async with gg.Gateway([backend], shared=shared, seed=index) as gate:
        fleet = gate._fleet
        out.put(("hello", index, fleet.worker_id if fleet is not None else None))
        await asyncio.sleep(max(0.0, start_at - time.time()))
        items = [
            {"messages": [{"role": "user", "content": f"worker {index} item {i}: summarise"}],
             "max_tokens": 120}
            for i in range(calls)
        ]
        results = await gate.map(items)
        stats = gate.stats()["sim"].fleet
        outages = stats.outages if stats is not None else 0
    ok = [r for r in results if isinstance(r, gg.ChatResult)]
    # latency from the send: the job's own queue at the gateway is not the backend's doing
    out.put((
        "done", index, [r.latency_s - r.queue_s for r in ok], len(results) - len(ok),
        time.time(), outages,
    ))


def _run(
    args: argparse.Namespace, workers: int, concurrency: int | str, shared_url: str | None,
    kill: bool = False,
) -> tuple[Row, str]:
    """One row on a fresh server; ``kill``: SIGKILL worker 0 a third of the way in."""
    namespace = f"fleet{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    note = ""
    with SimProcess(args.profile, time_scale=args.time_scale, seed=args.seed) as server:
        start_at = time.time() + 3.0 + 0.3 * workers  # every worker has started by then
        processes = [
            context.Process(target=_worker, args=(server.base_url, shared_url, namespace,
                                                   concurrency, args.calls // workers, i,
                                                   start_at, out, args.op_budget_s))
            for i in range(workers)
        ]
        for p in processes:
            p.start()
        hello = {}
        for _ in range(workers):
            _, index, worker_id = out.get(timeout=60)
            hello[index] = worker_id
        if kill:
            note = asyncio.run(_kill_and_watch(processes[0], hello[0], shared_url, namespace,
                                               start_at + args.kill_after_s))
        done = [out.get(timeout=600) for _ in range(workers - (1 if kill else 0))]
        for p in processes:
            p.join(timeout=30)
        ledger = server.ledger()
    latencies = sorted(x for d in done for x in d[2])
    failed = sum(d[3] for d in done)
    makespan = max(d[4] for d in done) - start_at
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else 0.0
    name = ("per-process auto" if concurrency == "auto" else f"shared= fixed {concurrency}")
    row = Row(name, concurrency if isinstance(concurrency, int) else None,
              len(latencies) / makespan, p99, ledger.rate_limited, failed,
              ledger.billed_tokens / max(1, ledger.ok), ledger.peak_in_flight,
              sum(d[5] for d in done))
    return row, note


async def _kill_and_watch(
    process: Any, worker_id: str | None, url: str | None, namespace: str, kill_at: float
) -> str:
    """SIGKILL the worker, then read Redis until none of its leases counts any more."""
    import redis.asyncio

    await asyncio.sleep(max(0.0, kill_at - time.time()))
    assert url is not None and worker_id is not None
    client: Any = redis.asyncio.Redis.from_url(url)
    pattern = f"gptgate:{namespace}:*:permits"
    keys = [k async for k in client.scan_iter(match=pattern)]
    held_before = 0
    for key in keys:
        members = await client.zrangebyscore(key, time.time() * 1000, "+inf")
        held_before += sum(1 for m in members if m.decode().startswith(worker_id))
    os.kill(process.pid, signal.SIGKILL)
    killed = time.monotonic()
    while True:
        held = 0
        for key in keys:
            members = await client.zrangebyscore(key, time.time() * 1000, "+inf")
            held += sum(1 for m in members if m.decode().startswith(worker_id))
        if held == 0 or time.monotonic() - killed > 10 * LEASE_S:
            break
        await asyncio.sleep(0.02)
    await client.aclose()
    back = time.monotonic() - killed
    verdict = "holds" if held == 0 and back <= LEASE_S + 0.1 else "MISS"
    return (f"worker 0 SIGKILLed holding {held_before} permits: back after {back:.2f} s "
            f"(lease_s {LEASE_S}) [{verdict}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="4,8")
    parser.add_argument("--calls", type=int, default=1200)
    parser.add_argument("--levels", default="8,16,32,48")
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill", action="store_true")
    parser.add_argument("--kill-after-s", type=float, default=2.0)
    parser.add_argument("--op-budget-s", type=float, default=OP_BUDGET_S)
    args = parser.parse_args()

    print("$ python benchmarks/fleet.py " + " ".join(sys.argv[1:]))
    levels = [int(x) for x in args.levels.split(",")]
    with redis_server() as redis:
        for workers in (int(w) for w in args.workers.split(",")):
            print(f"\n{args.profile}, {workers} worker processes, {args.calls} calls, "
                  f"time scale {args.time_scale}")
            print(f"{'row':<20} {'goodput/s':>9} {'p99 s':>7} {'429s':>5} {'failed':>6} "
                  f"{'tok/success':>11} {'peak in flight':>15} {'outages':>7}")
            rows = [_run(args, workers, "auto", None)[0]]
            rows += [_run(args, workers, level, redis.url)[0] for level in levels]
            for r in rows:
                peak = f"{r.peak}" + (f" / {r.limit}" if r.limit else "")
                print(f"{r.name:<20} {r.goodput:>9.1f} {r.p99_s:>7.2f} {r.rate_limited:>5} "
                      f"{r.failed:>6} {r.tokens_per_success:>11.1f} {peak:>15} {r.outages:>7}")
            fixed = [r for r in rows if r.limit is not None]
            best = max(fixed, key=lambda r: r.goodput)
            over = [r.name for r in fixed if r.peak > (r.limit or 0)]
            print(f"shared=: peak in flight never above the fleet limit: "
                  f"{'holds' if not over else 'MISS ' + ', '.join(over)}; 0 failed: "
                  f"{'holds' if all(r.failed == 0 for r in fixed) else 'MISS'}")
            auto = rows[0]
            print(f"per-process auto: peak {auto.peak} in flight, p99 "
                  f"{auto.p99_s / best.p99_s:.2f}x and goodput {auto.goodput / best.goodput:.2f}x"
                  f" of the best fixed fleet-wide limit ({best.limit}); shared= auto: not built")
            if args.kill:
                row, note = _run(args, workers, best.limit or levels[0], redis.url, kill=True)
                print(f"--kill at {args.kill_after_s} s, shared= fixed {best.limit}: "
                      f"survivors failed {row.failed} "
                      f"[{'holds' if row.failed == 0 else 'MISS'}]; {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
