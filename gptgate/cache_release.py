"""Whether the ramp pays on a backend: measured from the gate's own calls, per backend.

The ramp, the shares and the pacing keep a warm prefix's calls narrow so that they land where
the prefix is cached: on a server with prefix-affine routing, on its home replica while that
replica has a free slot. A hit saves the prefill; but calls kept together on one replica also
share its decode batch. Where a replica slows down past a few calls (its USL knee) and the
prefill is a small part of a call, the calls that hit take *longer* than the ones that missed
on another replica, and the hit rate the ramp protects costs the job time instead of buying it.

Issue 31's server family, traced per call (benchmarks/family.py --only cache): on draw 98
(9 replicas × 15 slots, knee 9, 1,024-token answers) the gate's hits took 34.4 s on average
and its misses 15.6 s; the job 401 s against the plain client's 290 s (three runs each), its
calls 1.7× as long while the gate held almost no call back (0.6 s of the whole backend idle
while calls waited at it). Draws 1073 (1.8×), 1089 (1.6×) and 45 (1.5×) show the same. On
the named profiles of benchmarks/cache.py, where the ramp is what keeps the hits, hits take
at most 1.43× as long as misses once 15 misses are measured (a job on ``overflow`` at
c=50), but up to 1.89× over the first 5: the first calls that spill reach idle replicas
while the home replica is busy, which says nothing about the job.

So per backend the gate keeps the mean latency (admission to release) of its calls that hit
and of those that missed, the warm-ups left out; once both are measured (``MIN_HITS`` and
``MIN_MISSES`` calls) and the hits take more than ``SLOWER`` × the misses' time, the ramp
does not pay there: each warm prefix's window is the backend's whole limit and its calls go
unpaced — "warm one, then release" — for ``MEMORY_S``; then it is judged again on fresh
calls. The single-flight warm-up stays: it costs one call time per prefix and is what the
hand warm-up does too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["MEMORY_S", "MIN_HITS", "MIN_MISSES", "SLOWER", "ReleaseJudge"]

#: hits slower than misses by more than this factor: the ramp's hits cost time (the named
#: profiles of benchmarks/cache.py: at most 1.43× once 15 misses are measured)
SLOWER = 1.6
#: calls of each kind measured before judging (the misses are the rare kind)
MIN_HITS = 20
MIN_MISSES = 15
#: how long a verdict holds before the backend is judged again on fresh calls
MEMORY_S = 600.0


@dataclass(slots=True)
class _Latencies:
    hits: int = 0
    hit_s: float = 0.0
    misses: int = 0
    miss_s: float = 0.0
    released_until: float = field(default=-math.inf)


class ReleaseJudge:
    """Per backend: do the hits the ramp protects take longer than the misses?"""

    __slots__ = ("_backends",)

    def __init__(self) -> None:
        self._backends: dict[str, _Latencies] = {}

    def released(self, backend: str, now: float) -> bool:
        """Whether warm prefixes on ``backend`` go out at its whole limit now."""
        stats = self._backends.get(backend)
        return stats is not None and stats.released_until > now

    def means(self, backend: str) -> tuple[float, float] | None:
        """``backend``'s mean latency of a call that hit and of one that missed (None: not
        both measured yet)."""
        stats = self._backends.get(backend)
        if stats is None or not stats.hits or not stats.misses:
            return None
        return stats.hit_s / stats.hits, stats.miss_s / stats.misses

    def record(self, backend: str, *, hit: bool, latency_s: float, now: float) -> bool:
        """Count one finished call (not a warm-up); True when this call releases the backend."""
        stats = self._backends.setdefault(backend, _Latencies())
        if stats.released_until > now:
            return False
        if hit:
            stats.hits += 1
            stats.hit_s += latency_s
        else:
            stats.misses += 1
            stats.miss_s += latency_s
        if stats.hits < MIN_HITS or stats.misses < MIN_MISSES:
            return False
        if stats.hit_s / stats.hits <= SLOWER * stats.miss_s / stats.misses:
            return False
        # judged again on calls after the verdict runs out
        self._backends[backend] = _Latencies(released_until=now + MEMORY_S)
        return True
