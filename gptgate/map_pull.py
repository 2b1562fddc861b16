"""How ``gate.map`` pulls its items: the deadline each one carries, and the slot it takes.

An item's deadline runs from the moment the job pulls it, as a clock reading carried with it
(a batched one waits to be flushed, a pulled one waits for its task to be run: both count).
Counted from the item's own task instead, it started as many event-loop iterations late as
the loop took to run that task — and ``map`` used to yield an iteration per item pulled — so
on a busy loop (the chaos suite's closing burst) the fifth item of a ``map`` was shed at its
deadline *plus* half a dozen iterations after its caller's (tests/test_map_deadline.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import anyio

from .clock import Clock

__all__ = ["stamp_deadline", "take_slot", "time_left_real"]


async def take_slot(slots: anyio.Semaphore) -> None:
    """A slot of the job's look-ahead: at once while one is free (``Semaphore.acquire`` yields
    an iteration even then), else wait for one (a yield that lets the running items go on)."""
    try:
        slots.acquire_nowait()
    except anyio.WouldBlock:
        await slots.acquire()


def stamp_deadline(
    kwargs: Mapping[str, Any], key: str, deadline_s: float | None, clock: Clock
) -> dict[str, Any]:
    """``kwargs`` carrying its absolute deadline under ``key``: ``deadline_s`` from now, or
    the one it already carries (stamped when ``map`` pulled it). None: no deadline applies."""
    if key in kwargs or deadline_s is None:
        return dict(kwargs)
    return {**kwargs, key: clock.now() + deadline_s}


def time_left_real(deadline: float | None, clock: Clock) -> float:
    """Real seconds until ``deadline`` (a clock reading; inf without one, 0 once passed)."""
    if deadline is None:
        return math.inf
    return clock.to_real(max(0.0, deadline - clock.now()))
