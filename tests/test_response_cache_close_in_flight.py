"""Closing a gateway while a call on ``ResponseCache(shared=)`` waits for another process's
answer to the same request.

Found by closing a ``SyncGateway`` (``shared=`` fleet limit and response cache) from another
thread under 16 threads of calls: the gateway's close waited for the calls it was sending,
not for those the cache held back while another process of the fleet sent the same request.
Such a call went on polling Redis after the close — through a new Redis client, opened after
the cache's own was closed, that nothing closed — until the other process answered or its
own deadline passed: neither ``GatewayClosedError`` at the close, nor a bounded close.
"""

from __future__ import annotations

import anyio
import httpx2

import gptgate as gg
from tests.fleettools import namespace
from tests.mockbackend import Script, backend, gateway

QUESTION = [{"role": "user", "content": "the same question"}]


async def test_a_call_waiting_for_another_process_ends_with_the_close(redis_url: str) -> None:
    shared = gg.Shared(redis_url, namespace=namespace())
    sent = anyio.Event()

    async def never_answered(request: httpx2.Request) -> httpx2.Response:
        sent.set()
        await anyio.sleep_forever()
        raise AssertionError

    # the other process: it claimed the request and sends it (its answer never comes)
    other = gateway(backend(Script(never_answered)),
                    response_cache=gg.ResponseCache(ttl_s=60, shared=shared))
    script = Script(never_answered)
    cache = gg.ResponseCache(ttl_s=60, shared=shared)
    assert cache.redis is not None
    gate = gateway(backend(script), response_cache=cache)
    outcome: list[BaseException] = []
    polled = anyio.Event()
    claim = cache.redis.claim

    async def claim_noted(key: str) -> bool:
        polled.set()
        return await claim(key)

    cache.redis.claim = claim_noted  # type: ignore[method-assign]

    async def ask() -> None:
        try:
            await gate.chat(QUESTION, temperature=0, timeout=3600)
        except gg.GateError as error:
            outcome.append(error)

    async with other, anyio.create_task_group() as tg:
        async with gate:
            tg.start_soon(lambda: other.chat(QUESTION, temperature=0))
            await sent.wait()
            tg.start_soon(ask)
            await polled.wait()
            await gate.aclose(grace_s=0)
        with anyio.fail_after(5):
            while not outcome:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert [type(e) for e in outcome] == [gg.GatewayClosedError]
    assert script.requests == []  # it never sent the call itself
    assert cache.redis._redis is None  # no client opened after the close
