"""The *Limit* half of the Limit/Limiter split (Netflix concurrency-limits).

A Limit is a pure object: it is fed one :class:`Sample` per finished attempt and computes how
many calls may be in flight. It does no I/O and never sleeps, so each algorithm is unit-tested
with exact values and a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = ["FixedLimit", "Limit", "Sample", "SampleKind"]

SampleKind = Literal["ok", "dropped", "ignored"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished attempt as a limit sees it."""

    start: float
    latency_s: float
    inflight: int
    kind: SampleKind
    ttft_s: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: for a dropped attempt: whether it signals congestion (429, overload 503, a timeout),
    #: or is a server failure (500, 502, 504, a stream cut mid-answer) that lowers goodput but
    #: alone is no reason to back off — a backend may fail some calls at any load
    congestion: bool = True
    #: for a dropped attempt: a rate-limit rejection (429). It says "wait" — the pause and the
    #: pacer handle that — more than "fewer at once": a limit may cut for it only when the
    #: calls filled it
    rate_limited: bool = False


@runtime_checkable
class Limit(Protocol):
    """Computes the concurrency limit from samples. ``now`` is the caller's clock reading."""

    @property
    def limit(self) -> int: ...

    def update(self, sample: Sample, now: float) -> None: ...


class FixedLimit:
    """A constant limit: what ``Backend(concurrency=N)`` asks for."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self._limit = limit

    @property
    def limit(self) -> int:
        return self._limit

    def update(self, sample: Sample, now: float) -> None:
        return None

    def __repr__(self) -> str:
        return f"FixedLimit({self._limit})"
