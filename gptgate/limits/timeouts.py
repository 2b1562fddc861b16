"""``AdaptiveTimeout``: attempt timeouts from the observed latency distribution.

A fixed timeout is wrong both ways: too short and P99 jitter on a loaded GPU fires false
timeouts whose retries add load and are billed twice (field experience: "GPU + high load needs
sane timeouts and retries so latency jitter does not trigger false retries"); too long and a hung
call holds its permit for minutes. An attempt is late when it is slower than nearly all recent
calls *of its size*:

    timeout = multiplier × p99(latency per token) × (expected output tokens + n0) × load

bounded to ``[min_s, max_s]``. ``load`` is the calls in flight now over those the quantile was
learned at (an EWMA), when more: a continuous-batching server decodes slower with a bigger
batch, and a limit in slow start doubles its calls per latency — a quantile learned at 4 in
flight cut healthy calls at 30 (issue 14: 7–19 false timeouts in 400 calls on the gpu
profile). Never less than 1: at a lighter load the learned bound is kept. The multiplier is
3: the tail of a busy GPU is heavy (lognormal σ ≈ 0.9: p99 × 3 is about p99.98), and a false
timeout is billed twice — the tail is hedging's job, a timeout is for hung calls.

Latency per token is ``latency / (n + n0)``, ``n0`` being the
fixed part of a call (first token, prefill) in decode-token equivalents, so that short answers
do not inflate the quantile. Without an expected size the p99 of whole latencies is used.
Until ``min_samples`` calls have been seen the answer is ``max_s``: no data, no tightening.

Quantiles come from a windowed P² estimator (O(1) per sample, follows drift). A timed-out
attempt is a censored observation — its latency is *at least* the timeout — and is recorded as
such (:meth:`observe_timeout`); ignoring it would bias the quantile down and tighten the
timeout in a spiral exactly when the backend slows.
"""

from __future__ import annotations

from .quantile import WindowedQuantile

__all__ = ["AdaptiveTimeout"]


class AdaptiveTimeout:
    """Per-attempt timeouts from a streaming p99 of per-token latency."""

    def __init__(
        self,
        min_s: float = 5.0,
        max_s: float = 600.0,
        multiplier: float = 3.0,
        *,
        quantile: float = 0.99,
        min_samples: int = 50,
        window: int = 1_000,
        overhead_tokens: float = 20.0,
    ) -> None:
        if not 0.0 < min_s <= max_s:
            raise ValueError("need 0 < min_s <= max_s")
        if multiplier < 1.0:
            raise ValueError("multiplier must be >= 1")
        if overhead_tokens < 0.0:
            raise ValueError("overhead_tokens must be >= 0")
        self.min_s = min_s
        self.max_s = max_s
        self.multiplier = multiplier
        self.min_samples = max(1, min_samples)
        self.overhead_tokens = overhead_tokens
        self._per_token = WindowedQuantile(quantile, window)
        self._latency = WindowedQuantile(quantile, window)
        self._seen = 0
        self._inflight = 0.0  # EWMA of the calls in flight when the samples were admitted

    @property
    def samples(self) -> int:
        """Observations so far (censored ones included)."""
        return self._seen

    @property
    def per_token_quantile(self) -> float:
        """The high quantile of seconds per (effective) output token; NaN before data."""
        return self._per_token.value

    @property
    def latency_quantile(self) -> float:
        """The high quantile of whole-call latency; NaN before data."""
        return self._latency.value

    def observe(
        self, latency_s: float, output_tokens: int | None = None, inflight: int | None = None
    ) -> None:
        """Record a finished attempt (``output_tokens`` None when unknown; ``inflight``: the
        calls in flight at its admission, itself included)."""
        if latency_s < 0.0:
            return
        self._seen += 1
        if inflight is not None and inflight > 0:
            alpha = max(0.02, 1.0 / self._seen)
            self._inflight += (inflight - self._inflight) * alpha
        self._latency.add(latency_s)
        if output_tokens is not None:
            size = max(1.0, max(0, output_tokens) + self.overhead_tokens)
            self._per_token.add(latency_s / size)

    def observe_timeout(
        self,
        timeout_s: float,
        expected_output_tokens: int | None = None,
        inflight: int | None = None,
    ) -> None:
        """Record an attempt that timed out: its latency was at least ``timeout_s``."""
        self.observe(timeout_s, expected_output_tokens, inflight)

    def timeout_for(
        self, expected_output_tokens: int | None = None, inflight: int | None = None
    ) -> float:
        """The timeout for an attempt expected to produce this many tokens (e.g. max_tokens),
        admitted with ``inflight`` calls in flight (itself included)."""
        if self._seen < self.min_samples:
            return self.max_s
        if expected_output_tokens is not None and self._per_token.count >= self.min_samples:
            size = max(1.0, max(0, expected_output_tokens) + self.overhead_tokens)
            value = self.multiplier * self._per_token.value * size
        elif self._latency.count >= self.min_samples:
            value = self.multiplier * self._latency.value
        else:
            return self.max_s
        if inflight is not None and self._inflight > 0.0:
            value *= max(1.0, inflight / self._inflight)
        return min(self.max_s, max(self.min_s, value))

    def __repr__(self) -> str:
        return (
            f"AdaptiveTimeout(min_s={self.min_s}, max_s={self.max_s}, "
            f"multiplier={self.multiplier}, samples={self._seen})"
        )
