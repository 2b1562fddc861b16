"""When a hedge's duplicate may go: once a call has waited past its backend's normal wait with
nothing to show, unless the backend is merely slow for everyone (Dean & Barroso, "The Tail at
Scale": a duplicate helps a request that is unlucky, not one behind a queue).

Why the second condition. A request stalled before it was scheduled (a slow balancer hop, a
request parked on a busy front end) shows nothing until it is let through, while the backend
answers the requests sent after it: it is *overtaken*, and a duplicate, a fresh chance, wins.
A request that waits because the backend's queue is long is answered in send order: the
requests sent after it wait too, and a duplicate would join the back of the same queue — on
one backend it only adds load, and on a saturated server a burst of such duplicates feeds on
itself (p99 2.45× unhedged on the simulator's ``plateau`` profile). So a call past the normal
wait is hedged when a request sent after it has shown progress, or when none was sent after
it (a lone call: nothing tells a stall from a slow backend, and a duplicate costs no queue of
ours); while later requests wait as it does, it waits for one of them to overtake it.

The normal wait is the policy's quantile of the backend's recent first tokens (a call on the
wire as SSE; its whole answers until it has enough first tokens) or whole answers (JSON),
taken once the far outliers are set aside — beyond the median + 9 median absolute deviations,
about Tukey's far fence: the stalls that were not hedged must not teach the hedge to wait as long
as they did (at 5% stalls the plain p95 *is* a stall). Samples are taken when the first token
(or answer) arrives, not when the call ends, and only from attempts that got one — a loser cut
before its first token is not counted, nor is its wait.
"""

from __future__ import annotations

from collections import deque

import anyio

from .clock import Clock
from .errors import GateError
from .hedge import HedgeBudget, HedgePolicy
from .limits.pacing import RateLimitPacer

__all__ = [
    "FAR_FENCE_MADS", "OUTLIER_MADS", "REPLACEMENTS", "Progress", "Waits", "await_both_lost",
    "await_hedge_room", "refused_as_full",
]

#: beyond the median + this many median absolute deviations a wait is no normal wait (about
#: Tukey's far fence, robust up to half the waits stalled where quartiles break at a quarter)
FAR_FENCE_MADS = 9.0
#: and beyond this many (about Tukey's inner fence) the request is surely stuck
OUTLIER_MADS = 4.0
#: how far past a fence a request is first seen as past it (a clock's tick)
_PAST = 1e-3
#: a duplicate lost as its call's request is (both past the far fence, nothing shown) is
#: replaced by a fresh one at most this many times
REPLACEMENTS = 2


