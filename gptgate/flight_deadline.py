"""Each single-flight caller keeps its own deadline (``gg.ResponseCache``).

Identical requests in flight at once share one call, but each caller chose its own
``timeout=``. Without this a follower with ``timeout=600`` got the error of a leader with
``timeout=0.5`` (its deadline cut the shared call), a follower with ``timeout=0.5`` waited as
long as a leader with ``timeout=600`` took, and a follower taking over from a cancelled leader
started a fresh deadline of its own. Now a follower waits only as long as its deadline allows,
sends with what is left of it, and takes over from a leader that ran out of its own time when it
has more time left than the leader had in all (with less, it would fail the same way: it gets
the leader's error, so followers with the same timeout do not send one doomed call each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from .errors import GateError, OverloadedError, RequestTimeout

if TYPE_CHECKING:
    from .clock import Clock

__all__ = ["CallerDeadline", "ran_out_of_its_own_time"]


def ran_out_of_its_own_time(error: BaseException) -> bool:
    """Did the call fail on its caller's deadline (a timeout of the call's, a stream cut at it,
    a call shed before it could be admitted in time) rather than on the backend's answer?"""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OverloadedError):
            return True
        if isinstance(seen, RequestTimeout) and seen.deadline:
            return True
        seen = seen.__cause__
    return False


class CallerDeadline:
    """One caller's time, counted from when it asked (``budget_s`` None: the gateway's default
    bound, which each call counts afresh)."""

    __slots__ = ("budget_s", "clock", "start")

    def __init__(self, clock: Clock, budget_s: float | None) -> None:
        self.clock = clock
        self.budget_s = budget_s
        self.start = clock.now()

    def left(self) -> float | None:
        """The seconds left (None: no deadline of its own); a ``RequestTimeout`` once none are."""
        if self.budget_s is None:
            return None
        left = self.budget_s - (self.clock.now() - self.start)
        if left <= 0:
            raise self._passed()
        return left

    async def wait(self, done: anyio.Event) -> None:
        """Wait for an identical call's end, at most until this caller's deadline."""
        left = self.left()
        if left is None:
            await done.wait()
            return
        with anyio.move_on_after(self.clock.to_real(left)):
            await done.wait()
        if not done.is_set():
            raise self._passed()

    def outlasts(self, leader_budget_s: float | None, error: GateError) -> bool:
        """Should this follower send the call itself after the leader failed with ``error``?
        Only when the leader ran out of an explicit deadline shorter than what is left here."""
        if leader_budget_s is None or not ran_out_of_its_own_time(error):
            return False
        left = self.left()
        return left is None or left > leader_budget_s

    def _passed(self) -> RequestTimeout:
        return RequestTimeout(
            "call deadline passed waiting for an identical call in flight", deadline=True
        )
