"""``@sync_gate.guard(...)`` on a plain function: it runs in the caller's thread (its thread
locals, a Flask request context, a sync SDK client) while it holds a permit taken through the
SyncGateway's loop.

The async guard (gptgate/guard.py) does the routing, admission, retries, span and ledger on
the loop; its body is this handoff: the loop tells the caller's thread "your try, go", waits
(shielded: a sync function cannot be cut, so its permit is held until it returns) for what the
function returned or raised, and classifies that as for an async guard. A retry is another
"go". A caller interrupted while it waits for a permit cancels its task: nothing is held.
A returned stream (a sync SDK's ``Stream``, a generator, an iterator class with ``close``:
still an object of its class, gptgate/stream_proxy.py) keeps the permit until it is read to
its end, closed, or dropped. The loop holds it only weakly while it waits for that end: a
strong reference there would keep a stream its caller dropped in a reference cycle (an SDK's
``Stream``) from ever being collected, and its permit with it. While it waits, it counts the
caller's reads: a stream left unread is worth a cycle collection (as the async watchdog asks,
gptgate/stream_watch.py), and one left unread past the backend's ``idle_timeout`` gives its
permit back — a later read raises ``RequestTimeout``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import queue
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast

import anyio
import httpx2
from anyio.lowlevel import EventLoopToken
from opentelemetry import context as otel_context

from .errors import BackendError, RequestTimeout
from .guard import _GUARD_PERMIT, GuardedCall, ReturnedStreamCut
from .guard_manager import entered_now
from .guard_nested import settle
from .guard_stream import event_stream_tap
from .stream_cut import EARLY_END, ended_early
from .stream_proxy import FollowedIterator
from .stream_reads import LeftByCaller, StreamReads
from .stream_watch import PROBE_LIVE_READER_S, PROBE_S, TICK_S, collect_cycles, collect_young
from .sync_http import GUARDED_HERE
from .sync_portal import LoopPortal, call_on, spawn_on, wait

if TYPE_CHECKING:
    from .clock import Clock
    from .observe import ResponseTap

__all__ = ["ThreadCall", "sync_guard"]

P = ParamSpec("P")
R = TypeVar("R")

#: the loop's last message to the caller's thread: the guarded call has ended
_DONE = object()


class _CallerLeft(Exception):
    """The caller's thread was interrupted inside the function: the try ends here."""


