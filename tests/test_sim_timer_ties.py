"""Timers due at the same virtual instant fire in the order they were scheduled
(gptgate/sim/virtual.py). asyncio's timer heap compares due times only, so its ties broke by
the heap's layout: eight callbacks scheduled for t=1 in order 0..7 ran as 0, 2, 6, 5, 7, 1, 3, 4."""

from __future__ import annotations

import asyncio

import anyio

from gptgate.sim import run_virtual


def test_callbacks_due_at_one_instant_run_in_scheduling_order() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        fired: list[int] = []
        for i in range(8):
            loop.call_later(1.0, fired.append, i)
        await asyncio.sleep(2.0)
        return fired

    assert run_virtual(main) == list(range(8))


def test_sleepers_due_at_one_instant_wake_in_the_order_they_slept() -> None:
    """The same through anyio's sleep, with earlier and later timers pushed and popped in
    between (the heap's layout then depends on all of them), and a cancelled one."""

    async def main() -> list[str]:
        woke: list[str] = []

        async def sleeper(name: str, seconds: float) -> None:
            await anyio.sleep(seconds)
            woke.append(name)

        async with anyio.create_task_group() as tg:
            for i in range(12):  # a due time of 3.0 for the even ones: ties among them
                tg.start_soon(sleeper, f"s{i}", 3.0 if i % 2 == 0 else 1.0 + i / 10)
            with anyio.CancelScope() as scope:
                scope.cancel()
                await anyio.sleep(3.0)  # scheduled, then cancelled
            await anyio.sleep(0.5)
            for i in range(12, 16):  # due at 3.0 too, scheduled after the first ones
                tg.start_soon(sleeper, f"s{i}", 2.5)
        return woke

    woke = run_virtual(main)
    assert [w for w in woke if int(w[1:]) % 2 == 0 or int(w[1:]) >= 12] == [
        "s0", "s2", "s4", "s6", "s8", "s10", "s12", "s13", "s14", "s15"
    ]


def test_earlier_timers_still_fire_first() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        for when in (3.0, 1.0, 2.0, 1.0, 0.5):
            loop.call_later(when, lambda w=when: fired.append(w))
        await asyncio.sleep(4.0)
        return fired

    assert run_virtual(main) == [0.5, 1.0, 1.0, 2.0, 3.0]
