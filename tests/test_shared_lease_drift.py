"""Two processes of one fleet configured with different ``Shared(lease_s=...)`` (config drift
in a rolling deploy). Every script set the backend keys' TTL to its *own* 2 × lease_s, so a
short-lease process's acquire shortened the TTL under a long-lease process's permits: once the
short TTL ran out Redis dropped the permits zset with the long-lease process's calls still in
flight, and the fleet admitted its whole limit again on top of them (until that process's next
renewal, lease_s / 3 later). A key's TTL is now only ever lengthened."""

from __future__ import annotations

import anyio
import redis.asyncio

from tests.fleettools import admission, leave_all, namespace
from tests.fleettools import fleet_client as shared_fleet_client

SHORT_S = 0.5  # its keys' TTL: 1 s; renewed every 0.17 s
LONG_S = 60.0  # renews every 20 s: never within this test


async def test_a_short_lease_does_not_drop_a_long_lease_processs_permits(redis_url: str) -> None:
    ns = namespace()
    raw = redis.asyncio.Redis.from_url(redis_url)
    async with (
        shared_fleet_client(redis_url, ns, lease_s=LONG_S) as long,
        shared_fleet_client(redis_url, ns, lease_s=SHORT_S) as short,
    ):
        at_long, at_short = admission(long, 2), admission(short, 2)
        held = [await at_long.enter(None)]  # a long call, in flight all along
        at_short.leave(await at_short.enter(None))  # one short call: its acquire set TTLs
        # past the short process's key TTL (a bounded poll, not a sleep race)
        with anyio.move_on_after(3 * SHORT_S):
            while await raw.exists(at_long.permits_key):
                await anyio.sleep(0.02)
        counted = await raw.zcard(at_long.permits_key)
        short_leases = []
        with anyio.move_on_after(SHORT_S):
            while len(short_leases) < 2:
                short_leases.append(await at_short.enter(None))
        # the fleet limit is 2 and the long call holds one: the short process gets one only
        assert counted == 1, "the long-lease process's permit was dropped with the key"
        assert len(short_leases) == 1
        leave_all(at_short, short_leases)
        leave_all(at_long, held)
    await raw.aclose()
