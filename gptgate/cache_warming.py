"""A straggling warm-up holds one place of the backend, not its group's share.

While two or more groups run on a backend, each may have its share of the limit in flight
(``limit // running``) whatever its ramp window, so that the ramp never leaves the backend
idle while calls wait. A group still warming has one call in flight — its warm-up — and uses
none of the rest of its share until that call's prefill. Warm-ups normally end within the
same fraction of a second, but one that straggles (a slow replica, a stall before the server
schedules it) kept its share's other places empty for its whole wait while the warm groups'
calls waited at their shares: family draw 23 (13 replicas × 10 slots, 4.8% stragglers of
4.5 s) ran 47 of its 64 places for the first 4.5 s, 1.15× the plain client's time.

So a warm-up that has waited longer than :data:`LATE` times the backend's measured prefill
for its prefix counts as holding one place, and the warm groups share the rest; once it is
warm the shares are even again. Only *late* warm-ups: lending the warming groups' places from
the job's first instant sends the first group warm out at nearly the whole limit while the
others' warm-ups are still on their way, and on a server that spreads a hot prefix that burst
meets cold replicas (the first ten family draws of seed 1: 4–10 points of hits lost on draws
3, 4 and 8)."""

from __future__ import annotations

__all__ = ["LATE", "late", "warm_share"]

#: a warm-up is late after this many times the prefill the backend's warm-ups measured
LATE = 3.0


def late(waited_s: float, expected_s: float | None) -> bool:
    """Whether a warm-up in flight for ``waited_s`` is late against ``expected_s``, the
    prefill measured on its backend for its prefix (None: nothing measured — not late)."""
    return expected_s is not None and waited_s > LATE * expected_s


def warm_share(limit: int, running: int, late_warmups: int) -> int:
    """Each running group's share of ``limit``: an even split, or — while some of them are
    late warm-ups (one place each) — the rest split among the others."""
    share = max(1, limit // running)
    if 0 < late_warmups < running:
        share = max(share, (limit - late_warmups) // (running - late_warmups))
    return share
