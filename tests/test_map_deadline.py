"""A ``gate.map`` item's deadline runs from the moment ``map`` pulls it, not from when the event
loop first runs its task: on a busy loop (every iteration costs time, as during the chaos
suite's closing burst) an item started a few iterations late was shed that much past the
deadline its caller counted from (docs/guide/deadlines.md, "gate.map on a busy loop")."""

from __future__ import annotations

import asyncio

import anyio
import pytest

import gptgate as gg
from gptgate.sim.virtual import VirtualTimeLoop
from gptgate.testing import LoopClock, run_virtual, sim_backend

USER = [{"role": "user", "content": "Summarise this ticket in one line."}]
#: what one event-loop iteration costs on the busy loop (virtual seconds)
STEP = 0.05
DEADLINE = 10.0


async def _busy(steps: list[float]) -> None:
    """Make every iteration of the loop cost ``STEP``: a CPU-bound neighbour."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)
    while True:
        loop.advance(STEP)
        steps.append(loop.time())
        await asyncio.sleep(0)


async def _lateness(every_s: float, lags: list[float]) -> None:
    """The chaos suite's loop watch: how late a timer wakes."""
    while True:
        asked = anyio.current_time()
        await anyio.sleep(every_s)
        lags.append(anyio.current_time() - asked - every_s)


async def _map_past_deadline(scenario: str) -> tuple[float, float, list[object]]:
    """A map of five items queued behind a call that holds the backend's only permit past
    their deadline: each is shed at its deadline. Returns how far past ``DEADLINE`` the map
    ended (counted from the call), the loop's worst lateness, and the outcomes."""
    clock = LoopClock()
    backend, _ = sim_backend("cpu", name="cpu", clock=clock, seed=3, concurrency=1)
    lags: list[float] = []
    steps: list[float] = []
    async with gg.Gateway([backend], clock=clock, seed=1) as gate, anyio.create_task_group() as tg:
        limiter = gate.backend_state("cpu").limiter
        held = await limiter.acquire()  # its only permit, held past the items' deadline
        await gate.map([], scenario=scenario)  # the scenario's batcher, started once
        tg.start_soon(_busy, steps)
        tg.start_soon(_lateness, 0.05, lags)
        await clock.sleep(1.0)
        begun = clock.now()
        items = [{"messages": USER, "max_tokens": 20} for _ in range(5)]
        results = await gate.map(items, scenario=scenario, timeout=DEADLINE)
        past = clock.now() - begun - DEADLINE
        tg.cancel_scope.cancel()
        held.ignore()
    return past, max(lags), list(results)


@pytest.mark.parametrize("scenario", ["default", "batch_content"])
def test_map_items_are_shed_at_the_deadline_counted_from_the_map(scenario: str) -> None:
    past, loop_late, results = run_virtual(_map_past_deadline, scenario)
    assert all(isinstance(r, gg.OverloadedError) for r in results), results
    assert loop_late <= 2 * STEP + 1e-9  # a timer wakes at most two iterations late
    # shed by its timer as late as the loop (two iterations), handed back to the caller in
    # two (a task group's exit) or three (a batched item's handle, then the exit): not one
    # more per item pulled before it (10 and 11 iterations before the fix)
    assert past <= 5 * STEP + 1e-9, f"{past:.3f} s past the deadline ({past / STEP:.1f} steps)"
