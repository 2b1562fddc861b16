"""A dollar budget per hour: ``Gateway(..., budget=gg.Budget(usd_per_hour=10))``.

Capacity is planned from the measured cost per call ($10/hour bought 465 calls at concurrency
10, 444 at 50): a budget is the guard rail that holds when the plan was wrong. What counts is
the cost ledger's — every attempt's cost, including the work the server possibly billed for
attempts that produced no result (cancelled streams, hedge losers, timeouts after the send).

Two sliding windows bound the spend, both counting settled costs and in-flight reservations:

* the **hour**: spend in any 3,600 s ≤ ``usd_per_hour`` (the promise);
* the **burst** window of ``burst_s`` seconds: spend in it ≤ ``usd_per_hour × burst_s / 3600``
  (the pace) — so a job 3× over budget spends it evenly over the hour instead of in the first
  minutes and then stopping dead for the rest of it.

A call reserves its most expensive outcome (prompt + ``max_tokens`` at the backend's price) at
admission and settles with its real cost when its attempt ends, so a hundred calls admitted
at once cannot overshoot together. A guarded call's size is unknown until its function
returns: it reserves what its backend's attempts have cost so far (:meth:`BudgetGate.
unsized_estimate`). :class:`SpendWindows` is the pure arithmetic (time passed
in); :class:`BudgetGate` is the async admission (FIFO by priority, on the gateway's clock).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import anyio
from opentelemetry import metrics
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, field_validator

from .clock import Clock
from .errors import BudgetExceededError

__all__ = ["Budget", "BudgetGate", "BudgetHold", "BudgetStatus", "Callers", "SpendWindows"]

log = logging.getLogger("gptgate")

#: the budget's promise holds over any window of this length
HOUR_S = 3600.0
#: a throttling episode (one warning) ends when no call has waited for this long
EPISODE_QUIET_S = 300.0


#: a request's extension: the :class:`Callers` it carries (``gate.embed``), for ``admit``
CALLERS = "gptgate.budget.callers"


@dataclass(slots=True)
class Callers:
    """The callers one request carries (``gate.embed`` merges several into one, and sends
    each alone if the budget refuses them together: gptgate/embed_batcher.py), so that
    ``throttled`` and ``raised`` count each caller once — not the request, nor a caller again
    in the request it is split into."""

    count: int = 1
    #: each caller is sent alone if the budget refuses this request: its refusal is not
    #: counted, theirs are
    split: bool = False
    #: the callers were counted throttled already (set when this request, or the merged one
    #: it was split from, waited): a wait of theirs is not counted again
    waited: bool = False


def _usd(value: float) -> str:
    """A budget in a message: cents, or the figures that matter below a cent ($0.0005/h
    printed as $0.00/h reads as no budget at all)."""
    return f"{value:.2f}" if value >= 0.01 else f"{value:.2g}"


class Budget(BaseModel):
    """A spending limit in dollars per hour, over a sliding hour.

    ``on_exceed="throttle"`` (default): calls wait in the queue until the spend leaves room,
    within their deadline (past it: :class:`~gptgate.BudgetExceededError`). ``"raise"``: a call
    that does not fit fails at once with ``BudgetExceededError``, sending nothing.
    ``burst_s``: the pace — at most ``usd_per_hour × burst_s / 3600`` in any ``burst_s``
    seconds (throttle only; 3600 turns pacing off: the hour may go in its first minute)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    usd_per_hour: StrictFloat = Field(gt=0)
    on_exceed: Literal["throttle", "raise"] = "throttle"
    burst_s: StrictFloat = Field(default=300.0, ge=1.0, le=HOUR_S)

    @field_validator("usd_per_hour", "burst_s", mode="before")
    @classmethod
    def _no_bool(cls, value: object) -> object:
        if isinstance(value, bool):  # True is not $1
            raise ValueError("must be a number, not a bool")
        return value

    @property
    def burst_usd(self) -> float:
        return self.usd_per_hour * self.burst_s / HOUR_S


