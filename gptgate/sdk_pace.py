"""An SDK request on ``gate.http_client`` takes its place in its backend's rate pacer.

``gate.chat`` reserves a request at the backend's pacer (gptgate/limits/pacing.py) before it
sends: after a short-window 429 (Azure's 1 s RPM windows) the calls a pause held go one
``spacing_s`` apart, and each success narrows the gap again. An SDK request — outside a guard
or inside one — only waited the pause out (gptgate/pause_wait.py): every request it held went
out at the same instant, and all but one met the next 429. On a 600 RPM deployment counted in
1-s windows, 100 concurrent SDK calls met 84 429s where ``gate.chat`` met 17; taking the same
place in the pacer, they meet about as many as ``gate.chat`` (16).

The reservation is one request and no tokens: the SDK's body is not parsed for a token
estimate here, and a token reservation without the usage to reconcile it would drain the
budget. With ``shared=`` (a fleet pacer) the SDK path is not paced here (the fleet's budget is
taken in the permit's round trip, which this path does not join).
"""

from __future__ import annotations

from .clock import Clock
from .pause_wait import wait_turn
from .routing import BackendState

__all__ = ["relax", "wait_paced"]


async def wait_paced(state: BackendState, clock: Clock, bound: float | None) -> float | None:
    """Reserve one request at ``state``'s pacer and wait for its send time: None once it has
    come; else, when it falls past ``bound`` (a clock reading; None: none), the wait left,
    unwaited (the caller answers unsent, as a pause past the bound)."""
    if state.fleet_pacer is not None:
        return None
    pace = state.pacer.reserve(clock.now(), 0)
    return await wait_turn(state, clock, pace, state.pacer.pauses, bound)


def relax(state: BackendState, clock: Clock, status: int) -> None:
    """An answer (not an error): the spacing after a short-window 429 narrows, as a success
    of ``gate.chat``'s narrows it."""
    if status < 400:
        state.pacer.relax(clock.now())
