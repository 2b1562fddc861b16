"""A backend's warm groups served in order from a job's start, until a change of head shows
what the order costs there (issue 31: the order tried from the start, with a quick abort).

Why: the order trial (gptgate/cache_order_trial.py) measures 80 side-by-side calls before it
tries the order, and where the order pays from the start — copies that expire while four
prefixes run side by side behind a server queue — those calls are the job's first third
(family draw 1090: 3 replicas × 1 slot, the trial from 491 s of a 1,394 s job, 65.9% hits
against the plain client's 90.4%; served in order from the start 88.2%). Where the order
costs, the cost shows at each change of head, not before: the next prefix's copies aged
while it waited and its burst meets cold replicas, so a window of its calls misses in a
burst — calls admitted in the same instant as their group's previous one (issue 31's server,
8 × 4 spreading at 2 in flight: 15 of 24 such misses after each change of head, none before).
Side by side, after a job's ramp, such misses are rare on the draws where the order pays
(1090: 0–2 in a window of 24). So the order runs from the start; a window of
:data:`WINDOW` calls with :data:`BURST_TRIGGER` of them missed in a burst sends the backend
back side by side (where the trial measures as before), and one change of head followed by
a window without such misses keeps the order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BURST_TRIGGER", "HEAD_RUN", "OPENING_SETTLE_CALLS", "WINDOW", "Opening"]

#: calls left out at the job's start: the ramps reaching their replicas miss in bursts
#: whatever the order (issue 31's server: 22 of the first 24 warm calls)
OPENING_SETTLE_CALLS = 32
#: calls per window judged
WINDOW = 24
#: share of a window's calls that missed in a burst for the order to be given up
BURST_TRIGGER = 0.25
#: calls of one group in a row (as they finish) that make it the head
HEAD_RUN = 8

Verdict = Literal["kept", "side"] | None


@dataclass(slots=True)
class Opening:
    """The order's first calls on a backend: windows of burst misses, changes of head."""

    settling: int = OPENING_SETTLE_CALLS
    calls: int = 0
    bursts: int = 0
    head: str | None = None
    run_key: str | None = None
    run: int = 0
    changed: bool = False
    after_change: int = 0

    def add(self, hit: bool, key: str, burst: bool) -> Verdict:
        """Count one finished call; a verdict once there is one."""
        if self.settling:
            self.settling -= 1
            return None
        self.calls += 1
        self.bursts += not hit and burst
        self._follow_head(key)
        if self.changed:
            self.after_change += 1
        if self.bursts >= BURST_TRIGGER * WINDOW:
            return "side"  # at once: each call in order after a costly change costs more
        if self.calls < WINDOW:
            return None
        self.calls = self.bursts = 0
        return "kept" if self.after_change >= WINDOW else None

    def _follow_head(self, key: str) -> None:
        self.run = self.run + 1 if key == self.run_key else 1
        self.run_key = key
        if self.run < HEAD_RUN or key == self.head:
            return
        if self.head is not None:
            self.changed = True
        self.head = key
