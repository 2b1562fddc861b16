"""A guarded body's request that would wait on the body's own unread stream is refused at
once, with the cause and the fix, instead of stalling for the stream's idle timeout.

Inside ``@gate.guard`` a request on ``gate.http_client`` holds the guard's permit — its seat
(gptgate/guard_seat.py) — until its body is read to its end or closed. A body that opens a
stream, leaves it unread and awaits another request on the same backend sends that request
while the seat is taken; on a limit of one no permit of its own can come either (the guard
holds the only one), and the body cannot read the stream while it waits. The wait ended only
when gptgate hung up on the unread stream at the backend's ``idle_timeout`` — the stream's
later reads then failed: a stall of the idle bound, then an error far from its cause.

The request is answered instead at once, unsent, with a 409 (``x-should-retry: false``, the
``x-gptgate-refused`` header: the guard does not try the body again) whose message says what
holds the permit and the fix: read or close the first stream before the next request (or
raise the backend's ``concurrency``). A stream whose answer arrived whole (its end marker:
the body broke out at the last chunk without closing it) is closed as read to its end, and
the request goes on. On a wider limit the request takes a permit of its own, as before. Only
a stream this task opened or last read and is not reading counts: a stream another task of
the body reads (``asyncio.gather``) frees the seat by itself.

A sync body's stream (``SyncGateway.guard``, gptgate/sync_http.py) is read on the loop by a
pump only a few chunks ahead of its thread; the thread blocked on its next request takes none,
so the stream counts as left unread by that thread while it is open (gptgate/sync_caller.py).
"""

from __future__ import annotations

import httpx2

from .guard_seat import Seat
from .limits import Limiter
from .local_refusal import local_refusal

__all__ = ["refused", "unblocked"]


async def unblocked(seat: Seat, limiter: Limiter) -> bool:
    """Whether a request of the guarded body may go on to wait for ``seat`` (or a permit of
    its own): False when the seat is held by a stream this task left unread on a limiter
    whose only permit that seat is (a wait on itself). A stream left open after its answer
    arrived whole (a ``break`` at the last chunk, before the connection's end) is closed as
    read to its end instead, and the seat is the request's: the server was done with it."""
    holder = seat.holder
    if holder is None or limiter.current_limit > 1 or not holder.left_by_this_task():
        return True
    if holder.whole():
        await holder.end_whole()
        return True
    return False


def refused(request: httpx2.Request, backend: str, idle_s: float) -> httpx2.Response:
    """The answer to such a request: a 409, unsent, that the SDK does not retry."""
    message = (
        f"gptgate: this @gate.guard body left a stream on backend {backend!r} open and "
        f"unread, and that stream holds the guard's permit (the backend's limit is 1): this "
        f"request would wait for it until the idle timeout ({idle_s:g} s) while the body "
        f"cannot read it. Not sent: read or close the stream first (iterate it to its end, "
        f"or close it: `stream.close()`, `with`, or their async forms), or raise the "
        f"backend's concurrency"
    )
    return local_refusal(
        request, 409, refused="self-wait", kind="gptgate_guard_self_wait", message=message
    )
