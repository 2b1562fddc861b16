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
taken once the far outliers are set aside — above Tukey's far fence, the upper quartile + 3
interquartile ranges: the stalls that were not hedged must not teach the hedge to wait as long
as they did (at 5% stalls the plain p95 *is* a stall). Samples are taken when the first token
(or answer) arrives, not when the call ends, and only from attempts that got one — a loser cut
before its first token is not counted, nor is its wait.
"""

from __future__ import annotations

from collections import deque

import anyio

from .clock import Clock

__all__ = ["FAR_FENCE_IQR", "Progress", "Waits", "await_hedge_moment"]

#: beyond the upper quartile + this many interquartile ranges a wait is no normal wait
FAR_FENCE_IQR = 3.0


class Waits:
    """Recent waits of one kind (to a first token, or to a whole answer)."""

    __slots__ = ("_normal", "_waits", "count")

    def __init__(self, size: int = 512) -> None:
        self._waits: deque[float] = deque(maxlen=size)
        self.count = 0
        #: (count, quantile, the normal wait then): the calls woken together sort once
        self._normal: tuple[int, float, float] | None = None

    def add(self, wait: float) -> None:
        self._waits.append(wait)
        self.count += 1

    def normal(self, quantile: float) -> float:
        """``quantile`` of the recent waits, far outliers set aside (at least one sample)."""
        cached = self._normal
        if cached is not None and cached[0] == self.count and cached[1] == quantile:
            return cached[2]
        ordered = sorted(self._waits)
        last = len(ordered) - 1
        q1, q3 = ordered[round(0.25 * last)], ordered[round(0.75 * last)]
        fence = q3 + FAR_FENCE_IQR * (q3 - q1)
        kept = last
        while ordered[kept] > fence:
            kept -= 1
        normal = ordered[round(quantile * kept)]
        self._normal = (self.count, quantile, normal)
        return normal


class Progress:
    """One backend's requests as a hedge sees them: the latest send, and for the requests
    that showed something (a first token, or a JSON answer), when they were sent and waited."""

    __slots__ = ("_changed", "answers", "first_tokens", "latest_sent", "latest_shown")

    def __init__(self) -> None:
        self.first_tokens = Waits()
        self.answers = Waits()
        self.latest_sent = float("-inf")
        #: the latest send among the requests that showed something
        self.latest_shown = float("-inf")
        self._changed = anyio.Event()

    def sent(self, at: float) -> None:
        self.latest_sent = max(self.latest_sent, at)

    def shown(self, sent_at: float, now: float, first_token: bool) -> None:
        (self.first_tokens if first_token else self.answers).add(now - sent_at)
        self.latest_shown = max(self.latest_shown, sent_at)
        self._changed.set()
        self._changed = anyio.Event()

    async def changed(self) -> None:
        """Until a request shows something."""
        await self._changed.wait()

    def normal_wait(self, quantile: float, min_samples: int, first_token: bool) -> float | None:
        """The normal wait to a first token (or a whole answer); None before ``min_samples``
        (the whole answers' stand in for first tokens until there are enough of those)."""
        for waits in (self.first_tokens, self.answers) if first_token else (self.answers,):
            if waits.count >= min_samples:
                return waits.normal(quantile)
        return None

    def held_back(self, sent_at: float) -> bool:
        """Requests sent after ``sent_at`` exist and none of them has shown anything yet:
        the backend is slow for everyone, not for this request."""
        return self.latest_sent > sent_at >= self.latest_shown


async def await_hedge_moment(
    progress: Progress,
    sent_at: float,
    quantile: float,
    min_samples: int,
    first_token: bool,
    clock: Clock,
) -> None:
    """Return once a request sent at ``sent_at`` that has shown nothing yet may be hedged
    (the caller cancels this when it shows something). Before ``min_samples`` the normal wait
    is unknown: wait for them, then count from the send — a job's first calls, sent together,
    are hedged too."""
    while True:
        normal = progress.normal_wait(quantile, min_samples, first_token)
        if normal is None:
            await progress.changed()
            continue
        wait = sent_at + normal - clock.now()
        if wait > 0:
            await clock.sleep(wait)
            continue  # the normal wait may have grown meanwhile
        if not progress.held_back(sent_at):
            return
        await progress.changed()
