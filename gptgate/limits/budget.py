"""``RetryBudget``: retries at most a fraction of requests, plus a small floor per second.

Retrying every failure multiplies load exactly when the backend can least take it (a retry
storm). A budget caps retries *in aggregate*: over any sliding ``window_s``,

    retries ≤ ratio × first attempts + min_retries_per_s × window_s

(Finagle's RetryBudget: 20% + 10/s over 10 s; Google SRE: retries < 10% of requests). The
floor lets a low-traffic client still retry its rare failures. When the budget is spent,
:meth:`try_spend` says no and the caller fails fast with the original error.

The window is a ring of ``buckets`` time buckets holding (requests, retries) with running
sums, so every call is O(1) amortised and memory is fixed. A request funds retries only while
its bucket is in the window, and a retry counts against every window it is in; hence over any
run of length ``T``, ``retries ≤ ratio·requests + min_retries_per_s·window_s·⌈(T + b)/window_s⌉``
where ``b = window_s/buckets`` (the run cut into window-aligned blocks, each of which a window
covers exactly).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RetryBudget", "RetryBudgetStatistics"]


@dataclass(frozen=True, slots=True)
class RetryBudgetStatistics:
    requests: int  # first attempts in the window
    retries: int  # retries spent in the window
    available: int  # retries that may be spent now
    denied: int  # try_spend() calls refused since creation


class RetryBudget:
    """Sliding-window budget: ``record_request`` per first attempt, ``try_spend`` per retry."""

    def __init__(
        self,
        ratio: float = 0.1,
        min_retries_per_s: float = 1.0,
        window_s: float = 10.0,
        *,
        buckets: int = 10,
    ) -> None:
        if ratio < 0.0:
            raise ValueError("ratio must be >= 0")
        if min_retries_per_s < 0.0:
            raise ValueError("min_retries_per_s must be >= 0")
        if window_s <= 0.0:
            raise ValueError("window_s must be > 0")
        if buckets < 1:
            raise ValueError("buckets must be >= 1")
        self.ratio = ratio
        self.min_retries_per_s = min_retries_per_s
        self.window_s = window_s
        self._width = window_s / buckets
        self._requests = [0] * buckets
        self._retries = [0] * buckets
        self._sum_requests = 0
        self._sum_retries = 0
        self._epoch: int | None = None  # index (in bucket widths since 0) of the newest bucket
        self._denied = 0

    def record_request(self, now: float) -> None:
        """Count one first attempt (it funds ``ratio`` of a retry while in the window)."""
        i = self._advance(now)
        self._requests[i] += 1
        self._sum_requests += 1

    def try_spend(self, now: float) -> bool:
        """Take one retry from the budget; False when it is spent (fail fast instead)."""
        i = self._advance(now)
        if self._available() < 1.0:
            self._denied += 1
            return False
        self._retries[i] += 1
        self._sum_retries += 1
        return True

    def available(self, now: float) -> int:
        """Retries that may be spent right now."""
        self._advance(now)
        return max(0, math.floor(self._available()))

    def statistics(self, now: float) -> RetryBudgetStatistics:
        self._advance(now)
        return RetryBudgetStatistics(
            requests=self._sum_requests,
            retries=self._sum_retries,
            available=max(0, math.floor(self._available())),
            denied=self._denied,
        )

    def _available(self) -> float:
        allowance = self.ratio * self._sum_requests + self.min_retries_per_s * self.window_s
        # a hair of tolerance so that e.g. 0.1 × 10 requests funds exactly one retry
        return allowance - self._sum_retries + 1e-9

    def _advance(self, now: float) -> int:
        """Rotate out buckets older than the window; return the index of ``now``'s bucket."""
        epoch = math.floor(now / self._width)
        n = len(self._requests)
        if self._epoch is None:
            self._epoch = epoch
        elif epoch > self._epoch:
            if epoch - self._epoch >= n:
                self._requests = [0] * n
                self._retries = [0] * n
                self._sum_requests = self._sum_retries = 0
            else:
                for e in range(self._epoch + 1, epoch + 1):
                    j = e % n
                    self._sum_requests -= self._requests[j]
                    self._sum_retries -= self._retries[j]
                    self._requests[j] = self._retries[j] = 0
            self._epoch = epoch
        # a reading older than the newest bucket (clocks of concurrent callers) lands there
        return self._epoch % n

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self.ratio}, min_retries_per_s={self.min_retries_per_s}, "
            f"window_s={self.window_s})"
        )
