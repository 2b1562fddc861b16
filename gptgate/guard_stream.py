"""A stream a guarded function returned unread, whatever client made it: the guard's permit
follows it until it is read to its end or closed — or dropped unread, or left unread past
the backend's ``idle_timeout`` (gptgate/stream_watch.py).

Handing the permit back when the function returned let 40 guarded calls under
``concurrency=5`` put 37 streams on the server at once. Followed here: an ``httpx2``
response (or an object holding one as ``.response``: the openai and anthropic SDKs'
streams), whose body is watched in place; an async generator, returned as a watched async
generator; any other async iterator with ``aclose``/``close``, returned as a proxy that
reads and closes it (its other attributes, and its class to ``isinstance``, are the
original's).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import httpx2

from .errors import BackendError, GateError, GatewayClosedError
from .observe import ResponseTap
from .operations import GENERATIVE, operation_of
from .outcomes import count_failure, report_failure
from .stream_cut import EARLY_END, ended_early, interrupted
from .stream_proxy import ProxyOf
from .stream_watch import OpenBody, WatchedByteStream, closable, watched_iterator

if TYPE_CHECKING:
    from .clock import Clock
    from .late_answer import Spawn
    from .lifecycle import CallRegistry
    from .limits import Permit
    from .routing import BackendState

__all__ = ["event_stream_tap", "follow_returned"]

#: the markers that end an event stream's answer: chat's ``[DONE]``, the Responses API's
#: terminal events (it sends no ``[DONE]``), Anthropic's ``message_stop``. A caller that stops
#: reading after one left nothing the server still runs: only ``[DONE]`` was known, and a
#: Responses stream left at ``response.completed`` held its slot for ``abandon_grace_s``
_ENDS = (
    b"data: [DONE]", b"event: response.completed", b"event: response.incomplete",
    b"event: response.failed", b"event: message_stop",
)
#: bytes of one chunk kept to find a marker split across two
_CARRY = max(map(len, _ENDS))
#: how a followed stream ended: the error that cut it, or None
StreamEnd = Callable[[BaseException | None], None]


class _PermitFollows:
    """The guard's permit (and span, through ``on_end``) end with the body, and the try's
    verdict for the circuit with it (gptgate/stream_cut.py): read to its end, a success;
    cut by the server or the network — an event stream's clean EOF before its terminal
    event too (``tap``) — a failure; left by its caller, neither."""

    def __init__(
        self, permit: Permit, on_end: StreamEnd, classify: Callable[[Exception], GateError],
        clock: Clock, state: BackendState, tap: ResponseTap | None,
    ) -> None:
        self._permit = permit
        self._on_end = on_end
        self._classify = classify
        self._clock = clock
        self._state = state
        #: an SDK's event stream of a generative answer, read for its end (None: not one)
        self._tap = tap
        self._complete = False
        self._carry = b""

    def arrived(self, item: object, *, drained: bool) -> None:
        # the guard counts no tokens of another client's stream; it only notes its end
        # marker (an SDK closes an event stream at ``[DONE]`` without reading on)
        if isinstance(item, bytes) and not self._complete:
            window = self._carry + item
            self._complete = any(end in window for end in _ENDS)
            self._carry = window[-_CARRY:]
        if self._tap is not None and isinstance(item, bytes):
            self._tap.feed(item, self._clock.now())

    def finished(self) -> None:
        tap = self._tap
        if tap is not None:
            tap.close(self._clock.now())
            if ended_early(tap):
                self._cut(BackendError(EARLY_END, backend=self._state.name), None)
                return
        self._permit.ignore()  # no size known: no sample of the load per token
        self._state.breaker.on_success()
        self._on_end(None)

    def cut(self, exc: Exception) -> None:
        self._cut(self._classify(exc), exc)

    def _cut(self, view: GateError, exc: Exception | None) -> None:
        permit = self._permit
        if type(view) is GateError:  # the application's own error (its generator's)
            report_failure(permit, view, self._clock.now() - permit.start)
        else:
            error = interrupted(view, self._state.name)
            report_failure(permit, error, self._clock.now() - permit.start)
            count_failure(self._state, error, self._clock.now())
            exc = exc if exc is not None else error
        self._on_end(exc)

    def left(self) -> None:
        if self._complete:  # whole: the server is done with it
            self.finished()
            return
        self._permit.abandon()  # the server runs it until it notices
        self._on_end(None)

    def hung_up(self, complete: bool) -> None:
        self.left()


class _Iterating:
    """An async iterator with ``aclose``/``close`` as a watched body's inner one."""

    def __init__(self, iterator: Any) -> None:
        self._iterator = iterator

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterator.__aiter__()  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        close = closable(self._iterator)
        if close is not None:
            result = close()
            if inspect.isawaitable(result):
                await result


