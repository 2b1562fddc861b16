"""Which event loop has a gateway open: claimed and given back atomically across threads.

A gateway's queues, events and pools belong to the event loop that opened it. A Flask-style
app whose request threads each run ``asyncio.run(...)`` with ``async with gate:`` on one shared
gateway used to open it twice at once: the second opener replaced the first one's task group
mid-flight (an untyped "exit cancel scope in a different task") and left the gateway "already
open" for good. Now opening is claimed under a thread lock before anything is built: the
second loop gets a typed :class:`GateError` naming the supported ways, the first goes on,
and closing gives the claim back whatever happens, so a later loop can open it again.

Phases: ``closed`` → ``opening`` → ``open`` → ``closing`` → ``closed``; a failed or cancelled
``opening`` goes back to ``closed``. An event loop runs in one thread and two loops cannot run
at once in one thread, so the thread names the loop (cheap enough for every call).
"""

from __future__ import annotations

import threading
from typing import Literal

import anyio

from .errors import GateError

__all__ = ["OTHER_LOOP", "Opened", "current_loop"]

Phase = Literal["closed", "opening", "open", "closing"]

#: what a caller on another loop is told (a call, an open, a close)
OTHER_LOOP = (
    "this gateway belongs to another event loop (thread) while it is open there: a Gateway "
    "serves one event loop at a time. Use one event loop per gateway (a Gateway per loop or "
    "thread, or send the call to the loop that opened it), or gg.SyncGateway (one loop in "
    "a background thread for sync code; gg.SyncGateway(gateway=...) to drive this one from "
    "other threads) to share one gateway between threads"
)
_REFUSED_HERE = {
    "open": "the gateway is already open in this event loop: open it once (one `async with`)",
    "opening": "the gateway is still opening in this event loop: await the first start()",
    "closing": "the gateway is still closing in this event loop: open it once aclose() returns",
}


def current_loop() -> int:
    """Which event loop this is (the thread that runs it)."""
    return threading.get_ident()


class Opened:
    """The open/close bookkeeping of one gateway; every transition under one lock."""

    __slots__ = ("_closed", "_lock", "loop", "phase")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.phase: Phase = "closed"
        #: the loop holding the gateway (None when closed)
        self.loop: int | None = None
        #: set once the close under way has ended (made when it begins, in the owner's loop)
        self._closed: anyio.Event | None = None

    def claim(self) -> None:
        """Start opening in this loop, or refuse: open (or opening, closing) elsewhere or
        already here."""
        here = current_loop()
        with self._lock:
            if self.phase == "closed":
                self.phase, self.loop = "opening", here
                return
            phase, loop = self.phase, self.loop
        if loop != here:
            raise GateError(OTHER_LOOP)
        raise GateError(_REFUSED_HERE[phase])

    def opened(self) -> None:
        with self._lock:
            self.phase = "open"

    def begin_close(self) -> bool:
        """Start closing: False when there is nothing to close here (never opened, already
        closed or being closed by another task of this loop); a typed error from another loop,
        whose close would touch the owner's queues from the wrong thread."""
        here = current_loop()
        with self._lock:
            if self.loop is not None and self.loop != here:
                raise GateError(OTHER_LOOP + "; close it from the loop that opened it")
            if self.phase != "open":
                return False
            self.phase = "closing"
            self._closed = anyio.Event()
            return True

    async def wait_closed(self) -> None:
        """Return once a close another task of this loop began has ended: an app's SIGTERM
        handler closes the gateway and its ``async with gate:`` exit closes it again — that
        second close returned at once, and the program ended while the first was still
        handing the fleet's permits back (tests/test_close_twice.py)."""
        closed = self._closed
        if closed is not None and self.phase == "closing":
            await closed.wait()

    def release(self) -> None:
        """Closed (or the opening failed): any loop may open the gateway again."""
        with self._lock:
            self.phase, self.loop = "closed", None
            closed, self._closed = self._closed, None
        if closed is not None:
            closed.set()

    def check_loop(self) -> None:
        """Refuse a call from another loop than the owner's (it would hang on foreign
        events): the hot path, so no lock — ``loop`` is one attribute read."""
        loop = self.loop
        if loop is not None and loop != current_loop():
            raise GateError(OTHER_LOOP)
