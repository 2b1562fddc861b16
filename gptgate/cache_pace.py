"""Paced sends on a spreading server: only while the hit rate says they pay.

On a backend that spreads a hot prefix over replicas, the cache gate may send a group's calls
beyond its first ``start`` in flight at most ``start`` per prefill time (the warm-up's,
admission to first token or response): a burst released at once meets each newly reached
replica several times before that replica's first call is prefilled, and every one of those
calls misses; spaced out, the replica is warm by the next one.

Pacing is a slower ramp, and it has a price: while it holds calls the backend may idle. Sent
for a whole job, it capped each group at ``start`` calls per prefill time — on a server whose
calls are short next to their prefill (8 replicas × 4 slots, a prefix spread once 2 of its
calls run on its home replica, copies kept 3–5 call latencies) it left a third of the slots
idle while calls waited: 1.42× the time of the simplest warm-up by hand for 4 more points of
hits (issue 31). So the default is "warm one, then release": the group's calls go as its ramp
window allows, and pacing is the exception that measurement must earn — it applies only until
the group's first ramp window is complete, and again after a window that missed the target
hit rate (the replicas it reached were cold: spacing pays there); once a window holds the
target, the replicas the prefix reaches are warm and the group's calls go unpaced.
"""

from __future__ import annotations

__all__ = ["pace_slot", "should_pace"]

_EPS = 1e-9


def should_pace(
    *,
    warmer: bool,
    prefill_s: float | None,
    in_flight: int,
    start: int,
    spreading: bool,
    last_window_hit_rate: float | None,
    target_hit_rate: float,
) -> bool:
    """Whether this call of a group waits for its paced slot.

    Not the warm-up, not before the warm-up's prefill time is known, not within the group's
    first ``start`` calls in flight, not on a backend never seen spreading a prefix — and not
    once the group's last complete ramp window held ``target_hit_rate``."""
    if warmer or prefill_s is None or in_flight <= start or not spreading:
        return False
    return last_window_hit_rate is None or last_window_hit_rate < target_hit_rate - _EPS


def pace_slot(now: float, next_send: float, prefill_s: float, start: int) -> tuple[float, float]:
    """``(when this call may go, when the group's next paced call may go)``: ``start`` calls
    per ``prefill_s``, never earlier than ``now``."""
    at = max(now, next_send)
    return at, at + prefill_s / start
