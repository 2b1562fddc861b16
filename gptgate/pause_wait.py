"""A backend paused by a 429's retry-after is paused for SDK requests and guarded calls too.

A 429's retry-after pauses its backend (its pacer's ``paused_until``): seen by any path in this
process, or by another process of the fleet with ``shared=`` (heard with the next permit's
acquire). ``gate.chat`` waits it out after its permit; an SDK request on ``gate.http_client``
and a ``@gate.guard``ed call did not, and went straight back into the rate limit — each to eat
a 429 of its own, the fleet's one pause holding none of them. They now wait it out the same
way, after their permit (so a pause the fleet's acquire just told of counts), within their own
bound: a pause that reaches past it is not waited for, and the caller is told so at once (an
SDK: a 429 it does not retry, unsent; a guarded call: ``OverloadedError``).
"""

from __future__ import annotations

from .clock import Clock
from .routing import BackendState

__all__ = ["pause_past"]


async def pause_past(state: BackendState, clock: Clock, bound: float | None) -> float | None:
    """None once ``state``'s backend is not paused (waited out, if it was); else, when the
    pause reaches past ``bound`` (a clock reading; None: none), what is left of it, unwaited."""
    while True:
        now = clock.now()
        left = state.pacer.paused_until - now
        if left <= 0:
            return None
        if bound is not None and now + left > bound:
            return left
        await clock.sleep(left)  # a later 429 may lengthen it: read again
