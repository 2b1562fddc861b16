"""Requests we hung up on, on llama.cpp's llama-server: does the server stay within the limit?

A timed-out (or cancelled) request is not over at the backend when the client closes its
connection: llama-server ends a streamed one at its next token, but finishes a non-streamed
one whole. Its concurrency slot therefore stays taken for the backend's ``abandon_grace_s``
after we hang up (gptgate/limits/limiter.py, ``Permit.abandon``). This runs the same job with
several graces against a real llama-server and polls its ``/metrics`` every 5 ms: requests
processing plus deferred (queued behind its slots) is the server's real concurrency.

Start the server first (``bash ../shared/realserver/start_server.sh 18080``: 4 slots), then:

    python benchmarks/abandoned.py [--base-url http://127.0.0.1:18080/v1] [--limit 4]
                                   [--calls 60] [--timeout 1] [--graces 0,0.1,2] [--stream]

Columns: calls, timeouts, failed, the server's peak concurrency against the limit, the share
of polls above the limit, goodput. Not in CI (it needs the real server).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from dataclasses import dataclass

import anyio
import httpx2

import gptgate as gg

_METRIC = re.compile(r"^llamacpp:(requests_processing|requests_deferred) (\S+)", re.M)


@dataclass(frozen=True, slots=True)
class Row:
    grace_s: float
    calls: int
    timeouts: int
    failed: int
    peak: int
    over_share: float
    goodput: float


async def _server_load(client: httpx2.AsyncClient, metrics_url: str) -> int:
    text = (await client.get(metrics_url)).text
    return int(sum(float(value) for _, value in _METRIC.findall(text)))


async def _wait_idle(client: httpx2.AsyncClient, metrics_url: str) -> None:
    with anyio.fail_after(60):
        while await _server_load(client, metrics_url):
            await anyio.sleep(0.05)


async def run(args: argparse.Namespace, grace_s: float) -> Row:
    metrics_url = args.base_url.removesuffix("/v1") + "/metrics"
    rng = random.Random(args.seed)
    # most answers fit the timeout; every few asks for far more than it allows
    sizes = [2000 if rng.random() < 0.2 else rng.randint(20, 120) for _ in range(args.calls)]
    backend = gg.Backend(
        name="llama", base_url=args.base_url, model="tiny", concurrency=args.limit,
        timeout=args.timeout, abandon_grace_s=grace_s, api_key="none",
    )
    polls: list[int] = []
    async with httpx2.AsyncClient() as client:
        await _wait_idle(client, metrics_url)
        async with gg.Gateway([backend], max_attempts=1, seed=args.seed, deadline_s=600.0) as gate:
            done = anyio.Event()

            async def poll() -> None:
                while not done.is_set():
                    polls.append(await _server_load(client, metrics_url))
                    await anyio.sleep(0.005)

            async def one(max_tokens: int) -> bool:
                body = {"messages": [{"role": "user", "content": "count on"}],
                        "max_tokens": max_tokens, "ignore_eos": True}
                try:
                    if args.stream:
                        async with gate.stream(**body) as s:
                            async for _ in s:
                                pass
                    else:
                        await gate.chat(**body, stream=False)
                except gg.GateError:
                    return False
                return True

            ok: list[bool] = []
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                tg.start_soon(poll)
                async with anyio.create_task_group() as calls:
                    for size in sizes:
                        calls.start_soon(lambda size=size: _append(ok, one(size)))
                elapsed = time.perf_counter() - start
                done.set()
            stats = gate.stats()["llama"]
    over = sum(1 for p in polls if p > args.limit)
    return Row(grace_s, args.calls, stats.timeouts, ok.count(False), max(polls, default=0),
               over / max(1, len(polls)), ok.count(True) / elapsed)


async def _append(out: list[bool], result: object) -> None:
    out.append(await result)  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:18080/v1")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--graces", default="0,0.1,2")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    print("$ python " + " ".join(sys.argv))
    rows = [anyio.run(run, args, float(g)) for g in args.graces.split(",")]
    print(f"\n{'stream' if args.stream else 'non-stream'} calls, fixed limit {args.limit}, "
          f"attempt timeout {args.timeout:g} s, no retries")
    print(f"{'grace s':>8} {'calls':>6} {'timeouts':>8} {'failed':>6} {'peak/limit':>10} "
          f"{'polls over':>10} {'goodput/s':>9}")
    for r in rows:
        print(f"{r.grace_s:>8g} {r.calls:>6} {r.timeouts:>8} {r.failed:>6} "
              f"{f'{r.peak}/{args.limit}':>10} {r.over_share:>10.1%} {r.goodput:>9.1f}")


if __name__ == "__main__":
    main()
