"""create_app: the engine as a raw ASGI 3 application (no framework).

Serving the same engine over real HTTP lets end-to-end tests exercise a client's sockets,
pool and SSE parser. Each SSE write goes out as its own ``http.response.body`` message with
``more_body=True``; a client that disconnects (``http.disconnect``) cancels the request, which
the engine bills as abandoned; a simulated reset raises out of the app so the server drops the
connection mid-body.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from gptgate.sim.engine import SimEngine, SimReset, SimResponse

__all__ = ["ASGIApp", "create_app"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def create_app(engine: SimEngine) -> ASGIApp:
    """An ASGI application answering every HTTP request with ``engine``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        if body is None:  # client left before sending its body
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        reset = False
        async with anyio.create_task_group() as tg:
            tg.start_soon(_watch_disconnect, receive, tg.cancel_scope)
            try:
                response = await engine.handle(
                    scope["method"], scope["path"], headers, body,
                    scope.get("query_string", b"").decode("latin-1"),
                )
            except SimReset:  # dropped before any response
                reset = not _drop_connection(scope.get("client"))
                tg.cancel_scope.cancel()
            else:
                try:
                    await _send_response(response, send)
                except SimReset:
                    reset = True
                finally:
                    if response.stream is not None:
                        with anyio.CancelScope(shield=True):
                            await response.stream.aclose()
                tg.cancel_scope.cancel()
        if reset:  # raised outside the task group, bare, so the server drops the connection
            raise SimReset("simulated connection reset")

    return app


def _drop_connection(client: object) -> bool:
    """Reset the TCP connection to ``client`` (host, port) before any response, as a crashed
    worker or a load balancer does. ASGI has no way to say "close without answering" (an
    exception before the response becomes a 500), so the socket is found among this
    process's descriptors (Linux's /proc) and shut down with an RST. False if it cannot be."""
    if not isinstance(client, (tuple, list)) or len(client) != 2:
        return False
    peer = (str(client[0]), int(client[1]))
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return False
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if sock.getpeername()[:2] == peer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
                return True
        except OSError:
            pass
        finally:
            sock.close()
    return False


async def _read_body(receive: Receive) -> bytes | None:
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _watch_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    """Cancel the request when the client goes away (the engine then bills it abandoned)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _send_response(response: SimResponse, send: Send) -> None:
    raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    await send({"type": "http.response.start", "status": response.status, "headers": raw_headers})
    if response.body is not None:
        await send(
            {
                "type": "http.response.body",
                "body": response.body,
                "more_body": response.stream is not None,
            }
        )
    if response.stream is not None:
        async for chunk in response.stream:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
