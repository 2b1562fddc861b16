"""The calls a gateway is running, so that closing it can end each one on purpose.

Closing has three phases (docs/guide.md, "Cancelling and closing"):

1. **closing** — new calls are refused at once with :class:`GatewayClosedError`; calls already
   accepted (running, queued at a limiter or a cache gate, or pending in a micro-batcher) go on;
2. **grace** — they get ``grace_s`` to finish;
3. **cancelled** — what is left is cancelled and ends in :class:`GatewayClosedError`; an
   accepted item that had not started yet is refused the same way.

A call is registered by :meth:`CallRegistry.call` (a scope the shutdown can cancel) or, for a
stream the caller reads at its own pace, by :meth:`CallRegistry.stream` (``gate.stream``) or
:meth:`CallRegistry.open_body` (a response body an SDK reads, gptgate/stream_watch.py).
Cancellation unwinds a call the way any cancellation does — permit ignored, cache ticket and
connection handed back — so the backend's health never hears of it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from types import TracebackType
from typing import TypeVar

import anyio

from .errors import GatewayClosedError

__all__ = ["CANCELLED", "CallRegistry", "OpenStream"]

T = TypeVar("T")

_REFUSED = "the gateway is closing: no new calls are accepted"
CANCELLED = "the gateway closed before the call finished (shutdown grace ran out)"


class OpenStream:
    """A registered stream: cancelled mid-step through ``scope``, or closed between steps
    (the caller is not reading) by the shutdown itself (``close``), so its connection is
    returned."""

    __slots__ = ("close", "closed", "released", "scope")

    def __init__(self, close: Callable[[], Awaitable[None]]) -> None:
        self.close = close
        self.scope: anyio.CancelScope | None = None
        self.closed = False
        #: set once the shutdown has finished closing it
        self.released = anyio.Event()

    async def refuse(self) -> None:
        """The caller came back to a stream the shutdown closed (or is closing)."""
        await self.released.wait()
        raise GatewayClosedError(CANCELLED)


class _Registered:
    """``with registry.call():`` — a class, not a generator: it runs on every call."""

    __slots__ = ("_registry", "_scope")

    def __init__(self, registry: CallRegistry) -> None:
        self._registry = registry
        self._scope = anyio.CancelScope()

    def __enter__(self) -> None:
        self._registry._scopes.add(self._scope)
        self._scope.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        scope = self._scope
        try:
            swallowed = scope.__exit__(exc_type, exc, tb)
        finally:
            self._registry._scopes.discard(scope)
            self._registry._notify()
        if scope.cancelled_caught:
            raise GatewayClosedError(CANCELLED)
        return bool(swallowed)


class CallRegistry:
    """The gateway's running calls and which phase of closing it is in."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self._streams: set[OpenStream] = set()
        self._changed = anyio.Event()
        self._watched = False
        #: new calls are refused
        self.closing = False
        #: the grace is over: accepted calls that had not started are refused too
        self.cancelled = False

    def __len__(self) -> int:
        return len(self._scopes) + len(self._streams)

    def check(self, *, new: bool = True) -> None:
        """Refuse a call the gateway will not run: any new one once closing, any at all once
        the grace has run out."""
        if self.cancelled:
            raise GatewayClosedError(CANCELLED if not new else _REFUSED)
        if new and self.closing:
            raise GatewayClosedError(_REFUSED)

    def call(self, *, new: bool = True) -> _Registered:
        """Run one call (its body) under a scope the shutdown may cancel; a call it cancelled
        raises ``GatewayClosedError`` instead of being cancelled silently."""
        self.check(new=new)
        return _Registered(self)

    async def stream(self, deltas: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
        """Yield ``deltas`` (a call's stream) while registered. Each step runs under a scope
        the shutdown may cancel; between steps no scope is held across the ``yield`` (the
        caller's own code runs there), and the shutdown closes the generator itself."""
        self.check(new=False)
        entry = OpenStream(deltas.aclose)
        self._streams.add(entry)
        try:
            async with aclosing(deltas):
                iterator: AsyncIterator[T] = deltas.__aiter__()
                while True:
                    if entry.closed:
                        await entry.refuse()
                    with anyio.CancelScope() as scope:
                        entry.scope = scope
                        try:
                            delta = await iterator.__anext__()
                        except StopAsyncIteration:
                            return
                        finally:
                            entry.scope = None
                    if scope.cancelled_caught:
                        raise GatewayClosedError(CANCELLED)
                    yield delta
        finally:
            self._streams.discard(entry)
            self._notify()

    def open_body(self, close: Callable[[], Awaitable[None]]) -> OpenStream:
        """Register a response body its caller reads at its own pace (an SDK stream): the
        shutdown gives it the grace, then cancels the read in progress (the entry's
        ``scope``) or, between reads, ``close``s it. ``body_done`` when it has ended."""
        self.check(new=False)
        entry = OpenStream(close)
        self._streams.add(entry)
        return entry

    def body_done(self, entry: OpenStream) -> None:
        self._streams.discard(entry)
        self._notify()

    def _notify(self) -> None:
        if self._watched:  # only a shutdown waits: the hot path makes no Event
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_idle(self) -> None:
        """Until no call is registered (a call started just now gets one checkpoint to
        register before the registry is judged empty)."""
        self._watched = True
        while True:
            if not len(self):
                await anyio.lowlevel.checkpoint()
                if not len(self):
                    return
            await self._changed.wait()

    async def cancel_all(self) -> None:
        """End the grace: refuse what has not started, cancel what runs, and close the
        streams whose callers are between two reads (handing back their connections)."""
        self.closing = self.cancelled = True
        for scope in list(self._scopes):
            scope.cancel()
        for entry in list(self._streams):
            if entry.scope is not None:
                entry.scope.cancel()
            elif not entry.closed:
                entry.closed = True
                with anyio.CancelScope(shield=True):
                    try:
                        await entry.close()
                    except RuntimeError:  # it resumed meanwhile: its next step sees `closed`
                        pass
                    finally:
                        entry.released.set()
                self._streams.discard(entry)
                self._notify()
