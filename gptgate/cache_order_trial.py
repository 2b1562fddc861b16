"""Whether serving a backend's warm groups in order pays: tried, measured, kept or refused
(issue 31, the server family's expiries the learner cannot see).

Why: side by side at their shares, each of a job's prefixes is called at a fraction of the
backend's pace for the whole job, so each copy of a prefix waits longer between its calls
than under the plain client's prompt order, where one prefix runs densely after the other.
Where a copy lives a few calls' time that costs expired copies. The expiry learner
(gptgate/cache_expiry.py) sees them only as a miss after a long spacing between a group's
admissions, and mostly they do not come that way: behind a server queue every call is
admitted 0 s after the previous one and ages in the server's queue (family draw 1001: 1
replica, 26 slots, a queue of 20; 0.87 s copies), and on a server that spreads a prefix
by its calls in flight the group's calls are dense while its copies on the replicas it
spills to are visited rarely (draw 1090: 3 replicas × 1 slot, 17 s copies; the gate's
misses came 18–110 s after the prefix's previous call *on that replica*). Both read as
spills. Traced per call in the simulator over the seed-1001 draws where the gate kept fewer
hits than the plain client, every extra miss was such an expired copy (1090: 105 against
the plain client's 2); served in order, 1090 kept 88.2% against 65.9%, 1021 78.9% against
48.3%, 1001 46.2% against 22.7%.

The gate cannot tell those expiries from real spills call by call, and the order costs
where the server spreads a burst over cold replicas (the named ``spread`` job: 85.2% →
80.4% when its head went first). So the order is *measured*: once warm calls running side
by side miss often (:data:`TRIGGER` of two windows of :data:`SIDE_CALLS` in a row, or
:data:`SPACED_TRIGGER` of one window at the groups' ordinary spacing — expired copies, not
a burst over cold replicas —, after the job's first :data:`SETTLE_CALLS`), the backend's
warm groups are served in order for a trial of :data:`TRIAL_CALLS` calls (after
:data:`TRIAL_SETTLE_CALLS`); the order is kept for :data:`MEMORY_S` if its calls kept
:data:`MARGIN` more of their hits than the side-by-side windows measured, and refused for as long
otherwise. Only hits are compared: the phases' latencies and paces are the server's noise at
this size (a latency grows as a server queue fills, whatever the order — draw 1090: 101 s
side by side in the job's first minutes, 258 s later —; the pace of 24 calls swung
0.2–4.8× between phases of one draw, one call's load jitter at a full replica deciding it).
Calls count toward the phase they were admitted in (a ticket carries its phase's epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from .cache_order_opening import OPENING_SETTLE_CALLS, Opening

__all__ = [
    "BURST_GAP_S", "MARGIN", "MAX_GROUPS", "MEMORY_S", "QUEUE_FACTOR", "SETTLE_CALLS",
    "SIDE_CALLS", "SPACED_TRIGGER", "SWITCH_CALLS", "TRIAL_CALLS", "TRIAL_SETTLE_CALLS", "TRIGGER",
    "OrderTrial",
]

#: calls left out at the start of each phase: calls admitted before it still queue at the
#: server among its calls (draw 1021: the order's first 32 calls kept 50% of their hits, the
#: next 32 75%, then 75–100%), and a job's first calls meet copies still fresh (draw 1001,
#: side by side: 25 hits in its first 32 warm calls, then 3–8 in each 32)
SETTLE_CALLS = 32
#: warm calls run side by side measured before a trial may start
SIDE_CALLS = 24
#: share of the calls of each of two windows in a row that missed for a trial to start (a
#: fifth started trials on the named ``spread`` jobs, whose windows kept 19 of 24 hits, and
#: lost them 3–5 points; the family's draws this is for miss 25–80%)
TRIGGER = 0.25
#: share of one window's calls that missed *spaced* — admitted after their group's previous
#: call, not in the same instant — for a trial to start without a second window. A cold
#: replica a ramp's burst reaches misses in a burst (issue 31's server spreading by calls in
#: flight: 12 of its first window's 24 calls missed, every one in a burst, then 0–3 a window);
#: a copy that expired between a prefix's calls side by side misses at the group's ordinary
#: spacing (family draw 1062: 8 of the first window's 24, 14 of the second; 1021: 6, 6). The
#: second window cost 8.5 s of side-by-side calls on 1062 and 19 s on 1021.
SPACED_TRIGGER = 0.25
#: warm calls served in order measured before the verdict
TRIAL_CALLS = 24
#: calls of other groups than the trial's first it waits for (a change of head)
SWITCH_CALLS = 8
#: calls left out at the start of a trial: calls admitted before it still queue at the server
TRIAL_SETTLE_CALLS = 16
#: the order is kept when its calls' hit share beats the side-by-side calls' by this much
MARGIN = 0.05
#: the most warm groups with calls on a backend for the order to be tried there: a job of
#: many small prefixes changes head about every window, and each change re-warms a prefix
#: whose copies aged while it waited (the named ``spread`` server, 50 prefixes at c=20: 16
#: warm groups at once, 78.4% -> 73.9% hits with the order kept); the family's jobs have 4
MAX_GROUPS = 8
#: a call admitted within this long of its group's previous call came in a burst
BURST_GAP_S = 0.001
#: a warm call this many times its prefix's prefill long queued at the server
QUEUE_FACTOR = 6.0
#: how long a verdict holds before the backend is measured again
MEMORY_S = 600.0

Phase = Literal["opening", "side", "trial", "kept", "refused"]


@dataclass(slots=True)
class _Measure:
    """Calls of one phase in windows of ``size``: the hits of its last two windows, and the
    last one's misses that came at their group's ordinary spacing (not in a burst)."""

    size: int
    settling: int = 0
    calls: int = 0
    hits: int = 0
    spaced: int = 0
    windows: list[int] = field(default_factory=list)
    last_spaced: int = 0

    def add(self, hit: bool, burst: bool = False) -> bool:
        """Count one call (``burst``: admitted in the same instant as its group's previous
        one); True when it completed a window."""
        if self.settling:
            self.settling -= 1
            return False
        self.calls += 1
        self.hits += hit
        self.spaced += not hit and not burst
        if self.calls < self.size:
            return False
        self.windows = [*self.windows[-1:], self.hits]
        self.last_spaced = self.spaced
        self.calls = self.hits = self.spaced = 0
        return True

    def misses_often(self) -> bool:
        """Its last two windows both missed :data:`TRIGGER` of their calls or more — or its
        last one did at its groups' ordinary spacing (:data:`SPACED_TRIGGER`)."""
        if self.last_spaced >= SPACED_TRIGGER * self.size:
            return True
        return len(self.windows) == 2 and all(
            hits <= (1.0 - TRIGGER) * self.size for hits in self.windows
        )

    @property
    def hit_share(self) -> float:
        """Over its last two windows (or its last one)."""
        return sum(self.windows) / (self.size * len(self.windows)) if self.windows else 0.0


