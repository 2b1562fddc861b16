"""A process waiting for a fleet permit is woken by another process's release at once, not
at its next poll (gptgate/shared/wake.py), and a release costs no message when nobody waits.
Against the real redis-server; every waiter here polls only every 60 s, so a permit that
arrives within the test's few seconds came by a wake-up."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.shared import fleet as fleet_module
from gptgate.shared.fleet import FleetAdmission, FleetClient, Lease
from gptgate.shared.scripts import RESERVE_MS
from gptgate.shared.wake import channel
from tests.conftest import RedisServer
from tests.fleettools import Wall, admission, auto, fleet_client, namespace, published

#: far beyond every wait below: a waiter that gets its permit in time was woken
NEVER_S = 60.0


async def subscribed(url: str, client: FleetClient, at: FleetAdmission) -> None:
    """Until the server counts ``client``'s subscriber on ``at``'s wake-up channel."""
    r: Any = redis.asyncio.Redis.from_url(url)
    name = channel(at.waiters_key, client.worker_id)
    try:
        with anyio.fail_after(5.0):
            while dict(await r.pubsub_numsub(name)).get(name.encode(), 0) < 1:
                await anyio.sleep(0.005)
    finally:
        await r.aclose()


async def waiting(at: FleetAdmission, processes: int) -> None:
    """Until ``at``'s last acquire was refused with ``processes`` queued as waiters."""
    with anyio.fail_after(5.0):
        while at.fleet_waiting < processes:
            await anyio.sleep(0.002)


@asynccontextmanager
async def two_processes(
    url: str, limit: int
) -> AsyncIterator[tuple[FleetClient, FleetClient, FleetAdmission, FleetAdmission]]:
    """Two processes ``a`` and ``b`` on one backend of ``limit`` permits, both subscribed to
    their wake-ups, polling only every minute."""
    ns = namespace()
    async with (
        fleet_client(url, ns, poll_s=NEVER_S) as a,
        fleet_client(url, ns, poll_s=NEVER_S) as b,
    ):
        at_a, at_b = admission(a, limit), admission(b, limit)
        for client, at in ((a, at_a), (b, at_b)):
            await subscribed(url, client, at)
        yield a, b, at_a, at_b


async def test_a_waiter_gets_another_processs_released_permit_without_polling(
    redis_url: str,
) -> None:
    async with two_processes(redis_url, 1) as (_, b, at_a, at_b):
        held = await at_a.enter(None)
        got: list[Lease] = []
        async with anyio.create_task_group() as tg:

            async def wait_in_b() -> None:
                got.append(await at_b.enter(None))

            tg.start_soon(wait_in_b)
            await waiting(at_b, 1)
            at_a.leave(held)  # b's only way to learn of it, short of a minute, is the wake-up
            with anyio.fail_after(2.0):
                while not got:
                    await anyio.sleep(0.002)
        assert at_b.statistics().held == 1 and b.wake.received == 1


async def test_the_oldest_waiting_process_is_woken_once_per_permit_freed(
    redis_url: str,
) -> None:
    ns = namespace()
    async with (
        fleet_client(redis_url, ns, poll_s=NEVER_S) as a,
        fleet_client(redis_url, ns, poll_s=NEVER_S) as b,
        fleet_client(redis_url, ns, poll_s=NEVER_S) as c,
    ):
        at_a, at_b, at_c = admission(a, 2), admission(b, 2), admission(c, 2)
        for client, at in ((b, at_b), (c, at_c)):
            await subscribed(redis_url, client, at)
        held = [await at_a.enter(None), await at_a.enter(None)]
        order: list[str] = []
        async with anyio.create_task_group() as tg:

            async def wait_in(name: str, at: FleetAdmission) -> None:
                await at.enter(None)
                order.append(name)

            tg.start_soon(wait_in, "b", at_b)
            await waiting(at_b, 1)
            tg.start_soon(wait_in, "c", at_c)
            await waiting(at_c, 2)
            before = await published(redis_url)
            at_a.leave(held[0])
            with anyio.fail_after(2.0):
                while not order:
                    await anyio.sleep(0.002)
            assert order == ["b"]  # the first to wait; c is still queued
            at_a.leave(held[1])
            with anyio.fail_after(2.0):
                while len(order) < 2:
                    await anyio.sleep(0.002)
        assert order == ["b", "c"]
        assert await published(redis_url) - before == 2  # one message per permit freed


