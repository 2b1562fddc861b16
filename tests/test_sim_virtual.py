"""``run_virtual``: timers jump, threads do not — work in a thread finishes in real time."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from gptgate.testing import run_virtual


def test_sleeps_cost_no_wall_time() -> None:
    async def main() -> float:
        await anyio.sleep(3600)
        return anyio.current_time()

    start = time.monotonic()
    assert run_virtual(main) >= 3600
    assert time.monotonic() - start < 5


def test_a_thread_finishes_before_a_timer_set_after_it_fires() -> None:
    """The openai SDK reads the platform in a thread on its first request; the virtual clock
    used to jump to the next timer (a deadline 10 s on) while the thread was still running, so
    the deadline fired although the work took 50 ms."""

    async def main() -> str:
        with anyio.fail_after(10):
            return await asyncio.to_thread(lambda: time.sleep(0.05) or "done")

    assert run_virtual(main) == "done"


def test_a_simulated_backend_built_outside_the_loop_says_where_to_build_it() -> None:
    """A sync pytest fixture or a module-level ``sim_backend("gpu")``: the engine reads the
    loop's clock as it is built, and there is no loop yet. Before, anyio's "Not currently
    running on any asynchronous event loop" from deep inside the engine; now the fix."""
    from gptgate.testing import sim_backend

    with pytest.raises(RuntimeError, match=r"inside the coroutine run_virtual runs"):
        sim_backend("gpu")
