"""A ``gather`` of identical deterministic calls on ``ResponseCache(shared=)``, at the
default ``op_budget_s``.

Found by an app that sent 200 ``gate.chat(..., temperature=0)`` over 4 prompts at once: the
idle loopback Redis was declared down ("unreachable (TimeoutError)", 160 ``shared_errors``)
and the simulator got 12 requests instead of 4. Two causes:

- a lookup's 50 ms budget counted its wait for one of the process's 16 connections, behind
  the process's own lookups: a burst queued itself into an outage, Redis idle all along;
- a caller whose Redis lookup came back after an identical call of its own process had been
  answered (the flight gone, the answer in memory) sent the call again.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import gptgate as gg
from gptgate.response_cache_redis import POOL_CONNECTIONS, RedisAnswers
from tests.fleettools import namespace
from tests.mockbackend import Script, backend, gateway, ok
from tests.slowredis import slow_replies

#: each reply this long in coming (the server or the network busy, never the event loop)
REPLY_S = 0.004


SlowReplies = slow_replies(REPLY_S)


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {i}"}]


async def test_lookups_queued_behind_the_processes_own_are_no_outage(redis_url: str) -> None:
    """640 lookups at once over 16 connections, each reply 4 ms: the last waits ~160 ms for
    a connection — its own process's queue, not a slow Redis (50 ms budget, the default)."""
    answers = RedisAnswers(gg.Shared(redis_url, namespace=namespace()), ttl_s=60)
    assert answers.shared.op_budget_s == 0.05
    answers._client().connection_pool.connection_class = SlowReplies
    await answers.put("k", b"answer")
    found: list[bytes | None] = []

    async def look() -> None:
        found.append(await answers.get("k"))

    async with anyio.create_task_group() as tg:
        for _ in range(POOL_CONNECTIONS * 40):
            tg.start_soon(look)
    await answers.aclose()
    assert answers.errors == 0 and answers.up
    assert found == [b"answer"] * (POOL_CONNECTIONS * 40)


async def test_a_lookup_that_failed_after_the_local_flight_ended_sends_nothing(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second caller's Redis lookup fails (the burst's outage) once the first caller's
    identical call has been answered and stored in memory: it is served from memory instead
    of sending the call again (Redis down, nothing else would stop it)."""
    script = Script(ok("one"), ok("two"))
    cache = gg.ResponseCache(ttl_s=60, shared=gg.Shared(redis_url, namespace=namespace()))
    redis = cache.redis
    assert redis is not None
    looked, first_done = 0, anyio.Event()
    read = redis.get_aged

    async def failing_for_the_second(key: str) -> Any:
        nonlocal looked
        looked += 1
        if looked == 1:
            return await read(key)
        await first_done.wait()  # the reply overran its budget meanwhile: an outage
        redis._down(TimeoutError())
        return None

    monkeypatch.setattr(redis, "get_aged", failing_for_the_second)
    gate = gateway(backend(script), response_cache=cache)
    texts: list[str] = []

    async def ask(then: anyio.Event | None) -> None:
        texts.append((await gate.chat(messages(1), temperature=0)).text)
        if then is not None:
            then.set()

    async with gate, anyio.create_task_group() as tg:
        tg.start_soon(ask, first_done)
        tg.start_soon(ask, None)
    assert len(script.requests) == 1 and texts == ["one", "one"]
