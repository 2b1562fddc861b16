"""Waiting on a backend's pacer, within a bound: a 429's pause, and a request's reserved turn.

A backend paused by a 429's retry-after is paused for SDK requests and guarded calls too.

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

__all__ = ["pause_past", "wait_turn"]


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


async def wait_turn(
    state: BackendState, clock: Clock, pace: float, pauses: int, bound: float | None
) -> float | None:
    """Wait ``pace`` seconds for a turn reserved at ``state``'s pacer (``pauses``: its count
    of 429 pauses then), counted in ``state.pacing`` meanwhile: None once the turn has come;
    else, when it falls past ``bound`` (a clock reading; None: none), the wait left, unwaited.
    One loop for ``gate.chat`` and the SDK path (gptgate/sdk_pace.py)."""
    if pace <= 0:
        return None
    pacer = state.pacer
    state.pacing += 1  # in flight for the limiter, not yet at the server
    try:
        while pace > 0:
            if bound is not None and clock.now() + pace > bound:
                return pace
            await clock.sleep(pace)
            # a 429 came while this request waited: its place is behind that pause now
            pace = 0.0 if pauses == pacer.pauses else pacer.requeue(clock.now())
            pauses = pacer.pauses
    finally:
        state.pacing -= 1
    return None
