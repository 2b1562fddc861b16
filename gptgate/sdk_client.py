"""``gate.http_client(name)``: an ``httpx2.AsyncClient`` for a third-party SDK whose transport
takes a permit of the backend's limiter per request and returns it when the response is
closed, sharing the backend's pooled connections: SDK traffic and gateway traffic obey one
limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx2

from .guard import _GUARD_PERMIT, GuardedGateway, classify_exception
from .limits import Permit
from .observe import ResponseTap
from .outcomes import report_failure, report_status
from .routing import BackendState

__all__ = ["GuardTransport"]


def _succeed(permit: Permit, state: BackendState, latency: float, tap: ResponseTap) -> None:
    """End a successful SDK call's permit with what its response told (tokens, TTFT)."""
    permit.success(
        latency,
        ttft_s=tap.ttft_s,
        input_tokens=tap.input_tokens or 0,
        output_tokens=tap.output_tokens or 0,
    )
    state.latency.add(latency)
    if tap.ttft_s is not None:
        state.ttft.add(tap.ttft_s)


class _PermitStream(httpx2.AsyncByteStream):
    """Holds the permit until the SDK closes the response (a stream is still in flight), and
    lets a :class:`ResponseTap` watch the body go by."""

    def __init__(
        self, inner: httpx2.AsyncByteStream, permit: Permit, state: BackendState, start: float,
        clock_now: Callable[[], float], tap: ResponseTap,
    ) -> None:
        self._inner = inner
        self._permit = permit
        self._state = state
        self._start = start
        self._now = clock_now
        self._tap = tap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._tap.feed(chunk, self._now())
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            if not self._permit.done:
                now = self._now()
                self._tap.close(now)
                _succeed(self._permit, self._state, now - self._start, self._tap)


class GuardTransport(httpx2.AsyncBaseTransport):
    """The transport behind ``gate.http_client(name)``.

    Given a backend's name, it looks up the live state at each request: the client may be
    built before the gateway opens, and outlive a re-open (which builds the state afresh)."""

    def __init__(self, gate: GuardedGateway, state: BackendState | str, priority: int = 5) -> None:
        self._gate = gate
        self._state = state
        self._priority = priority

    def _backend(self) -> BackendState:
        if isinstance(self._state, BackendState):
            return self._state
        self._gate.runner  # noqa: B018 - a clear "not open" GateError before anything else
        return self._gate.backend_state(self._state)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        state = self._backend()
        held = _GUARD_PERMIT.get()
        if held is not None and held.limiter is state.limiter:
            # inside a guarded call on this backend: its permit covers this request, and the
            # guard reports the outcome (one call, one permit — never a wait on itself)
            held.wire_attempts += 1
            return await state.pool.transport.handle_async_request(request)
        clock = self._gate.clock
        permit = await state.limiter.acquire(priority=self._priority)
        start = clock.now()
        state.calls += 1
        try:
            response = await state.pool.transport.handle_async_request(request)
        except BaseException as exc:
            if isinstance(exc, Exception):
                report_failure(permit, classify_exception(exc, state.name), clock.now() - start)
            permit.ignore()
            raise
        status = response.status_code
        if status >= 400:
            state.failures += 1
            report_status(permit, status, clock.now() - start)
        tap = ResponseTap(response.headers.get("content-type", ""), start)
        if response.is_closed:  # a pre-read body: the call is over already
            if not permit.done:
                now = clock.now()
                tap.feed(response.content, now)
                tap.close(now)
                _succeed(permit, state, now - start, tap)
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _PermitStream(response.stream, permit, state, start, clock.now, tap)
        return response
