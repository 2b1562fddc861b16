"""``GradientLimit``: the delay-based limit (Netflix Gradient2), for LLM latencies.

Gradient2 compares a short-term latency with a long-term baseline::

    g = clamp(tolerance · long / short, 0.5, 1)
    L ← (1 − smoothing)·L + smoothing·(g·L + queue_size)

When latency stays within ``tolerance`` of its baseline, ``g = 1`` and the limit grows by
``smoothing·queue_size`` per update (the ``queue_size`` headroom lets it probe); when latency
inflates, the limit shrinks towards ``g·L``, never by more than half per update (outliers).
The baseline is an EWMA over ``long_window`` samples; when it is more than twice the short
latency (load went away after a long overload) it decays 5% per update so the limit is not
held down by the past.

Adapted to LLM calls in two ways:

* **Latency per output token.** The latency fed in is the reference-call latency of
  :class:`~gptgate.limits.normalise.LatencyNormaliser` (``ttft + (K − 1)·tpot``), so a long
  answer at unchanged decode speed is not congestion. Short and long latencies are kept as
  ``(a, b)`` pairs and priced at the same, current ``K`` when compared.
* **Windows by sample count.** The short latency is the mean over ``window_samples`` calls,
  not over a second: at seconds per call a 1-second window holds nothing (REFERENCES,
  "Windowing"). The long window is counted in samples too.

A dropped call is the strongest delay signal there is: it counts as ``g = 0.5`` for its window.
No growth while the application keeps less than half the limit in flight.
"""

from __future__ import annotations

import math
from collections import deque

from .base import Sample
from .normalise import LatencyNormaliser

__all__ = ["GradientLimit"]


class GradientLimit:
    """Gradient2 over per-token-normalised latency, windowed by sample count."""

    def __init__(
        self,
        initial: int = 4,
        min_limit: int = 1,
        max_limit: int = 64,
        *,
        smoothing: float = 0.2,
        tolerance: float = 1.5,
        long_window: int = 600,
        window_samples: int = 10,
        queue_size: int = 4,
        timeout_s: float | None = None,
        overhead_tokens: float = 20.0,
        trace_size: int = 10_000,
    ) -> None:
        if not 1 <= min_limit <= max_limit:
            raise ValueError("need 1 <= min_limit <= max_limit")
        if not 0.0 < smoothing <= 1.0:
            raise ValueError("smoothing must be in (0, 1]")
        if tolerance < 1.0:
            raise ValueError("tolerance must be >= 1")
        if long_window < 1 or window_samples < 1:
            raise ValueError("windows must hold at least one sample")
        self.min_limit = min_limit
        self.max_limit = max_limit
        self.smoothing = smoothing
        self.tolerance = tolerance
        self.long_window = long_window
        self.window_samples = window_samples
        self.queue_size = queue_size
        self.timeout_s = timeout_s
        self._norm = LatencyNormaliser(overhead_tokens)
        self._low = min_limit
        self._high = max_limit
        self._estimate = float(min(max(initial, min_limit), max_limit))
        self._long: tuple[float, float] | None = None  # (a, b): R(K) = a + K·b
        self._long_samples = 0
        self._n = 0
        self._sum_a = 0.0
        self._sum_b = 0.0
        self._max_inflight = 0
        self._dropped = False
        self._last_short = math.nan
        #: ``(now, limit)`` at every change
        self.trace: deque[tuple[float, int]] = deque(maxlen=trace_size)

    @property
    def limit(self) -> int:
        return min(max(int(self._estimate), self._low), self._high)

    @property
    def estimate(self) -> float:
        """The un-rounded limit."""
        return self._estimate

    @property
    def long_latency(self) -> float:
        """The baseline (normalised seconds); NaN before the first window."""
        return math.nan if self._long is None else self._price(*self._long)

    @property
    def short_latency(self) -> float:
        """The last window's mean normalised latency; NaN before the first window."""
        return self._last_short

    def set_window(self, low: int | None, high: int | None = None) -> None:
        """Clamp to a scenario's concurrency window; ``None`` on a side lifts it."""
        lo = self.min_limit if low is None else min(max(self.min_limit, low), self.max_limit)
        hi = self.max_limit if high is None else max(min(self.max_limit, high), self.min_limit)
        if lo > hi:
            raise ValueError("window low must be <= high")
        self._low, self._high = lo, hi
        self._estimate = min(max(self._estimate, float(lo)), float(hi))

    def update(self, sample: Sample, now: float) -> None:
        if sample.kind == "ignored" or (sample.kind == "dropped" and not sample.congestion):
            return  # a server failure says nothing about the delay, nor about congestion
        self._max_inflight = max(self._max_inflight, sample.inflight)
        if sample.kind == "dropped" or (
            self.timeout_s is not None and sample.latency_s > self.timeout_s
        ):
            self._dropped = True
        else:
            a, b = self._norm.split(sample)
            self._n += 1
            self._sum_a += a
            self._sum_b += b
        if self._n + self._dropped >= self.window_samples:
            self._close_window(now)

    def _close_window(self, now: float) -> None:
        before = self.limit
        if self._n:
            a, b = self._sum_a / self._n, self._sum_b / self._n
            short = self._price(a, b)
            self._last_short = short
            long_ab = self._update_long(a, b, self._n)
            long = self._price(*long_ab)
            if long / short > 2.0:
                self._long = (long_ab[0] * 0.95, long_ab[1] * 0.95)
            gradient = max(0.5, min(1.0, self.tolerance * long / short))
        else:
            gradient = 1.0
        if self._dropped:
            gradient = 0.5
        target = gradient * self._estimate + self.queue_size
        estimate = (1.0 - self.smoothing) * self._estimate + self.smoothing * target
        if 2 * self._max_inflight < self._estimate:
            estimate = min(estimate, self._estimate)  # app-limited: no growth
        self._estimate = min(max(estimate, float(self._low)), float(self._high))
        self._n = 0
        self._sum_a = 0.0
        self._sum_b = 0.0
        self._max_inflight = 0
        self._dropped = False
        if self.limit != before:
            self.trace.append((now, self.limit))

    def _update_long(self, a: float, b: float, n: int) -> tuple[float, float]:
        # cumulative mean while warming up, then an EWMA over ~long_window samples
        self._long_samples += n
        if self._long is None:
            self._long = (a, b)
        else:
            alpha = max(n / self._long_samples, min(1.0, 2.0 * n / (self.long_window + 1)))
            la, lb = self._long
            self._long = (la + alpha * (a - la), lb + alpha * (b - lb))
        return self._long

    def _price(self, a: float, b: float) -> float:
        return max(a + self._norm.reference_tokens * b, 1e-12)

    def __repr__(self) -> str:
        return f"GradientLimit(limit={self.limit}, long={self.long_latency:.3g}s)"
