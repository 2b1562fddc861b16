"""Server signals (issue 35): ``concurrency="auto"`` with and without ``signals=True``.

Two simulator backends (the ``plateau`` profile: latency flat until the slots fill), one with
half the other's slots, serve one open-loop stream of calls (Poisson arrivals at ``--load`` ×
their joint capacity, ``slots / --service-s``). With signals the gateway reads
each server's ``/metrics`` (vLLM's names, from the simulator's scheduler) every
``--interval`` s: a waiting queue caps that backend's limit and the router adds the waiting
work per slot to its score. Without, the limit and router go by latency alone.

Columns: goodput (successful calls/s), p50/p99 latency, the small backend's mean server-side
waiting queue (sampled every 0.25 s) against its slots, calls that failed. Targets: with
signals the small backend's mean waiting ≤ its slots and goodput ≥ latency-only's. Virtual
time: exact and repeatable.

    python benchmarks/signals.py [--calls 3000] [--load 1.0] [--seeds 1,2,3] [--interval 1]
                                 [--profile plateau] [--service-s 0.3]
"""

from __future__ import annotations

import argparse
import random
import statistics
from dataclasses import dataclass

import anyio

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine, get_profile, run_virtual
from gptgate.testing import sim_backend

SLOTS = (16, 8)


@dataclass(frozen=True, slots=True)
class Row:
    goodput: float
    p50_s: float
    p99_s: float
    small_waiting: float
    small_share: float
    failed: int


async def job(
    signals: bool, calls: int, load: float, seed: int, interval: float, profile_name: str,
    service_s: float,
) -> Row:
    clock = LoopClock()
    engines: list[SimEngine] = []
    backends = []
    for n, slots in enumerate(SLOTS):
        profile = get_profile(profile_name).model_copy(update={"slots": slots})
        backend, engine = sim_backend(
            profile, name=f"gpu{slots}", clock=clock, seed=seed + n, max_concurrency=64,
            signals=signals, signals_interval_s=interval, timeout=120.0,
        )
        backends.append(backend)
        engines.append(engine)
    # joint capacity ≈ slots / service time of one call at full batch (measured below)
    rate = load * sum(SLOTS) / service_s
    rng = random.Random(seed)
    latencies: list[float] = []
    failed = 0
    waiting: list[int] = []
    async with gg.Gateway(backends, clock=clock, seed=seed) as gate:

        async def one(i: int) -> None:
            nonlocal failed
            start = clock.now()
            try:
                await gate.chat(
                    [{"role": "user", "content": f"Summarise ticket #{i} in two lines."}],
                    max_tokens=120,
                )
            except gg.GateError:
                failed += 1
            else:
                latencies.append(clock.now() - start)

        async def sample(done: anyio.Event) -> None:
            while not done.is_set():
                waiting.append(engines[1].snapshot().queued)
                await anyio.sleep(0.25)

        begin = clock.now()
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample, done)
            async with anyio.create_task_group() as calls_group:
                for i in range(calls):
                    calls_group.start_soon(one, i)
                    await anyio.sleep(rng.expovariate(rate))
            done.set()
        elapsed = clock.now() - begin
        stats = gate.stats()
    ordered = sorted(latencies)
    total = sum(s.calls for s in stats.values()) or 1
    return Row(
        goodput=len(latencies) / elapsed,
        p50_s=statistics.median(ordered),
        p99_s=ordered[int(0.99 * (len(ordered) - 1))],
        small_waiting=statistics.fmean(waiting) if waiting else 0.0,
        small_share=stats[f"gpu{SLOTS[1]}"].calls / total,
        failed=failed,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--profile", default="plateau")
    parser.add_argument("--service-s", type=float, default=0.3)
    args = parser.parse_args()
    print(f"{'seed':>4} {'signals':>7} {'goodput/s':>9} {'p50 s':>6} {'p99 s':>6} "
          f"{'small waiting':>13} {'small share':>11} {'failed':>6}")
    for seed in (int(s) for s in args.seeds.split(",")):
        for signals in (False, True):
            row = run_virtual(
                job, signals, args.calls, args.load, seed, args.interval, args.profile,
                args.service_s,
            )
            print(f"{seed:>4} {'on' if signals else 'off':>7} {row.goodput:>9.2f} "
                  f"{row.p50_s:>6.2f} {row.p99_s:>6.2f} {row.small_waiting:>8.1f}/{SLOTS[1]:<4} "
                  f"{row.small_share:>11.0%} {row.failed:>6}")


if __name__ == "__main__":
    main()
