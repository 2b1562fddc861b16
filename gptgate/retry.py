"""Retries: tenacity strategy objects, full-jitter back-off, retry-after, a budget, a deadline.

The happy path never touches tenacity (its machinery costs ~60 µs a call): the first attempt
runs directly, and only a retryable failure enters ``AsyncRetrying``, seeded with that failure
as its attempt 1, so every decision — retry or not, how long to wait, when to stop — is made by
the composed strategies below.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from .clock import Clock
from .errors import GateError
from .shed import Refusals

__all__ = ["Failover", "RetryPolicy", "SpendsRetries"]

T = TypeVar("T")


class SpendsRetries(Protocol):
    """A retry budget (see ``gptgate.limits.budget``): may this retry be spent now?"""

    def try_spend(self, now: float) -> bool: ...


def _error(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None


class retry_if_retryable(retry_base):
    """Retry what :meth:`RetryPolicy.retryable` allows."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy

    def __call__(self, retry_state: RetryCallState) -> bool:
        exc = _error(retry_state)
        return isinstance(exc, GateError) and self.policy.retryable(exc)


#: says whether a retry after this error is a *failover*: the call leaves a backend that
#: never got the request or whose circuit is open, for a healthy one — free of the retry
#: budget and of back-off (nothing is piled onto a struggling backend)
Failover = Callable[[GateError], bool]


def _is_failover(failover: Failover | None, exc: BaseException | None) -> bool:
    return failover is not None and isinstance(exc, GateError) and failover(exc)


class wait_full_jitter_or_retry_after(wait_base):
    """Wait :meth:`RetryPolicy.backoff` before the next attempt (nothing before a failover)."""

    def __init__(
        self,
        policy: RetryPolicy,
        deadline: float | None,
        failover: Failover | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self.policy = policy
        self.deadline = deadline
        self.failover = failover
        self.refusals = refusals

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = _error(retry_state)
        if _is_failover(self.failover, exc):
            return 0.0
        retry_after = exc.retry_after if isinstance(exc, GateError) else None
        number = retry_state.attempt_number
        if self.refusals is not None:
            number = self.refusals.attempt_number(number)
        return self.policy.backoff(number, retry_after, self.deadline)


class stop_after_counted_attempts(stop_base):
    """``stop_after_attempt`` over the attempts that count: a refusal requeued for free (see
    ``gptgate.shed``) is none; one out of time stops."""

    def __init__(self, attempts: int, refusals: Refusals) -> None:
        self.attempts = attempts
        self.refusals = refusals

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.refusals.stop(self.attempts)


class stop_at_deadline(stop_base):
    """Stop when the deadline leaves no time for another attempt (or its retry-after)."""

    def __init__(self, clock: Clock, deadline: float | None) -> None:
        self.clock = clock
        self.deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        if self.deadline is None:
            return False
        exc = _error(retry_state)
        retry_after = exc.retry_after if isinstance(exc, GateError) else None
        return self.clock.now() + (retry_after or 0.0) >= self.deadline


class stop_when_budget_spent(stop_base):
    """Spend one token of the retry budget; stop (fail fast) when there is none. A failover
    spends nothing."""

    def __init__(
        self,
        budget: SpendsRetries,
        clock: Clock,
        failover: Failover | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self.budget = budget
        self.clock = clock
        self.failover = failover
        self.refusals = refusals

    def __call__(self, retry_state: RetryCallState) -> bool:
        if _is_failover(self.failover, _error(retry_state)):
            return False
        if self.refusals is not None and self.refusals.free:
            return False  # a refusal requeued: no retry storm to stop (gptgate.shed)
        return not self.budget.try_spend(self.clock.now())


class RetryPolicy:
    """How a gateway retries: attempts, back-off, retry-after cap, optional budget."""

    def __init__(
        self,
        *,
        max_attempts: int,
        backoff_base_s: float,
        backoff_cap_s: float,
        max_retry_after_s: float,
        clock: Clock,
        seed: int | None = None,
    ) -> None:
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.max_retry_after_s = max_retry_after_s
        self.clock = clock
        self.rng = random.Random(seed)

    def retryable(self, error: GateError) -> bool:
        """A ``GateError`` whose class (or the server's ``x-should-retry``) says trying again
        may help, unless the server asks us to wait longer than we are willing to."""
        if not error.retryable:
            return False
        return error.retry_after is None or error.retry_after <= self.max_retry_after_s

    def backoff(
        self, attempt_number: int, retry_after: float | None, deadline: float | None
    ) -> float:
        """``U(0, min(cap, base·2ⁿ))`` (AWS full jitter), but never less than the server's
        retry-after, and never past the call's deadline."""
        # the exponent capped: a call requeued past a thousand refusals overflowed the float
        window = min(self.backoff_cap_s, self.backoff_base_s * 2 ** min(attempt_number - 1, 64))
        wait = self.rng.uniform(0.0, window)
        if retry_after is not None:
            wait = max(wait, retry_after)
        if deadline is not None:
            wait = max(0.0, min(wait, deadline - self.clock.now()))
        return wait

    async def run(
        self,
        attempt: Callable[[int], Awaitable[T]],
        *,
        deadline: float | None = None,
        budget: SpendsRetries | None = None,
        max_attempts: int | None = None,
        on_retry: Callable[[BaseException, float], None] | None = None,
        failover: Failover | None = None,
        refusals: Refusals | None = None,
    ) -> T:
        """Run ``attempt(n)`` for n = 1, 2, … until it returns, or the last error is raised.
        ``failover(error)`` marks retries that move off a dead backend (see :data:`Failover`);
        with ``refusals``, a server's refusals are requeued outside ``max_attempts`` and the
        budget (``gptgate.shed``)."""
        try:
            return await attempt(1)
        except GateError as first:
            if not self._retry_possible(first, max_attempts):
                raise
            first_error: GateError = first

        attempts = max_attempts or self.max_attempts
        counted = (
            stop_after_attempt(attempts) if refusals is None
            else stop_after_counted_attempts(attempts, refusals)
        )
        stop = counted | stop_at_deadline(self.clock, deadline)
        if budget is not None:
            stop = stop | stop_when_budget_spent(budget, self.clock, failover, refusals)
        calls = 0

        async def replay_then_attempt() -> T:
            nonlocal calls
            calls += 1
            try:
                if calls == 1:
                    raise first_error  # tenacity sees the first attempt's failure as attempt 1
                return await attempt(calls)
            except GateError as error:
                if refusals is not None:
                    refusals.note(error)
                raise

        async def before_sleep(state: RetryCallState) -> None:
            exc = _error(state)
            if on_retry is not None and exc is not None:
                on_retry(exc, state.upcoming_sleep)

        retrying = AsyncRetrying(
            sleep=self.clock.sleep,
            stop=stop,
            wait=wait_full_jitter_or_retry_after(self, deadline, failover, refusals),
            retry=retry_if_retryable(self),
            before_sleep=before_sleep,
            reraise=True,
        )
        return await retrying(replay_then_attempt)

    def _retry_possible(self, error: GateError, max_attempts: int | None) -> bool:
        """A second attempt may follow: retries are on, or the call moved past a backend
        that can never serve it (``GateError.moved``: no retry, so ``max_attempts=1`` too)."""
        return ((max_attempts or self.max_attempts) > 1 or error.moved) and self.retryable(error)
