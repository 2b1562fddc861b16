"""One pooled ``httpx2.AsyncClient`` per backend, and the pool's wait queue made visible.

A pool smaller than the concurrency turns the extra calls into pseudo-concurrency —
they wait for a connection, time out and retry. The pool is sized ``ceil(1.2 × ceiling)`` and
every request's wait for a connection is measured through httpcore2's trace hook: the first
trace event of a request fires once it holds a connection, so the time before it is pool wait.

The same first event says whether the connection is new (``connection.connect_tcp``) or kept
alive. A kept-alive connection that the server drops as the next request arrives — no byte of
response — is stale, not a failing backend (llama.cpp's server does it to a few percent of
requests): the request goes again, once, on a fresh connection. Counting it as a failed
attempt would spend the retry budget, feed the breaker and cut the adaptive limit.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from .clock import Clock
from .config import Backend
from .scrub import remember_headers, remember_secret
from .wire.dialect import Dialect, dialect_for

__all__ = ["BackendPool", "PoolStatistics"]

log = logging.getLogger("gptgate.pool")


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    size: int
    #: requests handed to the transport and not yet closed (connections checked out + waiting)
    checked_out: int
    #: requests waiting for a connection right now: non-zero means pseudo-concurrency
    waiting: int
    waits: int
    wait_total_s: float
    wait_max_s: float
    #: the configuration allows more concurrent calls than connections
    pseudo_concurrency: bool
    #: requests sent again on a fresh connection because their kept-alive one was dropped
    stale_retries: int = 0

    @property
    def wait_mean_s(self) -> float:
        return self.wait_total_s / self.waits if self.waits else 0.0


class _ClosingStream(httpx2.AsyncByteStream):
    """Wraps a response body so the pool accounting ends exactly once, on close."""

    __slots__ = ("_closed", "_inner", "_owner")

    def __init__(self, inner: httpx2.AsyncByteStream, owner: _InstrumentedTransport) -> None:
        self._inner = inner
        self._owner = owner
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner.checked_out -= 1
        await self._inner.aclose()


class _WaitProbe:
    """Per-request trace callback: the first event means a connection was assigned, and
    whether it was opened for this request or kept alive from an earlier one."""

    __slots__ = ("_owner", "_start", "reused", "waiting")

    def __init__(self, owner: _InstrumentedTransport, start: float) -> None:
        self._owner = owner
        self._start = start
        self.waiting = True
        self.reused = False

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if self.waiting:
            self.reused = not name.startswith("connection.")
            self._owner._connected(self, self._start)

    def abandon(self) -> None:
        if self.waiting:
            self.waiting = False
            self._owner.waiting -= 1


#: what a dropped kept-alive connection raises before any response byte
_STALE_ERRORS = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)


def _replayable(request: httpx2.Request) -> bool:
    """A body already in memory can be sent again (a streamed upload cannot)."""
    try:
        request.content  # noqa: B018 - raises when the body is a stream not read
    except httpx2.RequestNotRead:
        return False
    return True


class _InstrumentedTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, clock: Clock, traced: bool) -> None:
        self._inner = inner
        self._clock = clock
        self._traced = traced
        self.checked_out = 0
        self.waiting = 0
        self.waits = 0
        self.wait_total_s = 0.0
        self.wait_max_s = 0.0
        self.stale_retries = 0

    def _connected(self, probe: _WaitProbe, start: float) -> None:
        probe.waiting = False
        self.waiting -= 1
        wait = self._clock.now() - start
        self.waits += 1
        self.wait_total_s += wait
        if wait > self.wait_max_s:
            self.wait_max_s = wait

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await self._send(request)
        except _STALE_ERRORS as error:
            probe = request.extensions.get("trace")
            if not (isinstance(probe, _WaitProbe) and probe.reused and _replayable(request)):
                raise
            self.stale_retries += 1
            log.debug("%s on a kept-alive connection: sent again on a fresh one", error)
        return await self._send(request)

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
        probe: _WaitProbe | None = None
        if self._traced:
            probe = _WaitProbe(self, self._clock.now())
            request.extensions["trace"] = probe
            self.waiting += 1
        self.checked_out += 1
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException:
            self.checked_out -= 1
            raise
        finally:
            if probe is not None:
                probe.abandon()
        if response.is_closed:  # a pre-read body (MockTransport): nothing stays checked out
            self.checked_out -= 1
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _ClosingStream(response.stream, self)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def connection_counts(self) -> tuple[int, int]:
        """(open connections, idle connections) of an httpcore2 pool, else (0, 0)."""
        pool = getattr(self._inner, "_pool", None)
        connections = getattr(pool, "connections", None)
        if not connections:
            return 0, 0
        idle = sum(1 for c in connections if c.is_idle())
        return len(connections), idle


class BackendPool:
    """The backend's HTTP client: opened and closed by the gateway's lifecycle."""

    def __init__(self, backend: Backend, clock: Clock) -> None:
        self.backend = backend
        size = backend.pool_size
        limits = httpx2.Limits(
            max_connections=size, max_keepalive_connections=size, keepalive_expiry=30.0
        )
        if backend.transport is not None:
            inner: httpx2.AsyncBaseTransport = backend.transport
            traced = False
        else:
            inner = httpx2.AsyncHTTPTransport(limits=limits)
            traced = True
        self._transport = _InstrumentedTransport(inner, clock, traced)
        # a backstop only: the attempt's own bounds (first byte, idle, ``timeout``) are
        # enforced by the call; below ``timeout`` it cut plain answers at ``idle_timeout``
        read = max(backend.timeout, backend.first_byte_timeout or 0.0, backend.idle_timeout)
        timeout = httpx2.Timeout(
            connect=backend.connect_timeout,
            read=clock.to_real(read),
            write=clock.to_real(backend.timeout),
            pool=clock.to_real(backend.pool_timeout),
        )
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.update(backend.headers)
        key = backend.resolve_api_key()  # once, at open; held only by the client's headers
        remember_secret(key)  # masked in every error from now on, whatever its shape
        remember_headers(backend.headers)
        #: the backend's wire (gptgate/wire/dialect.py): its URL, auth, body and answers
        self.dialect: Dialect = dialect_for(backend)
        headers.update(self.dialect.auth_headers(key))
        self.client = httpx2.AsyncClient(
            base_url=backend.base_url,
            transport=self._transport,
            timeout=timeout,
            headers=headers,
            limits=limits,
            auth=self.dialect.auth(),
        )
        if backend.pseudo_concurrency:
            log.warning(
                "backend %s allows %d concurrent calls but has %d connections: the extra "
                "calls are pseudo-concurrent (they only wait for a connection)",
                backend.name,
                backend.ceiling,
                size,
            )

    def statistics(self) -> PoolStatistics:
        t = self._transport
        return PoolStatistics(
            size=self.backend.pool_size,
            checked_out=t.checked_out,
            waiting=t.waiting,
            waits=t.waits,
            wait_total_s=t.wait_total_s,
            wait_max_s=t.wait_max_s,
            pseudo_concurrency=self.backend.pseudo_concurrency,
            stale_retries=t.stale_retries,
        )

    @property
    def transport(self) -> httpx2.AsyncBaseTransport:
        """The instrumented transport: shared by ``gate.http_client`` so SDK traffic uses
        (and is counted against) the same connections."""
        return self._transport

    def connection_counts(self) -> tuple[int, int]:
        return self._transport.connection_counts()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.client.aclose()
