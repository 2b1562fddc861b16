"""A busy event loop is not a Redis outage. A burst of calls (a ``gather`` of hundreds, a
``map``) keeps the loop running their first steps for longer than the op budget: Redis has
answered, but nobody has read the answer yet. Timing the operation on the wall clock blamed
Redis — a warning, local limits on top of the fleet's permits (more in flight than the fleet
limit), and a rejoin — with Redis idle the whole time. Only time the loop was free to hear
Redis may count against the budget; a frozen Redis stays an outage
(test_shared_outage.py)."""

from __future__ import annotations

import functools
import logging
import time

import anyio
import pytest
import redis.asyncio

from gptgate.shared.fleet import FleetAdmission, Lease
from tests.conftest import RedisServer
from tests.fleettools import admission, namespace
from tests.fleettools import fleet_client as shared_fleet_client

fleet_client = functools.partial(shared_fleet_client, op_budget_s=0.05, probe_s=0.01)


async def counted(url: str, at: FleetAdmission) -> int:
    async with redis.asyncio.Redis.from_url(url) as r:
        return int(await r.zcard(at.permits_key))


async def deaf_loop(seconds: float) -> None:
    """What a burst's first steps do to the loop: run without yielding."""
    time.sleep(seconds)  # noqa: ASYNC251 - blocking the loop is the point


async def test_a_burst_that_keeps_the_loop_busy_is_not_an_outage(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    async with fleet_client(redis_url, namespace()) as client:
        at = admission(client, 4)
        granted: list[Lease] = []

        async def enter() -> None:
            granted.append(await at.enter(None))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for _ in range(6):  # 4 granted, 2 wait for a permit
                    tg.start_soon(enter)
                tg.start_soon(deaf_loop, 0.2)  # 4x the op budget, with every acquire sent
                await anyio.sleep(0.3)
                assert len(granted) == 4
                assert client.state == "up" and client.outages == 0
                assert not [r for r in caplog.records if "unreachable" in r.getMessage()]
                # the fleet's permits are Redis's, each counted once: none admitted locally
                assert all(lease.registered for lease in granted)
                assert await counted(redis_url, at) == 4
                for lease in granted[:2]:
                    at.leave(lease)
        assert len(granted) == 6 and client.outages == 0
        # the acquires were queued, not sent, while the loop was deaf: an operation's budget
        # starts when its batch is sent (gptgate/shared/coalesce.py), so nothing overran
        assert at.statistics().loop_busy == 0


async def test_a_loop_deaf_while_a_batch_is_in_flight_is_not_an_outage(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # the acquires are sent (Redis frozen: unanswered) when the loop goes deaf for 4x the
    # budget; the budget fires 150 ms late: LoopBusy, the outcome unknown, asked again under
    # fresh ids (the first ids released) — not an outage, and each permit counted once
    caplog.set_level(logging.WARNING, logger="gptgate")
    async with fleet_client(own_redis.url, namespace()) as client:
        at = admission(client, 4)
        granted: list[Lease] = []

        async def enter() -> None:
            granted.append(await at.enter(None))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                own_redis.freeze()
                try:
                    for _ in range(4):
                        tg.start_soon(enter)
                    await anyio.sleep(0.01)  # sent, unanswered
                    await deaf_loop(0.2)
                    await anyio.sleep(0.01)  # the late budgets fire: Redis still frozen
                finally:
                    own_redis.thaw()
        assert len(granted) == 4 and client.state == "up" and client.outages == 0
        assert not [r for r in caplog.records if "unreachable" in r.getMessage()]
        assert at.statistics().loop_busy >= 1  # seen, and counted as what it was
        assert await counted(own_redis.url, at) == 4  # the first ids released: each once
