"""Which sync caller a loop task reads a stream for (gptgate/guard_self_wait.py).

A sync SDK stream on ``SyncGateway.http_client`` is read on the loop by a pump task, only as
far ahead of its caller's thread as the read-ahead allows (gptgate/sync_http.py). Whether the
stream is "left unread by the body that now waits on it" is then a question about that
thread, not about the pump: the thread, blocked on its next request, takes no more chunks,
so the pump stops too. The pump's task carries its caller's thread here.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["SYNC_CALLER"]

#: the ident of the sync thread this loop task works for (None: an async caller)
SYNC_CALLER: ContextVar[int | None] = ContextVar("gptgate_sync_caller", default=None)
