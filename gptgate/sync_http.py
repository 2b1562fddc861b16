"""``SyncGateway.http_client(name)``: an ``httpx2.Client`` whose requests are sent by the
gateway's own SDK transport (gptgate/sdk_client.py) on the SyncGateway's loop, so a sync SDK
(``openai.OpenAI``, ``openai.AzureOpenAI``, ``anthropic.Anthropic``) is admitted, retried,
traced and billed as its async client is, under the same limit as every other thread's calls.

A whole answer (JSON) comes back in one hop to the loop: sent, read and closed there. An event
stream is pumped: one task on the loop reads it into a queue the caller's thread reads from,
so the body is read by a single task (its cancel scopes stay in one task) and closing the
stream early cancels that task, which hangs up and gives the permit back.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextvars import ContextVar

import httpx2

from .errors import GatewayClosedError
from .guard import _GUARD_PERMIT, GuardedCall
from .sync_portal import LoopPortal, spawn_on, wait

__all__ = ["GUARDED_HERE", "PortalTransport"]

#: the guarded call whose sync body runs in this thread (gptgate/sync_guard.py): a request the
#: body sends through a SyncGateway's http_client runs under its permit, as in async code
GUARDED_HERE: ContextVar[GuardedCall | None] = ContextVar("gptgate_sync_guard", default=None)

#: how long closing a stream waits for its task to hang up (it is shielded and quick)
_CLOSE_WAIT_S = 10.0


class _End:
    """The pump's last item: the body ended (``error`` None) or failed with ``error``."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


class _Pumped(httpx2.SyncByteStream):
    """An event stream's body as the caller's thread reads it."""

    def __init__(self, chunks: queue.SimpleQueue[bytes | _End], task: Future[None],
                 ended: threading.Event) -> None:
        self._chunks = chunks
        self._task = task
        self._ended = ended

    def __iter__(self) -> Iterator[bytes]:
        try:
            while True:
                chunk = self._chunks.get()
                if isinstance(chunk, _End):
                    if chunk.error is not None:
                        raise chunk.error
                    return
                yield chunk
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Hang up now if still reading; wait until the loop has given the permit back."""
        if not self._task.done():
            self._task.cancel()
        self._ended.wait(_CLOSE_WAIT_S)


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

    async def run(
        self, transport: httpx2.AsyncBaseTransport, request: httpx2.Request,
        guarded: GuardedCall | None,
    ) -> None:
        if guarded is not None:
            _GUARD_PERMIT.set(guarded)  # this task's own context: one call, one permit
        try:
            response = await transport.handle_async_request(request)
            try:
                if not _is_event_stream(response):
                    raw = b"".join([chunk async for chunk in response.aiter_raw()])
                    self.whole = True
                    self.head.set_result(_copy(response, httpx2.ByteStream(raw)))
                    return
                self.head.set_result(response)
                async for chunk in response.aiter_raw():
                    self.chunks.put(chunk)
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
        task = spawn_on(loop, exchange.run, transport, request, GUARDED_HERE.get())
        try:
            head = exchange.head.result()
        except BaseException:
            if not task.done():
                task.cancel()
            raise
        if exchange.whole:
            wait(task)  # whole: the task has ended (or is ending) already
            return head
        return _copy(head, _Pumped(exchange.chunks, task, exchange.ended))

    def close(self) -> None:
        """The pool is the gateway's: closing this client leaves it open."""
