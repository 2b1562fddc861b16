"""``GatewayConfig(keep_warm=True)`` with a backend that stalls: the other backends' hot
prefixes are still refreshed on time.

The refresh round went backend by backend, group by group, each refresh a call without a
deadline: a backend that stopped answering held the round for its timeout per hot group,
and the healthy backends' prefixes — the ones worth keeping warm — waited behind it, past
the provider's cache TTL on a long stall.
"""

from __future__ import annotations

from typing import Any

import anyio

import gptgate as gg
from gptgate.testing import FaultPlan, LoopClock, run_virtual, sim_backend

SYSTEM = {"role": "system", "content": "You are the support desk of a bank. " * 120}
INTERVAL_S = 60.0


async def _round_with_a_stalled_backend() -> dict[str, Any]:
    clock = LoopClock()
    stalled, stalled_engine = sim_backend("gpu", name="a", clock=clock, seed=1, timeout=40.0)
    healthy, healthy_engine = sim_backend("gpu", name="b", clock=clock, seed=2)
    healthy_engine.ledger.keep_bills()
    gate = gg.Gateway(
        [stalled, healthy], clock=clock, seed=3,
        keep_warm=True, keep_warm_interval_s=INTERVAL_S,
    )
    refreshed: list[float] = []
    async with gate, anyio.create_task_group() as group:

        async def traffic(backend: str, i: int) -> None:
            question = {"role": "user", "content": f"question {i} for {backend}"}
            with anyio.move_on_after(5.0):
                await gate.chat(
                    [SYSTEM, question], backend=backend, max_tokens=5, scenario="batch_content"
                )

        for i in range(11):  # both backends' groups hot: 12 calls a minute each
            group.start_soon(traffic, "a", i)
            group.start_soon(traffic, "b", i)
            await anyio.sleep(5.0)
        # backend a stops answering (no first byte) just before the refresh round
        stalled_engine.faults = FaultPlan(seed=1, loris_rate=1.0)

        async def watch() -> None:
            while not any(b.prompt == "." for b in healthy_engine.ledger.bills):
                await anyio.sleep(0.5)
            refreshed.append(clock.now())

        with anyio.fail_after(300):
            await watch()
        group.cancel_scope.cancel()
    return {"refreshed": refreshed[0]}


def test_a_stalled_backend_does_not_hold_back_the_others_refresh() -> None:
    out = run_virtual(_round_with_a_stalled_backend)
    # the round is due at 60 s: b's refresh goes then (before: 100.5 s, after a's 40 s timeout)
    assert out["refreshed"] < INTERVAL_S + 5.0
