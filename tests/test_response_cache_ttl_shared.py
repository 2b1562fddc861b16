"""``ResponseCache(ttl_s=, shared=)``: an answer read from Redis is served for what is left
of its TTL there, not for a fresh ``ttl_s`` in this process's memory. Before, a process that
read an answer stored nearly ``ttl_s`` ago kept it for another whole ``ttl_s``: answers up to
twice as old as ``ttl_s`` were served (a 300 s TTL set for freshness served 10-minute-old
answers)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import redis

import gptgate as gg
from gptgate.sim import SimEngine
from tests.fleettools import namespace
from tests.test_response_cache import ROOMY_S, Counting, M, _backend


class Stepped(gg.SystemClock):
    """Real time plus an offset a test moves forward: an hour passes in a line."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.monotonic() + self.offset


def test_an_answer_read_from_redis_expires_with_its_redis_ttl(redis_url: str) -> None:
    space = namespace()
    sync = redis.Redis.from_url(redis_url)

    async def main() -> None:
        counting = Counting(SimEngine("gpu", seed=3))
        clock = Stepped()

        def gate() -> gg.Gateway:
            shared = gg.Shared(redis_url, namespace=space, op_budget_s=ROOMY_S)
            return gg.Gateway([_backend(counting)], clock=clock,
                              response_cache=gg.ResponseCache(ttl_s=3600, shared=shared))

        one, two = gate(), gate()
        ask: dict[str, Any] = {"temperature": 0, "max_tokens": 20}
        async with one, two:
            await one.chat(M, **ask)
            (stored,) = sync.keys(f"{space}:rc:*")
            sync.pexpire(stored, 10_000)  # stored 3590 s ago: 10 s left of its hour
            assert (await two.chat(M, **ask)).from_cache  # from Redis
            clock.offset += 20  # 20 s later: gone from Redis, as its TTL said
            sync.delete(stored)
            again = await two.chat(M, **ask)
            assert not again.from_cache, "served from memory 3610 s after it was stored"
        assert counting.requests == 2

    anyio.run(main)
