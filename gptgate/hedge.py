"""Tail hedging: after a call has waited past its backend's normal wait (p95) and been
overtaken, send one duplicate and keep whichever answers first (Dean & Barroso, "The Tail at
Scale": a job ends with its slowest call). When exactly is gptgate/hedge_timing.py.

:class:`HedgePolicy` is the opt-in (``gate.chat(..., hedge=True)`` or
``Scenario(hedge=HedgePolicy(...))``); :class:`HedgeBudget` caps duplicates at a fraction of
the hedge-enabled calls over a sliding window, so hedging can never become a load multiplier
(those that replaced a request lost before its first token at twice that fraction).
The race itself is in ``HedgeRace`` (gptgate/hedge_race.py).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, StrictBool

__all__ = ["REPLACED_ALLOWANCE", "HedgeBudget", "HedgePolicy", "resolve_hedge", "uses_tools"]

#: duplicates that replaced a request lost before its first token, and those that doubled
#: work, together ≤ this many times the budget's ratio (the latter alone ≤ once)
REPLACED_ALLOWANCE = 2.0


class HedgePolicy(BaseModel):
    """When to send a duplicate of a slow call, and how many of them at most."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    #: hedge once the call has waited past this quantile of its backend's latency (whole
    #: answer) or time to first token (stream), measured from the send, far outliers (the
    #: stalls themselves) set aside — and requests sent after it have overtaken it
    quantile: float = Field(default=0.95, gt=0, lt=1)
    #: duplicates that double work ≤ this fraction of the hedge-enabled calls over
    #: ``window_s``; a duplicate that won while its call's request had shown nothing (no
    #: token: a request lost before its first token) replaced it and counts against an
    #: allowance as large again — all duplicates ≤ twice this fraction
    budget_ratio: float = Field(default=0.05, gt=0, le=1)
    window_s: float = Field(default=60.0, gt=0)
    #: a call waits until the backend has this many latencies (its p95 is not known before)
    min_samples: int = Field(default=20, ge=1)
    #: a call with ``tools`` is hedged only when its tools are idempotent: the user says so
    tools: StrictBool = False


def resolve_hedge(hedge: object, scenario_hedge: HedgePolicy | None) -> HedgePolicy | None:
    """The call's ``hedge=`` (True, False, a policy, or None for the scenario's)."""
    from .errors import BadRequestError

    if hedge is None:
        return scenario_hedge
    if hedge is True:
        return scenario_hedge or HedgePolicy()
    if hedge is False:
        return None
    if isinstance(hedge, HedgePolicy):
        return hedge
    raise BadRequestError(f"hedge must be True, False, None or a HedgePolicy, not {hedge!r}")


def uses_tools(params: Mapping[str, Any]) -> bool:
    return bool(params.get("tools") or params.get("functions"))


class HedgeBudget:
    """Hedges ≤ ``ratio`` × calls over the last ``window_s`` seconds — never exceeded: a hedge
    is spent only when one more still fits under the cap.

    A call past its threshold that finds the budget spent waits in line (:meth:`wait_turn`);
    each new call that makes room gives it to the call that has waited longest since its send
    — the one most likely to be the job's tail — not to whichever crossed its threshold next."""

    def __init__(self, ratio: float, window_s: float) -> None:
        self.ratio = ratio
        self.window_s = window_s
        self._calls: deque[float] = deque()
        self._hedges: deque[float] = deque()
        #: duplicates that replaced a request lost before its first token (see replaced)
        self._replaced: deque[float] = deque()
        #: calls past their threshold waiting for room: (sent at, arrival, granted)
        self._waiting: list[tuple[float, int, anyio.Event]] = []
        self._arrivals = 0
        #: arrival → when its room was granted (a grant cancelled before use is given back)
        self._granted_at: dict[int, float] = {}

    def _trim(self, now: float) -> None:
        edge = now - self.window_s
        for times in (self._calls, self._hedges, self._replaced):
            while times and times[0] <= edge:
                times.popleft()

    def record_call(self, now: float) -> None:
        self._calls.append(now)
        self._grant(now)

    def _grant(self, now: float) -> None:
        """Room made: to the waiting calls, longest waiter first."""
        waiting = self._waiting
        while waiting and self.try_spend(now):
            _, arrival, granted = heapq.heappop(waiting)  # the longest waiter gets the room
            self._granted_at[arrival] = now
            granted.set()

    def try_spend(self, now: float, share: float = 1.0) -> bool:
        """Take room for one hedge if it fits under ``share`` of the cap."""
        self._trim(now)
        cap = self.ratio * len(self._calls)
        doubled = len(self._hedges) + 1
        if doubled > share * cap or doubled + len(self._replaced) > REPLACED_ALLOWANCE * cap:
            return False
        self._hedges.append(now)
        return True

    def replaced(self, spent_at: float, now: float) -> None:
        """The duplicate spent at ``spent_at`` won while its call's first request had shown
        nothing (no token): it replaced a request lost before its first token — a stall
        before scheduling, billed nothing when cancelled — rather than doubling work. It moves
        from the cap to an allowance as large again (so duplicates stay ≤ twice the ratio),
        and its room goes to the next waiting call: where stalls come at the budget's own
        rate (family draw 64: 4.8% of the requests against 5%), the stalls that came after
        the budget was spent waited their turn (p99 0.78× for 0.23× with room for all, at
        +0.6% billed)."""
        if spent_at in self._hedges:
            self._hedges.remove(spent_at)
            self._replaced.append(now)
            self._grant(now)

    def give_back(self, spent_at: float, now: float | None = None) -> None:
        """A hedge spent at ``spent_at`` that was not sent after all (its call answered): with
        ``now``, its room goes to the next waiting call."""
        if spent_at in self._hedges:
            self._hedges.remove(spent_at)
            if now is not None:
                self._grant(now)

    async def wait_turn(self, sent_at: float) -> float:
        """Wait for room, ahead of every call sent after ``sent_at``; the time it was granted.
        A waiter cancelled (its call answered) leaves the line; one cancelled just as it was
        granted gives it back."""
        granted = anyio.Event()
        self._arrivals += 1
        entry = (sent_at, self._arrivals, granted)
        heapq.heappush(self._waiting, entry)
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():  # not sent: the budget gets it back
                self.give_back(self._granted_at[entry[1]])
            else:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            raise
        finally:
            spent_at = self._granted_at.pop(entry[1], None)
        assert spent_at is not None
        return spent_at

    @property
    def spent(self) -> int:
        return len(self._hedges)
