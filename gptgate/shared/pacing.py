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

Cost: the take is one script per call. On a backend with fleet permits it rides in the
permit's round trip (:class:`PendingTake`: pipelined after the ACQUIRE, run only if the
lease was granted), so a call still costs one round trip; with no fleet permit it is the
call's one round trip. It also carries this process's queued releases of the backend's
permits, its latest report and its reconciled tokens: nothing is sent on its own. A
process that has seen no budget itself looks for the fleet's once a second (``PROBE_S``), so
a backend that sends no ``x-ratelimit-*`` headers costs nothing more.

Redis away: the call is paced locally by a :class:`RateLimitPacer` fed the same reports
scaled to this process's share (``1 ÷`` the live workers last seen), as the concurrency
fallback admits on its share of the limit.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..limits.pacing import RateLimitPacer
from . import scripts
from .fleet import _RedisDown
from .wake import waiters_key

if TYPE_CHECKING:
    from ..config import Backend
    from ..wire.ratelimits import RateLimitInfo
    from .fleet import FleetClient

__all__ = ["FleetPacer", "FleetPacerStatistics", "PaceSeq", "PendingTake"]

#: how often a process that has seen no budget looks for one the fleet knows (real seconds)
PROBE_S = 1.0

#: where a call's take stands in the fleet's sequence: (requests, tokens) taken up to it
PaceSeq = tuple[int, int]


@dataclass(frozen=True, slots=True)
class _Report:
    #: when it was read (``FleetClient.stopwatch``): sent as how long ago, so the script dates
    #: it on Redis's clock, not on this process's (which may be off)
    at_s: float
    seq: PaceSeq | None
    limit_requests: float | None
    remaining_requests: float | None
    limit_tokens: float | None
    remaining_tokens: float | None

    def args(self, now_s: float) -> list[float | int]:
        """The PACE script's report arguments, ``now_s`` on the stopwatch."""
        def value(x: float | None) -> float:
            return -1.0 if x is None else float(x)

        seq = self.seq or (-1, -1)
        return [
            max(0, round((now_s - self.at_s) * 1000)), seq[0], seq[1],
            value(self.limit_requests), value(self.remaining_requests),
            value(self.limit_tokens), value(self.remaining_tokens),
        ]


_NO_REPORT: list[float | int] = [-1, -1, -1, -1, -1, -1, -1]
#: the PACE answer's "taken" when the lease it rode with was not granted
_NOT_GRANTED = -2


@dataclass(frozen=True, slots=True)
class _Command:
    keys: list[str]
    args: list[Any]
    #: what the script carries, put back on the queues if it cannot be sent
    carried: list[str]
    report: _Report | None
    give_back: float


class PendingTake:
    """A call's take riding with its permit's acquire: both scripts go in one pipelined
    round trip, and the take runs only if the permit was granted (the script checks the
    lease). ``result`` once taken: (delay in gateway seconds, the take's place)."""

    __slots__ = ("_token", "at", "deadline", "lease_id", "pacer", "result", "tokens")

    def __init__(self, pacer: FleetPacer, tokens: int, deadline: float | None) -> None:
        self.pacer = pacer
        #: when it was taken (a gateway clock reading): its delay counts from then
        self.at = 0.0
        self.tokens = tokens
        self.deadline = deadline
        self.lease_id = ""
        self.result: tuple[float, PaceSeq | None] | None = None
        self._token: contextvars.Token[PendingTake | None] | None = None

    def detach(self) -> None:
        """The admission is over: later acquires of this task carry nothing."""
        if self._token is not None:
            with contextlib.suppress(ValueError):  # reset from another context: a no-op
                _RIDER.reset(self._token)
            self._token = None

    async def send_with(
        self,
        name: str,
        keys: list[str],
        args: list[Any],
        on_cancel: Callable[[bool], None] | None = None,
    ) -> Any:
        """Send the ``name`` script (the acquire) and this take in one round trip; the
        acquire's answer. Redis failing is an outage, as for any operation."""
        pacer = self.pacer
        client = pacer.client
        register(client)
        now = self.at = client.clock.now()  # the take is now, not when the call began waiting
        command = pacer._command(now, self.tokens, self.deadline, self.lease_id)

        def cancelled(sent: bool) -> None:
            if not sent:  # nothing ran: what the take carried goes with the next one
                pacer._unsent(command)
            if on_cancel is not None:
                on_cancel(sent)

        try:
            answers = await client.run(
                [(name, keys, args), ("PACE", command.keys, command.args)], cancelled
            )
        except _RedisDown:
            pacer._unsent(command)
            raise
        self.result = pacer._answer(answers[1], now, self.tokens)
        return answers[0]


