"""Prefixes sharing a home replica, seen from their calls' latencies (issue 31, round 11).

A prefix-affine server hashes each prefix to a home replica, and two or three of a job's
four prefixes often share one. Side by side at their shares, the prefixes on a shared home
keep it at two or three shares' batch (slow decode steps) while other replicas idle; the
hand warm-up's FIFO runs one prefix at a time, whose calls past its home's room overflow (or,
on a router spreading by calls in flight, spread) to the idle replicas. The warm order
(gptgate/cache_order.py) is the hand's FIFO, but it was off on a backend marked spreading —
and an overflow's first call on a cold replica reads as a spill, so prefix-affine servers
get marked too (family draws 96, 1089, 45: docs/caching.md, "Time misses at a higher hit
rate"). What the gate does see is the shared home's cost: side by side at equal shares, the
calls of the prefixes on it take longer than those of a prefix alone on its home (draw 96:
25.7 s against 11.4–15.1 s per call; draw 45: 13.4 and 14.2 s against 7.8 and 8.0 s),
where without a shared home the prefixes' calls take about as long as each other (family
draws 7, 10, 13, 15, 16, 20: the slowest prefix's mean at most 1.64× the fastest's).

So per backend marked spreading, the mean latency (admission to release) of each warm
group's calls — the warm-ups, calls paced by a rate budget and calls queued at the server
left out (gptgate/cache.py) —; while at most ``MAX_GROUPS`` groups were measured since the
last verdict (more: a job of many prefixes, not judged for ``MEMORY_S``), once two have
``MIN_CALLS`` each and the slowest mean is ``SLOWER`` × the fastest or more, the backend
counts as having shared homes for ``MEMORY_S``, and its warm groups are served in order
while few are warm (gptgate/cache.py ``_in_order``); then it is judged again on fresh calls.
Only on a backend marked spreading: elsewhere a prefix-affine server's shared home is already
ordered (a warm prefix seen running wider than ``start``), and the signal fires on servers
with a queue, where the order costs (family draw 14: 37.6 s -> 91.8 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .cache_order_trial import MAX_GROUPS

__all__ = ["MEMORY_S", "MIN_CALLS", "SLOWER", "SharedHomes"]

#: a group's calls measured before its mean counts
MIN_CALLS = 10
#: the slowest group's mean over the fastest's that shows a shared home (the family's draws
#: without one: at most 1.65×)
SLOWER = 2.0
#: how long a verdict holds before the backend is judged again on fresh calls
MEMORY_S = 600.0


@dataclass(slots=True)
class _Backend:
    #: per group: [calls, summed latency]
    groups: dict[str, list[float]] = field(default_factory=dict)
    #: every group measured since the last verdict (at most MAX_GROUPS: past that, crowded)
    keys: set[str] = field(default_factory=set)
    until: float = -math.inf
    crowded_until: float = -math.inf


class SharedHomes:
    """Per backend: are some warm groups' calls much slower than others' (a shared home)?"""

    __slots__ = ("_backends",)

    def __init__(self) -> None:
        self._backends: dict[str, _Backend] = {}

    def seen(self, backend: str, now: float) -> bool:
        """Whether ``backend`` counts as having prefixes on a shared home now."""
        stats = self._backends.get(backend)
        return stats is not None and stats.until > now

    def record(self, backend: str, key: str, latency_s: float, now: float) -> bool:
        """Count one finished warm call of group ``key``; True when this call shows the
        backend's shared homes."""
        stats = self._backends.setdefault(backend, _Backend())
        if stats.until > now or stats.crowded_until > now:
            return False
        if key not in stats.keys and len(stats.keys) >= MAX_GROUPS:
            # a job of many prefixes (the named profiles' 10- and 50-prompt jobs): the order
            # is for a few large ones (gptgate/cache_order.py); judged again later
            self._backends[backend] = _Backend(crowded_until=now + MEMORY_S)
            return False
        stats.keys.add(key)
        calls = stats.groups.setdefault(key, [0.0, 0.0])
        calls[0] += 1
        calls[1] += latency_s
        means = [s / n for n, s in stats.groups.values() if n >= MIN_CALLS]
        if len(means) < 2 or max(means) < SLOWER * min(means):
            return False
        # judged again on calls after the verdict runs out
        self._backends[backend] = _Backend(until=now + MEMORY_S)
        return True

    def forget(self, backend: str, key: str) -> None:
        """Group ``key`` has no calls on ``backend`` any more: its mean leaves the count."""
        stats = self._backends.get(backend)
        if stats is not None:
            stats.groups.pop(key, None)
