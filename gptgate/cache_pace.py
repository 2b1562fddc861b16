"""Paced sends on a spreading server: spaced, never slower than the window itself.

On a backend that spreads a hot prefix over replicas, the cache gate spaces a group's calls
beyond its first ``start`` in flight: a burst released at once meets each newly reached
replica several times before that replica's first call is prefilled, and every one of those
calls misses; spaced out, the replica is warm by the next one. The spacing is ``start`` calls
per prefill time (the backend's fastest warm-up per prefix token, admission to first token,
scaled to the group's prefix: a warm-up that stalled as a straggler or waited behind a full
backend measured its wait — gptgate/cache.py ``CacheGate._prefill``) …

… but never slower than the group's window runs on its own: ``window`` calls per call latency
(the group's measured latency, admission to release). Spaced at the prefill time alone, the
pacing was a throughput cap for a whole job whenever a call lasts less than ``window ÷ start``
prefill times. On a server whose calls are short next to their prefill (issue 31: 8 replicas
× 4 slots, a prefix spread once 2 of its calls run on its home replica, copies kept 3–5 call
latencies, 60-token answers after a 1,300-token prefill at 2,500 tokens/s) it capped each
prefix at 6.5 calls a second where its window of 16 ran 13: a third of the slots idle while
calls waited, 1.41× the hand warm-up's time, and the prefix visited its replicas so rarely
that copies expired (39 expired-copy misses in 600 calls). Where calls are long next to their
prefill (the ``spread`` profile: 2 s calls, 0.33 s prefill) the window's own pace is the
slower one and the spacing is as before: there it is what keeps a burst's duplicates off cold
replicas. So the slower ramp applies where measurement says it costs no throughput, and
"warm one, then release" holds elsewhere.
"""

from __future__ import annotations

__all__ = ["pace_interval", "pace_slot", "should_pace"]


def should_pace(
    *, warmer: bool, prefill_s: float | None, in_flight: int, start: int, spreading: bool
) -> bool:
    """Whether this call of a group (counted in ``in_flight``) waits for a paced slot: not the
    warm-up, not before the warm-up's prefill time is known, not within the group's first
    ``start`` calls in flight, not on a backend never seen spreading a prefix."""
    return not (warmer or prefill_s is None or in_flight <= start or not spreading)


def pace_interval(prefill_s: float, start: int, latency_s: float | None, window: int) -> float:
    """Seconds between a group's paced calls: ``start`` per prefill time, or the window's own
    pace (``window`` calls per ``latency_s``) when that is faster. ``latency_s`` None: no call
    of the group has ended yet."""
    spaced = prefill_s / start
    if latency_s is None:
        return spaced
    return min(spaced, latency_s / max(1, window))


def pace_slot(now: float, next_send: float, interval: float) -> tuple[float, float]:
    """``(when this call may go, when the group's next paced call may go)``: never earlier
    than ``now``."""
    at = max(now, next_send)
    return at, at + interval
