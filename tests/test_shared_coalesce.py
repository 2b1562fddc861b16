"""One fleet client's Redis operations go out together (gptgate/shared/coalesce.py): a burst
of calls uses one connection and a round trip or two, a fresh gateway's first burst pays no
connect and no script load, and a caller that leaves mid-batch loses no permit and counts none
twice. Against a real redis-server; the connections and scripts are counted by the server."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
import redis.asyncio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.shared.fleet import FleetAdmission, FleetClient
from tests.conftest import RedisServer
from tests.fleettools import admission, fleet_client, namespace
from tests.mockbackend import USER, Script, backend, gateway, ok


async def server_stats(r: Any) -> dict[str, int]:
    """Connections the server has accepted, and the EVALSHA / SCRIPT calls it has run (read
    on the test's one connection ``r``, opened before)."""
    stats: dict[str, Any] = await r.info("stats")
    commands: dict[str, Any] = await r.info("commandstats")
    return {
        "connections": int(stats["total_connections_received"]),
        "evalsha": int(commands.get("cmdstat_evalsha", {}).get("calls", 0)),
        "script": int(commands.get("cmdstat_script", {}).get("calls", 0)),
    }


async def counted(url: str, at: FleetAdmission) -> int:
    async with redis.asyncio.Redis.from_url(url) as r:
        return int(await r.zcard(at.permits_key))


async def burst(at: FleetAdmission, n: int, deadline: float | None) -> tuple[int, int]:
    """``n`` concurrent enters: (granted, refused at the deadline)."""
    outcome = {"granted": 0, "refused": 0}

    async def one() -> None:
        try:
            await at.enter(deadline)
        except gg.OverloadedError:
            outcome["refused"] += 1
        else:
            outcome["granted"] += 1

    async with anyio.create_task_group() as group:
        for _ in range(n):
            group.start_soon(one)
    return outcome["granted"], outcome["refused"]


async def test_a_burst_of_acquires_is_one_connection_and_a_round_trip_or_two(
    redis_url: str,
) -> None:
    # redis-py's pool opened one connection per concurrent operation: this burst of 32
    # opened 32, each paying a connect and a handshake inside its 50 ms budget
    async with redis.asyncio.Redis.from_url(redis_url) as r:
        before = await server_stats(r)
        # a generous op budget: connections are counted, not latency (a loaded machine's
        # op over 1 s reconnected and was counted as one more)
        async with fleet_client(redis_url, namespace(), op_budget_s=5.0) as client:
            at = admission(client, 32)
            trips = client._batch.round_trips
            assert await burst(at, 32, None) == (32, 0)
            assert client._batch.round_trips - trips <= 2
            # the fleet is full: exactly the limit, the next 32 wait and are refused
            assert await burst(at, 32, SystemClock().now() + 0.05) == (0, 32)
            assert len(at.held) == 32 and await counted(redis_url, at) == 32
        after = await server_stats(r)
    # one connection for the burst (+ counted()'s own), not 32: the server counts every
    # client's, and under load a connection of an earlier test's client closing late came in
    # the window once (4 where 3): a bound far below 32 still says the burst shares one
    assert after["connections"] - before["connections"] <= 8


async def test_a_fresh_gateways_first_burst_pays_no_connect_no_script_load_no_outage(
    redis_url: str,
) -> None:
    # every script is loaded and the connection opened when the gateway starts: before, each
    # acquire of the first burst connected (32 connections) and met NOSCRIPT, then loaded
    # a generous op budget: what is counted is connections and script loads, not latency
    # (on a loaded machine a 50 ms op ran over, reconnected, and was counted as a connect)
    shared = gg.Shared(redis_url, namespace=namespace(), op_budget_s=2.0)
    gate = gateway(backend(Script(ok()), concurrency=32), shared=shared)
    async with redis.asyncio.Redis.from_url(redis_url) as r, gate:
        started = await server_stats(r)
        async with anyio.create_task_group() as group:
            for _ in range(64):
                group.start_soon(gate.chat, USER)
        during = await server_stats(r)
        fleet = gate.stats()["mock"].fleet
        assert fleet is not None and fleet.outages == 0 and fleet.state == "up"
    assert during["connections"] == started["connections"]
    assert during["script"] == started["script"]
    assert during["evalsha"] > started["evalsha"]  # the burst did go through Redis


async def test_a_caller_cancelled_mid_batch_loses_no_permit_and_counts_none_twice(
    own_redis: RedisServer,
) -> None:
    # 8 acquires in flight (a frozen Redis holds their answers) and 4 queued behind them;
    # every caller leaves (its task group is cancelled). The 8 were granted when Redis woke:
    # each grant is released; the 4 queued never ran. Before, the 8 grants stayed counted
    # until their leases expired (5 s): the fleet was full with nobody holding a permit.
    async with fleet_client(own_redis.url, namespace(), op_budget_s=5.0) as client:
        at = admission(client, 8)
        # mid-run: connections open, scripts loaded (a burst of 8, then its releases)
        leases = [await at.enter(None) for _ in range(8)]
        for lease in leases:
            at.leave(lease)
        await wait_until_counted(own_redis.url, at, 0)
        own_redis.freeze()
        try:
            async with anyio.create_task_group() as group:
                for _ in range(8):
                    group.start_soon(at.enter, None)
                await anyio.sleep(0.1)  # the sender has sent them: they are in flight
                for _ in range(4):
                    group.start_soon(at.enter, None)
                await anyio.sleep(0.05)
                group.cancel_scope.cancel()
        finally:
            own_redis.thaw()
        assert not at.held
        await wait_until_counted(own_redis.url, at, 0)
        # every permit is there again, once: 8 granted, a 9th refused
        assert await burst(at, 9, SystemClock().now() + 0.05) == (8, 1)
        assert await counted(own_redis.url, at) == 8
        assert client.state == "up" and client.outages == 0


async def wait_until_counted(url: str, at: FleetAdmission, n: int, timeout: float = 3.0) -> None:
    with anyio.fail_after(timeout):
        while await counted(url, at) != n:
            await anyio.sleep(0.01)


async def test_scripts_flushed_mid_run_are_loaded_again_once_no_outage(
    own_redis: RedisServer,
) -> None:
    async with fleet_client(own_redis.url, namespace(), op_budget_s=5.0) as client:
        at = admission(client, 16)
        assert await burst(at, 8, None) == (8, 0)
        async with redis.asyncio.Redis.from_url(own_redis.url) as r:
            await r.script_flush()
            before = await server_stats(r)
            # in one batch: refused, loaded, sent again
            assert await burst(at, 8, None) == (8, 0)
            after = await server_stats(r)
        assert client.state == "up" and client.outages == 0
        assert await counted(own_redis.url, at) == 16
    assert after["script"] - before["script"] == 1  # one SCRIPT LOAD (ACQUIRE), not eight


async def test_a_sender_stopped_under_its_callers_is_no_outage(own_redis: RedisServer) -> None:
    # the gateway's close cancels the sender (its task group) while an operation waits on it:
    # that was an outage (a warning, and the close then skipped its final flush); now the
    # caller hears it at once and sends its operation itself
    shared = gg.Shared(own_redis.url, namespace=namespace(), lease_s=60.0, op_budget_s=5.0)
    client = FleetClient(shared, clock=SystemClock())
    at = admission(client, 4)
    leases = []

    async def enter() -> None:
        leases.append(await at.enter(None))

    async with anyio.create_task_group() as callers:
        async with anyio.create_task_group() as senders:
            await client.start(senders)
            own_redis.freeze()  # the acquire's batch is in flight, unanswered
            callers.start_soon(enter)
            await anyio.sleep(0.05)
            senders.cancel_scope.cancel()
        own_redis.thaw()
    assert client.outages == 0 and client.state == "up"
    assert len(leases) == 1 and await counted(own_redis.url, at) == 1  # the first try released
    at.leave(leases[0])
    await client.aclose()
    assert await counted(own_redis.url, at) == 0


async def test_callers_and_sender_cancelled_together(own_redis: RedisServer) -> None:
    # the gateway's close cancels the calls and the sender at once: a caller whose queued
    # operation the stopping sender has just failed is cancelled, not crashed (it looked for
    # its operation in a queue the sender had cleared)
    shared = gg.Shared(own_redis.url, namespace=namespace(), lease_s=60.0, op_budget_s=5.0)
    client = FleetClient(shared, clock=SystemClock())
    at = admission(client, 8)
    try:
        async with anyio.create_task_group() as callers, anyio.create_task_group() as senders:
            await client.start(senders)
            own_redis.freeze()
            callers.start_soon(at.enter, None)  # in flight
            await anyio.sleep(0.05)
            for _ in range(3):
                callers.start_soon(at.enter, None)  # queued behind it
            await anyio.sleep(0.05)
            senders.cancel_scope.cancel()
            callers.cancel_scope.cancel()
    finally:
        own_redis.thaw()
    assert not at.held and client.outages == 0
    await client.aclose()
    assert await counted(own_redis.url, at) == 0


async def test_a_callers_budget_runs_from_the_send_not_from_the_queue(
    own_redis: RedisServer,
) -> None:
    # a fresh gateway's burst: the loop runs the calls' first steps for most of the budget
    # (45 of 50 ms) before the sender can send their acquires, then Redis takes 20 ms. Timed
    # from the queue, the budget ran out on time with Redis blamed: an outage at start (1 in
    # 8 fresh gateways on an idle 2-core box; 3 in 40 on a loaded one)
    # (scaled up 4x here, so that a loaded machine's own delays stay well inside the margin)
    async with fleet_client(own_redis.url, namespace(), op_budget_s=0.2) as client:
        at = admission(client, 8)
        try:
            async with anyio.create_task_group() as group:
                for _ in range(8):
                    group.start_soon(at.enter, None)
                await anyio.lowlevel.checkpoint()  # queued
                time.sleep(0.18)  # noqa: ASYNC251 - the burst's first steps
                own_redis.freeze()
                await anyio.sleep(0.05)  # sent: Redis answers 50 ms later
                own_redis.thaw()
        finally:
            own_redis.thaw()
        # timed from the queue, the budget ran out 20 ms after the send: asked again (a slow
        # Redis) or, before late answers were asked again, an outage
        assert client.outages == 0 and client.loop_busy == 0 and client.slow_ops == 0
        assert len(at.held) == 8 and await counted(own_redis.url, at) == 8
