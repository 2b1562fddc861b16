"""Refusals: what a server sheds before doing any work is requeued, not failed.

A 429, or a 503/529 carrying the server's ``retry-after``, with nothing billed and no token
produced, says "not now — come back then": a bounded queue or a rate limit shedding load. The
server did no work for it, so sending it again later multiplies no load the way retrying a
real failure does. It is therefore no failed *attempt*: the call waits the server's
retry-after (never less; a full-jitter back-off over its own refusals on top, so one call
cannot hammer a server that keeps refusing) and goes back through the limiter, without
spending the retry budget or one of ``max_attempts`` — until its deadline, or without one, for
the call's no-hang bound (``gate.default_deadline_s``) after its first refusal. A refusal
whose retry-after reaches past that ends the call with it (typed:
:class:`~gptgate.errors.RateLimitedError`, or :class:`~gptgate.errors.BackendError` with its
503/529 status and retry-after).

This is gRPC's rule for RPCs the server application never saw (transparent retries: not
counted against ``maxAttempts`` nor the retry throttle) applied to HTTP load shedding, with the
server's pushback as the delay. What bounds the load of requeued calls is not the budget but
the limit and the pause: a refusal pauses the whole backend until its retry-after (as a 429
always did, ``gptgate.outcomes.count_failure``; a full queue's 503/529 only until a place is
expected to free: gptgate/shed_pause.py), so during a storm of refusals at most the calls
admitted at one instant are sent per retry-after, and an adaptive limit takes each refusal as
a loss. The retry budget keeps its job: a storm of real failures (a 5xx without retry-after, a
timeout, a reset) still fails fast once it is spent (issue 31: the budget's 10% had failed 155
of 400 calls a bounded queue refused on the server family's draw 3, while every plain client
completed them).
"""

from __future__ import annotations

from .clock import Clock
from .errors import GateError

__all__ = ["SHED_STATUSES", "Refusals", "is_shed"]

#: statuses with which a server sheds load before doing any work (with a retry-after)
SHED_STATUSES = frozenset({429, 503, 529})


def is_shed(error: BaseException) -> bool:
    """A refusal before any work: a retryable 429/503/529 with the server's retry-after,
    nothing billed, no token produced."""
    return (
        isinstance(error, GateError)
        and error.retryable
        and error.status in SHED_STATUSES
        and error.retry_after is not None
        and error.retry_after > 0
        and not error.billed
        and error.output_tokens == 0
    )


class Refusals:
    """One call's failed attempts, split into refusals requeued for free and attempts that
    count (against ``max_attempts`` and the retry budget)."""

    __slots__ = ("_bound_s", "_clock", "_until", "counted", "expired", "free", "refused")

    def __init__(self, clock: Clock, deadline: float | None, bound_s: float | None) -> None:
        self._clock = clock
        self._bound_s = bound_s
        #: requeued for free until here (the deadline, else set at the first refusal)
        self._until = deadline
        #: failed attempts that count against max_attempts and the retry budget
        self.counted = 0
        #: refusals so far (free or not): the exponent of the call's own back-off
        self.refused = 0
        #: the last failure was a refusal requeued for free
        self.free = False
        #: the last failure was a refusal with no time left to requeue it: the call ends
        self.expired = False

    def note(self, error: BaseException) -> None:
        """Classify one failed attempt (exactly once per attempt). Without a deadline or a
        bound, a refusal counts as an attempt: nothing may be requeued without an end."""
        self.free = False
        if isinstance(error, GateError) and error.moved:
            return  # routed past a backend that can never serve it: no attempt of the call's
        if is_shed(error):
            assert isinstance(error, GateError) and error.retry_after is not None
            now = self._clock.now()
            if self._until is None and self._bound_s is not None:
                self._until = now + self._bound_s
            if self._until is not None:
                self.refused += 1
                self.free = now + error.retry_after < self._until
                self.expired = not self.free
                return
        self.counted += 1

    def stop(self, max_attempts: int) -> bool:
        """No further attempt: a refusal out of time, or ``max_attempts`` counted failures."""
        return self.expired or (not self.free and self.counted >= max_attempts)

    def attempt_number(self, sent: int) -> int:
        """The back-off exponent of the next wait: the call's refusals after a free one, else
        its counted attempts (``sent`` when nothing was classified)."""
        if self.free:
            return self.refused
        return self.counted or sent
