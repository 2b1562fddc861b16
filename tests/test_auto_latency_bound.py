"""``concurrency="auto"`` keeps its calls inside their timeout on a slow server.

On a 2-slot server answering in ~23 s, slow start doubled 4 → 8 before the first window told
it anything, the queued calls passed the backend's 60 s timeout, the timeouts opened the
circuit and 9 of 20 calls failed — where a fixed limit of 4 (auto's own start) fails none.
Found on a real llama-server (2 slots, 600-token answers): 7 timeouts, the other calls moved
to the small tier. gptgate/limits/latency_bound.py.
"""

from __future__ import annotations

import math

import anyio
import pytest

import gptgate as gg
from gptgate.limits import LLMLimit, Sample
from gptgate.limits.latency_bound import LatencyBound
from gptgate.sim import LoopClock, get_profile, run_virtual
from gptgate.testing import sim_backend

#: 2 slots, every answer runs to its 600-token cap at ~38 ms a token (~23 s a call)
SLOW_2_SLOTS = get_profile("gpu").model_copy(update={
    "name": "slow-2", "replicas": 1, "slots": 2, "max_queue": None, "base_step_s": 0.038,
    "jitter_sigma": 0.05, "usl_sigma": 0.0, "usl_kappa": 0.0, "fills_max_tokens": True,
    "finishes_abandoned": True,
})


def _job(concurrency: int | str) -> tuple[int, int, int]:
    """20 calls at once; (failed, timeouts, the highest limit seen)."""

    async def main() -> tuple[int, int, int]:
        clock = LoopClock()
        backend, _ = sim_backend(SLOW_2_SLOTS, name="slow", clock=clock,
                                 concurrency=concurrency, timeout=60.0)
        failed = 0
        async with gg.Gateway([backend], clock=clock) as gate:
            async def one(i: int) -> None:
                nonlocal failed
                try:
                    await gate.chat([{"role": "user", "content": f"cat {i}"}], max_tokens=600)
                except gg.GateError:
                    failed += 1

            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(one, i)
            limit = gate.backend_state("slow").limiter.limit
            trace = getattr(limit, "trace", [])
            stats = gate.stats()["slow"]
            return failed, stats.timeouts, max((lim for _, lim in trace), default=stats.limit)

    result: tuple[int, int, int] = run_virtual(main)
    return result


def test_auto_fails_no_more_calls_than_its_initial_fixed_limit() -> None:
    fixed_failed, fixed_timeouts, _ = _job(4)
    auto_failed, auto_timeouts, highest = _job("auto")
    assert fixed_failed == 0
    assert auto_failed == 0  # was 9: every one "circuit is open" after 9 timeouts
    assert auto_timeouts <= fixed_timeouts  # was 9 against 2
    assert highest <= 4  # slow start did not double into a 92 s queue


def test_bound_prices_the_slowest_call_per_call_in_flight() -> None:
    bound = LatencyBound(60.0)
    assert bound.ceiling() == math.inf  # nothing measured yet
    for latency in (23.0, 23.5, 46.0, 46.5):
        bound.add(latency)
    bound.close(4.0)
    assert bound.ceiling() == 4  # 8 in flight would take ~93 s; 48 s fits 4
    for latency in (1.0, 1.2, 2.5):
        bound.add(latency)
    bound.close(16.0)
    assert bound.ceiling() == 307  # calls far inside their timeout: no bound to speak of
    assert LatencyBound(None).ceiling() == math.inf
    with pytest.raises(ValueError):
        LatencyBound(0.0)


def test_limit_stops_slow_start_at_the_bound_and_cuts_under_it() -> None:
    # 4 slots answering in ~45 s: all four served at once (no stair to read), and 8 in flight
    # would queue half of them to ~90 s
    limit = LLMLimit(initial=4, max_limit=64, latency_bound_s=60.0)
    now = 0.0
    for i, latency in enumerate((44.0, 45.0, 46.0, 46.0)):
        now = latency
        limit.update(Sample(start=0.0, latency_s=latency, inflight=i + 1, kind="ok",
                            output_tokens=600), now)
    assert limit.limit == 4 and not limit.in_slow_start
    free = LLMLimit(initial=4, max_limit=64)  # no bound: the same window doubles
    for i, latency in enumerate((44.0, 45.0, 46.0, 46.0)):
        free.update(Sample(start=0.0, latency_s=latency, inflight=i + 1, kind="ok",
                           output_tokens=600), latency)
    assert free.limit == 8
