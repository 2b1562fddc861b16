"""The shared 429 pause: one gateway's retry-after is honoured by another gateway on the same
backend key (two Gateways in one process, a real redis-server)."""

from __future__ import annotations

import time
import uuid

import anyio
import httpx2
import redis.asyncio

import gptgate as gg
from tests.mockbackend import USER, Script, backend, error, gateway, ok


async def test_a_retry_after_seen_by_one_gateway_pauses_the_other(redis_url: str) -> None:
    arrivals: list[float] = []
    first = error(429, "slow down", retry_after="1")

    def handler(request: httpx2.Request) -> httpx2.Response:
        arrivals.append(time.monotonic())
        return first if len(arrivals) == 1 else ok()

    script = Script(handler)
    shared = gg.Shared(redis_url, namespace=f"t{uuid.uuid4().hex[:12]}", lease_s=5.0)
    a, b = (gateway(backend(script, concurrency=4), shared=shared) for _ in range(2))
    for gate in (a, b):
        gate._fleet_options = {"poll_s": 0.002}
    async with a, b, anyio.create_task_group() as tg:
        tg.start_soon(a.chat, USER)  # 429, then its own retry after 1 s
        with anyio.fail_after(5):
            while not arrivals:
                await anyio.sleep(0.001)
        assert a._fleet is not None
        admission = a._fleet._admissions[0]
        async with redis.asyncio.Redis.from_url(redis_url) as r:
            with anyio.fail_after(5):  # a publishes the pause in the background
                while await r.pttl(admission.pause_key) <= 0:
                    await anyio.sleep(0.002)
        result = await b.chat(USER)  # b never saw a 429 itself
    assert result.text
    assert len(arrivals) == 3
    # b's request waited out a's retry-after (1 s) instead of going at once
    assert min(arrivals[1:]) - arrivals[0] >= 0.9
