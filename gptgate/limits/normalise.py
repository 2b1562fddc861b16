"""Per-token latency normalisation: make a long answer not look like congestion.

An LLM call takes ``latency = ttft + (n − 1)·tpot`` for ``n`` output tokens: the time to
first token (queueing + prefill) and the time per output token (decode speed, which slows as
the server's batch grows) are what *load* changes, while ``n`` is what the *caller* asked for.
A delay-based limit comparing raw latencies would read a run of long answers as a queue and
cut the limit for nothing.

So a call is priced as the latency a **reference call** of ``K`` output tokens would have had
under the same load:

* streamed samples know both parts: ``R(K) = ttft + (K − 1)·tpot`` with
  ``tpot = (latency − ttft)/(n − 1)``. Server-side queueing raises ``ttft``, batch slowdown
  raises ``tpot``; both move ``R`` by what a typical call feels, whatever ``n`` was.
* non-streamed samples only know the total, rescaled by the length with the fixed part as
  ``n0`` token-equivalents: ``R(K) = latency·(K + n0)/(n + n0)`` — exact when
  ``n0 = ttft/tpot − 1``, which is learned from streamed samples when there are any; else it
  is fitted from the calls' latencies against their lengths (:class:`OverheadFit`), and the
  ``overhead_tokens`` guess stands only until the calls spread enough in length for a slope.

``K`` is the running mean answer length, so the two parts are weighted as the workload weighs
them. It moves when the mix moves, and a window priced at an old ``K`` must not be compared
with one priced at a new ``K`` — that drift would itself look like congestion. But ``R(K)`` is
*linear* in ``K``: each sample is kept as two numbers ``(a, b)`` with ``R(K) = a + K·b``,
a window keeps their sums, and windows are priced at the same, current ``K`` when compared.
O(1) per sample.
"""

from __future__ import annotations

from .base import Sample
from .overhead_fit import OverheadFit

__all__ = ["LatencyNormaliser"]


class LatencyNormaliser:
    """Splits a successful :class:`Sample` into ``(a, b)`` with ``R(K) = a + K·b`` seconds."""

    __slots__ = ("_count", "_fit", "_guess", "_horizon", "_n_ref", "_overhead", "_tpot", "_ttft")

    def __init__(self, overhead_tokens: float = 20.0, horizon: int = 256) -> None:
        if overhead_tokens < 0:
            raise ValueError("overhead_tokens must be >= 0")
        if horizon < 1:
            raise ValueError("horizon must be >= 1")
        self._overhead = self._guess = float(overhead_tokens)
        self._horizon = horizon
        self._n_ref = 1.0
        self._count = 0
        self._ttft = 0.0
        self._tpot = 0.0
        self._fit = OverheadFit(horizon=horizon)

    @property
    def reference_tokens(self) -> float:
        """``K``: the running mean answer length (cumulative, then an EWMA of ``horizon``)."""
        return self._n_ref

    @property
    def overhead_tokens(self) -> float:
        """``n0``: the fixed part of a call (first token, prefill) in decode-token equivalents."""
        return self._overhead

    def split(self, sample: Sample) -> tuple[float, float]:
        """Learn from ``sample`` and return its ``(a, b)``: ``R(K) = a + K·b``."""
        latency = max(sample.latency_s, 1e-9)
        n = max(0, sample.output_tokens)
        self._count += 1
        # cumulative mean for the first `horizon` samples (no bias from the first one), then
        # an EWMA so that a change of workload is followed
        alpha = max(1.0 / self._count, 1.0 / self._horizon)
        self._n_ref += alpha * (max(1, n) - self._n_ref)
        ttft = sample.ttft_s
        if ttft is not None and 0.0 <= ttft < latency and n >= 2:
            tpot = (latency - ttft) / (n - 1)
            self._learn_overhead(ttft, tpot)
            return ttft - tpot, tpot
        stretch_from = 1.0
        if self._tpot == 0.0:
            # no streamed call has told the fixed part: fit it from the calls' lengths
            self._fit.add(n, latency)
            fitted = self._fit.overhead_tokens(10.0 * self._n_ref)
            if fitted is not None:
                self._overhead = fitted
            # a fitted fixed part near 0 would stretch a near-empty answer's latency by up
            # to K: never further than the guess stretched it (family draw 1091: a 0.23 s
            # empty answer priced at 59 s with ``n0`` fitted at 0, ending slow start)
            stretch_from = max(1.0, self._guess)
        per_token = latency / max(stretch_from, n + self._overhead)
        return per_token * self._overhead, per_token

    def __call__(self, sample: Sample) -> float:
        """Learn from ``sample`` and return ``R(K)`` at the current ``K``."""
        a, b = self.split(sample)
        return a + self._n_ref * b

    def _learn_overhead(self, ttft: float, tpot: float) -> None:
        if tpot <= 0.0:
            return
        beta = 1.0 / self._horizon
        if self._tpot == 0.0:
            self._ttft, self._tpot = ttft, tpot
        else:
            self._ttft += beta * (ttft - self._ttft)
            self._tpot += beta * (tpot - self._tpot)
        self._overhead = min(max(0.0, self._ttft / self._tpot - 1.0), 10.0 * self._n_ref)
