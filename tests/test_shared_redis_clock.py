"""Leases judged on Redis's clock (planned, docs/fleet.md "Clocks"): today every lease's expiry
is its holder's wall clock + lease_s, and an acquire sweeps the leases whose expiry is behind
*its own* wall clock, so a process whose clock runs ahead by more than lease_s × 2/3 sweeps the
others' live permits and passes the fleet limit (warned once since bd92053, not prevented).
With ``redis.call('TIME')`` as the scripts' ``now`` no process's clock matters. Strict xfail
until then: it must start passing when the scripts take Redis's clock (an injected ``wall=``
then only drives what tests move by hand, through a seam of their own)."""

from __future__ import annotations

import time

import pytest

from tests.fleettools import Wall, admission, leave_all, namespace
from tests.fleettools import fleet_client as shared_fleet_client


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="leases on each process's clock")
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
