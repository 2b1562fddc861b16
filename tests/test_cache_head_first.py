"""The warm order to a head's last call (gptgate/cache_order.py ``head_goes_first``, issue 31):
on a backend serving a job's few warm groups in order, the head goes first even once it has
fewer calls left than the limit, and the next group takes the rest — the hand warm-up's FIFO
semaphore — instead of every group running its last calls side by side at its share."""

from __future__ import annotations

import anyio

from gptgate.cache import CacheGate, PrefixGroup
from gptgate.cache_order import head_goes_first
from gptgate.cache_order_trial import MAX_GROUPS
from gptgate.scenarios import RampPolicy
from gptgate.sim import LoopClock, run_virtual
from tests.cache_order_check import assert_gate_against_plain, learn_short_lived

JOB = RampPolicy(start=5, window=5, turn_wait_s=600.0)
CACHEABLE = 4096


def group(key: str) -> PrefixGroup:
    return PrefixGroup(key=key, prefix_tokens=CACHEABLE)


def test_a_small_head_goes_first_only_among_few_warm_groups() -> None:
    assert head_goes_first(10, 10, 40)  # fills the backend alone: always
    assert head_goes_first(3, 10, 2)
    assert head_goes_first(3, 10, MAX_GROUPS)
    # many warm groups (many small prefixes): a small head's burst would spread
    assert not head_goes_first(3, 10, MAX_GROUPS + 1)


def test_a_head_short_of_the_limit_still_goes_first() -> None:
    """Two warm groups on a backend serving them in order (copies seen expiring), limit 8:
    ``b`` (the head) has 3 calls running and 4 more arrive, 7 in all — fewer than the limit;
    ``a`` has 4 running and 3 more arrive. The head's 4 go at once, ``a``'s behind them. Before,
    a head that could not fill the backend alone fell back to the shares (4 each): ``b`` got
    one more call and its other 3 waited while ``a``'s ran side by side with them."""

    async def main() -> None:
        clock = LoopClock()
        gate = CacheGate(clock=clock)
        limit = 8

        await learn_short_lived(
            gate, clock, JOB, limit=limit, first="a", then="b", cacheable=CACHEABLE
        )
        _running_b = [await gate.enter("b", group("b"), JOB, limit=limit) for _ in range(3)]
        _running_a = [await gate.enter("b", group("a"), JOB, limit=limit) for _ in range(4)]
        order: list[str] = []

        async def call(key: str) -> None:
            await gate.enter("b", group(key), JOB, limit=limit)
            order.append(key)
            await clock.sleep(1e6)

        async with anyio.create_task_group() as tg:
            for key in "bbbbaaa":
                tg.start_soon(call, key)
            await clock.sleep(1.0)
            # the head's calls past its share of 4, then a's behind them (the backend's
            # limiter queues what passed the gate beyond the limit, in this order)
            assert order == ["b"] * 4 + ["a"] * 3
            tg.cancel_scope.cancel()

    run_virtual(main)


def test_copies_expiring_on_a_spreading_server_keep_the_floor() -> None:
    """The server family's draw 1021 (2 replicas × 26 slots spreading a prefix at 4 in
    flight, a queue of 18, copies kept 5.2 s idle; 400 calls over 4 prefixes at 64). The
    order trial serves the warm groups in order from ~86 s, kept from ~178 s — but a head
    with fewer calls left than the limit fell back to the shares, so each prefix's last 36
    calls ran side by side again, meeting expired copies (traced per call: 93 expired misses
    against the plain client's 18): 60.8% hits against the plain client's 74.2%. Now 70.0% at
    the plain client's time (the floor: −5 points, 1.10×)."""
    assert_gate_against_plain(1021, 64, hits=0.05, time=1.10)
