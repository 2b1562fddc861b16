"""A backend's warm groups served in order from a job's start where its calls queue at the
server, until a change of head shows what the order costs there (issue 31: the order tried
from the start, with a quick abort).

Why: the order trial (gptgate/cache_order_trial.py) measures 80 side-by-side calls before it
tries the order, and where the order pays from the start — copies that expire while four
prefixes run side by side behind a server queue — those calls are a third of the job or
more (family draw 1067: 1 replica × 1 slot, a queue of 3, the trial from 1,322 s of a
3,124 s job, 75.2% hits against the plain client's 80.7%). What the gate sees early there is
the queue: a warm call takes many times its group's warm-up (which met an idle server) — up
to 38× on 1067, 17× on 1090, 9–14× on 76, 1013 and 1058 in their first 32 warm calls, while
the named profiles' jobs stay within 4× (`overflow` at c=50) and issue 31's spreading server
within 3×. So a warm call :data:`~gptgate.cache_order_trial.QUEUE_FACTOR` times its
group's warm-up long, among the job's first :data:`OPENING_SETTLE_CALLS` side-by-side
samples, starts the order at once.

Where the order costs, the cost shows at each change of head, not before: the next prefix's
copies aged while it waited and its burst meets cold replicas, so a window of its calls
misses in a burst — calls admitted in the same instant as their group's previous one
(issue 31's server in order: 15 of 24 such misses after each change of head, none before).
Where the order pays such misses are rare (1090: 0–2 in a window of 24). So
:data:`BURST_TRIGGER` of a window's calls missed in a burst sends the backend back side by
side at once (the trial measures there as before), and one change of head followed by a
window without them keeps the order (for :data:`~gptgate.cache_order_trial.MEMORY_S`).
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
