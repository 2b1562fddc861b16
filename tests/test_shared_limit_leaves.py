"""The fleet's fixed limit is the lowest any *live* process configured. Every acquire kept the
lowest limit ever published alive (it renewed the key's TTL), so once the process that set
it had gone — closed, killed, or replaced in a rolling deploy that raised ``concurrency`` —
the others stayed at its limit for as long as any of them kept calling: 2 of 8 for good."""

from __future__ import annotations

import time

import anyio

from tests.fleettools import admission, namespace
from tests.fleettools import fleet_client as shared_fleet_client

LEASE_S = 0.5  # the limit key lives 2 × lease_s after its holder's last renewal


async def test_the_fleet_limit_follows_the_processes_that_are_still_there(
    redis_url: str,
) -> None:
    ns = namespace()
    async with shared_fleet_client(redis_url, ns, lease_s=LEASE_S) as high:
        at_high = admission(high, 8)
        await high._publish_limit(at_high)  # (as its start does: made after it here)
        async with shared_fleet_client(redis_url, ns, lease_s=LEASE_S) as low:
            at_low = admission(low, 2)
            await low._publish_limit(at_low)
            # low stays, idle but alive: the fleet keeps to its 2 past the key's TTL
            until = time.monotonic() + 3 * 2 * LEASE_S
            while time.monotonic() < until:
                at_high.leave(await at_high.enter(None))
                assert at_high.fleet_limit == 2
                await anyio.sleep(0.02)
            del at_low
        # low closed: its limit lapses with its key's TTL; high's calls go on meanwhile
        with anyio.fail_after(5 * 2 * LEASE_S):
            while at_high.fleet_limit != 8:
                at_high.leave(await at_high.enter(None))
                await anyio.sleep(0.02)
        assert at_high.in_force == 8
