"""Fleet-wide RPM/TPM pacing: one request budget and one token budget per backend for the
whole fleet, so N processes together stay under the provider's limits instead of N × them.

Without ``shared=`` every process paces from the ``x-ratelimit-*`` headers it sees
(:class:`~gptgate.limits.RateLimitPacer`); but ``remaining`` counts the whole fleet's use,
so each process believes the whole remainder is its own and N of them spend it N times over —
a 429 storm. With ``shared=`` the budgets live in Redis (:data:`~gptgate.shared.scripts.PACE`)
as the same corrected token buckets: each call takes one request and ``prompt + max_tokens``
tokens there and waits the delay it is told; any process's report corrects the fleet's level.

A report is exact when it knows its call's place in the fleet's sequence of takes: the
server had counted everything up to that call's take, and none of what the fleet took after
it, so ``level = remaining − headroom − taken since`` (plus the refill since the report).

Cost: one Redis round trip per call (the take), which also carries this process's queued
releases of the backend's permits, its latest report and its reconciled tokens — nothing
is sent on its own. A process that has seen no budget itself looks for the fleet's once a
second (``PROBE_S``), so a backend that sends no ``x-ratelimit-*`` headers costs nothing more.

Redis away: the call is paced locally by a :class:`RateLimitPacer` fed the same reports
scaled to this process's share (``1 ÷`` the live workers last seen), as the concurrency
fallback admits on its share of the limit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..limits.pacing import RateLimitPacer
from . import scripts
from .fleet import _RedisDown

if TYPE_CHECKING:
    from ..config import Backend
    from ..wire.ratelimits import RateLimitInfo
    from .fleet import FleetClient

__all__ = ["FleetPacer", "FleetPacerStatistics", "PaceSeq"]

#: how often a process that has seen no budget looks for one the fleet knows (real seconds)
PROBE_S = 1.0

#: where a call's take stands in the fleet's sequence: (requests, tokens) taken up to it
PaceSeq = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Report:
    at_ms: int
    seq: PaceSeq | None
    limit_requests: float | None
    remaining_requests: float | None
    limit_tokens: float | None
    remaining_tokens: float | None

    def args(self) -> list[float | int]:
        def value(x: float | None) -> float:
            return -1.0 if x is None else float(x)

        seq = self.seq or (-1, -1)
        return [
            self.at_ms, seq[0], seq[1],
            value(self.limit_requests), value(self.remaining_requests),
            value(self.limit_tokens), value(self.remaining_tokens),
        ]


_NO_REPORT: list[float | int] = [-1, -1, -1, -1, -1, -1, -1]


@dataclass(frozen=True, slots=True)
class FleetPacerStatistics:
    #: the fleet's budget is known (some process saw a limit) and paces this process's calls
    active: bool
    #: calls this process paced through Redis, and of them how many were told to wait
    fleet_reserved: int
    fleet_delayed: int
    #: calls paced locally on this process's share while Redis was away
    local_reserved: int


class FleetPacer:
    """One backend's fleet-wide RPM/TPM budget (see the module docstring). ``local`` is the
    backend's own pacer: its 429 pause (which the fleet's shared pause feeds) still holds."""

    def __init__(
        self, client: FleetClient, *, name: str, key: str, local: RateLimitPacer
    ) -> None:
        self.client = client
        self.name = name
        self.pace_key = f"{key}:pace"
        self.permits_key = f"{key}:permits"
        self.local = local
        #: paces during an outage: the reports scaled to this process's share
        self.fallback = RateLimitPacer(margin=local.margin)
        #: a limit has been seen (here, or by the fleet): calls take from the fleet budget
        self.active = False
        self._report: _Report | None = None
        self._give_back = 0.0
        self._next_probe = -math.inf
        self._fleet_reserved = 0
        self._fleet_delayed = 0
        self._local_reserved = 0

    @classmethod
    def for_backend(
        cls, client: FleetClient, backend: Backend, local: RateLimitPacer
    ) -> FleetPacer:
        """Keyed like the backend's permits (namespace + name + base_url + model)."""
        key = client._backend_key(backend.name, backend.base_url, backend.model)
        return cls(client, name=backend.name, key=key, local=local)

    @property
    def share(self) -> float:
        """This process's part of the budget while Redis is away."""
        return 1.0 / max(1, self.client.live_workers)

    async def reserve(
        self, now: float, tokens: int, deadline: float | None = None
    ) -> tuple[float, PaceSeq | None]:
        """Take one request and ``tokens`` from the fleet's budget: (the delay in seconds of
        the gateway's clock, the take's place in the fleet's sequence — None when paced
        locally). A delay past ``deadline`` (a clock reading) takes nothing from the fleet:
        the call will not be sent, and a budget spent by calls that fail at once would hold
        up every later one. Never fails because Redis did: an outage paces locally, on this
        process's share."""
        client = self.client
        if not self.active:
            # a budget no process has seen (a self-hosted server sends none) costs Redis
            # nothing but a look every PROBE_S: another process may have learned one
            if client.state != "up" or time.monotonic() < self._next_probe:
                return self.local.reserve(now, tokens), None
            self._next_probe = time.monotonic() + PROBE_S
        pause = max(0.0, self.local.paused_until - now)
        if client.state != "up":
            return max(pause, self._reserve_locally(now, tokens)), None
        if "PACE" not in client._scripts:
            register(client)
        carried = client._take_releases(self.permits_key)
        report, self._report = self._report, None
        give_back, self._give_back = self._give_back, 0.0
        now_ms = int(client.wall() * 1000)
        minute_ms = client.clock.to_real(60.0) * 1000.0
        ttl_ms = int(max(2 * minute_ms, 2000 * client.shared.lease_s))
        most_ms = -1
        if deadline is not None:
            most_ms = int(client.clock.to_real(max(0.0, deadline - now)) * 1000)
        try:
            delay_ms, taken_requests, taken_tokens, known = await client._op(
                "PACE",
                [self.pace_key, self.permits_key],
                [
                    now_ms, max(0, tokens), self.local.margin, minute_ms, ttl_ms, give_back,
                    *(report.args() if report is not None else _NO_REPORT), most_ms, *carried,
                ],
            )
        except _RedisDown:
            # sent again after the rejoin (a release may run twice: ZREM is idempotent)
            client._pending[:0] = [(self.permits_key, lease_id) for lease_id in carried]
            if self._report is None:
                self._report = report
            self._give_back += give_back
            return max(pause, self._reserve_locally(now, tokens)), None
        if not int(known):
            if not self.active:  # no budget anywhere yet: as without shared=
                return self.local.reserve(now, tokens), None
            # Redis restarted empty: the next report brings the budget back
            return max(pause, self._reserve_locally(now, tokens)), None
        self.active = True
        delay = client.clock_s(int(delay_ms))
        if int(taken_requests) < 0:  # past the deadline: nothing taken
            return max(pause, delay), None
        self._fleet_reserved += 1
        if delay > 0:
            self._fleet_delayed += 1
        return max(pause, delay), (int(taken_requests), int(taken_tokens))

    def _reserve_locally(self, now: float, tokens: int) -> float:
        self._local_reserved += 1
        return self.fallback.reserve(now, tokens)

    def observe(self, now: float, info: RateLimitInfo, seq: PaceSeq | None) -> None:
        """A response's ``x-ratelimit-*`` values (``seq``: its call's take, if paced by the
        fleet): kept for this process's next take to carry, and fed to the local fallback
        scaled to this process's share."""
        if info.limit_requests or info.limit_tokens:
            self.active = True
        if not self.active:
            return
        share = self.share

        def scaled(x: float | None) -> float | None:
            return None if x is None else x * share

        self.fallback.observe(
            now,
            limit_requests=scaled(info.limit_requests),
            remaining_requests=scaled(info.remaining_requests),
            reset_requests_s=info.reset_requests_s,
            limit_tokens=scaled(info.limit_tokens),
            remaining_tokens=scaled(info.remaining_tokens),
            reset_tokens_s=info.reset_tokens_s,
        )
        report = _Report(
            int(self.client.wall() * 1000), seq,
            info.limit_requests, info.remaining_requests,
            info.limit_tokens, info.remaining_tokens,
        )
        kept = self._report
        # the freshest report wins; an exact one (with its sequence) over a bound at a tie
        if kept is None or (report.at_ms, report.seq is not None) >= (
            kept.at_ms, kept.seq is not None
        ):
            self._report = report

    def reconcile(self, seq: PaceSeq | None, reserved: int, actual: int) -> None:
        """A call used ``actual`` of the ``reserved`` tokens: give the rest back where it was
        taken (the fleet's budget, carried by the next take, or the local fallback)."""
        if seq is not None:
            self._give_back += reserved - actual
        elif self.active:
            self.fallback.reconcile(reserved, actual)

    def sustained_rate(self) -> float | None:
        """Calls per second this process's share of the budgets sustains."""
        rate = self.local.sustained_rate()
        return None if rate is None else rate * self.share

    def statistics(self) -> FleetPacerStatistics:
        return FleetPacerStatistics(
            active=self.active,
            fleet_reserved=self._fleet_reserved,
            fleet_delayed=self._fleet_delayed,
            local_reserved=self._local_reserved,
        )

    def __repr__(self) -> str:
        return f"FleetPacer({self.name!r}, active={self.active})"


def register(client: FleetClient) -> None:
    """Load the ``PACE`` script into ``client`` (with ``shared=`` only: after it connected)."""
    if client._redis is not None and "PACE" not in client._scripts:
        client._scripts["PACE"] = client._redis.register_script(scripts.PACE)

