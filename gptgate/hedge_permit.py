"""A permit for a hedge's duplicate: lent past ``concurrency=`` once its call's request is lost.

A duplicate needs a permit like any request, and its call holds one already. When that
request stalled before being scheduled (a slow balancer hop, a request parked on a busy front
end) the permit holds no place on the server, yet the duplicate waits for another — on a
backend one slot wide, for the stall itself to end (family draw 93: p99 1.00× unhedged
against the oracle hedger's 0.33×), and where every permit is held by calls asleep at the
rate-limit pacer, about one call's time (draw 24). So once the call's request has shown
nothing past the far fence of the backend's normal waits (``Progress.lost``: a stall, not a
slow answer), the duplicate may borrow one permit past the limit: at most one per backend at a
time (in flight ≤ ``concurrency`` + 1), within the hedge budget (the duplicate has its room
there already), within the connection pool, never past a fleet's shared cap. Before then it
waits its turn ahead of the queue as before.
"""

from __future__ import annotations

import anyio

from .clock import Clock
from .limits.limiter import Limiter, Permit

__all__ = ["hedge_permit"]


async def hedge_permit(
    limiter: Limiter,
    lent_from: float | None,
    clock: Clock,
    *,
    priority: int,
    deadline: float | None,
    tag: object,
    stall_s: float | None,
) -> Permit:
    """A permit of ``limiter``: lent past its limit from ``lent_from`` (a clock reading; None:
    never, any attempt but a duplicate), else acquired in turn."""
    if lent_from is not None:
        wait = lent_from - clock.now()
        if wait > 0:  # in turn until the call's request counts as lost
            with anyio.move_on_after(clock.to_real(wait)):
                return await limiter.acquire(
                    priority=priority, deadline=deadline, tag=tag, stall_s=stall_s
                )
        lent = limiter.borrow()
        if lent is not None:
            return lent
    return await limiter.acquire(priority=priority, deadline=deadline, tag=tag, stall_s=stall_s)
