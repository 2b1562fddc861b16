"""A response body its caller reads at its own pace (an SDK stream), watched so that the
permit it holds comes back when the body is read to its end or closed — and, when the caller
left it without closing it (a ``break``), as soon as its object is dropped, or once it has
sat unread for the backend's ``idle_timeout``: gptgate then hangs up itself.

Why a watchdog: an SDK's stream object sits in a reference cycle (openai's ``AsyncStream``
and its own generator), so a stream left with ``break`` used to be closed only by Python's
cycle collector, whenever that ran; its permit was held until then and the next calls failed
with "no permit". A weak reference to the body's facade (what the SDK's response holds) says
when the collector found it dropped (being in a cycle, nothing is freed sooner: no finalizer
can tell it at once). Once the body sat unread 0.2 s the watchdog asks for a collection of the
young generations (cheap: at most every 0.2 s per clock), which finds a stream dropped soon
after it was opened; once the task that last read it has ended (or after 1 s unread), a full
one (at most every 5 s per clock) finds one that lived long enough to grow old.

While open, a body is registered with the gateway's calls (gptgate/lifecycle.py): closing
the gateway gives it the grace, then cancels the read in progress or closes it between reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import math
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import anyio
import httpx2

from .errors import GateError, GatewayClosedError, RequestTimeout
from .stream_reads import PAST_DEADLINE
from .sync_caller import SYNC_CALLER

if TYPE_CHECKING:
    from .clock import Clock
    from .late_answer import Spawn
    from .lifecycle import CallRegistry, OpenStream

__all__ = [
    "PROBE_LIVE_READER_S", "PROBE_S", "TICK_S", "BodyListener", "Closable", "OpenBody",
    "WatchedByteStream", "closable", "collect_cycles", "collect_young", "watched_iterator",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)

#: how often a watchdog looks at its body (gateway seconds)
TICK_S = 0.1
#: a body unread this long, the task that last read it over, is worth a cycle collection
PROBE_S = 0.2
#: ... and this long while that task lives on (a worker loop that dropped it and went on)
PROBE_LIVE_READER_S = 1.0
#: at most one such collection per clock this often (gateway seconds)
_COLLECT_EVERY_S = 5.0
#: ... and one of the young generations only this often (gateway seconds)
_YOUNG_EVERY_S = 0.2
#: draining what had arrived when gptgate hangs up: a gap this long ends it ...
_DRAIN_GAP_S = 0.02
#: ... and so does this much time in all (a server still generating is hung up on)
_DRAIN_S = 0.2


class _CutAtBound(Exception):
    """A read cut at the body's ``cut_at`` (raised as the SDK's own timeout error)."""


_CLOSED = "the gateway closed before the stream was read to its end (shutdown grace ran out)"


class Closable(Protocol[T_co]):
    """What a watched body reads from: an async iterator it can close."""

    def __aiter__(self) -> AsyncIterator[T_co]: ...

    async def aclose(self) -> None: ...


class BodyListener(Protocol[T_contra]):
    """Told how a watched body went, exactly once among ``finished``, ``cut``, ``left`` and
    ``hung_up`` (``arrived`` before, for each piece that arrived)."""

    def arrived(self, item: T_contra, *, drained: bool) -> None:
        """A piece arrived: read by the caller, or ``drained`` by gptgate hanging up."""

    def finished(self) -> None:
        """Read to its end."""

    def cut(self, exc: Exception) -> None:
        """It failed under its reader (the server's or the network's doing)."""

    def left(self) -> None:
        """The caller closed it or cancelled a read before its end, or the shutdown cut a
        read in progress."""

    def hung_up(self, complete: bool) -> None:
        """gptgate hung up on it (dropped, unread too long, or unread at the shutdown) after
        draining what had arrived; ``complete``: that drain reached its end."""


class OpenBody(Generic[T]):
    """One open body, shared by its facade (what the caller's response holds), the watchdog
    and the gateway's shutdown. It never holds the facade: a facade the caller dropped can be
    collected, and the weak reference to it says so."""

    def __init__(
        self,
        inner: Closable[T],
        listener: BodyListener[T],
        *,
        clock: Clock,
        backend: str,
        silence_s: float | None = None,
        unread_s: float | None = None,
        drain: bool = False,
        cut_at: float | None = None,
        typed_cut: bool = False,
        quiet_s: float | None = None,
        events: Callable[[], int] | None = None,
    ) -> None:
        self._inner = inner
        self._listener = listener
        self._clock = clock
        self._backend = backend
        #: the longest wait for the server's next piece (None: the SDK's own timeouts)
        self._silence_s = silence_s
        #: the longest the caller may leave it unread (None: unbounded)
        self._unread_s = unread_s
        self._drain = drain
        #: no read goes past this clock reading (None: unbounded): a request the transport
        #: sent again is cut at its bound, as ``gate.chat`` cuts its attempts at the deadline
        self._cut_at = cut_at
        #: the cut raises gptgate's ``RequestTimeout(deadline=True)`` (a body no SDK reads:
        #: a guarded function's own generator) instead of the transport's read timeout
        self._typed_cut = typed_cut
        #: no read goes on ``quiet_s`` past the last piece that moved ``events()`` (a stream's
        #: events: its keep-alive comments are no progress; gptgate/body_bound.py)
        self._quiet_s = quiet_s if events is not None else None
        self._events = events
        self._events_seen = 0
        self._progress_at = anyio.current_time() if events is not None else 0.0
        self._pieces: AsyncIterator[T] | None = None
        self._inner_closed = False
        self._entry: OpenStream | None = None
        self._registry: CallRegistry | None = None
        #: ended one way or another (the listener was told)
        self.done = False
        #: what a read after gptgate hung up raises
        self._refusal: GateError | None = None
        self.reading = False
        self.since = clock.now()
        self.dropped = False
        self._reader: weakref.ref[asyncio.Task[Any]] | None = None
        self._follow_reader()
        #: the sync thread whose pump reads it (gptgate/sync_caller.py), None: async
        self._caller = SYNC_CALLER.get()
        #: the cycle collector was asked once in this unread spell
        self._probed = False
        self._facade: weakref.ref[object] | None = None
        #: set when it ends, for the watchdog (None: no watchdog)
        self._ended: anyio.Event | None = None
        #: set once gptgate has hung up (a close meanwhile waits for its drain)
        self._hung: anyio.Event | None = None

    # -- setting up ---------------------------------------------------------------------------

    def watch(
        self, facade: object, registry: CallRegistry | None, spawn: Spawn | None
    ) -> None:
        """Register with the gateway's calls and start the watchdog for ``facade``."""
        self._facade = weakref.ref(facade, self._facade_dropped)
        if registry is not None:
            self._entry = registry.open_body(self._shut)
            self._registry = registry
        if spawn is not None:
            self._ended = anyio.Event()
            spawn(self._watchdog)

    def _facade_dropped(self, _ref: object) -> None:
        self.dropped = True  # told by the collector: only a flag, the watchdog acts

    # -- the reader's side ----------------------------------------------------------------

    async def next(self) -> tuple[T] | None:
        """The next piece (in a 1-tuple), or None at the end."""
        if self._refusal is not None:
            raise self._refusal
        if self.done:
            return None
        self.reading = True
        self._probed = False
        self._follow_reader()
        entry = self._entry
        # one scope per read: the server's silence bound (its deadline) and the shutdown
        # (which cancels it through the registry entry)
        silence, cut_at = self._silence_s, self._cut_at
        deadline = (
            math.inf if silence is None else anyio.current_time() + self._clock.to_real(silence)
        )
        quiet = self._quiet_s is not None and (
            quiet_real := self._progress_at + self._clock.to_real(self._quiet_s)
        ) < deadline
        if quiet:
            deadline = quiet_real
        cut = cut_at is not None and (
            cut_real := anyio.current_time() + self._clock.to_real(cut_at - self._clock.now())
        ) < deadline
        if cut:
            deadline = cut_real
        try:
            with anyio.CancelScope(deadline=deadline) as scope:
                if entry is not None:
                    entry.scope = scope
                try:
                    piece = await self._read()
                finally:
                    if entry is not None:
                        entry.scope = None
            if scope.cancelled_caught and not self._shut_down():
                if cut:
                    raise _CutAtBound
                if quiet:
                    raise httpx2.ReadTimeout("stream sent no event (only keep-alives)")
                raise httpx2.ReadTimeout("stream idle between chunks")
        except _CutAtBound:
            # the request's own bound, no fault of the server's: left, as a caller leaves;
            # the SDK's own timeout error (openai's APITimeoutError), as a cut before the
            # headers raises, and typed for any later read
            self._refusal = RequestTimeout(
                PAST_DEADLINE, backend=self._backend, billed=True, deadline=True
            )
            await self._finish(self._listener.left)
            if self._typed_cut:
                raise self._refusal from None
            raise httpx2.ReadTimeout(PAST_DEADLINE) from None
        except Exception as exc:
            await self._finish(functools.partial(self._listener.cut, exc))
            raise
        except BaseException:  # the caller cancelled its read
            await self._finish(self._listener.left)
            raise
        finally:
            self.reading = False
            self.since = self._clock.now()
        if scope.cancelled_caught:  # the shutdown's grace ran out under this read
            self._refusal = GatewayClosedError(_CLOSED, backend=self._backend)
            await self._finish(self._listener.left)
            raise self._refusal
        if piece is None:
            await self._finish(self._listener.finished)
            return None
        self._listener.arrived(piece[0], drained=False)
        if self._events is not None and (seen := self._events()) != self._events_seen:
            self._events_seen = seen
            self._progress_at = anyio.current_time()
        return piece

    def left_by_this_task(self) -> bool:
        """Open, not being read, and this task is the one that opened or last read it: while
        this task waits on something else, nobody reads it (gptgate/guard_self_wait.py).
        A sync caller's stream: this task works for the thread whose pump reads it — the
        pump reads only a few chunks ahead of that thread, blocked now on this request."""
        if self.done:
            return False
        if self._caller is not None:
            return SYNC_CALLER.get() == self._caller
        if self.reading or self._reader is None:
            return False
        task = _task()
        return task is not None and self._reader() is task

    def _shut_down(self) -> bool:
        return self._registry is not None and self._registry.cancelled

    def _follow_reader(self) -> None:
        """Remember the task reading (a weak reference, renewed only when it changes)."""
        task = _task()
        if task is not None and (self._reader is None or self._reader() is not task):
            self._reader = weakref.ref(task)

    async def _read(self) -> tuple[T] | None:
        if self._pieces is None:
            self._pieces = self._inner.__aiter__()
        try:
            return (await self._pieces.__anext__(),)
        except StopAsyncIteration:
            return None

    async def close(self) -> None:
        """The caller (or its SDK) closed the body: before its end, it left it. Closed by
        the collector's finalizers (the SDK's generator of a stream its caller dropped),
        it is a hang-up like the watchdog's: the collection told ``dropped`` first, and that
        close may come before the watchdog looks — it booked only what the caller had read
        while the server had gone on generating."""
        if self._hung is not None:  # gptgate is hanging up: its drain reads the body
            await self._hung.wait()
            return
        if self.dropped:
            await self.hang_up("dropped by its caller unread")
            return
        await self._finish(self._listener.left)

    # -- ending -------------------------------------------------------------------------------

    def _set_done(self) -> None:
        self.done = True
        if self._ended is not None:
            self._ended.set()  # the watchdog leaves now

    async def _finish(self, tell: Callable[[], None]) -> None:
        if not self.done:
            self._set_done()
            self._unregister()
            tell()
        await self._close_inner()

    async def _close_inner(self) -> None:
        if self._inner_closed:
            return
        self._inner_closed = True
        # a body already broken is closed all the same
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self._inner.aclose()

    def _unregister(self) -> None:
        if self._registry is not None and self._entry is not None:
            self._registry.body_done(self._entry)
            self._entry = None

    async def _shut(self) -> None:
        """The shutdown closes a body nobody is reading: a hang-up, without the drain (its
        grace is over); what the server generated meanwhile is possibly billed."""
        await self._hang_up(GatewayClosedError(_CLOSED, backend=self._backend), drain=False)

    async def hang_up(self, why: str) -> None:
        """The caller left the body unread: read what had arrived (``drain``), hang up, and
        give its permit back (the listener's ``hung_up``)."""
        refusal = RequestTimeout(
            f"the stream was {why}: gptgate hung up and gave its permit back",
            backend=self._backend,
        )
        await self._hang_up(refusal, drain=self._drain)

    async def _hang_up(self, refusal: GateError, *, drain: bool) -> None:
        if self.done:
            return
        self._set_done()
        self._hung = anyio.Event()
        self._refusal = refusal
        self._unregister()
        complete = False
        try:
            if drain:
                complete = await self._drained()
        finally:  # cut short (the gateway closing), it hangs up all the same
            await self._close_inner()
            self._listener.hung_up(complete)
            self._hung.set()

    async def _drained(self) -> bool:
        """Read what the server had sent (a gap of ``_DRAIN_GAP_S`` ends it): True at the
        body's end."""
        if self._pieces is None:
            self._pieces = self._inner.__aiter__()
        to_real = self._clock.to_real
        with anyio.move_on_after(to_real(_DRAIN_S)):
            while True:
                with anyio.move_on_after(to_real(_DRAIN_GAP_S)) as gap:
                    try:
                        piece = await self._pieces.__anext__()
                    except StopAsyncIteration:
                        return True
                    except Exception:
                        return False
                if gap.cancelled_caught:
                    return False
                self._listener.arrived(piece, drained=True)
        return False

    # -- the watchdog -------------------------------------------------------------------------

    async def _watchdog(self) -> None:
        """Hang up once the facade was dropped or the body sat unread ``unread_s``."""
        clock, ended = self._clock, self._ended
        assert ended is not None
        while not self.done:
            with anyio.move_on_after(clock.to_real(TICK_S)):
                await ended.wait()
            if self.done:
                return
            if self.dropped:
                await self.hang_up("dropped by its caller unread")
                return
            if self.reading:
                continue
            idle = clock.now() - self.since
            if self._unread_s is not None and idle >= self._unread_s:
                await self.hang_up(f"left unread {self._unread_s:g}s (the idle bound)")
                return
            if self._probed or idle < PROBE_S:
                continue
            reader_gone = self._reader_gone()
            if collect_young(clock) and self.dropped:  # a short-lived stream is still young
                await self.hang_up("dropped by its caller unread")
                return
            if reader_gone or idle >= PROBE_LIVE_READER_S:
                ran = collect_cycles(clock)
                if self.dropped:
                    await self.hang_up("dropped by its caller unread")
                    return
                # once the reader is gone: a stream handed to another task stays alive. While
                # it lives on, again at each collection the rate allows, until the idle bound
                self._probed = ran and reader_gone

    def _reader_gone(self) -> bool:
        reader = self._reader() if self._reader is not None else None
        return reader is None or reader.done()


def _task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # not on asyncio: no reader to follow (the idle bound still holds)
        return None


#: the last collection a watchdog asked for, per generation collected: its clock's id and time
_last_collect: dict[int, tuple[int, float]] = {}


def collect_young(clock: Clock) -> bool:
    """A collection of the young generations (0 and 1), at most once per ``_YOUNG_EVERY_S``
    per clock: False when none ran. A stream dropped soon after it was opened (a preview) is
    still young, and their size is bounded by the collector's thresholds, not by the heap —
    cheap enough to run at every probe. Before, only the full collection, at most every 5 s,
    found it: a worker loop of 15 previews on a limit of 3 waited 4.6 s for every third
    permit (16.9 s in all, now 7.3 s; tests/test_sdk_stream_young.py)."""
    return collect_cycles(clock, generation=1, every_s=_YOUNG_EVERY_S)


def collect_cycles(
    clock: Clock, generation: int = 2, every_s: float = _COLLECT_EVERY_S
) -> bool:
    """A cycle collection, so that a stream its caller dropped is seen now (its facade's
    weak reference is told); False when one of ``generation`` ran less than ``every_s`` ago
    on this clock (the caller asks again at its next tick). By default a full collection: a
    stream that lived through two of the young ones sits in the oldest generation already.
    Rare on purpose — on a large heap it pauses the event loop for tens of milliseconds."""
    now = clock.now()
    last_clock, last = _last_collect.get(generation, (0, -math.inf))
    if last_clock == id(clock) and now - last < every_s:
        return False
    _last_collect[generation] = (id(clock), now)
    gc.collect(generation)
    return True


class WatchedByteStream(httpx2.AsyncByteStream):
    """The facade an ``httpx2.Response`` holds for a watched body."""

    def __init__(self, body: OpenBody[bytes]) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        body = self._body
        try:
            while (piece := await body.next()) is not None:
                yield piece[0]
        finally:
            if not body.done:  # closed at a yield (the caller's ``break``, a collected
                await body.close()  # generator): it left the body

    async def aclose(self) -> None:
        await self._body.close()


async def watched_iterator(body: OpenBody[T]) -> AsyncIterator[T]:
    """The facade of a watched async generator (a guarded function returned one): an async
    generator too, read and closed as the original."""
    try:
        while (piece := await body.next()) is not None:
            yield piece[0]
    finally:
        if not body.done:
            await body.close()


def closable(value: object) -> Callable[[], Awaitable[None]] | None:
    """How to close an async iterator (``aclose``, else an async ``close``); None if it
    has neither."""
    for name in ("aclose", "close"):
        method = getattr(value, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    return None
