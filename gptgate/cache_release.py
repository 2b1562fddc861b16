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

Where a hit saves little the bar is lower (issue 31, round 18). What a hit saves is its
prefix's prefill (the group's measured ``prefill_s``); what it costs on a full home is the
decode of a fuller batch — and, on the simulator as on loaded servers, a wider spread of
steps, so the job's slowest answers start there. On family draw 1064 (8 replicas × 18 slots,
prefix-affine, answers of ~600 tokens) a prefill is 0.25–0.39 s and a call 20–35 s: hits at
1.25–1.5× the misses' time cost 20–40 prefills each, and the gate took 1.12× the plain
client's time with its homes at a batch of 11.5–16 of 18 while five replicas idled. So where
the server has room for the calls (their latency's fixed part under half of it:
gptgate/cache_queue_share.py — where they queue at the server, the extra time is the queue,
not decode: draw 12 released this way took 1.23× the plain client's time) the backend is also
released once the hits take more than the misses' time plus ``PAYBACK`` prefills and at least
``LOW_SLOWER`` × the misses'. The draws where the ramp keeps hits that pay (11, 1059, 1073)
reach at most 4.5 prefills; the named profiles of benchmarks/cache.py never meet this bar.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["LOW_SLOWER", "MEMORY_S", "MIN_HITS", "MIN_MISSES", "PAYBACK", "SLOWER", "ReleaseJudge"]

#: hits slower than misses by more than this factor: the ramp's hits cost time (the named
#: profiles of benchmarks/cache.py: at most 1.43× once 15 misses are measured)
SLOWER = 1.6
#: calls of each kind measured before judging (the misses are the rare kind)
MIN_HITS = 20
MIN_MISSES = 15
#: how long a verdict holds before the backend is judged again on fresh calls
MEMORY_S = 600.0
#: where a hit saves little, the hits' extra time over the misses' that outweighs what a hit
#: saves, counted in the prefills of the hits' prefixes
PAYBACK = 20.0
#: … and never under this factor of the misses' time (family draw 11's hits: at most 1.17×)
LOW_SLOWER = 1.25


@dataclass(slots=True)
class _Latencies:
    hits: int = 0
    hit_s: float = 0.0
    misses: int = 0
    miss_s: float = 0.0
    #: hits whose prefix's prefill time is known, and that prefill summed
    saved: int = 0
    saved_s: float = 0.0
    released_until: float = field(default=-math.inf)


def _bar(stats: _Latencies, room: bool) -> float:
    """The hits' mean latency past which the ramp does not pay: ``SLOWER`` × the misses', or,
    where the prefill a hit saves is small against a call, the misses' plus ``PAYBACK`` such
    prefills (never under ``LOW_SLOWER`` × the misses')."""
    miss = stats.miss_s / stats.misses
    if not stats.saved or not room:
        return SLOWER * miss
    saved = stats.saved_s / stats.saved
    return min(SLOWER * miss, max(LOW_SLOWER * miss, miss + PAYBACK * saved))


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

    def record(
        self, backend: str, *, hit: bool, latency_s: float, now: float,
        prefill_s: float | None = None, room: bool = False,
    ) -> bool:
        """Count one finished call (not a warm-up); True when this call releases the backend.
        ``prefill_s``: the prefill of the call's prefix (what a hit saved); ``room``: the
        backend's calls show a server with room for them (gptgate/cache_queue_share.py) — only
        then is the hits' extra time their decode, and weighed against that prefill."""
        stats = self._backends.setdefault(backend, _Latencies())
        if stats.released_until > now:
            return False
        if hit:
            stats.hits += 1
            stats.hit_s += latency_s
            if prefill_s is not None:
                stats.saved += 1
                stats.saved_s += prefill_s
        else:
            stats.misses += 1
            stats.miss_s += latency_s
        if stats.hits < MIN_HITS or stats.misses < MIN_MISSES:
            return False
        if stats.hit_s / stats.hits <= _bar(stats, room):
            return False
        # judged again on calls after the verdict runs out
        self._backends[backend] = _Latencies(released_until=now + MEMORY_S)
        return True
