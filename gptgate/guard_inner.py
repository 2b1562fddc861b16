"""``gate.chat``, ``gate.stream`` and ``gate.map`` awaited inside a guarded try: one call, one
permit.

An attempt of such a call routed to the backend whose permit the running guarded try holds
took a permit of its own there. On ``concurrency=1`` it waited for the permit its own guard
held — the queue's stall bound (196 s), then ``OverloadedError``; a body migrated from the SDK
to ``gate.chat`` under its existing guard deadlocked. An SDK request of the body on that
backend runs under the guard's permit, one at a time (its *seat*, gptgate/guard_seat.py); the
gateway's own attempts now do the same: the seat, or a permit of their own, whichever comes
first — never a wait on itself, never past the limit. A duplicate of a hedged attempt there
borrows no permit past the limit (it would be a second request under one permit). An attempt
routed to another backend takes that backend's permit as before. What escapes the inner call
has been retried and counted by its own policy: the guard settles it (gptgate/guard_nested.py)
instead of trying its whole body again (3 × 3 tries).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from .clock import Clock
from .guard import _GUARD_PERMIT, GuardedCall
from .guard_nested import settle
from .hedge_permit import hedge_permit
from .limits import Limiter, Permit, SampleKind
from .results import Usage

__all__ = ["SeatPermit", "inner_permit", "settle_inner", "under_guard"]

T = TypeVar("T")


class SeatPermit(Permit):
    """The guard's permit as one inner attempt holds it (its seat): ending it frees the seat
    and tells the guard what the attempt taught (the guard samples its own permit once)."""

    __slots__ = ("_call",)

    def __init__(self, call: GuardedCall) -> None:
        outer = call.permit
        super().__init__(call.limiter, outer.start, outer.inflight)
        self._call = call

    def _finish(
        self,
        kind: SampleKind,
        latency_s: float,
        ttft_s: float | None,
        input_tokens: int,
        output_tokens: int,
        congestion: bool = True,
        rate_limited: bool = False,
        abandoned: bool = False,
    ) -> None:
        if self.done:
            return
        self._done = True
        call = self._call
        if kind != "ignored" or abandoned:  # sent: counted on its own wire, not again
            call.wire_attempts += 1
        if kind == "ok":
            usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
            call.answered(usage, ttft_s, generative=True)
        call.seat.free()


async def inner_permit(
    limiter: Limiter,
    lent_from: float | None,
    clock: Clock,
    *,
    priority: int,
    deadline: float | None,
    tag: object,
    stall_s: float | None,
) -> Permit:
    """A permit for an attempt routed to ``limiter``: the running guard's seat when it holds
    that limiter's permit (or a permit of its own, whichever comes first, never one lent past
    the limit), else :func:`~gptgate.hedge_permit.hedge_permit`'s.

    Inside a guarded try the guard is told where the attempt went, as of its body's SDK
    requests: its wire books the answer, so the guard books none of what its body returns
    (a ``ChatResult`` carries usage), and an answer from another backend is that backend's."""

    async def acquire(lend: bool) -> Permit:
        return await hedge_permit(
            limiter, lent_from if lend else None, clock,
            priority=priority, deadline=deadline, tag=tag, stall_s=stall_s,
        )

    outer = _GUARD_PERMIT.get()
    if outer is None or not outer.running:
        return await acquire(True)
    own: Permit | None
    if outer.limiter is limiter:
        own = await outer.seat.take_or(lambda: acquire(False))
        if own is None:
            return SeatPermit(outer)
    else:
        own = await acquire(True)
    if own.limiter is outer.limiter:
        outer.wire_attempts += 1  # on the guard's backend, on a permit of its own
    else:
        outer.elsewhere.append(own.limiter.name)
    return own


def settle_inner(error: BaseException) -> None:
    """A call of the gateway's ended in ``error`` inside a guarded try: its own retries and
    failure counts are done, the guard's are not to add to them."""
    settle(_GUARD_PERMIT.get(), error)


def under_guard(
    call: GuardedCall | None, verb: Callable[[], Awaitable[T]]
) -> Callable[[], Awaitable[T]]:
    """``verb`` to run as a task of the sync gateway's loop for a caller's thread inside a
    sync guarded try (``call``): the task is inside that try, as the thread is."""
    if call is None:
        return verb

    async def inside() -> T:
        _GUARD_PERMIT.set(call)  # this task's own context
        return await verb()

    return inside
