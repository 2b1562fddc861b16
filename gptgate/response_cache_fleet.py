"""One call per request across a fleet (``ResponseCache(shared=...)``).

The in-process single-flight joins identical calls of one gateway; two processes sending the
same deterministic request at once each sent it (2 processes x 20 prompts: 40 requests).
Now the first to claim the request in Redis (``{namespace}:rcf:{key}``, ``lease_s`` long)
sends it; the others poll Redis for its answer and, when the claim is gone without one (an
error, an answer kept private, a leader that died), claim it themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from .response_cache_redis import RedisAnswers

__all__ = ["POLL_S", "answer_or_claim"]

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