async def test_a_release_with_nobody_waiting_publishes_nothing(redis_url: str) -> None:
    ns = namespace()
    async with fleet_client(redis_url, ns) as a, fleet_client(redis_url, ns) as b:
        at_a, at_b = admission(a, 4), admission(b, 4)
        await subscribed(redis_url, b, at_b)
        before = await published(redis_url)
        for _ in range(20):  # sent alone (RELEASE) and carried by the next acquire
            for at in (at_a, at_b):
                at.leave(await at.enter(None))
            await anyio.sleep(0.005)
        await a._flush()
        await b._flush()
        assert await published(redis_url) - before == 0
        assert a.wake.received == b.wake.received == 0


async def test_a_release_goes_out_at_once_while_another_process_waits(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # releases wait RELEASE_LINGER_S for an acquire of their process to carry them; with a
    # process waiting elsewhere none will (this one waits for nothing): sent at once instead
    monkeypatch.setattr(fleet_module, "RELEASE_LINGER_S", NEVER_S)
    async with two_processes(redis_url, 1) as (a, _, at_a, at_b):
        held = await at_a.enter(None)
        got: list[Lease] = []
        async with anyio.create_task_group() as tg:

            async def wait_in_b() -> None:
                got.append(await at_b.enter(None))

            tg.start_soon(wait_in_b)
            await waiting(at_b, 1)
            # a learns that b waits from its own next acquire (refused here: a gives up)
            with pytest.raises(gg.OverloadedError):
                await at_a.enter(a.clock.now() + 0.05)
            assert at_a.fleet_waiting == 2
            at_a.leave(held)
            with anyio.fail_after(2.0):
                while not got:
                    await anyio.sleep(0.002)
        assert at_b.statistics().held == 1


async def test_wake_ups_resume_after_redis_restarts_empty(own_redis: RedisServer) -> None:
    ns = namespace()
    async with (
        fleet_client(own_redis.url, ns, poll_s=NEVER_S, op_budget_s=0.05, probe_s=0.01) as a,
        fleet_client(own_redis.url, ns, poll_s=NEVER_S, op_budget_s=0.05, probe_s=0.01) as b,
    ):
        at_a, at_b = admission(a, 1), admission(b, 1)
        await subscribed(own_redis.url, b, at_b)
        own_redis.stop()
        own_redis.start()  # empty: no subscriber, no script, no lease
        # b's subscriber lost its connection: it subscribes again once b finds Redis back
        with anyio.fail_after(5.0):
            while (a.state, b.state) != ("up", "up") or b.wake.subscriptions < 2:
                await a._renew()
                await b._renew()
                await anyio.sleep(0.01)
        await subscribed(own_redis.url, b, at_b)
        held = await at_a.enter(None)
        assert held.registered  # granted by Redis: its release goes there
        got: list[Lease] = []
        async with anyio.create_task_group() as tg:

            async def wait_in_b() -> None:
                got.append(await at_b.enter(None))

            tg.start_soon(wait_in_b)
            await waiting(at_b, 1)
            at_a.leave(held)
            with anyio.fail_after(2.0):
                while not got:
                    await anyio.sleep(0.002)
        assert b.wake.received == 1


class Settable:
    """A leader's limit that the test moves (the fleet publishes it at the next round)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def update(self, sample: Any, now: float) -> None:
        return None


async def test_a_leader_that_raises_the_limit_wakes_the_waiters(redis_url: str) -> None:
    ns, limit = namespace(), Settable(1)
    # leadership rounds run when the test says so
    lead = functools.partial(fleet_client, redis_url, ns, lead_s=1e6, poll_s=NEVER_S)
    async with lead(autos=[limit]) as leading, lead(autos=[Settable(1)]) as following:
        await leading._lead()
        await following._lead()
        at_lead, at_follow = auto(leading), auto(following)
        assert at_lead.leading and not at_follow.leading
        await subscribed(redis_url, following, at_follow)
        await at_lead.enter(None)  # the fleet's one permit
        got: list[Lease] = []
        async with anyio.create_task_group() as tg:

            async def wait_in_follower() -> None:
                got.append(await at_follow.enter(None))

            tg.start_soon(wait_in_follower)
            await waiting(at_follow, 1)
            limit.limit = 2
            await leading._lead()  # publishes 2: one permit free, one waiter woken
            with anyio.fail_after(2.0):
                while not got:
                    await anyio.sleep(0.002)
        assert following.wake.received == 1


async def test_a_process_above_its_share_hands_a_permit_to_a_waiting_process(
    redis_url: str,
) -> None:
    # one permit, two processes, both with calls waiting: the one holding it used to take it
    # back with its release, for good — the other's calls waited until they failed
    async with two_processes(redis_url, 1) as (a, _, at_a, at_b):
        await a._renew()  # two live workers: a's share of one permit is half of one
        held = await at_a.enter(None)
        got: list[str] = []
        async with anyio.create_task_group() as tg:

            async def wait_in(name: str, at: FleetAdmission) -> None:
                await at.enter(None)
                got.append(name)

            tg.start_soon(wait_in, "b", at_b)
            await waiting(at_b, 1)
            tg.start_soon(wait_in, "a", at_a)
            await waiting(at_a, 2)
            at_a.leave(held)
            with anyio.fail_after(2.0):
                while not got:
                    await anyio.sleep(0.002)
            assert got == ["b"]
            tg.cancel_scope.cancel()


async def test_a_process_whose_new_calls_keep_arriving_still_hands_a_permit_on(
    redis_url: str,
) -> None:
    # two permits: a holds one for good and cycles new calls back to back on the other while
    # b waits. The permit a freed went to a's next call (its acquire reached Redis before b,
    # woken, did; or a reused it, counting itself alone): b waited as long as a's calls came
    async with two_processes(redis_url, 2) as (a, _, at_a, at_b):
        await at_a.enter(None)  # held by a to the end
        cycling = await at_a.enter(None)  # a: the only live worker it has seen
        got: list[Lease] = []
        cycles_after_told = 0
        async with anyio.create_task_group() as tg:

            async def wait_in_b() -> None:
                got.append(await at_b.enter(None))

            tg.start_soon(wait_in_b)
            await waiting(at_b, 1)
            with anyio.fail_after(3.0):
                while True:
                    told = at_a.fleet_waiting >= 1 and at_a.live_workers == 2
                    at_a.leave(cycling)
                    try:  # a's next call: a new one, not one that was waiting
                        cycling = await at_a.enter(a.clock.now() + 0.2)
                    except gg.OverloadedError:
                        break  # refused: the permit went to b
                    cycles_after_told += told
                while not got:
                    await anyio.sleep(0.002)
        assert at_b.statistics().held == 1
        # once a knew that b waits and that it holds more than its share, its next release
        # was b's (one more cycle may have been on its way)
        assert cycles_after_told <= 1


async def members(url: str, key: str) -> list[str]:
    r: Any = redis.asyncio.Redis.from_url(url)
    try:
        return [m.decode() for m in await r.zrange(key, 0, -1)]
    finally:
        await r.aclose()


async def test_a_permit_reserved_for_a_waiter_that_died_is_free_after_reserve_ms(
    redis_url: str,
) -> None:
    ns, wall = namespace(), Wall()
    async with fleet_client(redis_url, ns, fleet_clock=wall, poll_s=NEVER_S) as a:
        at = admission(a, 1)
        held = await at.enter(None)
        r: Any = redis.asyncio.Redis.from_url(redis_url)
        try:  # a process that queued as a waiter, then died
            await r.zadd(at.waiters_key, {"dead-worker": int(wall.now * 1000) - 1})
        finally:
            await r.aclose()
        at.leave(held)
        with anyio.fail_after(2.0):  # the release pops it: the permit is kept for it
            while "dead-worker:~" not in await members(redis_url, at.permits_key):
                await anyio.sleep(0.002)
        assert not await at._try(a.new_lease())
        wall.now += RESERVE_MS / 1000 + 0.001
        assert await at._try(a.new_lease())
        assert await members(redis_url, at.waiters_key) == []


async def test_a_process_woken_with_nothing_waiting_hands_its_reservation_back(
    redis_url: str,
) -> None:
    async with two_processes(redis_url, 1) as (a, b, at_a, at_b):
        held = await at_a.enter(None)
        with pytest.raises(gg.OverloadedError):  # b waits, then gives up: still queued
            await at_b.enter(b.clock.now() + 0.05)
        assert at_b.fleet_waiting == 1
        at_a.leave(held)
        with anyio.fail_after(2.0):  # woken, b has no call left for it: handed back
            while b.wake.received < 1:
                await anyio.sleep(0.002)
            while f"{b.worker_id}:~" in await members(redis_url, at_a.permits_key):
                await anyio.sleep(0.002)
        assert await at_a._try(a.new_lease())  # well within RESERVE_MS: wall time moved little