class ThreadCall(Generic[R]):
    """One guarded call of a sync function, shared by the caller's thread and the loop."""

    def __init__(self, fn: Callable[[], R]) -> None:
        self._fn = fn
        #: loop → thread: a try's permit and the guard's trace context (run the function
        #: now, its SDK requests children of the guard's span), or ``_DONE``
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._try = 0
        self._replied: anyio.Event | None = None
        self._outcome: tuple[Any, BaseException | None] = (None, None)
        #: set when a returned stream has been read, closed or dropped
        self._stream_end: anyio.Event | None = None
        #: that stream, weakly (the caller's to drop): what the try returned, once it ended
        self._streamed: Callable[[], object] | None = None
        #: the caller's reads of that stream (and what its next read raises, if anything)
        self._reads = StreamReads()
        #: what cut that stream while it was read, if anything
        self._stream_error: Exception | None = None
        #: its caller closed or dropped it before its end
        self._stream_left = False
        #: the loop running this call: the thread's answers go there directly, not through
        #: the portal, which a closing SyncGateway stops while a try still holds its permit
        self._token: EventLoopToken | None = None

    # -- on the loop --------------------------------------------------------------------

    async def body(self) -> R:
        """One try, holding its permit: hand it to the caller's thread and wait."""
        self._try += 1
        self._replied = replied = anyio.Event()
        self._stream_end, self._stream_error, self._stream_left = None, None, False
        guarded = _GUARD_PERMIT.get()
        self.inbox.put((guarded, otel_context.get_current()))
        with anyio.CancelScope(shield=True):  # the function runs on until it returns
            await replied.wait()
        value, error = self._outcome
        if error is not None:
            raise error
        if self._stream_end is not None:  # the permit follows the stream to its end
            await self._follow(self._stream_end, guarded)
            if self._stream_error is not None:  # the guard classifies it, as a try's failure
                raise ReturnedStreamCut(self._stream_error)
            if self._stream_left and guarded is not None:
                guarded.caller_left = True
            assert self._streamed is not None
            value = self._streamed()  # None once its caller dropped it
        return value  # type: ignore[no-any-return]

    async def _follow(self, ended: anyio.Event, guarded: GuardedCall | None) -> None:
        """Wait for the returned stream's end. Left unread, it is worth a cycle collection
        (dropped in a reference cycle, it ends only when collected); left unread past the
        idle bound, it ends here and its next read raises."""
        if guarded is None or guarded.clock is None:
            await ended.wait()
            return
        clock, reads = guarded.clock, self._reads
        try:
            await self._watch_reads(ended, clock, guarded.idle_s, reads)
        except anyio.get_cancelled_exc_class():
            # the guard cuts its call at the deadline here (a sync read cannot be cut in
            # the caller's thread): its next read raises, where it read on past the deadline
            if guarded.deadline is not None and clock.now() >= guarded.deadline - TICK_S:
                reads.cut_at_deadline()
            raise

    @staticmethod
    async def _watch_reads(
        ended: anyio.Event, clock: Clock, idle_s: float | None, reads: StreamReads
    ) -> None:
        seen, since = reads.count, clock.now()
        while not ended.is_set():
            with anyio.move_on_after(clock.to_real(TICK_S)):
                await ended.wait()
            if ended.is_set():
                return
            if reads.count != seen:
                seen, since = reads.count, clock.now()
                continue
            idle = clock.now() - since
            if idle_s is not None and idle >= idle_s:
                reads.refusal = RequestTimeout(
                    f"the stream was left unread {idle_s:g}s (the idle bound): gptgate gave "
                    "its permit back"
                )
                return
            if idle >= PROBE_S:  # a stream dropped soon after it was opened is still young
                collect_young(clock)
            if idle >= PROBE_LIVE_READER_S:
                collect_cycles(clock)

    def _deliver(self, number: int, value: object, error: BaseException | None,
                 streaming: bool) -> None:
        if number != self._try or self._replied is None:
            return  # a stale try's answer
        self._outcome = (None, None) if streaming else (value, error)
        if streaming:
            self._streamed = _weakly(value)
            self._stream_end = anyio.Event()
        self._replied.set()

    def _stream_ended(self, error: Exception | None) -> None:
        if self._stream_end is not None:
            self._stream_left = isinstance(error, LeftByCaller)
            self._stream_error = None if self._stream_left else error
            self._stream_end.set()

    async def done(self, guarded: Callable[[ThreadCall[R]], Awaitable[R]]) -> R:
        self._token = anyio.lowlevel.current_token()
        try:
            return await guarded(self)
        finally:
            self.inbox.put(_DONE)

    def _to_loop(self, then: Callable[[], None]) -> None:
        """A try's answer, from the caller's thread to the loop. Not through the portal:
        ``close()`` stops it (no new calls) and then waits for the loop's tasks — this one
        in its shielded wait for the answer — so the loop always runs on until it has it."""
        anyio.from_thread.run_sync(then, token=self._token)

    # -- in the caller's thread ---------------------------------------------------------

    def run(self, loop: LoopPortal, guarded: Callable[[ThreadCall[R]], Awaitable[R]]) -> R:
        task: Future[R] = spawn_on(loop, self.done, guarded)
        # a task cancelled before it ever ran (the portal stopping) never says it is done
        task.add_done_callback(lambda _: self.inbox.put(_DONE))
        try:
            while True:
                message = self.inbox.get()
                if message is _DONE:
                    return wait(task)
                number = self._try
                held_permit, trace_context = cast(
                    "tuple[GuardedCall | None, otel_context.Context]", message
                )
                token = GUARDED_HERE.set(held_permit)
                traced = otel_context.attach(trace_context)
                try:
                    # a stream manager returned unentered is entered on this try's permit
                    value = entered_now(self._fn())
                except Exception as error:
                    self._to_loop(functools.partial(self._deliver, number, None, error, False))
                    continue
                except BaseException:
                    task.cancel()  # interrupted: the loop must not wait for the function
                    self._to_loop(
                        functools.partial(self._deliver, number, None, _CallerLeft(), False)
                    )
                    raise
                finally:
                    otel_context.detach(traced)
                    GUARDED_HERE.reset(token)
                self._reads = StreamReads()
                held = _hold_stream(
                    value, lambda error: _tell(loop, functools.partial(self._stream_ended, error)),
                    self._reads,
                )
                self._to_loop(
                    functools.partial(self._deliver, number, value, None, held is not None)
                )
                if held is not None:
                    return held  # type: ignore[no-any-return]
        except BaseException:
            if not task.done():
                task.cancel()
            raise


