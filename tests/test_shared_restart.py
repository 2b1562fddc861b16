"""Redis restarted empty (or flushed) while processes hold permits, and no outage declared.

redis-py's pool checks an idle connection before it hands it out: one the server closed is
reconnected on the spot, without an error. So a process whose connection was idle when Redis
restarted reaches the new, empty Redis at its next operation and never sees an outage. The
permits it holds are counted nowhere until its next renewal (``lease_s / 3`` later), and
every acquire meanwhile — its own and the others' — was judged on a count that leaves them
out: two processes holding 2 permits each on a limit of 4 put 6 or 8 calls on the backend
(the "4–8 in flight on a limit of 4" seen in ``benchmarks/fleet.py --restart-redis``).

Against a real redis-server restarted on the same port (and one flushed: the same loss
with no connection dropped at all)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.shared.fleet import FleetAdmission, FleetClient, Lease
from tests.conftest import RedisServer
from tests.fleettools import admission, fleet_pair, namespace
from tests.fleettools import fleet_client as shared_fleet_client
from tests.mockbackend import USER, Script, ok, wait_until

#: lease_s 30: a renewal every 10 s, far beyond the test; a probe every 10 ms
fleet_client = functools.partial(
    shared_fleet_client, op_budget_s=0.5, probe_s=0.01, lease_s=30.0
)


async def counted(url: str, at: FleetAdmission) -> int:
    async with redis.asyncio.Redis.from_url(url) as r:
        return int(await r.zcard(at.permits_key))


async def flush(url: str) -> None:
    """The data lost, the connections kept: a failover to an empty replica, a FLUSHALL."""
    async with redis.asyncio.Redis.from_url(url) as r:
        await r.flushall()
        await r.script_flush()


def restart(server: RedisServer) -> Callable[[str], Awaitable[None]]:
    async def lose(url: str) -> None:
        server.stop()
        server.start()  # empty, on the same port
    return lose


async def try_enter(at: FleetAdmission) -> Lease | None:
    try:
        return await at.enter(SystemClock().now() + 0.05)
    except gg.OverloadedError:
        return None


@pytest.mark.parametrize("how", ["restart", "flush"])
async def test_permits_held_across_a_lost_redis_still_count(
    own_redis: RedisServer, how: str
) -> None:
    lose = restart(own_redis) if how == "restart" else flush
    ns = namespace()
    async with fleet_client(own_redis.url, ns) as a, fleet_client(own_redis.url, ns) as b:
        at_a, at_b = admission(a, 4), admission(b, 4)
        held = [await at_a.enter(None), await at_b.enter(None)]
        held += [await at_a.enter(None), await at_b.enter(None)]
        assert at_a.live_workers == at_b.live_workers == 2
        await lose(own_redis.url)
        more = [await try_enter(at) for at in (at_a, at_b, at_a, at_b)]
        got = [lease for lease in more if lease is not None]
        assert len(held) + len(got) <= 4, (
            f"{len(held) + len(got)} in flight on a limit of 4 "
            f"(states {a.state}/{b.state}, outages {a.outages}/{b.outages})"
        )
        # once both are back in the fleet, Redis counts each permit in flight, once
        with anyio.fail_after(5):
            while a.state != "up" or b.state != "up":
                await anyio.sleep(0.005)
        await a._renew()
        await b._renew()
        assert await counted(own_redis.url, at_a) == len(held) + len(got)


async def test_a_process_that_finds_redis_lost_keeps_to_its_share_until_the_others_renew(
    own_redis: RedisServer,
) -> None:
    """The first process to find the loss registers its own permits at once; another one,
    idle since, is counted only at its next renewal (or acquire). Until then the first keeps
    to its share: it cannot tell what the others hold."""
    ns = namespace()
    async with fleet_client(own_redis.url, ns) as a, fleet_client(own_redis.url, ns) as b:
        at_a, at_b = admission(a, 4), admission(b, 4)
        held_b = [await at_b.enter(None), await at_b.enter(None), await at_b.enter(None)]
        held_a = [await at_a.enter(None)]  # (a learns of b: two workers on the backend)
        assert at_a.local_share == 2
        await flush(own_redis.url)
        got = [lease for lease in [await try_enter(at_a) for _ in range(3)] if lease]
        assert len(got) == 1  # its share (2), not the empty Redis's 4
        assert await counted(own_redis.url, at_a) == 2  # its own, registered again
        await b._renew()  # b's permits are counted again: the fleet's limit holds by Redis
        assert await counted(own_redis.url, at_a) == 5
        assert await try_enter(at_a) is None
        for lease in held_a + got:
            at_a.leave(lease)
        for lease in held_b:
            at_b.leave(lease)


def held_until(release: anyio.Event) -> Callable[[httpx2.Request], Any]:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        await release.wait()
        return ok()

    return handler


def fleet_of(gate: gg.Gateway) -> FleetClient:
    assert gate._fleet is not None
    return gate._fleet


async def test_two_gateways_keep_the_backend_within_the_limit_across_a_redis_restart(
    own_redis: RedisServer,
) -> None:
    """Counted at the backend: two gateways on a fleet limit of 4 with 2 calls each in
    flight; Redis restarts empty; 4 more calls arrive. Before: 6 on the backend."""
    release = anyio.Event()
    script = Script(held_until(release))
    shared = gg.Shared(own_redis.url, namespace=namespace(), lease_s=30.0, op_budget_s=0.5)
    gates = fleet_pair(script, shared)
    results: list[gg.ChatResult] = []

    async def one(gate: gg.Gateway) -> None:
        results.append(await gate.chat(USER))

    def waiting() -> int:
        return sum(fleet_of(g)._admissions[0]._waiting for g in gates)

    async with gates[0], gates[1]:
        for gate in gates:
            await fleet_of(gate)._renew()  # both know of 2 live workers
        async with anyio.create_task_group() as tg:
            for i in range(4):
                tg.start_soon(one, gates[i % 2])
            await wait_until(lambda: script.in_flight == 4)
            own_redis.stop()
            own_redis.start()  # empty, on the same port: no call ran meanwhile
            for i in range(4):
                tg.start_soon(one, gates[i % 2])
            # every new call is on the backend or waits for a permit
            await wait_until(lambda: script.in_flight + waiting() == 8)
            peak = script.max_in_flight
            release.set()
    assert len(results) == 8  # none failed
    assert peak <= 4, f"{peak} calls on the backend on a fleet limit of 4"
