"""SimTransport: an httpx2 transport that calls a :class:`SimEngine` in-process.

Not ``httpx2.ASGITransport``: that one buffers the whole body before returning, so a client
would see a stream arrive all at once and could never close it early. Here the response's
byte stream pulls from the engine as the engine produces bytes, so time to first token,
between-chunk gaps, early close (billed as abandoned) and mid-body resets are all real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from gptgate.sim.engine import SimEngine, SimReset, SimResponse

__all__ = ["SimTransport"]


class _EngineStream(httpx2.AsyncByteStream):
    """Streams a :class:`SimResponse` body; a simulated reset becomes ``httpx2.ReadError``."""

    __slots__ = ("_request", "_response")

    def __init__(self, response: SimResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        response = self._response
        if response.body is not None:
            yield response.body
        if response.stream is None:
            return
        try:
            async for chunk in response.stream:
                yield chunk
        except SimReset as exc:
            raise httpx2.ReadError(f"simulated: {exc}", request=self._request) from exc

    async def aclose(self) -> None:
        if self._response.stream is not None:
            await self._response.stream.aclose()


class SimTransport(httpx2.AsyncBaseTransport):
    """Route every request of an ``httpx2.AsyncClient`` to ``engine``, without sockets.

    ``httpx2.AsyncClient(transport=SimTransport(engine), base_url="http://sim/v1")``
    """

    def __init__(self, engine: SimEngine) -> None:
        self.engine = engine

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        try:
            response = await self.engine.handle(
                request.method, request.url.path, request.headers, body,
                request.url.query.decode("ascii", "replace"),
            )
        except SimReset as exc:  # dropped before any response
            raise httpx2.RemoteProtocolError(
                f"simulated: server disconnected without sending a response ({exc})",
                request=request,
            ) from exc
        return httpx2.Response(
            response.status,
            headers=response.headers,
            stream=_EngineStream(response, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1"},
        )
