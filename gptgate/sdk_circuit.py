"""An SDK's request on ``gate.http_client`` meets its backend's circuit as ``gate.chat`` does.

The transport used to send whatever the SDK asked, open circuit or not: an SDK bound to a
sick backend (500s after 2 s) put 464 requests on it in 60 s where ``gate.chat`` put 64 —
the circuit breaker protected the backend from the gateway's own calls only. Now a request
to a backend whose circuit is open waits for the cool-down's end within the gateway's
``max_breaker_wait_s`` and the request's own pool timeout (gptgate's "wait for a permit"
bound, as for the limiter), then goes — the half-open probe, when it is the first — or, still
open, is answered without being sent: a 503 the SDK does not retry (``x-should-retry:
false``), saying when the backend is probed again (``retry-after``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx2

from .circuit_cause import last_failure
from .errors import BackendError
from .local_refusal import local_refusal
from .routing import BackendState, RouteRequest

if TYPE_CHECKING:
    from .calls import CallRunner

__all__ = ["through_circuit"]


async def through_circuit(
    runner: CallRunner, state: BackendState, request: httpx2.Request, deadline: float | None
) -> httpx2.Response | None:
    """None when the request may go (now, or after waiting for the cool-down's end); else
    the refusal to hand the SDK instead of sending it."""
    if state.breaker.allows(runner.clock.now()):
        return None
    try:
        await runner.route(RouteRequest(backend=state.name), frozenset(), deadline)
    except BackendError as error:
        return _circuit_open(request, state, error.retry_after)
    return None


def _circuit_open(
    request: httpx2.Request, state: BackendState, retry_after: float | None
) -> httpx2.Response:
    """The refusal, naming what opened the circuit (a revoked key's 401 reads as such)."""
    message = (
        f"gptgate: backend {state.name!r} failed repeatedly and its circuit is open "
        f"({last_failure(state)}); the request was not sent"
        + (f" (probed again in {retry_after:.1f} s)" if retry_after is not None else "")
    )
    return local_refusal(
        request, 503, refused="circuit-open", kind="gptgate_circuit_open", message=message,
        retry_after=retry_after,
    )
