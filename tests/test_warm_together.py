"""``gate.warm(messages)`` on several backends, one of them stalled: the others are warmed at
once, not after the stalled one's attempts time out.

Before, the backends were warmed one after another: a backend that never sends a first byte
held ``warm()`` for its three attempts (3 × its 60 s timeout) before the next backend got its
request — a startup that waits three minutes to warm a healthy backend it could have warmed at
once.
"""

from __future__ import annotations

from typing import Any

import anyio

import gptgate as gg
from gptgate.testing import FaultPlan, LoopClock, run_virtual, sim_backend

SYSTEM = [{"role": "system", "content": "You are a careful assistant. " * 200}]


async def _warm_with_a_stalled_backend() -> dict[str, Any]:
    clock = LoopClock()
    stalled, _ = sim_backend(
        "gpu", name="stalled", clock=clock, seed=1, timeout=60.0,
        faults=FaultPlan(seed=1, loris_rate=1.0),  # no first byte, ever
    )
    healthy, engine = sim_backend("gpu", name="healthy", clock=clock, seed=2)
    gate = gg.Gateway([stalled, healthy], clock=clock, seed=3)
    reached: list[float] = []
    async with gate, anyio.create_task_group() as group:

        async def watch() -> None:
            while not engine.ledger.snapshot().requests:
                await anyio.sleep(0.05)
            reached.append(clock.now())

        group.start_soon(watch)
        start = clock.now()
        results = await gate.warm(SYSTEM)
        took = clock.now() - start
    return {"results": results, "took": took, "reached": reached[0] - start}


def test_a_stalled_backend_does_not_hold_back_warming_the_others() -> None:
    out = run_virtual(_warm_with_a_stalled_backend)
    stalled, healthy = out["results"]  # in the order of the eligible backends
    assert isinstance(stalled, gg.RequestTimeout)
    assert isinstance(healthy, gg.ChatResult) and healthy.backend == "healthy"
    assert out["reached"] < 1.0  # before: 180 s, after the stalled backend's three timeouts
    assert out["took"] >= 180.0  # warm() itself still reports every backend's outcome