#: the take of the call this task is admitting (``FleetPacer.ride_along``)
_RIDER: contextvars.ContextVar[PendingTake | None] = contextvars.ContextVar(
    "gptgate_fleet_take", default=None
)


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
        key = client.key_of(backend)
        return cls(client, name=backend.name, key=key, local=local)

    @property
    def share(self) -> float:
        """This process's part of the budget while Redis is away: as for the backend's
        permits, one over the workers its last acquire counted live on it (the fleet's
        count at the last renewal without one)."""
        for admission in self.client._admissions:
            if admission.permits_key == self.permits_key:
                return 1.0 / admission.live_workers
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
        register(client)
        command = self._command(now, tokens, deadline, lease_id="")
        try:
            answer = await client._op("PACE", command.keys, command.args)
        except _RedisDown:
            self._unsent(command)
            if not self.active:  # a look for the fleet's budget: as without shared=
                return self.local.reserve(now, tokens), None
            return max(pause, self._reserve_locally(now, tokens)), None
        taken = self._answer(answer, now, tokens)
        assert taken is not None  # no lease to check: never "not granted"
        return taken

    def _command(
        self, now: float, tokens: int, deadline: float | None, lease_id: str
    ) -> _Command:
        """One PACE script's keys and arguments; what it carries is taken off the queues
        (:meth:`_unsent` puts it back when it could not be sent)."""
        client = self.client
        carried = client._take_releases(self.permits_key)
        report, self._report = self._report, None
        give_back, self._give_back = self._give_back, 0.0
        minute_ms = client.clock.to_real(60.0) * 1000.0
        ttl_ms = int(max(2 * minute_ms, 2000 * client.shared.lease_s))
        most_ms = -1
        if deadline is not None:
            most_ms = int(client.clock.to_real(max(0.0, deadline - now)) * 1000)
        args: list[Any] = [
            client.now_arg(), max(0, tokens), self.local.margin, minute_ms, ttl_ms, give_back,
            *(report.args(client.stopwatch()) if report is not None else _NO_REPORT), most_ms,
            lease_id, *carried,
        ]
        keys = [self.pace_key, self.permits_key, waiters_key(self.permits_key)]
        return _Command(keys, args, carried, report, give_back)

    def _unsent(self, command: _Command) -> None:
        """Redis went away with ``command``: what it carried is sent after the rejoin (a
        release may run twice: ZREM is idempotent)."""
        client = self.client
        client._pending[:0] = [(self.permits_key, lease_id) for lease_id in command.carried]
        if self._report is None:
            self._report = command.report
        self._give_back += command.give_back

    def _answer(
        self, answer: list[Any], now: float, tokens: int
    ) -> tuple[float, PaceSeq | None] | None:
        """(delay, the take's place) from a PACE answer; None: its lease was not granted."""
        delay_ms, taken_requests, taken_tokens, known = (int(x) for x in answer)
        if taken_requests == _NOT_GRANTED:
            return None
        pause = max(0.0, self.local.paused_until - now)
        if not known:
            if not self.active:  # no budget anywhere yet: as without shared=
                return self.local.reserve(now, tokens), None
            # Redis restarted empty: the next report brings the budget back
            return max(pause, self._reserve_locally(now, tokens)), None
        self.active = True
        delay = self.client.clock_s(delay_ms)
        if taken_requests < 0:  # past the deadline: nothing taken
            return max(pause, delay), None
        self._fleet_reserved += 1
        if delay > 0:
            self._fleet_delayed += 1
        return max(pause, delay), (taken_requests, taken_tokens)

    # -- riding along with the permit's acquire --------------------------------------------

    def ride_along(self, tokens: int, deadline: float | None) -> PendingTake | None:
        """Before a call waits for its permit: its take, to be sent in the same round trip as
        the permit's acquire (see :meth:`rider`); None when the fleet's budget is not in
        use. ``PendingTake.detach`` when the admission is over."""
        if not self.active or self.client.state != "up":
            return None
        take = PendingTake(self, tokens, deadline)
        take._token = _RIDER.set(take)
        return take

    def rider(self, lease_id: str) -> PendingTake | None:
        """The calling task's take still to send with the acquire of ``lease_id`` on this
        backend, if any (``FleetAdmission.rider``)."""
        take = _RIDER.get()
        if take is None or take.pacer is not self or take.result is not None:
            return None
        take.lease_id = lease_id
        return take

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
            self.client.stopwatch(), seq,
            info.limit_requests, info.remaining_requests,
            info.limit_tokens, info.remaining_tokens,
        )
        kept = self._report
        # the freshest report wins; an exact one (with its sequence) over a bound at a tie
        if kept is None or (report.at_s, report.seq is not None) >= (
            kept.at_s, kept.seq is not None
        ):
            self._report = report

    def reconcile(self, seq: PaceSeq | None, reserved: int, actual: int) -> None:
        """A call used ``actual`` of the ``reserved`` tokens: give the rest back where it was
        taken (the fleet's budget, carried by the next take, or the local fallback)."""
        if seq is not None:
            self._give_back += reserved - actual
        elif self.active:
            self.fallback.reconcile(reserved, actual)

    def sustained_rate(self, *, whole: bool = False) -> float | None:
        """Calls per second this process's share of the budgets sustains — or the whole
        budget (``whole``), for a limit that is the fleet's (``concurrency="auto"``)."""
        rate = self.local.sustained_rate()
        if rate is None or whole:
            return rate
        return rate * self.share

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
    if "PACE" not in client._scripts and client._redis is not None:
        client._scripts["PACE"] = client._redis.register_script(scripts.PACE)

