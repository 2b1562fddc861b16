"""``stats().fleet.fleet_in_flight`` is as current as the renewal (every ``lease_s / 3``), not
frozen at this process's last acquire.

Before, only an acquire set it: two gateways that ended their calls kept showing the count of
their last acquires (4 in flight, 7 s after everything ended, nothing held) for as long as they
made no call — a dashboard showed phantom load on an idle fleet. The renewal, which every
process runs anyway, now counts each backend's permits too (no round trip of its own).
Against a real redis-server."""

from __future__ import annotations

from tests.fleettools import admission, fleet_client, leave_all, namespace


async def test_an_idle_fleet_shows_nothing_in_flight_after_a_renewal(redis_url: str) -> None:
    ns = namespace()
    async with fleet_client(redis_url, ns) as a, fleet_client(redis_url, ns) as b:
        at_a, at_b = admission(a, 4), admission(b, 4)
        held_a = [await at_a.enter(None) for _ in range(2)]
        held_b = [await at_b.enter(None) for _ in range(2)]
        assert (at_a.statistics().fleet_in_flight, at_b.statistics().fleet_in_flight) == (2, 4)
        leave_all(at_a, held_a[1:])  # a still holds one
        leave_all(at_b, held_b)
        await a._flush()  # the releases, as the background task sends them
        await b._flush()
        await a._renew()  # what each background task does every lease_s / 3
        await b._renew()
        assert (at_a.statistics().fleet_in_flight, at_b.statistics().fleet_in_flight) == (1, 1)
        leave_all(at_a, held_a[:1])
        await a._flush()
        await a._renew()
        await b._renew()
        stats = [at_a.statistics(), at_b.statistics()]
        assert [(s.fleet_in_flight, s.held) for s in stats] == [(0, 0), (0, 0)]


async def test_a_renewal_counts_the_permits_it_registers(redis_url: str) -> None:
    """The renewal re-adds this process's permits (after a Redis restart they are counted
    nowhere else): its count includes them."""
    ns = namespace()
    async with fleet_client(redis_url, ns) as a, fleet_client(redis_url, ns) as b:
        at_a, at_b = admission(a, 5), admission(b, 5)
        for _ in range(3):
            await at_a.enter(None)
        await b._renew()  # b never called: it learns the fleet's count from its renewal
        assert at_b.statistics().fleet_in_flight == 3
        await a._renew()
        assert at_a.statistics().fleet_in_flight == 3