class _Window:
    """Settled spend over the last ``horizon_s`` seconds, against ``cap_usd``."""

    __slots__ = ("cap_usd", "entries", "horizon_s", "total")

    def __init__(self, horizon_s: float, cap_usd: float) -> None:
        self.horizon_s = horizon_s
        self.cap_usd = cap_usd
        self.entries: deque[tuple[float, float]] = deque()
        self.total = 0.0

    def add(self, now: float, usd: float) -> None:
        """Count ``usd`` as spent at the end of the current second: one entry a second
        however many calls end in it (an hour at 100 calls/s is 3,600 entries, not 360,000),
        and it leaves the window at most a second late, never early."""
        stamp = math.floor(now) + 1.0
        entries = self.entries
        if entries and entries[-1][0] == stamp:
            entries[-1] = (stamp, entries[-1][1] + usd)
        else:
            entries.append((stamp, usd))
        self.total += usd

    def prune(self, now: float) -> None:
        entries, horizon = self.entries, now - self.horizon_s
        while entries and entries[0][0] <= horizon:
            self.total -= entries.popleft()[1]
        if not entries:
            self.total = 0.0  # no float drift left behind

    def room_at(self, now: float, usd: float, held: float) -> float | None:
        """The earliest time ≥ ``now`` at which ``usd`` more fits, if no more is spent and
        nothing held settles; None when the held reservations alone leave no room (it frees
        up only as they settle). A call larger than the whole cap fits an empty window."""
        self.prune(now)
        excess = self.total + held + min(usd, self.cap_usd) - self.cap_usd
        if excess <= 1e-12:
            return now
        for at, amount in self.entries:
            excess -= amount
            if excess <= 1e-12:
                return at + self.horizon_s
        return None


class SpendWindows:
    """The pure spend tracker: settled costs and held reservations in the hour and burst
    windows. Every method takes ``now``; nothing here sleeps or reads a clock."""

    __slots__ = ("_held", "_ids", "budget", "windows")

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        paced = budget.on_exceed == "throttle" and budget.burst_s < HOUR_S
        self.windows = [_Window(HOUR_S, budget.usd_per_hour)]
        if paced:
            self.windows.append(_Window(budget.burst_s, budget.burst_usd))
        self._held: dict[int, float] = {}
        self._ids = itertools.count(1)

    @property
    def held_usd(self) -> float:
        return math.fsum(self._held.values())

    def spent(self, now: float) -> float:
        """Settled spend in the last hour."""
        hour = self.windows[0]
        hour.prune(now)
        return max(0.0, hour.total)

    def record(self, now: float, usd: float) -> None:
        """A real (or possibly billed) cost, from the ledger."""
        if usd > 0:
            for window in self.windows:
                window.add(now, usd)

    def room_at(self, now: float, usd: float) -> float | None:
        """When ``usd`` more fits every window (``now`` if it does now; None: only once
        reservations in flight settle)."""
        held = self.held_usd
        latest = now
        for window in self.windows:
            at = window.room_at(now, usd, held)
            if at is None:
                return None
            latest = max(latest, at)
        return latest

    def reserve(self, usd: float) -> int:
        key = next(self._ids)
        self._held[key] = usd
        return key

    def resize(self, key: int, usd: float) -> None:
        if key in self._held:
            self._held[key] = usd

    def release(self, key: int) -> bool:
        return self._held.pop(key, None) is not None


@dataclass(slots=True)
class BudgetHold:
    """A reservation held by one attempt from admission until its cost is in the ledger."""

    key: int
    usd: float


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """``gate.budget_status()``: the window's spend against the budget, and what it did."""

    usd_per_hour: float
    on_exceed: str
    #: settled spend (the ledger's, possibly billed work included) in the last hour
    spent_usd: float
    #: reservations of attempts in flight (their most expensive outcome)
    reserved_usd: float
    #: calls waiting for room now
    waiting: int
    #: calls that had to wait (throttle), and calls refused (raise, or a deadline in throttle)
    throttled: int
    raised: int
    #: a throttling episode is under way: from the first wait until no call has waited for
    #: five minutes
    throttling: bool


@dataclass(order=True, slots=True)
class _Waiter:
    rank: tuple[int, int]
    usd: float = field(default=0.0, compare=False)
    turn: anyio.Event = field(default_factory=anyio.Event, compare=False)


