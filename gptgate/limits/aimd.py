"""``AIMDLimit``: the loss-based limit (additive increase, multiplicative decrease).

Netflix concurrency-limits' ``AIMDLimit``, itself TCP Reno's congestion avoidance: every
dropped call (a 429, an overload 503, a timeout) — or a success slower than ``timeout_s`` —
multiplies the limit by ``backoff_ratio``; every success while the application keeps at least
half the limit busy (``2·inflight ≥ L``) adds one. The half-limit rule stops the limit from
growing without bound while the application itself sends little: an idle limit proves
nothing about the backend.

It only reacts to loss, so on its own it fills the server's queue up to the point of
rejection; :class:`~gptgate.limits.llm.LLMLimit` adds the delay signal. It is here as the
simple, predictable baseline and for backends whose latency says nothing (e.g. a proxy that
queues internally).
"""

from __future__ import annotations

import math
from collections import deque

from .base import Sample

__all__ = ["AIMDLimit"]


class AIMDLimit:
    """Loss-based limit: ``floor(L·backoff)`` on a drop, ``L + 1`` on a busy success."""

    def __init__(
        self,
        initial: int = 4,
        min_limit: int = 1,
        max_limit: int = 64,
        backoff_ratio: float = 0.9,
        timeout_s: float | None = None,
        *,
        trace_size: int = 10_000,
    ) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError("need 1 <= min_limit <= max_limit")
        if not 0.0 < backoff_ratio < 1.0:
            raise ValueError("backoff_ratio must be in (0, 1)")
        self.min_limit = min_limit
        self.max_limit = max_limit
        self.backoff_ratio = backoff_ratio
        self.timeout_s = timeout_s
        self._low = min_limit
        self._high = max_limit
        self._limit = min(max(initial, min_limit), max_limit)
        #: ``(now, limit)`` at every change
        self.trace: deque[tuple[float, int]] = deque(maxlen=trace_size)

    @property
    def limit(self) -> int:
        return self._limit

    def set_window(self, low: int | None, high: int | None = None) -> None:
        """Clamp to a scenario's concurrency window; ``None`` on a side lifts it."""
        lo = self.min_limit if low is None else min(max(self.min_limit, low), self.max_limit)
        hi = self.max_limit if high is None else max(min(self.max_limit, high), self.min_limit)
        if lo > hi:
            raise ValueError("window low must be <= high")
        self._low, self._high = lo, hi
        self._limit = min(max(self._limit, lo), hi)

    def update(self, sample: Sample, now: float) -> None:
        if sample.kind == "ignored" or (sample.kind == "dropped" and not sample.congestion):
            return  # a server failure is no loss signal: AIMD backs off on congestion only
        limit = self._limit
        if sample.kind == "dropped" or (
            self.timeout_s is not None and sample.latency_s > self.timeout_s
        ):
            limit = max(self._low, math.floor(limit * self.backoff_ratio))
        elif 2 * sample.inflight >= limit:
            limit = min(self._high, limit + 1)
        if limit != self._limit:
            self._limit = limit
            self.trace.append((now, limit))

    def __repr__(self) -> str:
        return f"AIMDLimit(limit={self._limit}, backoff={self.backoff_ratio})"
