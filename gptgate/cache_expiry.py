"""Which backends drop a cached prefix between a group's calls: a cache lifetime learned from
the calls' spacing (issue 31, the server family's short-lifetime draws).

Why: a provider keeps a prefix for a while after it was written or last hit (OpenAI: minutes;
a self-hosted server: what its memory and eviction leave, seconds on a busy small box). When
the gate runs a job's prefixes side by side at their shares, each prefix's calls are spread
over the whole job, and where the entry lives less than the spacing of its calls every call
meets an expired copy — the family's draw 1001 (1 replica × 26 slots, entries kept 0.87 s
idle): the gate's calls of a prefix came 2.6 s apart (median), the plain client's, sent in
prompt order, 0.4–1.0 s apart: 22.7% hits against 41.4%.

What the gate sees is each call's spacing — the time since its group's previous call was
admitted — and whether it hit. An expired copy misses after a *long* spacing (the entry's
lifetime passed); a spill to a replica still cold for the prefix misses in a *burst* (a
widened window sends several calls at once; draws 1004/1008: every such miss 0 s after the
previous call). So a warm call that missed after more than twice the median spacing of the
backend's recent hits is an *expiry*: it says nothing against the ramp's width (and is not a
spill: without this a 1-replica server was marked spreading by its expiries, draw 1067),
and a backend with :data:`MEASURED` such expiries within :data:`MEMORY_S` is *short-lived*:
there the gate serves warm groups in order (gptgate/cache_order.py), so that each prefix's
calls run densely, one prefix after the other, as the plain client's do.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

__all__ = ["EXPIRY_FACTOR", "MEASURED", "MEMORY_S", "ExpiryLearner"]

#: a miss after more than this many times the recent hits' median spacing is an expiry
EXPIRY_FACTOR = 2.0
#: expiries within :data:`MEMORY_S` that make a backend short-lived
MEASURED = 3
#: how long an expiry counts (clock seconds): as long as a spill marks a backend spreading
MEMORY_S = 600.0
#: recent hits' spacings remembered per backend
_HITS_KEPT = 32
#: fewer hits than this: no median worth comparing against yet
_MIN_HITS = 4


class ExpiryLearner:
    """Per backend: the spacings of recent hits, and when its recent expiries happened."""

    __slots__ = ("_expiries", "_hit_gaps")

    def __init__(self) -> None:
        self._hit_gaps: dict[str, deque[float]] = {}
        self._expiries: dict[str, deque[float]] = {}

    def expired(self, backend: str, gap_s: float, hit: bool, now: float) -> bool:
        """Count one warm call of ``backend`` admitted ``gap_s`` after its group's previous
        one: True when it missed after a spacing long enough to read as an expired copy."""
        if not math.isfinite(gap_s):
            return False
        gaps = self._hit_gaps.setdefault(backend, deque(maxlen=_HITS_KEPT))
        if hit:
            gaps.append(gap_s)
            return False
        if len(gaps) < _MIN_HITS or gap_s <= EXPIRY_FACTOR * statistics.median(gaps):
            return False
        self._expiries.setdefault(backend, deque(maxlen=MEASURED)).append(now)
        return True

    def short_lived(self, backend: str, now: float) -> bool:
        """Whether ``backend`` lately dropped :data:`MEASURED` copies between calls."""
        seen = self._expiries.get(backend)
        return seen is not None and len(seen) == MEASURED and seen[0] > now - MEMORY_S
