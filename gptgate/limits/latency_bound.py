"""``LatencyBound``: a ceiling that keeps the adaptive limit's calls inside their timeout.

Every attempt is cut at its backend's ``timeout``. On a server whose slots are all busy, a
call waits for the calls ahead of it, so its latency grows with the calls in flight (Little's
law at a plateau: ``R ∝ N``). Slow start doubles on goodput alone, and on a slow server it
doubles into that queue before any latency comes back: on a 2-slot server answering in 23 s,
4 calls in flight take 23 and 46 s, 8 take up to 92 s — past a 60 s timeout. A fixed limit
of 4 failed none of 20 calls; ``concurrency="auto"`` timed out 9, opened the circuit and
failed them (a real llama-server: 7 timeouts, the rest moved to another tier).

So each window's slowest call, per call in flight, prices the next step as if the server
were saturated (no elasticity: the cautious reading), and the limit stays where that
predicted slowest call is within ``share`` of the bound. The ceiling binds only where
latencies come within ``bound × share / 2`` of the bound — a doubling's reach — and not at all
on servers whose calls take a fraction of their timeout.
"""

from __future__ import annotations

import math

__all__ = ["LatencyBound"]


class LatencyBound:
    """The most calls in flight whose predicted slowest latency fits ``share × bound_s``."""

    def __init__(self, bound_s: float | None, share: float = 0.8) -> None:
        if bound_s is not None and bound_s <= 0.0:
            raise ValueError("bound_s must be > 0")
        if not 0.0 < share <= 1.0:
            raise ValueError("share must be in (0, 1]")
        self.bound_s = bound_s
        self.share = share
        self._worst = 0.0  # the open window's slowest call
        self._per_call: float | None = None  # slowest latency per call in flight, last window

    def add(self, latency_s: float) -> None:
        """One finished (or cut) attempt of the open window."""
        if latency_s > self._worst:
            self._worst = latency_s

    def close(self, n_mean: float) -> None:
        """The window closed at ``n_mean`` calls in flight."""
        if self._worst > 0.0 and n_mean > 0.0:
            self._per_call = self._worst / n_mean
        self._worst = 0.0

    def ceiling(self) -> float:
        """The highest limit the last window's latencies allow (``inf`` without a bound or
        before a window closed)."""
        if self.bound_s is None or self._per_call is None:
            return math.inf
        return max(1.0, math.floor(self.share * self.bound_s / self._per_call))
