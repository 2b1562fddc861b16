"""A short burst of 429s is a rate-limit rejection — "wait" (the pause and the pacer handle
it) — not "this backend's capacity is 1" (issue 14, item 6)."""

from __future__ import annotations

import anyio
import pytest

import gptgate as gg
from gptgate.sim import LoopClock, run_virtual
from gptgate.sim.faults import FAULT_HEADER
from gptgate.testing import sim_backend

USER = [{"role": "user", "content": "hello"}]


async def _healthy_job_after_429s(rejections: int) -> tuple[float, int]:
    clock = LoopClock()
    spec, _ = sim_backend("gpu", name="gpu", clock=clock, seed=5, concurrency="auto")
    async with gg.Gateway([spec], clock=clock, seed=1) as gate:
        for _ in range(rejections):  # sequential calls, each meeting 429 on every attempt
            with pytest.raises(gg.RateLimitedError):
                await gate.chat(USER, max_tokens=20, extra_headers={FAULT_HEADER: "429"})
        began = clock.now()
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(lambda: gate.chat(USER, max_tokens=50))
        took = clock.now() - began
        return took, gate.stats()["gpu"].limit


def test_a_short_burst_of_429s_does_not_cost_the_limit_its_capacity() -> None:
    """Two sequential calls meeting 429s (six attempts) drove the limit from 4 to 1; the next
    200 healthy calls then took 2.5× a fresh gateway's time with the limit reaching only 4.
    Now the job takes about what it takes on a fresh gateway."""
    fresh_s, fresh_limit = run_virtual(_healthy_job_after_429s, 0)
    after_s, after_limit = run_virtual(_healthy_job_after_429s, 2)
    assert after_s <= 1.2 * fresh_s, (after_s, fresh_s, after_limit, fresh_limit)
    assert after_limit >= 0.7 * fresh_limit, (after_limit, fresh_limit)
