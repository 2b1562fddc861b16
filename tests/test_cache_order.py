"""Warm order (gptgate/cache_order.py, issue 31): on a backend never seen spreading, a job's
warm prefix groups are served first come, first served, as the hand warm-up's FIFO semaphore
serves them, instead of side by side at a share each."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import anyio

from gptgate.cache import CacheGate, PrefixGroup
from gptgate.scenarios import RampPolicy
from gptgate.sim import LoopClock, family, run_virtual

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from _strategies import job, run_gptgate, run_hand  # noqa: E402

JOB = RampPolicy(start=5, window=5, turn_wait_s=600.0)


def group(key: str) -> PrefixGroup:
    return PrefixGroup(key=key, prefix_tokens=4096)


async def _warm(gate: CacheGate, key: str, limit: int) -> None:
    warm = await gate.enter("b", group(key), JOB, limit=limit)
    warm.prefilled()
    warm.release()


def test_a_freed_slot_goes_to_the_group_warm_first_once_the_backend_is_full() -> None:
    """Two warm groups, the backend's limit taken, ``a`` (warm first) with a backlog: ``a`` is
    released past its share and takes the slots ``b`` frees; ``b``'s calls wait until ``a``
    has none left. Before, each group refilled its own share of slots whatever the other's
    backlog, so the prefixes ran side by side to the end."""

    async def main() -> None:
        clock = LoopClock()
        gate = CacheGate(clock=clock)
        limit = 10
        await _warm(gate, "a", limit)
        # a good window of a's: the backend shows no sign of spreading a prefix
        window = [await gate.enter("b", group("a"), JOB, limit=limit) for _ in range(5)]
        for t in window:
            t.observe(cached_tokens=4096, input_tokens=5000)
        await _warm(gate, "b", limit)
        held = [await gate.enter("b", group("b"), JOB, limit=limit) for _ in range(5)]
        order: list[str] = []

        async def call(key: str) -> None:
            await gate.enter("b", group(key), JOB, limit=limit)
            order.append(key)
            await clock.sleep(1e6)

        async with anyio.create_task_group() as tg:
            for key in ["a"] * 12 + ["b"] * 3:
                tg.start_soon(call, key)
            await clock.sleep(1.0)
            assert order == ["a"] * 5  # a's in flight up to the limit; b's wait (full)
            for t in held:  # b's calls end: b's waiting calls stay behind a's backlog
                t.release()
            await clock.sleep(1.0)
            assert order == ["a"] * 5
            for t in window:
                t.release()
            await clock.sleep(1.0)
            assert order == ["a"] * 10  # a's backlog first …
            tg.cancel_scope.cancel()

    run_virtual(main)


def test_short_cache_lifetimes_keep_the_hand_warm_up_s_hits() -> None:
    """The server family's draw 18 (1 replica × 15 slots, unbounded queue; a cached prefix
    lives 70 s from when it was written, a hit does not refresh it; 400 calls over 4
    prefixes at 64): the hand warm-up's semaphore runs the prefixes one after another, each
    spans a quarter of the 600 s job, and meets a quarter of the expiries. Before, the gate
    ran them side by side: 86.7% hits against the hand's 90.5% (26 missed calls against 11);
    the rule is the hand's −2 points."""
    server = family(18)
    items = job(4, 400, 18)
    hand = run_virtual(run_hand, server, [items], 64, 18, 100, 3600.0)
    gate = run_virtual(functools.partial(run_gptgate, timeout=3600.0), server, [items], 64, 18)
    assert gate.failed == hand.failed == 0
    assert gate.hit >= hand.hit - 0.02, (gate.hit, hand.hit)
    assert gate.total_s <= 1.05 * hand.total_s, (gate.total_s, hand.total_s)
