"""Concurrency limits (pure algorithms) and the limiter that enforces them."""

from .base import FixedLimit, Limit, Sample, SampleKind
from .limiter import Limiter, LimiterStatistics, Permit

__all__ = ["FixedLimit", "Limit", "Limiter", "LimiterStatistics", "Permit", "Sample", "SampleKind"]
