"""An SDK's request on ``gate.http_client`` meets its backend's circuit as ``gate.chat`` does.

The transport used to send whatever the SDK asked, open circuit or not: an SDK bound to a
sick backend (500s after 2 s) put 464 requests on it in 60 s where ``gate.chat`` put 64 —
the circuit breaker protected the backend from the gateway's own calls only. Now a request
to a backend whose circuit is open waits for the cool-down's end within the gateway's
``max_breaker_wait_s`` and the request's own pool timeout (gptgate's "wait for a permit"
bound, as for the limiter), then goes — the half-open probe, when it is the first — or, still
open, is answered without being sent: a 503 the SDK does not retry (``x-should-retry:
false``), saying when the backend is probed again (``retry-after``).

A request of ``gate.http_client(..., fallback=[...])`` does not wait: refused at once while a
backend after this one in its order (``FALLS_TO``) is not open, it goes there as the requests
that met the open circuit first did. Before, the ones queued for a permit when the circuit
opened — past the failover's circuit check — waited the 5 s cool-down and then failed over.
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

__all__ = ["FALLS_TO", "through_circuit"]

#: the request extension holding its client's failover order (backend names, the primary
#: first; set by gptgate/sdk_failover.py, copied to each fallback's rewrite)
FALLS_TO = "gptgate_falls_to"


async def through_circuit(
    runner: CallRunner, state: BackendState, request: httpx2.Request, deadline: float | None
) -> httpx2.Response | None:
    """None when the request may go (now, or after waiting for the cool-down's end); else
    the refusal to hand the SDK instead of sending it."""
    now = runner.clock.now()
    if state.breaker.allows(now):
        return None
    if _fallback_up(runner, state, request):  # moved on at once, not kept for the cool-down
        return _circuit_open(request, state, max(0.0, state.breaker.opened_until - now))
    try:
        await runner.route(RouteRequest(backend=state.name), frozenset(), deadline)
    except BackendError as error:
        return _circuit_open(request, state, error.retry_after)
    return None


def _fallback_up(runner: CallRunner, state: BackendState, request: httpx2.Request) -> bool:
    """A backend after ``state`` in the request's failover order whose circuit is not open."""
    order = request.extensions.get(FALLS_TO)
    if not isinstance(order, tuple) or state.name not in order:
        return False
    now = runner.clock.now()
    states = runner.router.by_name
    return any(
        n in states and states[n].breaker.allows(now) for n in order[order.index(state.name) + 1:]
    )


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
