"""The guard's permit covers one request of its body at a time.

A guarded body's request through ``gate.http_client`` on the guard's backend runs under the
guard's permit (one call, one permit: never a wait on itself). A body that sends several at
once (``asyncio.gather`` of SDK calls) used to run them all under that one permit: on
``concurrency=1`` with ``shared=``, three at the server for a fleet limit of one. The permit is
now a *seat* one request holds from its send to its body's end; a request sent while the seat
is taken races for either — the seat when its holder ends, or a permit of its own from the
limiter — and takes whichever comes first, so a body on a limit of one never waits on its own
permit, and one on a wider limit still sends its requests together where there is room.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import anyio

__all__ = ["Seat"]

T = TypeVar("T")


class SeatHolder(Protocol):
    """The request holding a seat, as gptgate/guard_self_wait.py asks about it."""

    def left_by_this_task(self) -> bool:
        """Its body is open, unread, and this task opened or last read it."""
        ...

    def whole(self) -> bool:
        """Its answer arrived whole (the stream's end marker), its body still open."""
        ...

    async def end_whole(self) -> None:
        """Close a whole answer's body as read to its end (the seat is freed)."""
        ...


class _Waiter:
    __slots__ = ("scope", "seated")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        #: the seat was handed to this waiter (its admission is cancelled, if still waiting)
        self.seated = False


class Seat:
    """One guarded try's permit, as its body's requests hold it: one at a time."""

    __slots__ = ("_taken", "_waiters", "holder")

    def __init__(self) -> None:
        self._taken = False
        self._waiters: deque[_Waiter] = deque()
        #: the request holding the seat, once its body is open (a wait on it by the task
        #: that must read it is a wait on itself: gptgate/guard_self_wait.py)
        self.holder: SeatHolder | None = None

    @property
    def taken(self) -> bool:
        return self._taken

    def free(self) -> None:
        """The request holding the seat ended: the longest waiter gets it, else it is free."""
        self.holder = None
        if not self._waiters:
            self._taken = False
            return
        waiter = self._waiters.popleft()
        waiter.seated = True
        waiter.scope.cancel()  # its own admission, if it still waits, is given up

    async def take_or(self, admit: Callable[[], Awaitable[T]]) -> T | None:
        """None: the seat is this request's (free it when the request ends). Else what
        ``admit`` returned — a permit of its own won the race, the seat is not its."""
        if not self._taken:
            self._taken = True
            return None
        waiter = _Waiter()
        self._waiters.append(waiter)
        admitted = False
        try:
            with waiter.scope:
                result = await admit()
                admitted = True
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            if waiter.seated and (admitted or not waiter.scope.cancelled_caught):
                self.free()  # admitted (or failing) all the same: the seat goes on
        if admitted:
            return result
        return None  # cancelled by ``free``: seated
