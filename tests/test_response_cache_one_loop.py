"""One ``ResponseCache`` given to two gateways that run on different event loops — a
``SyncGateway`` for a process's sync code and an async app's ``Gateway``, both built with the
same cache so they share answers.

Identical calls in flight on both at once crashed the callers with asyncio's ``RuntimeError:
... is bound to a different event loop`` (the single-flight event belongs to one loop), and
the two loops' threads wrote the same unlocked store. The cache now serves one event loop at a
time: a gateway opening it while a gateway on another loop holds it open is refused with a
typed error naming the two ways that work (``SyncGateway(gateway=app_gate)``, or a cache per
gateway with ``shared=`` Redis); gateways on one loop share it as before.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import anyio.lowlevel
import pytest

import gptgate as gg
from tests.simserve import unlimited_gpu

SCALE = 50.0
USER = [{"role": "user", "content": "the same question"}]


@pytest.fixture
def base_url() -> Iterator[str]:
    with unlimited_gpu(400, seed=1, scale=SCALE) as url:
        yield url


def _backend(base_url: str) -> gg.Backend:
    return gg.Backend(name="a", base_url=base_url, model="m", concurrency=4)


def test_a_cache_open_on_another_loop_is_refused_with_the_fix_named(base_url: str) -> None:
    cache = gg.ResponseCache()
    sync_gate = gg.SyncGateway([_backend(base_url)], clock=gg.ScaledClock(SCALE),
                               response_cache=cache)
    warm = [{"role": "user", "content": "open the sync gateway"}]
    sync_gate.chat(warm, max_tokens=5)  # open: its loop holds the cache

    async def main() -> None:
        gate = gg.Gateway([_backend(base_url)], clock=gg.ScaledClock(SCALE),
                          response_cache=cache)

        async def lead() -> None:
            await gate.chat(USER, temperature=0, max_tokens=200)

        with pytest.raises(gg.BadRequestError, match=r"SyncGateway\(gateway="):
            async with gate, anyio.create_task_group() as tg:
                tg.start_soon(lead)
                while gate.stats()["a"].in_flight == 0:  # the app's call is in flight
                    await anyio.sleep(0.001)
                tg.start_soon(lead)  # an identical one of the app's waits for it
                for _ in range(20):
                    await anyio.lowlevel.checkpoint()
                await anyio.to_thread.run_sync(  # and one from a sync thread
                    lambda: sync_gate.chat(USER, temperature=0, max_tokens=200)
                )
        sync_gate.close()  # the cache is free for another loop
        async with gate:
            first = await gate.chat(USER, temperature=0, max_tokens=200)
            again = await gate.chat(USER, temperature=0, max_tokens=200)
        assert not first.from_cache and again.from_cache

    try:
        anyio.run(main)
    finally:
        sync_gate.close()


def test_gateways_on_one_loop_share_a_cache_and_closing_one_keeps_the_other(
    base_url: str,
) -> None:
    async def main() -> None:
        cache = gg.ResponseCache()
        one = gg.Gateway([_backend(base_url)], clock=gg.ScaledClock(SCALE), response_cache=cache)
        two = gg.Gateway([_backend(base_url)], clock=gg.ScaledClock(SCALE), response_cache=cache)
        async with two:
            async with one:
                sent = await one.chat(USER, temperature=0, max_tokens=20)
            served = await two.chat(USER, temperature=0, max_tokens=20)
        assert not sent.from_cache and served.from_cache

    anyio.run(main)
