"""Which event loop has a gateway open: claimed and given back atomically across threads.

A gateway's queues, events and pools belong to the event loop that opened it. A Flask-style
app whose request threads each run ``asyncio.run(...)`` with ``async with gate:`` on one shared
gateway used to open it twice at once: the second opener replaced the first one's task group
mid-flight (an untyped "exit cancel scope in a different task") and left the gateway "already
open" for good. Now opening is claimed under a thread lock before anything is built: the
second loop gets a typed :class:`GateError` naming the supported ways, the first goes on,
and closing gives the claim back whatever happens, so a later loop can open it again.

Phases: ``closed`` → ``opening`` → ``open`` → ``closing`` → ``closed``; a failed or cancelled
``opening`` goes back to ``closed``. A loop is named by its thread *and* its asyncio loop
object (None under trio): one thread runs one loop at a time, but may park one loop and run
another (a session-scoped test fixture's loop, a ``loop.run_until_complete`` style app) —
named by its thread only, that second loop's call went through and wrote its request on the
first loop's pooled connection before failing untyped.

A process forked while a gateway was open (a process pool started by an async app, a
``--preload`` master that opened it) holds a copy whose sockets are the parent's: a call there
wrote on the parent's connection, and the parent could then read the answer to the child's
prompt. In the child that copy's bookkeeping is ``forked``: it is the parent's, closed by
nothing here. The gateway itself is rebuilt fresh on its first touch in the child
(gptgate/fork_rebuild.py), with new bookkeeping that is ``auto``: the gateway opens on the
first awaited call of a loop there (``wait_opened`` holds the calls that arrive meanwhile).

A process that exits with a gateway still open (its loop run by a daemon thread, or parked)
never ran that loop again to close it, so ``state=`` — "written on exit" — was not: at
interpreter exit every gateway still open here is told to write it (``at_exit``), a plain
file write that needs no loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Literal

import anyio

from .errors import GateError

__all__ = ["OTHER_LOOP", "Opened", "current_loop"]

Phase = Literal["closed", "opening", "open", "closing", "forked"]

#: what a caller on another loop is told (a call, an open, a close)
OTHER_LOOP = (
    "this gateway belongs to another event loop (thread) while it is open there: a Gateway "
    "serves one event loop at a time. Use one event loop per gateway (a Gateway per loop or "
    "thread, or send the call to the loop that opened it), or gg.SyncGateway (one loop in "
    "a background thread for sync code; gg.SyncGateway(gateway=...) to drive this one from "
    "other threads) to share one gateway between threads"
)
#: what the parent's copy of a gateway's state says if reached in a forked child (the
#: gateway is rebuilt on its first touch there, so only a reference kept from before the
#: fork to its inner objects could reach it)
FORKED = (
    "this is the parent process's state of a gateway that was open when the process forked: "
    "its connections (their sockets shared with the parent) and its event loop are the "
    "parent's, so nothing is sent through it from this process. Use the gateway itself in "
    "this process (it is rebuilt fresh here on first use), not objects taken from it before "
    "the fork"
)
#: what every loop is told of a gateway whose own loop was closed under it
DEAD_LOOP = (
    "the event loop that opened this gateway was closed with the gateway still open "
    "(loop.close() with no aclose() before it, and no asyncio.run to close it on the way "
    "out): nothing can close it now, nor open it again. Build a new Gateway; close a gateway "
    "before its loop closes (`async with gate:`, or asyncio.run, which closes one left open)"
)
#: a thread id no thread has: the owner of a gateway that was open in the parent of a fork
_PARENTS = -1

_REFUSED_HERE = {
    "open": "the gateway is already open in this event loop: open it once (one `async with`)",
    "opening": "the gateway is still opening in this event loop: await the first start()",
    "closing": "the gateway is still closing in this event loop: open it once aclose() returns",
}


def current_loop() -> int:
    """The thread that runs this event loop (with :func:`_running`, which loop of it)."""
    return threading.get_ident()


#: the running asyncio loop of this thread, or None (trio, or no loop): one C call
_running = asyncio._get_running_loop


class Opened:
    """The open/close bookkeeping of one gateway; every transition under one lock."""

    __slots__ = (
        "__weakref__", "_closed", "_lock", "_opening", "_owner_loop", "at_exit", "auto", "loop",
        "phase",
    )

    def __init__(self, at_exit: Callable[[], None] | None = None) -> None:
        #: the gateway's method run at interpreter exit if it is still open then (its state
        #: file); held weakly: the registry of every gateway's bookkeeping keeps none alive
        self.at_exit = None if at_exit is None else weakref.WeakMethod(at_exit)
        self._lock = threading.Lock()
        self.phase: Phase = "closed"
        #: the thread of the loop holding the gateway (None when closed)
        self.loop: int | None = None
        #: that loop itself, when asyncio's (a thread may park one loop and run another)
        self._owner_loop: object = None
        #: set once the close under way has ended (made when it begins, in the owner's loop)
        self._closed: anyio.Event | None = None
        #: set once the open under way has ended, opened or not (made when it begins)
        self._opening: anyio.Event | None = None
        #: in a forked child, of a gateway open in the parent: the first awaited call of a
        #: loop opens it (gptgate/fork_rebuild.py); an explicit close ends that
        self.auto = False
        _ALL.add(self)

    def claim(self) -> None:
        """Start opening in this loop, or refuse: open (or opening, closing) elsewhere or
        already here."""
        here, running = current_loop(), _running()
        with self._lock:
            if self.phase == "closed":
                self.phase, self.loop, self._owner_loop = "opening", here, running
                self._opening = anyio.Event()
                return
            phase, loop, owner = self.phase, self.loop, self._owner_loop
        if phase == "forked":
            raise GateError(FORKED)
        if loop != here or owner is not running:
            raise GateError(_elsewhere(owner))
        raise GateError(_REFUSED_HERE[phase])

    def opened(self) -> None:
        with self._lock:
            self.phase = "open"
            opening, self._opening = self._opening, None
        if opening is not None:
            opening.set()

    def opening_here(self) -> bool:
        """The open under way is this loop's (another task of it started it)."""
        return self.loop == current_loop() and self._owner_loop is _running()

    async def wait_opened(self) -> None:
        """Return once the open another task of this loop began has ended."""
        opening = self._opening
        if opening is not None:
            await opening.wait()

    def begin_close(self, *, lost: bool = False) -> bool:
        """Start closing: False when there is nothing to close here (never opened, already
        closed or being closed by another task of this loop); a typed error from another loop,
        whose close would touch the owner's queues from the wrong thread. An explicit close
        (not ``lost``: the loop ending under it) ends a forked child's opening on first use."""
        here, running = current_loop(), _running()
        with self._lock:
            if self.phase == "forked":
                return False  # the parent's to close: nothing of it is touched here
            if self.loop is not None and (self.loop != here or self._owner_loop is not running):
                owner = self._owner_loop
                raise GateError(_elsewhere(owner, "; close it from the loop that opened it"))
            if not lost:
                self.auto = False
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
            if self.phase == "forked":
                return
            self.phase, self.loop, self._owner_loop = "closed", None, None
            closed, self._closed = self._closed, None
            opening, self._opening = self._opening, None
        for event in (closed, opening):
            if event is not None:
                event.set()

    def check_loop(self) -> None:
        """Refuse a call from another loop than the owner's (it would hang on foreign
        events, or write on the owner's connections): the hot path, so no lock — two
        attribute reads and a C call."""
        loop = self.loop
        if loop is not None and (loop != current_loop() or self._owner_loop is not _running()):
            raise GateError(FORKED if loop == _PARENTS else _elsewhere(self._owner_loop))

    def forked(self) -> None:
        """In the child of a fork: a gateway open (or opening, closing) in the parent stays
        the parent's — refused here, never closed here."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        if self.phase != "closed":
            self.phase, self.loop, self._owner_loop = "forked", _PARENTS, None
            self._closed = self._opening = None


def _elsewhere(owner: object, then: str = "") -> str:
    """Why a loop that is not the owner is refused: the owner still runs, or it was closed."""
    if isinstance(owner, asyncio.AbstractEventLoop) and owner.is_closed():
        return DEAD_LOOP
    return OTHER_LOOP + then


#: every gateway's bookkeeping, for the fork hook (weak: a gateway dropped is gone)
_ALL: weakref.WeakSet[Opened] = weakref.WeakSet()


def _forked_all() -> None:
    for opened in list(_ALL):
        opened.forked()


def _exiting() -> None:
    """Interpreter exit: what a gateway still open here saves on its way out."""
    for opened in list(_ALL):
        save = opened.at_exit() if opened.at_exit is not None else None
        if opened.phase == "open" and save is not None:
            with contextlib.suppress(Exception):  # at exit: nothing to tell anyone
                save()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_forked_all)
# registered before gptgate/sync.py's hook, so it runs after it (LIFO): a SyncGateway's
# gateway is closed (and saved) by then, and skipped here
atexit.register(_exiting)
