"""A call reuses the permit this process's last call ended while its release is still queued
(gptgate/shared/fleet.py, ``FleetAdmission._reuse``): the fleet still counts it, so keeping it
is what the release carried by the next acquire did, without either round trip. Against a real
redis-server, whose own counts say what was sent."""

from __future__ import annotations

import time

import pytest
import redis.asyncio

from gptgate.shared import fleet as fleet_module
from gptgate.shared.fleet import FleetAdmission
from tests.fleettools import admission, fleet_client, namespace, scripts_run


async def counted(url: str, at: FleetAdmission) -> int:
    async with redis.asyncio.Redis.from_url(url) as r:
        return int(await r.zcard(at.permits_key))


async def test_a_call_reuses_the_permit_the_last_one_ended(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet_module, "RELEASE_LINGER_S", 60.0)  # the release stays queued
    async with fleet_client(redis_url, namespace()) as a:
        at = admission(a, 4)
        first = await at.enter(None)
        at.leave(first)
        before = await scripts_run(redis_url)
        second = await at.enter(None)  # the release is still queued: no round trip
        assert await scripts_run(redis_url) == before
        assert second.id == first.id and second.registered
        assert at.statistics().reused == 1 and not a._pending
        assert await counted(redis_url, at) == 1  # counted once all along
        at.leave(second)
        await a._flush()
        assert await counted(redis_url, at) == 0


async def test_a_release_already_sent_is_not_reused(redis_url: str) -> None:
    async with fleet_client(redis_url, namespace()) as a:
        at = admission(a, 4)
        first = await at.enter(None)
        at.leave(first)
        await a._flush()  # sent: the fleet may have given it to another process
        second = await at.enter(None)
        assert second.id != first.id and at.statistics().reused == 0
        assert await counted(redis_url, at) == 1
        at.leave(second)


async def test_no_reuse_when_redis_has_not_answered_lately(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause or a lower limit set by another process is heard within ``REUSE_FRESH_S``."""
    async with fleet_client(redis_url, namespace()) as a:
        at = admission(a, 4)
        first = await at.enter(None)
        at.leave(first)
        monkeypatch.setattr(fleet_module, "REUSE_FRESH_S", -1.0)
        second = await at.enter(None)  # asked Redis, carrying the release
        assert second.id != first.id and at.statistics().reused == 0
        assert await counted(redis_url, at) == 1
        at.leave(second)


async def test_a_reusing_process_hears_the_fleets_pause_with_its_releases(
    redis_url: str,
) -> None:
    ns = namespace()
    async with fleet_client(redis_url, ns) as a, fleet_client(redis_url, ns) as b:
        at_a, at_b = admission(a, 4), admission(b, 4)
        paused: list[float] = []
        at_a.on_pause = paused.append
        lease = await at_a.enter(None)
        at_a.leave(lease)
        lease = await at_a.enter(None)  # reused: no acquire to read the pause
        b.pause(at_b, 2.0)  # another process saw a 429
        await b._flush()
        at_a._answered_at = time.monotonic() - fleet_module.REUSE_FRESH_S  # due again
        assert at_a.hearing
        at_a.leave(lease)
        await a._flush()  # the release, and the fleet's pause read with it
        assert paused and 1.0 < paused[0] <= 2.0
        assert not at_a.hearing


async def test_a_permit_waiting_to_be_reused_is_renewed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its lease must not run out in Redis while a later call holds it."""
    monkeypatch.setattr(fleet_module, "RELEASE_LINGER_S", 60.0)  # the release stays queued
    now = [time.time()]
    async with fleet_client(redis_url, namespace(), lease_s=5.0, wall=lambda: now[0]) as a:
        at = admission(a, 4)
        lease = await at.enter(None)
        at.leave(lease)  # queued, reusable
        async with redis.asyncio.Redis.from_url(redis_url) as r:
            expiry = float(await r.zscore(at.permits_key, lease.id) or 0)
            now[0] += 1.0  # the fleet's clock, a second on
            await a._renew()
            renewed = float(await r.zscore(at.permits_key, lease.id) or 0)
        assert renewed > expiry
        at.leave(await at.enter(None))

