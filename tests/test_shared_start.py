"""``shared=`` at start: a Redis unreachable before the fleet was ever seen (down, a mistyped
URL). Each process then admits one call per backend at a time — it cannot know how many
others are admitting alone — and takes its share of the fleet's limit only once Redis has
answered and the others have had time to rejoin; ``Shared(required=True)`` fails the start
with a typed error instead. Against a loopback port nothing listens on, and a real
redis-server that comes up later."""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.shared.fleet import FleetStatistics
from tests.conftest import RedisServer
from tests.fleettools import admission, leave_all, namespace
from tests.fleettools import fleet_client as shared_fleet_client
from tests.mockbackend import USER, Script, backend, gateway, wait_until
from tests.test_shared_outage import held_until, outage_warnings

#: a short op budget, a fast outage probe
fleet_client = functools.partial(shared_fleet_client, op_budget_s=0.05, probe_s=0.01)

LIMIT, WORKERS = 6, 3


def unreachable_url(password: str = "") -> str:
    """A Redis URL on a loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    auth = f":{password}@" if password else ""
    return f"redis://{auth}127.0.0.1:{port}/3"


@asynccontextmanager
async def fleet_of(
    script: Script, shared: gg.Shared, *, concurrency: int | str = LIMIT, probe_s: float = 0.01
) -> AsyncIterator[list[gg.Gateway]]:
    """``WORKERS`` open gateways of one fleet (each its own worker, as processes are)."""
    gates = [
        gateway(backend(script, concurrency=concurrency), shared=shared) for _ in range(WORKERS)
    ]
    for gate in gates:
        gate._fleet_options = {"poll_s": 0.002, "probe_s": probe_s}
    async with AsyncExitStack() as stack:
        for gate in gates:
            await stack.enter_async_context(gate)
        yield gates


@pytest.mark.parametrize("concurrency", [LIMIT, "auto"])
async def test_unreachable_at_start_each_process_admits_one_call_not_the_whole_limit(
    caplog: pytest.LogCaptureFixture, concurrency: int | str
) -> None:
    """3 workers, a fleet limit of 6, Redis unreachable from the start: each process took the
    whole limit as its share (alone as far as it knew), 18 in flight at the server."""
    caplog.set_level(logging.WARNING, logger="gptgate")
    release = anyio.Event()
    script = Script(held_until(release))
    url = unreachable_url()
    shared = gg.Shared(url, namespace=namespace())
    async with (
        fleet_of(script, shared, concurrency=concurrency) as gates,
        anyio.create_task_group() as tg,
    ):
        for gate in gates:
            for _ in range(8):
                tg.start_soon(gate.chat, USER)
        await wait_until(lambda: script.in_flight >= WORKERS)
        await anyio.sleep(0.05)  # room for more, were any admitted
        assert script.max_in_flight == WORKERS
        stats = [gate.stats()["mock"] for gate in gates]
        release.set()
    assert script.max_in_flight == WORKERS  # one each, to the end
    for entry in stats:
        assert entry.fleet is not None
        assert (entry.fleet.state, entry.fleet.seen, entry.fleet.local_share) == ("down", False, 1)
        assert entry.limit == 1  # what is applied, not the configured 6
    warnings = outage_warnings(caplog)
    assert len(warnings) == WORKERS  # one per process
    assert all(url in w and "mock=1 of" in w for w in warnings)


async def test_redis_up_later_the_fleet_grows_to_its_limit_and_no_further(
    own_redis: RedisServer,
) -> None:
    """Three gateways started while their Redis was down: one call each; once it answers
    and every process has rejoined, the fleet's limit of 6 through Redis, never above."""
    own_redis.stop()
    release = anyio.Event()
    script = Script(held_until(release))
    shared = gg.Shared(own_redis.url, namespace=namespace(), lease_s=1.0)  # renewals: 0.33 s
    async with fleet_of(script, shared, probe_s=0.1) as gates, anyio.create_task_group() as tg:
        for gate in gates:
            for _ in range(8):
                tg.start_soon(gate.chat, USER)
        await wait_until(lambda: script.in_flight >= WORKERS)
        assert script.max_in_flight == WORKERS
        own_redis.start()
        await wait_until(lambda: all(fleet(g).seen for g in gates))
        await wait_until(lambda: script.in_flight >= LIMIT)
        await anyio.sleep(0.05)  # room for more, were any admitted
        assert script.max_in_flight == LIMIT
        assert [fleet(g).state for g in gates] == ["up"] * WORKERS
        assert all(g.stats()["mock"].limit == LIMIT for g in gates)
        release.set()
    assert script.max_in_flight == LIMIT


def fleet(gate: gg.Gateway) -> FleetStatistics:
    statistics = gate.stats()["mock"].fleet
    assert statistics is not None
    return statistics


async def test_the_log_names_the_whole_url_with_the_password_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    url = unreachable_url(password="hunter2")
    shown = url.replace(":hunter2@", ":****@")
    async with gateway(backend(Script()), shared=gg.Shared(url, namespace=namespace())):
        pass
    (warning,) = outage_warnings(caplog)
    assert shown in warning and "hunter2" not in warning
    shared = gg.Shared(url)
    assert shown in repr(shared) and "hunter2" not in repr(shared)
    assert shared.display_url == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:****@h:6379/0"),
        ("redis://user:pw@h:6379/0", "redis://user:****@h:6379/0"),
        ("rediss://secret@h:6380", "rediss://****@h:6380"),  # a lone userinfo may be the key
        ("redis://h:6379/0?password=pw&db=1", "redis://h:6379/0?password=****&db=1"),
        ("unix:///run/redis.sock?db=2", "unix:///run/redis.sock?db=2"),
    ],
)
def test_display_url_masks_every_password(url: str, shown: str) -> None:
    assert gg.Shared(url).display_url == shown


