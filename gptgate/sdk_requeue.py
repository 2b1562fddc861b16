"""Refusals of SDK requests on ``gate.http_client`` outside a guard, requeued by the transport.

A server's refusal before any work (a 429, or a 503/529 with retry-after, nothing billed:
gptgate/shed.py) is sent again by the transport, unseen by the SDK, as ``gate.chat`` requeues
it: an SDK built with ``max_retries=0`` (what the guard docs recommend) would otherwise fail
every refused request (97 of 192 on a bounded queue refusing about a fifth of them).

Every resend lives within the request's wait bound, read once at its start (its pool timeout,
the gateway's or scenario's deadline: ``GuardTransport._wait_deadline``), and is *cut* at it
the way ``gate.chat`` cuts an attempt at its deadline: its permit wait ends there, its wait
for the headers runs in a cancel scope that ends there (``anyio.fail_after`` on the deadline's
rest in ``CallRunner._send``), and its body is read no further than that
(``OpenBody(cut_at=)``). A resend that was only bounded outlived the chaos suite's deadlines
by ~8 s. A cut resend hands back what it held — its permit (abandoned: the server may have
started it), its dollar reservation, its pooled connection — and the SDK sees a timeout.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress

import anyio
import httpx2

from .clock import Clock
from .error_body import CLASSIFIED
from .errors import GateError
from .guard import REFUSED_HEADER
from .retry import RetryPolicy
from .routing import BackendState
from .shed import SHED_STATUSES, Refusals

__all__ = ["requeue_refusals"]

#: how long a refusal's body may take to be read, so its connection goes back to the pool
_DISCARD_S = 1.0


async def requeue_refusals(
    response: httpx2.Response,
    request: httpx2.Request,
    *,
    state: BackendState,
    clock: Clock,
    retry: RetryPolicy,
    bound: float | None,
    resend: Callable[[float], Awaitable[httpx2.Response]],
) -> httpx2.Response:
    """``response``, or — while it is a refusal the bound leaves time to requeue — the answer
    to the request sent again after the server's retry-after (``resend(bound)``), each resend
    cut at ``bound``. Without a bound nothing is requeued: nothing may wait without an end."""
    if bound is None:
        return response
    refusals = Refusals(clock, bound, None)
    while True:
        try:
            wait = _requeue_wait(response, state, retry, refusals, bound)
        except BaseException:  # a response is never dropped unclosed: its connection
            await _discard(response, clock)
            raise
        if wait is None:
            return response
        await _discard(response, clock)
        await clock.sleep(wait)
        response = await _cut_at_bound(request, clock, bound, resend)


def _requeue_wait(
    response: httpx2.Response, state: BackendState, retry: RetryPolicy, refusals: Refusals,
    bound: float,
) -> float | None:
    """How long to wait before sending the refused request again; None: hand the response
    to the SDK (no refusal, or its retry-after reaches past the bound)."""
    if response.status_code not in SHED_STATUSES or response.headers.get(REFUSED_HEADER):
        return None  # gptgate's own refusal (an open circuit, a budget) waited all it may
    error = response.extensions.get(CLASSIFIED)  # by its body, as the attempt saw it
    if not isinstance(error, GateError):
        error = state.pool.dialect.error_for_status(
            response.status_code, response.headers, b"", backend=state.name
        )
    refusals.note(error)
    if not refusals.free:
        return None
    return retry.backoff(refusals.refused, error.retry_after, bound)


async def _discard(response: httpx2.Response, clock: Clock) -> None:
    """Read the refusal's short body and close it, shielded: its connection goes back to the
    pool whatever cancels the caller meanwhile (a closing gateway, the caller's own scope)."""
    with anyio.CancelScope(shield=True):
        try:
            with anyio.move_on_after(clock.to_real(_DISCARD_S)), suppress(httpx2.HTTPError):
                await response.aread()
        finally:
            await response.aclose()


async def _cut_at_bound(
    request: httpx2.Request, clock: Clock, bound: float,
    resend: Callable[[float], Awaitable[httpx2.Response]],
) -> httpx2.Response:
    """``resend(bound)`` up to its headers, cancelled at ``bound`` (its body is cut there by
    its watch). The cancellation reaches the attempt's own handlers: its permit is abandoned,
    its reservation released, the pool's request closed."""
    left = bound - clock.now()
    if left > 0:
        with anyio.move_on_after(clock.to_real(left)):
            return await resend(bound)
    raise httpx2.ReadTimeout(
        "gptgate: the request's deadline passed while a refusal of it was sent again",
        request=request,
    )
