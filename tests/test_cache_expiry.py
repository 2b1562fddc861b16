"""Short cache lifetimes learned per backend (gptgate/cache_expiry.py, issue 31): a warm call
that missed after a long spacing is an expired copy, not a spill; where copies expire, warm
groups are served in order (gptgate/cache_order.py), each prefix's calls dense, as the plain
client's prompt order runs them."""

from __future__ import annotations

from gptgate.cache import CacheGate, PrefixGroup
from gptgate.cache_expiry import MEASURED, MEMORY_S, ExpiryLearner
from gptgate.scenarios import RampPolicy
from gptgate.sim import LoopClock, run_virtual
from tests.cache_order_check import (
    assert_gate_against_plain,
    assert_head_served_first,
    learn_short_lived,
)

JOB = RampPolicy(start=5, window=5, turn_wait_s=600.0)
CACHEABLE = 4096


def group(key: str) -> PrefixGroup:
    return PrefixGroup(key=key, prefix_tokens=CACHEABLE)


def test_a_miss_after_a_long_spacing_is_an_expiry_a_burst_s_miss_is_not() -> None:
    learner = ExpiryLearner()
    for _ in range(4):  # hits 1 s apart
        assert not learner.expired("b", 1.0, True, now=0.0)
    # a burst's miss (a replica still cold for the prefix): 0 s after the previous call
    assert not learner.expired("b", 0.0, False, now=1.0)
    assert not learner.expired("b", 2.0, False, now=1.0)  # within twice the hits' spacing
    assert not learner.short_lived("b", now=1.0)
    for k in range(MEASURED):  # misses after 10 s: the copy expired in between
        assert learner.expired("b", 10.0, False, now=2.0 + k)
    assert learner.short_lived("b", now=10.0)
    assert not learner.short_lived("other", now=10.0)
    assert not learner.short_lived("b", now=2.0 + MEMORY_S)  # forgotten
    # no hits to compare against yet: nothing is read as an expiry
    assert not ExpiryLearner().expired("b", 100.0, False, now=0.0)


def test_a_short_lived_backend_serves_its_warm_groups_in_order() -> None:
    """Two warm groups on a backend whose copies expire between calls, the limit taken by
    five calls of each: the group first in the warm order (``b``: ``a`` went idle and came
    back behind it), whose calls can fill the backend alone, is released past its share up
    to the limit, and ``a``'s calls wait while the limit is taken. Before, each group had its
    share (5) of the limit, so ``b``'s calls waited as long as ``a``'s and the prefixes ran
    side by side to the end."""

    async def main() -> None:
        clock = LoopClock()
        gate = CacheGate(clock=clock)
        await learn_short_lived(
            gate, clock, JOB, limit=10, first="a", then="b", cacheable=CACHEABLE
        )
        await assert_head_served_first(gate, clock, group("b"), group("a"), JOB)

    run_virtual(main)


def test_copies_expiring_between_calls_keep_the_plain_client_s_hits() -> None:
    """The server family's draw 1009 (1 replica × 1 slot, a queue of 1; a copy kept 42 s
    idle, calls of ~70 s; 400 calls over 4 prefixes at the queue's cap of 2). The plain
    client's prompt order runs one prefix after another; the gate ran the four side by side,
    each prefix's calls ~250 s apart against the plain's ~50 s, and its expiries marked the
    one-replica server spreading 22 times: 19.0% hits against the plain client's 37.8%
    (the floor: −5 points)."""
    assert_gate_against_plain(1009, 2, hits=0.05, time=1.10)
