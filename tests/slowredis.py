"""A real Redis connection whose replies come late: Redis (or the network) busy, never the
event loop — for the shared response cache's budgets and cancellations."""

from __future__ import annotations

from typing import Any

import anyio
from redis.asyncio import Connection


def slow_replies(reply_s: float) -> type[Connection]:
    """A connection class whose every reply to a command takes ``reply_s`` to arrive (its
    handshake's do not: a connection is opened once)."""

    class SlowReplies(Connection):
        ready = False

        async def connect(self) -> None:
            await super().connect()
            self.ready = True

        async def read_response(self, *args: Any, **kwargs: Any) -> Any:
            if self.ready:
                await anyio.sleep(reply_s)
            return await super().read_response(*args, **kwargs)

    return SlowReplies
