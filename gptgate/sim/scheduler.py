"""One replica's continuous-batching slots and its FIFO admission queue.

At most ``slots`` sequences run; later arrivals wait in order, up to ``max_queue`` of them
(``None`` = without limit, like llama-server), and beyond that are refused. A finished
sequence hands its slot straight to the head of the queue, so there is no thundering herd
and no per-token wake-up: the only awaits are one per queued request.

Cancellation is safe at every point: a waiter cancelled before its turn leaves the queue; one
cancelled just after it was granted a slot passes the slot on.
"""

from __future__ import annotations

from collections import deque

import anyio

from gptgate.sim.cache import KVPrefixCache, PrefixCache

__all__ = ["QueueFull", "Replica"]


class QueueFull(Exception):
    """The replica's queue is at ``max_queue``: the request is refused (429 or 503)."""


class _Waiter:
    __slots__ = ("cancelled", "event", "granted")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False
        self.cancelled = False


class Replica:
    """Slots, queue and prefix cache of one serving replica."""

    __slots__ = ("_waiting", "active", "cache", "index", "max_queue", "queued", "slots")

    def __init__(
        self,
        index: int,
        slots: int,
        max_queue: int | None,
        cache: PrefixCache | KVPrefixCache,
    ) -> None:
        self.index = index
        self.slots = slots
        self.max_queue = max_queue
        self.cache = cache
        self.active = 0
        self.queued = 0
        self._waiting: deque[_Waiter] = deque()

    @property
    def refuses(self) -> bool:
        """Would :meth:`acquire` raise :class:`QueueFull` now?"""
        if self.active < self.slots and not self.queued:
            return False
        return self.max_queue is not None and self.queued >= self.max_queue

    async def acquire(self) -> None:
        """Take a slot, waiting in FIFO order; raises :class:`QueueFull` when refused."""
        if self.active < self.slots and not self.queued:
            self.active += 1
            return
        if self.refuses:
            raise QueueFull
        waiter = _Waiter()
        self._waiting.append(waiter)
        self.queued += 1
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release()
            else:
                waiter.cancelled = True
                self.queued -= 1
            raise

    def release(self) -> None:
        """Give a slot back (exactly once per successful :meth:`acquire`)."""
        self.active -= 1
        self._dispatch()

    def resize(self, slots: int) -> None:
        """Change the slot count; running sequences above a smaller count finish normally."""
        self.slots = max(1, slots)
        self._dispatch()

    def _dispatch(self) -> None:
        waiting = self._waiting
        while self.active < self.slots and waiting:
            waiter = waiting.popleft()
            if waiter.cancelled:
                continue
            waiter.granted = True
            self.queued -= 1
            self.active += 1
            waiter.event.set()
