"""A half-open backend gets one probe — from this process, and with ``shared=`` from the whole
fleet — whichever path the call takes: ``gate.chat``, an SDK request on ``gate.http_client``
or a ``@gate.guard`` try.

The probe is claimed as its try is admitted (its permit granted), not as it is sent: every
caller waiting on an open circuit wakes at the cool-down's end, and when only the send
claimed it (after the pacer's wait, the budget's hold) all of them passed the circuit first —
10 of 10 went at the half-open moment. A try that finds the probe taken hands its permit back
(nothing was sent) and waits for the verdict (:func:`await_verdict`, in the router's wait) or
goes elsewhere. The claimed number travels with the attempt: ended without a verdict —
cancelled in the pacer included — it is handed back (``CircuitBreaker.probe_left``), and with
``shared=`` the fleet's probe lease with it (gptgate/shared/health.py).

With ``shared=`` the local probe then asks the fleet's lease; refused, its breaker stays open
until the fleet's verdict. Before, only ``gate.chat`` asked: SDK requests and guarded tries
took the probe locally, and with N processes each sent its own probe at the same moment.
"""

from __future__ import annotations

import anyio

from .clock import Clock
from .errors import BackendError
from .limits import Permit
from .routing import BackendState

__all__ = ["await_verdict", "claim_probe"]


async def claim_probe(backend: BackendState, permit: Permit, clock: Clock) -> int | None:
    """The try holding ``permit`` is admitted: its probe number (0: it is no probe), or
    None — the circuit is open (another try of this process or of the fleet probes it, or
    a failed probe re-opened it) and ``permit`` is handed back unused. Cancelled while
    asking the fleet, both are handed back."""
    breaker = backend.breaker
    probe = breaker.claim_probe(clock.now())
    health = backend.fleet_health
    if probe is None:
        permit.ignore()
        return None
    if not probe or health is None:
        return probe
    allowed = False
    try:
        allowed = await health.may_probe()
    finally:
        if not allowed:  # refused (the breaker is held open now) or cancelled: nothing sent
            permit.ignore()
            breaker.probe_left(probe)
    return probe if allowed else None


async def await_verdict(
    backend: BackendState, clock: Clock, deadline: float | None, patience: float
) -> None:
    """Another try of this process probes ``backend``: wait for its verdict, within
    ``deadline`` and the probe's own bound (the backend's timeout, counted from its send)
    plus ``patience`` (``max_breaker_wait_s``: how long a call waits on an open circuit);
    BackendError past it."""
    verdict = backend.breaker.probe_verdict()
    if verdict is None:
        return
    bound = backend.backend.timeout + patience
    if deadline is not None:
        bound = min(bound, deadline - clock.now())
    with anyio.move_on_after(clock.to_real(max(0.0, bound))):
        await verdict.wait()
        return
    raise BackendError(
        "the backend's circuit is half-open and its probe gave no verdict in time",
        backend=backend.name,
        should_retry=False,
    )
