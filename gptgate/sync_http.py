"""``SyncGateway.http_client(name)``: an ``httpx2.Client`` whose requests are sent by the
gateway's own SDK transport (gptgate/sdk_client.py) on the SyncGateway's loop, so a sync SDK
(``openai.OpenAI``, ``openai.AzureOpenAI``, ``anthropic.Anthropic``) is admitted, retried,
traced and billed as its async client is, under the same limit as every other thread's calls.

A whole answer (JSON) comes back in one hop to the loop: sent, read and closed there. An event
stream is pumped: one task on the loop reads it into a queue the caller's thread reads from,
so the body is read by a single task (its cancel scopes stay in one task) and closing the
stream early cancels that task, which hangs up and gives the permit back.

The pump reads at most ``_AHEAD`` chunks ahead of its caller: a caller that stops reading (a
``break``) stops the read, so the body's watchdog (gptgate/stream_watch.py) sees it unread and
asks the cycle collector for a stream dropped in a reference cycle (an SDK's ``Stream``), or
hangs up at the idle bound. A dropped stream's finalizer may run on any thread the collector
runs on — the loop's own thread included — so it only cancels the pump, never waits for it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextvars import ContextVar

import anyio
import httpx2

from .errors import GatewayClosedError
from .guard import _GUARD_PERMIT, GuardedCall
from .sync_caller import SYNC_CALLER
from .sync_portal import LoopPortal, call_on, spawn_on, wait

__all__ = ["GUARDED_HERE", "PortalTransport"]

#: the guarded call whose sync body runs in this thread (gptgate/sync_guard.py): a request the
#: body sends through a SyncGateway's http_client runs under its permit, as in async code
GUARDED_HERE: ContextVar[GuardedCall | None] = ContextVar("gptgate_sync_guard", default=None)

#: how long closing a stream waits for its task to hang up (it is shielded and quick)
_CLOSE_WAIT_S = 10.0
#: chunks the pump reads ahead of its caller before it waits for the caller to take some
_AHEAD = 16


class _End:
    """The pump's last item: the body ended (``error`` None) or failed with ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Pumped(httpx2.SyncByteStream):
    """An event stream's body as the caller's thread reads it."""

    def __init__(self, exchange: _Exchange, task: Future[None], loop: LoopPortal) -> None:
        self._exchange = exchange
        self._task = task
        self._loop = loop

    def __iter__(self) -> Iterator[bytes]:
        try:
            while True:
                chunk = self._exchange.take(self._loop)
                if isinstance(chunk, _End):
                    if chunk.error is not None:
                        raise chunk.error
                    return
                yield chunk
        except GeneratorExit:  # closed unread, often by the collector: on any thread
            self._hang_up()
            raise
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Hang up now if still reading; wait until the loop has given the permit back
        (unless this is the loop's own thread: it would wait for itself)."""
        self._hang_up()
        if threading.get_ident() != self._loop.thread_id:
            self._exchange.ended.wait(_CLOSE_WAIT_S)

    def _hang_up(self) -> None:
        if not self._task.done():
            self._task.cancel()

    def __del__(self) -> None:  # dropped before it was ever read
        self._hang_up()


def _is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


class _Exchange:
    """One request on the loop: the head (or the whole answer) for the caller, then the body
    of an event stream into ``chunks``."""

    def __init__(self) -> None:
        self.head: Future[httpx2.Response] = Future()
        self.chunks: queue.SimpleQueue[bytes | _End] = queue.SimpleQueue()
        self.ended = threading.Event()
        #: the head carries the whole body (not an event stream)
        self.whole = False
        #: the pump waits for its caller to take chunks (set when it should go on)
        self._room: anyio.Event | None = None

    def take(self, loop: LoopPortal) -> bytes | _End:
        """The next chunk, in the caller's thread; wakes the pump once half its read-ahead
        has been taken."""
        chunk = self.chunks.get()
        room = self._room
        if room is not None and self.chunks.qsize() <= _AHEAD // 2:
            self._room = None
            with contextlib.suppress(Exception):  # the loop stopped: nothing to wake
                call_on(loop, room.set)
        return chunk

    async def _wait_for_room(self) -> None:
        if self.chunks.qsize() < _AHEAD:
            return
        self._room = room = anyio.Event()
        if self.chunks.qsize() <= _AHEAD // 2:  # the caller took them meanwhile
            self._room = None
            return
        await room.wait()

    async def run(
        self, transport: httpx2.AsyncBaseTransport, request: httpx2.Request,
        guarded: GuardedCall | None, caller: int,
    ) -> None:
        SYNC_CALLER.set(caller)  # the thread it reads for: a self-wait is that thread's
        if guarded is not None:
            _GUARD_PERMIT.set(guarded)  # this task's own context: one call, one permit
        try:
            response = await transport.handle_async_request(request)
            try:
                if not _is_event_stream(response):
                    raw = b"".join([chunk async for chunk in _raw(response)])
                    self.whole = True
                    self.head.set_result(_copy(response, httpx2.ByteStream(raw)))
                    return
                self.head.set_result(response)
                async for chunk in _raw(response):
                    self.chunks.put(chunk)
                    await self._wait_for_room()
                self.chunks.put(_End(None))
            except Exception as error:
                self.chunks.put(_End(error))
                raise
            finally:
                await response.aclose()
        except Exception as error:
            if not self.head.done():
                self.head.set_exception(error)
        finally:
            if not self.head.done():  # cancelled before the head: the portal is stopping
                self.head.set_exception(GatewayClosedError("the SyncGateway closed"))
            self.chunks.put(_End(GatewayClosedError("the stream was closed")))
            self.ended.set()


async def _raw(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The body's bytes as they come; a body already in memory — a mock transport's
    ``httpx2.Response(200, json=...)``, which counts as consumed — as it is."""
    if response.is_stream_consumed:
        yield response.content
        return
    async for chunk in response.aiter_raw():
        yield chunk


def _copy(response: httpx2.Response, stream: httpx2.SyncByteStream) -> httpx2.Response:
    return httpx2.Response(
        response.status_code, headers=response.headers, stream=stream,
        extensions=response.extensions,
    )


class PortalTransport(httpx2.BaseTransport):
    """Sends each request through an async transport on the SyncGateway's loop."""

    def __init__(
        self, loop: Callable[[], LoopPortal], transport: Callable[[], httpx2.AsyncBaseTransport]
    ) -> None:
        #: looked up per request: the SyncGateway opens on first use and is rebuilt after fork
        self._loop = loop
        self._transport = transport

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        loop = self._loop()
        transport = self._transport()
        request.read()  # a sync body is read here, in the caller's thread
        exchange = _Exchange()
        task = spawn_on(
            loop, exchange.run, transport, request, GUARDED_HERE.get(), threading.get_ident()
        )
        try:
            head = exchange.head.result()
        except BaseException:
            if not task.done():
                task.cancel()
            raise
        if exchange.whole:
            wait(task)  # whole: the task has ended (or is ending) already
            return head
        return _copy(head, _Pumped(exchange, task, loop))

    def close(self) -> None:
        """The pool is the gateway's: closing this client leaves it open."""