async def test_required_fails_the_start_naming_the_url_and_a_later_start_works(
    own_redis: RedisServer,
) -> None:
    own_redis.stop()
    url = own_redis.url.replace("redis://", "redis://:hunter2@")
    shared = gg.Shared(url, namespace=namespace(), required=True)
    gate = gateway(backend(Script()), shared=shared)
    with pytest.raises(gg.SharedUnreachableError) as caught:
        async with gate:
            pytest.fail("started without its Redis")
    error = caught.value
    assert isinstance(error, gg.GateError) and not error.retryable
    assert shared.display_url in str(error) and "hunter2" not in str(error)
    assert "hunter2" not in repr(error) and error.url == shared.display_url
    with pytest.raises(gg.GatewayClosedError):  # not half open
        await gate.chat(USER)
    own_redis.start()
    gate = gateway(backend(Script()), shared=gg.Shared(own_redis.url, required=True))
    async with gate:
        fleet = gate.stats()["mock"].fleet
        assert fleet is not None and (fleet.state, fleet.seen) == ("up", True)


async def test_redis_up_later_the_share_grows_only_once_the_fleet_is_seen(
    own_redis: RedisServer,
) -> None:
    """Redis comes up after the start: the first process back is told "1 live worker" while
    the others still admit alone, unseen by Redis. It keeps to one call until the others have
    had two probe periods to rejoin; then the fleet's limit, through Redis."""
    ns = namespace()
    own_redis.stop()
    slow_probe = functools.partial(shared_fleet_client, op_budget_s=0.05, probe_s=0.5)
    async with slow_probe(own_redis.url, ns) as a, slow_probe(own_redis.url, ns) as b:
        at_a, at_b = admission(a, LIMIT), admission(b, LIMIT)
        assert a.state == b.state == "down" and not a.seen
        held_a = [await at_a.enter(None)]
        held_b = [await at_b.enter(None)]
        with pytest.raises(gg.OverloadedError):  # one each while the fleet is unseen
            await at_a.enter(SystemClock().now() + 0.05)
        own_redis.start()
        await a._renew()  # a finds it first: "1 live worker"; b is still down
        assert a.state == "up" and b.state == "down" and a.rejoining
        assert not a.seen and at_a.local_share == 1
        with pytest.raises(gg.OverloadedError):
            await at_a.enter(SystemClock().now() + 0.05)
        await b._renew()
        with anyio.fail_after(5):  # the rejoin window ends
            while a.rejoining:
                await anyio.sleep(0.01)
        assert not a.seen and at_a.local_share == 1  # no renewal has counted the fleet yet
        await a._renew()
        assert a.seen and a.live_workers == 2
        while len(held_a) + len(held_b) < LIMIT:
            held_a.append(await at_a.enter(SystemClock().now() + 1.0))
        with pytest.raises(gg.OverloadedError):  # Redis counts the fleet's 6
            await at_a.enter(SystemClock().now() + 0.05)
        assert at_a.local_share == LIMIT // 2  # the share an outage now would take
        leave_all(at_a, held_a)
        leave_all(at_b, held_b)


async def test_an_outage_after_the_fleet_was_seen_keeps_the_share_it_knew(
    own_redis: RedisServer,
) -> None:
    """Unchanged: once seen, an outage admits on limit ÷ the live workers last counted."""
    ns = namespace()
    async with fleet_client(own_redis.url, ns) as a, fleet_client(own_redis.url, ns) as b:
        at_a, at_b = admission(a, LIMIT), admission(b, LIMIT)
        held_b = await at_b.enter(None)
        held = [await at_a.enter(None)]
        assert a.seen and at_a.local_share == LIMIT // 2
        own_redis.stop()
        while len(held) < LIMIT:
            try:
                held.append(await at_a.enter(SystemClock().now() + 0.05))
            except gg.OverloadedError:
                break
        assert a.state == "down" and a.seen and len(held) == LIMIT // 2
        leave_all(at_a, held)
        at_b.leave(held_b)
        own_redis.start()


async def test_stats_limit_is_the_limit_in_force_and_local_limit_the_configured_one(
    redis_url: str,
) -> None:
    """Two gateways of one fleet configured 4 and 8: the fleet enforces 4, and the second's
    ``stats().limit`` said 8."""
    shared = gg.Shared(redis_url, namespace=namespace())
    script = Script(held_until(anyio.Event()))
    low = gateway(backend(Script(), concurrency=4), shared=shared)
    high = gateway(backend(script, concurrency=8), shared=shared)
    async with low, high:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(high.chat, USER)  # its acquire hears the fleet's 4
                await wait_until(lambda: script.in_flight == 1)
                tg.cancel_scope.cancel()
        stats = high.stats()["mock"]
        assert stats.fleet is not None and stats.fleet.limit == 4
        assert (stats.limit, stats.local_limit) == (4, 8)
        assert (low.stats()["mock"].limit, low.stats()["mock"].local_limit) == (4, 4)


async def test_stats_limit_without_shared_is_the_local_limit() -> None:
    async with gateway(backend(Script(), concurrency=5)) as gate:
        stats = gate.stats()["mock"]
    assert (stats.limit, stats.local_limit) == (5, 5)