def _side() -> _Measure:
    return _Measure(SIDE_CALLS, settling=SETTLE_CALLS)


@dataclass(slots=True)
class _Trial:
    """The calls served in order, until the head has changed: the order's cost is at a
    change of head (the next prefix's copies aged while it waited; the named ``spread``
    server's many prefixes at c=20: the trial's calls of its first head kept 22 of 24 hits,
    the job 73.9% against 78.4% side by side)."""

    settling: int = field(default_factory=lambda: TRIAL_SETTLE_CALLS)
    calls: int = 0
    hits: int = 0
    head: str | None = None
    others: int = 0

    def add(self, hit: bool, key: str) -> bool:
        """Count one call of group ``key``; True when the trial has measured enough."""
        if self.settling:
            self.settling -= 1
            return False
        self.calls += 1
        self.hits += hit
        if self.head is None:
            self.head = key
        elif key != self.head:
            self.others += 1
        return self.calls >= TRIAL_CALLS and self.others >= SWITCH_CALLS

    @property
    def hit_share(self) -> float:
        return self.hits / self.calls if self.calls else 0.0


@dataclass(slots=True)
class _Backend:
    phase: Phase = "side"
    epoch: int = 0
    until: float = field(default=-math.inf)
    side: _Measure = field(default_factory=_side)
    trial: _Trial = field(default_factory=_Trial)
    opening: Opening = field(default_factory=Opening)
    #: side-by-side samples left in which a queue seen at the server starts the opening
    #: (none once a verdict ran out: the opening is a job's first calls')
    opening_left: int = OPENING_SETTLE_CALLS


class OrderTrial:
    """Per backend: side by side, in a trial of the order, or a verdict on the order."""

    __slots__ = ("_backends",)

    def __init__(self) -> None:
        self._backends: dict[str, _Backend] = {}

    def _state(self, backend: str, now: float) -> _Backend:
        state = self._backends.setdefault(backend, _Backend())
        if state.phase in ("kept", "refused") and state.until <= now:
            # the verdict ran out: measured again on fresh side-by-side calls
            self._backends[backend] = state = _Backend(epoch=state.epoch + 1, opening_left=0)
        return state

    def ordered(self, backend: str, now: float) -> bool:
        """Whether ``backend``'s warm groups are served in order now (the job's opening on a
        queueing server, a trial, or kept)."""
        return self._state(backend, now).phase in ("opening", "trial", "kept")

    def queue_seen(self, backend: str, now: float) -> None:
        """A warm call on ``backend`` took :data:`QUEUE_FACTOR` times its prefix's prefill or
        more: calls queue at the server. In the job's opening, its warm groups go in order
        from now (gptgate/cache_order_opening.py)."""
        state = self._state(backend, now)
        if state.phase == "side" and state.opening_left > 0:
            state.phase, state.epoch, state.opening_left = "opening", state.epoch + 1, 0

    def epoch(self, backend: str, now: float) -> int:
        """The current phase's number: a call admitted now carries it."""
        return self._state(backend, now).epoch

    def phase(self, backend: str, now: float) -> Phase:
        return self._state(backend, now).phase

    def record(
        self, backend: str, *, epoch: int, hit: bool, now: float, key: str = "",
        burst: bool = False,
    ) -> None:
        """One finished warm call (not a warm-up) of group ``key``, admitted in phase
        ``epoch`` while two or more warm groups had calls on ``backend``."""
        state = self._state(backend, now)
        if epoch != state.epoch:
            return  # admitted under another phase: its hits say nothing about this one
        if state.phase == "opening":
            verdict = state.opening.add(hit, key, burst)
            if verdict is not None:
                state.phase, state.epoch = verdict, state.epoch + 1
                state.until = now + MEMORY_S
        elif state.phase == "side":
            state.opening_left = max(0, state.opening_left - 1)
            if state.side.add(hit, burst) and state.side.misses_often():
                state.phase, state.epoch = "trial", state.epoch + 1
        elif state.phase == "trial" and state.trial.add(hit, key):
            pays = state.trial.hit_share >= state.side.hit_share + MARGIN
            state.phase = "kept" if pays else "refused"
            state.epoch += 1
            state.until = now + MEMORY_S
