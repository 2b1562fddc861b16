"""A hot prefix spread off its home replica by the calls it has in flight there.

Why: cache-aware load balancers (SGLang's router, vLLM's production stack, llm-d) keep a
prefix on the replica that holds it only while that replica is not overloaded by it; past a
threshold of outstanding requests they send the next ones to the least-loaded replica, whose
cache is cold for that prefix. ``SimProfile.spread_in_flight`` is that threshold: once this
many of a prefix's calls are in flight on its home replica (routed there, not yet finished),
the next call goes to the least-loaded *other* replica (ties: the replicas after home, in
order), so a burst warms several cold caches at once. ``None`` = never (the profile's other
routing alone: ``prefix_overflow_rpm`` and the full-replica balance).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from gptgate.sim.scheduler import Replica

__all__ = ["InFlightSpread"]


class InFlightSpread:
    """Counts each route key's calls in flight on its home replica and spreads past a limit."""

    __slots__ = ("_home", "_limit")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._home: Counter[int] = Counter()

    def choose(self, key: int, home: Replica, replicas: Sequence[Replica]) -> Replica:
        """``home`` while fewer than the limit of ``key``'s calls run there, else the
        least-loaded other replica (queued calls count as load)."""
        n = len(replicas)
        if n == 1 or self._home[key] < self._limit:
            return home
        others = [replicas[(home.index + k) % n] for k in range(1, n)]
        return min(others, key=lambda r: (r.active + r.queued) / r.slots)

    def enter(self, key: int, replica: Replica, home: Replica) -> Callable[[], None] | None:
        """Count a call routed to ``replica``; returns the callback that uncounts it when it
        ends (exactly once), or None when it did not land on its home replica."""
        if replica is not home:
            return None
        self._home[key] += 1
        done = False

        def leave() -> None:
            nonlocal done
            if not done:
                done = True
                left = self._home[key] - 1
                if left:
                    self._home[key] = left
                else:
                    del self._home[key]

        return leave
