"""With ``shared=``, a half-open backend is probed by one process of the fleet, whichever
path the call takes: ``gate.chat``, an SDK request on ``gate.http_client`` or a ``@gate.guard``
try. A try that would be this process's probe asks the fleet's probe lease first
(gptgate/shared/health.py); refused, its breaker stays open until the fleet's verdict.

Before, only ``gate.chat`` asked: SDK requests and guarded tries took the probe locally, and
with N processes each sent its own probe to a recovering backend at the same moment.
"""

from __future__ import annotations

from .clock import Clock
from .limits import Permit
from .routing import BackendState

__all__ = ["fleet_lets_probe"]


async def fleet_lets_probe(backend: BackendState, permit: Permit, clock: Clock) -> bool:
    """May the try holding ``permit`` go? Yes unless the backend is half-open and the fleet
    gives its probe to another process (nothing is asked otherwise). Refused or cancelled
    while asking, the permit is handed back unused: nothing was sent."""
    health = backend.fleet_health
    if health is None or backend.breaker.state(clock.now()) != "half_open":
        return True
    allowed = False
    try:
        allowed = await health.may_probe()
    finally:
        if not allowed:
            permit.ignore()
    return allowed
