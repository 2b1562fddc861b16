"""A released backend's warm groups share its limit at the gate where its server has room
(issue 31, rounds 15–16).

Once the ramp does not pay on a backend (gptgate/cache_release.py) every warm group there has
the whole limit as its window. Without a bound on their sum, four groups on family draw 96
passed the gate together — 247 calls admitted at a limit of 64 —, queued at the backend's
limiter in an order the gate no longer chose, and their latency from admission counted that
queue, so the signal of prefixes sharing a home replica (gptgate/cache_shared_home.py) never
came and the job took 101.9 s against the plain client's 73.8 s on its third engine seed.
The bound costs where the calls queue at the server (draws 12 and 1094), which the fixed part
of the calls' latency shows (gptgate/cache_queue_share.py): there it stays off.
"""

from __future__ import annotations

import anyio
import pytest

from gptgate.cache import CacheGate, PrefixGroup
from gptgate.cache_queue_share import MIN_CALLS, QueueShare
from gptgate.cache_release import MIN_HITS, MIN_MISSES
from gptgate.scenarios import RampPolicy
from gptgate.sim import LoopClock, run_virtual
from tests.cache_order_check import assert_gate_against_plain

JOB = RampPolicy(start=5, window=5, turn_wait_s=600.0)
CACHEABLE = 4096


def group(key: str) -> PrefixGroup:
    return PrefixGroup(key=key, prefix_tokens=CACHEABLE)


def judge_released(gate: CacheGate, fixed_s: float) -> None:
    """Hits slower than misses (the ramp does not pay on backend ``b``), the calls' latency
    ``fixed_s + 5 ms`` per answer token over answers of 100–600 tokens."""
    calls = [(True, n) for n in range(MIN_HITS)] + [(False, n) for n in range(MIN_MISSES)]
    for hit, i in calls:
        tokens = 100 + 100 * (i % 6)
        latency = fixed_s + 0.005 * tokens + (1.0 if hit else 0.0)
        gate._judge_release("b", hit=hit, latency_s=latency, output_tokens=tokens)


def admitted_after_release(fixed_s: float) -> tuple[list[str], list[str]]:
    """Limit 4, two warm groups, the backend released on calls with a fixed part of
    ``fixed_s``. ``a`` runs 3 calls and ``b`` 1; 2 of ``b`` and 1 of ``a`` arrive; then one
    call of ``a`` ends, then two more. The calls let through after the arrivals, and after the
    first end."""

    async def main() -> tuple[list[str], list[str]]:
        clock = LoopClock()
        gate = CacheGate(clock=clock)
        limit = 4
        for key in "ab":  # both warm
            t = await gate.enter("b", group(key), JOB, limit=limit)
            t.prefilled()
            t.observe(cached_tokens=0, input_tokens=CACHEABLE + 100)
            t.release()
        judge_released(gate, fixed_s)
        running = [await gate.enter("b", group("a"), JOB, limit=limit) for _ in range(3)]
        running.append(await gate.enter("b", group("b"), JOB, limit=limit))
        order: list[str] = []

        async def call(key: str) -> None:
            await gate.enter("b", group(key), JOB, limit=limit)
            order.append(key)
            await clock.sleep(1e6)

        async with anyio.create_task_group() as tg:
            for key in "bba":
                tg.start_soon(call, key)
            await clock.sleep(1.0)
            first = list(order)
            running[0].release()
            await clock.sleep(1.0)
            second = list(order)
            running[1].release()
            running[2].release()
            await clock.sleep(1.0)
            assert sorted(order) == ["a", "b", "b"]
            tg.cancel_scope.cancel()
        return first, second

    return run_virtual(main)


def test_released_groups_wait_at_the_gate_while_the_limit_is_taken() -> None:
    """A server with room (a fixed part of 0.1 s, a tenth of the calls' latency): none of the
    three passes while the limit is taken (before round 15: all three, each group's window
    being the limit — 7 admitted at a limit of 4). A call of ``a`` ends: ``a``'s own waiter
    takes the slot; the next ones that end go to ``b``."""
    assert admitted_after_release(0.1) == ([], ["a"])


def test_where_calls_queue_at_the_server_released_groups_pass() -> None:
    """A server that queues the calls (a fixed part of 10 s, most of their latency): the
    released groups pass at the whole limit, as before round 15 (family draws 12 and 1094,
    where the bound cost 1.06× → 1.22× and 1.07× → 1.13× of the plain client's time)."""
    first, _ = admitted_after_release(10.0)
    assert sorted(first) == ["a", "b", "b"]


def test_the_fixed_part_share() -> None:
    """``c + n·t``: the fixed part over the mean latency; unknown with too few calls or
    answers of one length (they fill ``max_tokens``: no slope)."""
    share = QueueShare()
    for i in range(MIN_CALLS):
        share.record("b", 100 + 50 * (i % 5), 2.0 + 0.01 * (100 + 50 * (i % 5)))
    assert share.share("b") == pytest.approx(2.0 / 4.0)
    assert not share.room("b")
    same = QueueShare()
    for _ in range(MIN_CALLS):
        same.record("b", 1024, 5.0)
    assert same.share("b") is None and not same.room("b")
    few = QueueShare()
    for i in range(MIN_CALLS - 1):
        few.record("b", 100 + 50 * (i % 5), 0.1 + 0.01 * (100 + 50 * (i % 5)))
    assert few.share("b") is None
    few.record("b", 300, 3.1)
    assert few.room("b")
    few.reset("b")
    assert few.share("b") is None


def test_a_shared_home_after_the_release_keeps_the_floor() -> None:
    """Family draw 96 (4 replicas × 36 slots spreading a prefix at 15 in flight, three of the
    four prefixes homed on one replica), its third engine seed, where the release came at 16 s
    before the shared home was seen: 101.9 s against the plain client's 73.8 s before; now
    73.7 s (the floor: −5 points, 1.10×). Its calls' fixed part was 0.35 of their latency."""
    assert_gate_against_plain(96, 64, hits=0.05, time=1.10, seeds=[96 + 20_000])


def test_a_server_queue_keeps_the_limiters_mix() -> None:
    """Family draw 12 (9 replicas × 4 slots at a cap of 64: calls wait 22 s at the server on
    average), the judge's three engine seeds pooled: the bound took 1,689.7 s against the
    plain client's 1,379.8 s (1.22×); without it (the calls' fixed part 0.55–0.69 of their
    latency) 1,456.4 s (1.06×)."""
    assert_gate_against_plain(12, 64, hits=0.05, time=1.10, repeats=3)
