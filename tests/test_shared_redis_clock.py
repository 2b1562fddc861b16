"""Leases judged on Redis's clock (docs/guide/many-processes.md "Clocks"). Before, every
lease's expiry was its holder's wall clock + lease_s, and an acquire swept the leases whose
expiry was behind *its own* wall clock, so a process whose clock ran ahead by more than
lease_s × 2/3 swept the others' live permits and passed the fleet limit (warned once since
bd92053, not prevented; this test was a strict xfail then). Every script now reads
``redis.call('TIME')``: a process's wall clock (``wall=``) judges nothing, and tests that move
leases by hand pass a clock of their own (``fleet_clock=``)."""

from __future__ import annotations

import time

from gptgate.limits import FixedLimit
from gptgate.wire.ratelimits import RateLimitInfo
from tests.fleettools import Wall, admission, auto, leave_all, namespace
from tests.fleettools import fleet_client as shared_fleet_client
from tests.test_shared_pacing import BUDGET, free_takes, pacer


async def test_a_process_an_hour_ahead_does_not_sweep_the_others_permits(redis_url: str) -> None:
    ns = namespace()
    async with shared_fleet_client(redis_url, ns, lease_s=6.0) as right, \
            shared_fleet_client(redis_url, ns, wall=Wall(time.time() + 3600), lease_s=6.0) as ahead:
        at_right, at_ahead = admission(right, 1), admission(ahead, 1)
        held = [await at_right.enter(None)]
        lease = ahead.new_lease()
        granted = await at_ahead._try(lease)
        if granted:
            at_ahead.leave(lease)
        leave_all(at_right, held)
    assert not granted, "the fleet's one permit was granted twice"
    # its own reckoning of the fleet's clock (what it dates without a script) is Redis's
    assert abs(ahead.fleet_time() - time.time()) < 1.0


async def test_a_process_an_hour_behind_keeps_its_permits(redis_url: str) -> None:
    """Its leases expired an hour ago by everybody else's clock: the first acquire elsewhere
    swept them, and its calls in flight no longer counted."""
    ns = namespace()
    async with shared_fleet_client(redis_url, ns, wall=Wall(time.time() - 3600),
                                   lease_s=6.0) as behind, \
            shared_fleet_client(redis_url, ns, lease_s=6.0) as right:
        at_behind, at_right = admission(behind, 1), admission(right, 1)
        held = await at_behind.enter(None)
        lease = right.new_lease()
        granted = await at_right._try(lease)
        if granted:
            at_right.leave(lease)
        at_behind.leave(held)
        again = await at_behind.enter(None)  # (its permit reused, or acquired again)
        at_behind.leave(again)
    assert not granted, "the fleet's one permit was granted twice"
    # dated on Redis's clock: the leader maps a sample's grant by it (gptgate/shared/leader.py)
    assert abs(held.granted_wall - time.time()) < 1.0
    assert abs(again.granted_wall - time.time()) < 1.0


async def test_a_follower_an_hour_ahead_does_not_take_a_live_leaders_lead(
    redis_url: str,
) -> None:
    """The lead is ``expiry|worker`` too: a follower whose clock ran past the expiry took the
    lead from a live leader, and the fleet had two limits published in turn."""
    ns, rounds = namespace(), 1e6  # the test runs the rounds
    async with shared_fleet_client(redis_url, ns, autos=[FixedLimit(6)], lead_s=rounds) as a, \
            shared_fleet_client(redis_url, ns, wall=Wall(time.time() + 3600),
                                autos=[FixedLimit(4)], lead_s=rounds) as ahead:
        await a._lead()
        await ahead._lead()
        assert auto(a).leading and not auto(ahead).leading
        assert auto(ahead).fleet_limit == 6


async def test_a_rate_report_from_a_process_an_hour_behind_refills_nothing(
    redis_url: str,
) -> None:
    """A report's time was the reader's wall clock: an hour old, the next take refilled the
    fleet's budget for an hour since — full again right after the server said it was spent.
    It is now sent as how long ago it was read, and dated on Redis's clock."""
    ns = namespace()
    async with shared_fleet_client(redis_url, ns) as right, \
            shared_fleet_client(redis_url, ns, wall=Wall(time.time() - 3600)) as behind:
        p_right, p_behind = pacer(right), pacer(behind)
        p_right.observe(0.0, BUDGET, None)
        await p_right.reserve(0.0, 10)  # carries the budget: 54 at once for the fleet
        _, seq = await p_behind.reserve(0.0, 10)
        # its server has 5 left after its call: the fleet's level is 5 - 6 headroom
        p_behind.observe(0.0, RateLimitInfo(limit_requests=60, remaining_requests=5), seq)
        await p_behind.reserve(0.0, 10)  # carries the report
        assert await free_takes([p_right]) == 0