def _weakly(value: object) -> Callable[[], object]:
    """A weak reference to ``value`` (a strong one for the rare object that takes none)."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def _tell(loop: LoopPortal, then: Callable[[], None]) -> None:
    with contextlib.suppress(Exception):  # closed meanwhile: its close gave the permit back
        call_on(loop, then)


#: how a returned stream ended: the error that cut it while it was read, or None
StreamEnd = Callable[[Exception | None], None]


class _EndWatch(httpx2.SyncByteStream):
    """A response body that says once when it has been read to its end, closed or dropped,
    or what cut it while it was read — an SDK's event stream of a generative answer that
    reached a clean EOF before its terminal event too (``tap``): the server cut it, though
    the SDK raises nothing (gptgate/stream_cut.py; it counted as a success)."""

    def __init__(
        self, inner: httpx2.SyncByteStream, ended: StreamEnd, reads: StreamReads,
        tap: ResponseTap | None,
    ) -> None:
        self._inner = inner
        self._ended: StreamEnd | None = ended
        self._reads = reads
        self._tap = tap

    def _end(self, error: Exception | None = None) -> None:
        ended, self._ended = self._ended, None
        if ended is not None:
            ended(error)

    def __iter__(self) -> Iterator[bytes]:
        tap = self._tap
        try:
            for piece in self._reads.pieces(iter(self._inner)):
                if tap is not None and isinstance(piece, bytes):
                    tap.feed(piece, time.monotonic())
                yield piece
            if tap is not None:
                tap.close(time.monotonic())
                if ended_early(tap):
                    self._end(BackendError(EARLY_END))
        except Exception as error:
            self._end(error)
            raise
        finally:
            self._end()

    def _left(self) -> None:
        """Closed or dropped: an event stream before its terminal event was left by its
        caller (no verdict); anything else ends as before."""
        tap = self._tap
        self._end(LeftByCaller() if tap is not None and not tap.complete else None)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._left()

    def __del__(self) -> None:
        self._left()


def _watched_generator(inner: Iterator[Any], ended: StreamEnd, reads: StreamReads) -> Iterator[Any]:
    """``inner`` read through ``reads``; ``ended`` told once: None at its end, what cut it,
    or ``LeftByCaller`` when its caller closed or dropped it first (no success)."""
    error: Exception | None = None
    try:
        yield from reads.pieces(inner)
    except GeneratorExit:
        error = LeftByCaller()
        raise
    except Exception as cut:
        error = cut
        raise
    finally:
        ended(error)


def _hold_stream(value: object, ended: StreamEnd, reads: StreamReads) -> Any:
    """``value`` if it is a stream still to be read, watched so that ``ended`` is told once
    it is over, and by what error if one cut it (the caller gets the same object back);
    else None."""
    response = value if isinstance(value, httpx2.Response) else getattr(value, "response", None)
    if isinstance(response, httpx2.Response):
        stream = response.stream
        if response.is_closed or response.is_stream_consumed or not isinstance(
            stream, httpx2.SyncByteStream
        ):
            return None
        tap = event_stream_tap(response, time.monotonic())
        response.stream = _EndWatch(stream, ended, reads, tap)
        reads.over_http = True
        return value
    if inspect.isgenerator(value):
        return _watched_generator(value, ended, reads)
    if hasattr(value, "__next__") and callable(getattr(value, "close", None)):
        return FollowedIterator(value, ended, reads)  # an iterator class of its own: still one
    return None


def sync_guard(
    loop: Callable[[], LoopPortal],
    async_guard: Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]],
    covers: Callable[[GuardedCall], bool] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """The decorator: ``async_guard`` is the gateway's ``guard(...)`` with the same options,
    built on its first call (on the gateway's loop, once it is open there). ``covers(call)``:
    the guarded call running in this thread (the function was called inside it) holds a
    permit this guard may use — then the function runs under it: waiting for a second permit
    of the same limit, held by callers that each wait for theirs, would wait forever."""

    def decorator(fn: Callable[P, R]) -> Callable[P, R]:
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"SyncGateway.guard wraps plain functions; {getattr(fn, '__qualname__', fn)!r} "
                "is async: decorate it with the async gateway's guard (sync_gate.gateway.guard)"
            )

        async def on_loop(call: ThreadCall[R]) -> R:
            return await call.body()

        on_loop.__qualname__ = getattr(fn, "__qualname__", None) or repr(fn)  # the span's name
        guarded = async_guard(on_loop)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            outer = GUARDED_HERE.get()
            if outer is not None and covers is not None and covers(outer):
                return fn(*args, **kwargs)  # part of the guarded call it runs in
            call: ThreadCall[R] = ThreadCall(functools.partial(fn, *args, **kwargs))
            try:
                return call.run(loop(), guarded)
            except Exception as exc:
                settle(outer, exc)  # retried and counted on its backend: not again outside
                raise

        return wrapper

    return decorator

