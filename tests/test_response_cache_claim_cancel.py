"""A caller cancelled while its fleet-wide claim (``ResponseCache(shared=)``) is on its way
leaves no claim behind.

Found by cancelling a ``gate.map`` of 300 deterministic items over 30 prompts: 13
``{namespace}:rcf:`` claims stayed in Redis after the gateway closed, each keeping every other
process that asked the same prompt polling for ``lease_s`` (10 s) for an answer nobody would
send. The SET NX had reached Redis, but the caller was cancelled before its reply was read: the
claim's token was never recorded, so nothing released it.
"""

from __future__ import annotations

import anyio
import redis.asyncio as aioredis

import gptgate as gg
from tests.fleettools import namespace
from tests.mockbackend import Script, backend, gateway, ok
from tests.slowredis import slow_replies

#: each reply's delay: the caller is cancelled while it waits for its claim's
REPLY_S = 0.2


SlowReplies = slow_replies(REPLY_S)


async def test_a_caller_cancelled_while_claiming_leaves_no_claim(redis_url: str) -> None:
    space = namespace()
    shared = gg.Shared(redis_url, namespace=space, op_budget_s=5 * REPLY_S)
    cache = gg.ResponseCache(ttl_s=60, shared=shared)
    assert cache.redis is not None
    cache.redis._client().connection_pool.connection_class = SlowReplies
    script = Script(ok("answer"))
    gate = gateway(backend(script), response_cache=cache)
    watcher = aioredis.Redis.from_url(redis_url)
    try:
        async with gate, anyio.create_task_group() as tg:

            async def ask() -> None:
                await gate.chat([{"role": "user", "content": "q"}], temperature=0)

            tg.start_soon(ask)
            with anyio.fail_after(5):
                while not await watcher.keys(f"{space}:rcf:*"):  # the SET NX has run
                    await anyio.sleep(0.005)
            tg.cancel_scope.cancel()  # its reply not read yet
        assert script.requests == []
        assert await watcher.keys(f"{space}:rcf:*") == []
    finally:
        await watcher.aclose()