class Waits:
    """Recent waits of one kind (to a first token, or to a whole answer)."""

    __slots__ = ("_normal", "_waits", "count", "fence")

    def __init__(self, size: int = 512) -> None:
        self._waits: deque[float] = deque(maxlen=size)
        self.count = 0
        #: (count, quantile, the normal and the stuck wait then): calls woken together sort once
        self._normal: tuple[int, float, float, float] | None = None
        #: the far fence when :meth:`normal` last sorted: past it no wait is a normal one
        self.fence = float("inf")

    def add(self, wait: float) -> None:
        self._waits.append(wait)
        self.count += 1

    def normal(self, quantile: float) -> tuple[float, float]:
        """``quantile`` of the recent waits, far outliers set aside, and the wait past which
        a request is surely stuck (at least one sample)."""
        cached = self._normal
        if cached is not None and cached[0] == self.count and cached[1] == quantile:
            return cached[2], cached[3]
        ordered = sorted(self._waits)
        last = len(ordered) - 1
        median = ordered[last // 2]
        spread = sorted(abs(wait - median) for wait in ordered)[last // 2]  # the MAD
        fence = self.fence = median + FAR_FENCE_MADS * spread
        kept = last
        while ordered[kept] > fence:
            kept -= 1
        normal = ordered[round(quantile * kept)]
        stuck = max(normal, median + OUTLIER_MADS * spread)
        self._normal = (self.count, quantile, normal, stuck)
        return normal, stuck


class Progress:
    """One backend's requests as a hedge sees them: the latest send, and for the requests
    that showed something (a first token, or a JSON answer), when they were sent and waited."""

    __slots__ = (
        "_changed", "answers", "first_tokens", "latest_refused", "latest_sent", "latest_shown"
    )

    def __init__(self) -> None:
        self.first_tokens = Waits()
        self.answers = Waits()
        self.latest_sent = float("-inf")
        #: the latest send among the requests that showed something
        self.latest_shown = float("-inf")
        #: when the backend last refused a request as too many (429, 503)
        self.latest_refused = float("-inf")
        #: made when a hedge waits on it: every attempt tells ``shown``, few have a hedge
        self._changed: anyio.Event | None = None

    def sent(self, at: float) -> None:
        self.latest_sent = max(self.latest_sent, at)

    def refused(self, at: float) -> None:
        self.latest_refused = at

    def shown(self, sent_at: float, now: float, first_token: bool) -> None:
        (self.first_tokens if first_token else self.answers).add(now - sent_at)
        self.latest_shown = max(self.latest_shown, sent_at)
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def changed(self) -> None:
        """Until a request shows something."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def normal_wait(
        self, quantile: float, min_samples: int, first_token: bool
    ) -> tuple[float, float] | None:
        """The normal wait to a first token (or a whole answer) and the stuck one; None
        before ``min_samples`` (the whole answers' stand in for first tokens until there are
        enough of those)."""
        for waits in (self.first_tokens, self.answers) if first_token else (self.answers,):
            if waits.count >= min_samples:
                return waits.normal(quantile)
        return None

    def lost(self, waited: float, quantile: float, min_samples: int, first_token: bool) -> bool:
        """A request that has ``waited`` with nothing to show, past the far fence of the
        normal waits: lost before its first token (a stall), not merely slow — a tail of
        slow first tokens, even past the stuck wait, was prefilled and billed when cancelled
        (a drawn server without stalls: +2.2% billed when those counted as lost)."""
        for waits in (self.first_tokens, self.answers) if first_token else (self.answers,):
            if waits.count >= min_samples:
                waits.normal(quantile)
                return waited > waits.fence
        return False

    def lend_at(
        self, sent_at: float, now: float, quantile: float, min_samples: int, first_token: bool
    ) -> float | None:
        """When a duplicate asking for a permit ``now`` may borrow one past the limit
        (gptgate/hedge_permit.py): once its call's request, sent at ``sent_at`` and showing
        nothing, is :meth:`lost` (past the far fence as it stands now), and not before it has
        waited one normal wait in turn — a permit that frees by then comes without borrowing,
        and a request that answers meanwhile needs no duplicate (family draw 24: lent at the
        far fence alone, the first wave's slowest first tokens, 5 ms past a fence drawn from
        20 samples, took the budget the job's stalls needed: p99 0.86× for 0.72×). None
        before ``min_samples``."""
        lost = self.lost_at(sent_at, quantile, min_samples, first_token)
        normal = self.normal_wait(quantile, min_samples, first_token)
        return None if lost is None or normal is None else max(lost, now + normal[0])

    def lost_at(
        self, sent_at: float, quantile: float, min_samples: int, first_token: bool
    ) -> float | None:
        """When a request sent at ``sent_at`` that shows nothing counts as :meth:`lost`
        (past the far fence as it stands now); None before ``min_samples``."""
        for waits in (self.first_tokens, self.answers) if first_token else (self.answers,):
            if waits.count >= min_samples:
                waits.normal(quantile)
                return sent_at + waits.fence
        return None

    def held_back(self, sent_at: float) -> bool:
        """Requests sent after ``sent_at`` exist and none of them has shown anything yet:
        the backend is slow for everyone, not for this request. Or it has refused a request
        as too many since: it is full, and a duplicate would take the place of another."""
        return self.latest_sent > sent_at >= self.latest_shown or self.latest_refused >= sent_at


def refused_as_full(error: GateError, pacer: RateLimitPacer, now: float) -> bool:
    """A refusal that says the backend is full (a 503, or a 429 while its reported rate
    limits had room: a bounded queue): a duplicate would take the place of another request
    on the server. A 429 with the reported requests or tokens spent is a quota, not a full
    server — a duplicate waits for the pacer like any call and costs a share of the quota,
    the load Tail at Scale pays for its tail, not a slot."""
    if error.status == 503:
        return True
    if error.status != 429:
        return False
    funded = pacer.funded_calls(now)
    return funded is None or funded >= 1.0


async def await_hedge_room(
    progress: Progress,
    budget: HedgeBudget,
    sent_at: float,
    policy: HedgePolicy,
    first_token: bool,
    clock: Clock,
) -> float:
    """Return, with the budget's room taken (the time it was), once a request sent at
    ``sent_at`` that has shown nothing yet may be hedged (the caller cancels this when it
    shows something). Before ``min_samples`` the normal wait is unknown: wait for them, then
    count from the send — a job's first calls, sent together, are hedged too.

    Past the normal wait a call may take only the first half of the budget: the other half is
    kept for the calls surely stuck (past the median + ``OUTLIER_MADS`` spreads: a stall) where
    the others may be merely slow — when both want more than the budget, the stuck ones get
    it, longest waiter first."""
    await _past(progress, sent_at, policy, first_token, clock, stuck=False)
    now = clock.now()
    if budget.try_spend(now, share=0.5):
        return now
    await _past(progress, sent_at, policy, first_token, clock, stuck=True)
    now = clock.now()
    if budget.try_spend(now):
        return now
    return await budget.wait_turn(sent_at)


async def _past(
    progress: Progress,
    sent_at: float,
    policy: HedgePolicy,
    first_token: bool,
    clock: Clock,
    stuck: bool,
) -> None:
    """Until the request has waited past the normal (or the stuck) wait and the backend is
    not holding back the requests sent after it too."""
    while True:
        waits = progress.normal_wait(policy.quantile, policy.min_samples, first_token)
        if waits is None:
            await progress.changed()
            continue
        wait = sent_at + waits[stuck] - clock.now()
        if wait > 0:
            await clock.sleep(wait)
            continue  # the normal wait may have grown meanwhile
        if not progress.held_back(sent_at):
            return
        await progress.changed()


async def await_both_lost(
    first: Progress,
    first_sent: float,
    duplicate: Progress,
    duplicate_sent: float,
    policy: HedgePolicy,
    first_token: bool,
    clock: Clock,
) -> None:
    """Until a call's request (sent at ``first_sent``) and its duplicate have both waited past
    the far fence with nothing to show (the caller cancels this when either shows
    something): the duplicate stalled too, and a fresh one — a new draw of the server's luck
    — replaces it in its room and permit. A stall is a request's luck, not the call's: on
    family draw 1035 (4.8% of the requests stalled 3.4–4.8 s) three of the job's four
    slowest calls were those whose duplicate stalled as well (5.0–5.7 s against a p99 of
    2.6 s for the oracle hedger, which re-draws a stalled copy as often as it takes)."""
    while True:
        times = [
            progress.lost_at(sent, policy.quantile, policy.min_samples, first_token)
            for progress, sent in ((first, first_sent), (duplicate, duplicate_sent))
        ]
        if times[0] is None or times[1] is None:
            await duplicate.changed()
            continue
        wait = max(times[0], times[1]) - clock.now()
        if wait < 0:
            return
        # strictly past it (as ``lost``): one answering at the fence itself is no stall
        await clock.sleep(wait + _PAST)  # the fence may have moved meanwhile
