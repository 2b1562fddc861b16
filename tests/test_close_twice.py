"""A second ``aclose()`` while the first is still closing — what an app's SIGTERM handler
that closes the gateway and then its ``async with gate:`` exit do — returned at once, so the
program went on (and ended: ``asyncio.run`` cancels what is left) while the first close was
still handing the fleet's permits back. Measured with real processes: a worker closed that
way from its SIGTERM handler with 2 calls in flight left its permits to the fleet's lease
(another process's call waited 4.5 s of lease_s 5 instead of the 0.5 s grace). A second close
now returns once the gateway is closed."""

from __future__ import annotations

import contextlib

import anyio
import anyio.lowlevel
import httpx2
import redis.asyncio

import gptgate as gg
from tests.fleettools import namespace

USER = [{"role": "user", "content": "hello"}]


async def test_a_second_aclose_returns_once_the_first_has_closed(redis_url: str) -> None:
    ns = namespace()
    started = 0
    both = anyio.Event()

    async def hang(request: httpx2.Request) -> httpx2.Response:
        nonlocal started
        started += 1
        if started == 2:
            both.set()
        await anyio.sleep_forever()
        raise AssertionError

    backend = gg.Backend(
        name="b", base_url="http://127.0.0.1:9/v1", model="m", concurrency=2, timeout=30,
        transport=httpx2.MockTransport(hang),
    )
    gate = gg.Gateway([backend], shared=gg.Shared(redis_url, namespace=ns, lease_s=30), seed=1)
    raw = redis.asyncio.Redis.from_url(redis_url)

    async def call() -> None:
        with contextlib.suppress(gg.GatewayClosedError):
            await gate.chat(USER)

    async with anyio.create_task_group() as tg:
        await gate.start()
        tg.start_soon(call)
        tg.start_soon(call)
        with anyio.fail_after(5):
            await both.wait()
        (key,) = [k async for k in raw.scan_iter(f"*{ns}*:permits")]
        assert await raw.zcard(key) == 2
        tg.start_soon(gate.aclose, 0.05)  # the SIGTERM handler's close
        with anyio.fail_after(5):
            while gate._opened.phase != "closing":
                await anyio.lowlevel.checkpoint()
        await gate.aclose()  # the ``async with`` exit: returns once closed
        assert gate._opened.phase == "closed"
        assert await raw.zcard(key) == 0
    await raw.aclose()
