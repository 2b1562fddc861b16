"""Concurrency limits (pure algorithms) and the limiter that enforces them.

Pure controllers, fed outcomes and a clock reading, no I/O:

* :class:`LLMLimit` — the default for ``concurrency="auto"``: slow start, loss, per-token delay
  elasticity, server-queue detection; finds the knee of the U-curve online.
* :class:`GradientLimit` (delay, Gradient2) and :class:`AIMDLimit` (loss) — the classics.
* :class:`FixedLimit` — ``concurrency=N``.
* :class:`RetryBudget` — retries ≤ a fraction of requests plus a floor, over a sliding window.
* :class:`RateLimitPacer` — paces below the RPM/TPM reported in ``x-ratelimit-*`` headers.
* :class:`AdaptiveTimeout` — attempt timeouts from a streaming p99 of per-token latency.

The async side: :class:`Limiter` hands out :class:`Permit` objects in priority order.
"""

from .aimd import AIMDLimit
from .base import FixedLimit, Limit, Sample, SampleKind
from .budget import RetryBudget, RetryBudgetStatistics
from .gradient import GradientLimit
from .limiter import Limiter, LimiterStatistics, Permit
from .llm import LLMLimit
from .normalise import LatencyNormaliser
from .pacing import PacerStatistics, RateLimitPacer
from .quantile import P2Quantile, WindowedQuantile
from .timeouts import AdaptiveTimeout

__all__ = [
    "AIMDLimit",
    "AdaptiveTimeout",
    "FixedLimit",
    "GradientLimit",
    "LLMLimit",
    "LatencyNormaliser",
    "Limit",
    "Limiter",
    "LimiterStatistics",
    "P2Quantile",
    "PacerStatistics",
    "Permit",
    "RateLimitPacer",
    "RetryBudget",
    "RetryBudgetStatistics",
    "Sample",
    "SampleKind",
    "WindowedQuantile",
]
