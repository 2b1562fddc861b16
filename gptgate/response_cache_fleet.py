"""One call per request across a fleet (``ResponseCache(shared=...)``).

The in-process single-flight joins identical calls of one gateway; two processes sending the
same deterministic request at once each sent it (2 processes x 20 prompts: 40 requests).
Now the first to claim the request in Redis (``{namespace}:rcf:{key}``, ``lease_s`` long)
sends it; the others poll Redis for its answer and, when the claim is gone without one (an
error, an answer kept private, a leader that died), claim it themselves.

The leader renews its claim every third of ``lease_s`` while its call runs (:func:`kept`):
a claim that lapsed under a live call longer than ``lease_s`` — a long answer, a reasoning
model — had every waiting process send the same call again (3 processes, a 2 s call, a 0.5 s
lease: 3 requests), and the first leader's release then deleted the claim of the one that
took over. Only a leader that died lets its claim lapse now, and a release drops only the
releasing process's own claim.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from .background import _spawn_detached

if TYPE_CHECKING:
    from .response_cache_redis import RedisAnswers

__all__ = ["POLL_S", "answer_or_claim", "kept"]

#: how often a waiting process looks for the leader's answer
POLL_S = 0.02


async def answer_or_claim(
    redis: RedisAnswers, key: str, still_waiting: Callable[[], object] = lambda: None
) -> bytes | None:
    """Another process's answer to ``key`` (after waiting for it), or None once this one
    holds the claim and must send the call (then ``redis.release(key)`` when done).
    ``still_waiting()`` is called before each poll: it raises once the caller's own deadline
    has passed (it holds no claim then)."""
    while not await redis.claim(key):
        still_waiting()
        await anyio.sleep(POLL_S)
        data = await redis.get(key)
        if data is not None:
            return data
    data = await redis.get(key)  # stored by a leader that released just before our claim
    if data is not None:
        await redis.release(key)
    return data


#: renewal tasks running (asyncio keeps only weak references to tasks)
_RENEWING: set[object] = set()


@asynccontextmanager
async def kept(redis: RedisAnswers | None, key: str) -> AsyncIterator[None]:
    """Keep this process's claim on ``key`` alive while the block runs (its call): renewed
    every third of ``lease_s``, so it lapses only if this process dies. ``None``: no claim."""
    if redis is None:
        yield
        return
    stop = anyio.Event()
    every = redis.shared.lease_s / 3

    async def renew() -> None:
        try:
            while True:
                with anyio.move_on_after(every):
                    await stop.wait()
                if stop.is_set():
                    return
                await redis.renew(key)
        finally:
            _RENEWING.discard(task)

    task = _spawn_detached(renew)
    _RENEWING.add(task)
    try:
        yield
    finally:
        stop.set()