class WatchedIterator(ProxyOf):
    """The proxy returned for an async iterator that is neither a generator nor an HTTP
    response: read and closed through the watch, anything else is the original's — its
    class too, to ``isinstance`` (gptgate/stream_proxy.py)."""

    _OWN = frozenset({"_original", "_body"})

    def __init__(self, body: OpenBody[Any], original: Any) -> None:
        self._body = body
        self._original = original

    def __aiter__(self) -> WatchedIterator:
        return self

    async def __anext__(self) -> Any:
        piece = await self._body.next()
        if piece is None:
            raise StopAsyncIteration
        return piece[0]

    async def aclose(self) -> None:
        await self._body.close()

    async def close(self) -> None:
        await self._body.close()

    async def __aenter__(self) -> WatchedIterator:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._body.close()


def follow_returned(
    result: object,
    permit: Permit,
    on_end: StreamEnd,
    *,
    classify: Callable[[Exception], GateError],
    clock: Clock,
    backend: str,
    idle_s: float,
    calls: CallRegistry,
    spawn: Spawn | None,
    cut_at: float | None = None,
    state: BackendState,
) -> tuple[bool, object]:
    """Whether ``result`` is a stream still to be read, and what to return in its place
    (itself, or its watched facade). Followed, the permit and ``on_end`` are the watch's.

    ``cut_at``: the guarded call's deadline (a clock reading). No stream is read past it.
    An HTTP response's read raises the client's own read timeout (the SDK's timeout error),
    as a request ``gate.http_client`` sent again is cut at its bound; a returned generator
    or iterator, which no SDK reads, raises ``RequestTimeout(deadline=True)``, as the
    guarded body cut at the deadline does. A stream the SDK opened on its own client,
    trickling faster than the SDK's read timeout, ran 114 s past its call's 40 s deadline
    in the chaos run, until the gateway closed."""
    response = result if isinstance(result, httpx2.Response) else getattr(result, "response", None)
    tap = event_stream_tap(response, clock.now())
    listener = _PermitFollows(permit, on_end, classify, clock, state, tap)

    def body(inner: Any, *, typed: bool) -> OpenBody[Any]:
        return OpenBody(
            inner, listener, clock=clock, backend=backend, unread_s=idle_s, cut_at=cut_at,
            typed_cut=typed,
        )

    def watch(watched: OpenBody[Any], facade: object) -> None:
        try:
            watched.watch(facade, calls, spawn)
        except GatewayClosedError:  # the shutdown's grace ran out as the function returned
            listener.left()
            raise

    if isinstance(response, httpx2.Response):
        stream = response.stream
        if response.is_closed or response.is_stream_consumed or not isinstance(
            stream, httpx2.AsyncByteStream
        ):
            return False, result
        watched = body(stream, typed=False)
        response.stream = facade = WatchedByteStream(watched)
        watch(watched, facade)
        return True, result
    if inspect.isasyncgen(result):
        watched = body(result, typed=True)
        generator = watched_iterator(watched)
        watch(watched, generator)
        return True, generator
    if hasattr(result, "__anext__") and closable(result) is not None:
        watched = body(_Iterating(result), typed=True)
        proxy = WatchedIterator(watched, result)
        watch(watched, proxy)
        return True, proxy
    return False, result


def event_stream_tap(response: object, now: float) -> ResponseTap | None:
    """A tap for an SDK's event stream of a generative answer (chat, completion, Messages,
    Responses), whose end says whether the server cut it; None for anything else (a sync
    guard's stream too, gptgate/sync_guard.py)."""
    if not isinstance(response, httpx2.Response):
        return None
    kind = response.headers.get("content-type", "")
    if not kind.startswith("text/event-stream"):
        return None
    try:
        path = response.request.url.path
    except RuntimeError:  # a response built without its request
        return None
    if operation_of(path) not in GENERATIVE:
        return None
    return ResponseTap(kind, now)