class BudgetGate:
    """Admission against a :class:`Budget`: reserve, wait (throttle) or refuse (raise).

    Waiters queue by priority, then arrival; only the head watches the clock (and hears of
    released reservations), so a thousand queued calls cost one timer. One warning is logged
    per throttling episode (from the first wait until no call has waited for
    ``EPISODE_QUIET_S``), not per call."""

    def __init__(
        self, budget: Budget, clock: Clock, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        self.budget = budget
        self.clock = clock
        self.windows = SpendWindows(budget)
        self._queue: list[_Waiter] = []
        self._order = itertools.count()
        self.throttled = 0
        self.raised = 0
        #: when a call last waited or was admitted after waiting (a throttling episode lasts
        #: until none has for EPISODE_QUIET_S)
        self._last_wait = -math.inf
        meter = metrics.get_meter("gptgate", meter_provider=meter_provider)
        meter.create_observable_gauge(
            "gptgate.client.budget.spend", callbacks=[self._observe], unit="USD",
            description="Spend in the budget's sliding hour (settled, and reserved in flight)",
        )
        self._refusals = meter.create_counter(
            "gptgate.client.budget.refused", unit="{call}",
            description="Calls the dollar budget made wait (throttled) or refused (raised)",
        )

    def _observe(self, options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        now = self.clock.now()
        yield metrics.Observation(self.windows.spent(now), {"gptgate.budget.state": "settled"})
        yield metrics.Observation(self.windows.held_usd, {"gptgate.budget.state": "reserved"})

    # -- the ledger's side ----------------------------------------------------------------

    def record(self, usd: float) -> None:
        """Every cost the ledger counts (``gate.chat``, guarded calls, SDK traffic)."""
        self.windows.record(self.clock.now(), usd)

    def release(self, hold: BudgetHold) -> None:
        """The attempt's real cost is in the ledger: its reservation goes, and the head of
        the queue looks again (the real cost is usually below the reservation)."""
        if self.windows.release(hold.key):
            self._wake_head()

    def resize(self, hold: BudgetHold, usd: float) -> None:
        """The call moved to another backend before it was sent: reserve at its price."""
        hold.usd = usd
        self.windows.resize(hold.key, usd)

    def commit(self, usd: float) -> BudgetHold | None:
        """Hold ``usd`` already committed without asking (a batch job submitted by an earlier
        process, resumed here): its cost settles from its results like any reservation."""
        return self._grant(usd)

    # -- admission ------------------------------------------------------------------------

    def unsized_estimate(self, learned_usd: float | None, typical_usd: float) -> float:
        """What a call of unknown size (a guarded call) reserves: the mean cost of its
        backend's attempts so far, once one has cost anything; before that a typical call's
        price, but never more than the budget holds. A guess dearer than the whole budget
        would refuse every guarded call for good — nothing admitted, so nothing learned —
        although each may cost a fraction of it: reserving the whole budget instead lets one
        run at a time until the ledger knows what they cost."""
        if learned_usd is not None and learned_usd > 0:
            return learned_usd
        return min(typical_usd, *(window.cap_usd for window in self.windows.windows))

    async def admit(
        self,
        usd: float,
        *,
        priority: int = 0,
        deadline: float | None = None,
        guarded: bool = False,
        counted: bool = True,
        embedding: bool = False,
        callers: Callers | None = None,
    ) -> BudgetHold | None:
        """Admit a call that may cost up to ``usd``: its reservation (None for $0).

        ``guarded``: ``usd`` is :meth:`unsized_estimate`'s (the advice on refusal says what
        such a call can change); ``embedding``: an embeddings request (no ``max_tokens`` to
        lower: its advice is fewer or shorter texts). ``counted=False``: a try whose refusal
        is not its call's — a hedge's duplicate, an escalation (the call keeps its first
        answer) — is not counted among the calls throttled or raised. ``callers``: whom the
        request carries (``gate.embed``'s, possibly merged): a wait counts each of them
        throttled once; a refusal, unless they are each sent alone after it (``split``)."""
        now = self.clock.now()
        raised_counted = counted and not (callers is not None and callers.split)
        if usd > self.budget.usd_per_hour:
            self._refused("raised", raised_counted)
            advice = (
                "(the mean cost of its backend's attempts so far): raise the budget, or "
                "guard a cheaper backend (@gate.guard(backend=...))"
                if guarded
                else "embed fewer or shorter texts per call, or raise the budget"
                if embedding
                else "lower max_tokens or raise the budget"
            )
            raise BudgetExceededError(
                f"this {'guarded ' if guarded else ''}call may cost ${usd:.4f}, more than the "
                f"whole budget of ${_usd(self.budget.usd_per_hour)}/h: {advice}",
                spent_usd=self.windows.spent(now), budget_usd=self.budget.usd_per_hour,
            )
        if not self._queue:
            at = self.windows.room_at(now, usd)
            if at is not None and at <= now:
                return self._grant(usd)
            if self.budget.on_exceed == "raise":
                self._refused("raised", raised_counted)
                raise self._exceeded(now, usd, at)
        return await self._wait(usd, priority, deadline, counted, raised_counted, callers)

    def _grant(self, usd: float) -> BudgetHold | None:
        if usd <= 0:
            return None
        return BudgetHold(self.windows.reserve(usd), usd)

    async def _wait(
        self, usd: float, priority: int, deadline: float | None, counted: bool,
        raised_counted: bool, callers: Callers | None = None,
    ) -> BudgetHold | None:
        clock = self.clock
        now = clock.now()
        episode, self._last_wait = self._throttling(now), now
        waiter = _Waiter((-priority, next(self._order)), usd)
        heapq.heappush(self._queue, waiter)
        if callers is None:
            self._refused("throttled", counted)
        elif counted and not callers.waited:
            callers.waited = True
            self._refused("throttled", count=callers.count)
        if not episode:
            log.warning(
                "budget: throttling — $%.2f spent and $%.2f reserved in the last hour of "
                "$%.2f/h; calls wait for room (gate.budget_status())",
                self.windows.spent(now), self.windows.held_usd, self.budget.usd_per_hour,
            )
        try:
            while True:
                now = clock.now()
                if waiter.turn.is_set():  # woken: look again, and wait on a fresh event
                    waiter.turn = anyio.Event()
                until = deadline
                if self._queue[0] is waiter:
                    at = self.windows.room_at(now, usd)
                    if at is not None and at <= now:
                        heapq.heappop(self._queue)
                        self._wake_head()
                        self._last_wait = now
                        return self._grant(usd)
                    late = at is not None and deadline is not None and at > deadline
                    if late or (deadline is not None and now >= deadline):
                        # room comes too late: fail now
                        raise self._late(now, usd, raised_counted, at)
                    if at is not None:
                        until = at if deadline is None else min(at, deadline)
                elif deadline is not None and now >= deadline:
                    raise self._late(now, usd, raised_counted)
                # the head: until room, or a release; behind it: until its turn
                await self._until(waiter.turn, now, until)
        finally:
            if waiter in self._queue:
                head = self._queue[0] is waiter
                self._queue.remove(waiter)
                heapq.heapify(self._queue)
                if head:
                    self._wake_head()

    async def _until(self, event: anyio.Event, now: float, until: float | None) -> None:
        """Wait for ``event``, or until the clock reads ``until``."""
        if until is None:
            await event.wait()
            return
        with anyio.move_on_after(self.clock.to_real(max(0.0, until - now))):
            await event.wait()

    def _throttling(self, now: float) -> bool:
        return bool(self._queue) or now - self._last_wait < EPISODE_QUIET_S

    def _wake_head(self) -> None:
        if self._queue:
            self._queue[0].turn.set()

    # -- errors ---------------------------------------------------------------------------

    def _refused(
        self, how: Literal["throttled", "raised"], counted: bool = True, count: int = 1
    ) -> None:
        if not counted:
            return
        if how == "throttled":
            self.throttled += count
        else:
            self.raised += count
        self._refusals.add(count, {"gptgate.budget.outcome": how})

    def _late(
        self, now: float, usd: float, counted: bool, at: float | None = None
    ) -> BudgetExceededError:
        self._refused("raised", counted)
        error = self._exceeded(now, usd, at if at is not None else self.windows.room_at(now, usd))
        error.message = f"throttled past the call's deadline: {error.message}"
        error.args = (error.message,)
        return error

    def _exceeded(self, now: float, usd: float, at: float | None) -> BudgetExceededError:
        spent, held, cap = self.windows.spent(now), self.windows.held_usd, self.budget
        when = (
            f"room for it frees up in {at - now:.0f} s"
            if at is not None
            else "room frees up as the calls in flight settle"
        )
        return BudgetExceededError(
            f"dollar budget exceeded: ${spent:.4f} spent and ${held:.4f} reserved in the last "
            f"hour of ${_usd(cap.usd_per_hour)}/h; this call may cost ${usd:.4f}; {when}",
            spent_usd=spent,
            budget_usd=cap.usd_per_hour,
            retry_after=None if at is None else round(max(0.0, at - now), 1),
        )

    def status(self) -> BudgetStatus:
        now = self.clock.now()
        return BudgetStatus(
            usd_per_hour=self.budget.usd_per_hour,
            on_exceed=self.budget.on_exceed,
            spent_usd=self.windows.spent(now),
            reserved_usd=self.windows.held_usd,
            waiting=len(self._queue),
            throttled=self.throttled,
            raised=self.raised,
            throttling=self._throttling(now),
        )
