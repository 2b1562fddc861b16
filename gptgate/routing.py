"""Routing: per-backend live state (latency, health) and the choice of a backend per call.

Eligibility first (privacy/compliance, model tier — or, for a classified ``tier="auto"`` call,
the preferred tier while one of its backends is up and fits the call (gptgate/tiers.py) — an
explicit backend, health), then the best
by predicted completion time — queue ahead of us over the backend's limit, times its observed
service time (time to first token when a person is waiting) — plus a cost term for work where
nobody waits, minus a bonus for the backend that already holds the call's prompt prefix.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import anyio
from cachetools import TTLCache

from .clock import Clock
from .config import Backend, Price
from .errors import NoBackendError
from .limits import Limiter
from .limits.pacing import RateLimitPacer
from .limits.timeouts import AdaptiveTimeout
from .pool import BackendPool
from .results import Usage
from .signals import SignalReader, server_wait_s

if TYPE_CHECKING:
    from .circuit_cause import FailureCause
    from .drift import DriftMonitor
    from .shared.health import FleetHealth
    from .shared.pacing import FleetPacer

__all__ = ["BackendState", "CircuitBreaker", "LatencyWindow", "RouteRequest", "Router"]

# First-token and whole-call priors (seconds) before a backend has any samples: a GPU answers
# first at low load, a TPU holds up at high load, a CPU is slow (docs/background.md).
_TTFT_PRIOR = {"gpu": 0.3, "tpu": 0.5, "cpu": 1.2}
_LATENCY_PRIOR = {"gpu": 2.0, "tpu": 2.0, "cpu": 6.0}


class LatencyWindow:
    """The last ``size`` values (for percentiles on demand) and an EWMA (for routing)."""

    __slots__ = ("_values", "alpha", "count", "ewma")

    def __init__(self, size: int = 1024, alpha: float = 0.1) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self.alpha = alpha
        self.ewma: float | None = None
        self.count = 0

    def add(self, value: float) -> None:
        self._values.append(value)
        self.count += 1
        self.ewma = value if self.ewma is None else self.ewma + self.alpha * (value - self.ewma)

    def percentile(self, q: float) -> float | None:
        if not self._values:
            return None
        ordered = sorted(self._values)
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return ordered[index]


class CircuitBreaker:
    """Consecutive backend failures open the circuit for a cool-down that doubles each time it
    re-opens (capped); after it, one probe is let through (half-open). ``on_open`` is told each
    time it opens (the gateway moves the calls queued there to healthy backends).

    With ``shared=`` the fleet's view reaches it too: ``on_transition`` is told of what this
    process saw itself (opened for a cool-down, closed by a successful call), to publish;
    :meth:`force_open` and :meth:`force_close` apply what another process saw, and are not
    told back (gptgate/shared/health.py)."""

    def __init__(
        self,
        threshold: int = 5,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 60.0,
        on_open: Callable[[], object] | None = None,
    ):
        self.threshold = threshold
        self.base_cooldown_s = cooldown_s
        #: the doubling's cap (``breaker_max_cooldown_s``); a first cool-down above it stays
        #: (a failed probe "doubled" a 120 s cool-down down to 60 s)
        self.max_cooldown_s = max(cooldown_s, max_cooldown_s)
        self.failures = 0
        self.opened_until = 0.0
        self._cooldown_s = cooldown_s
        self._probing = False
        #: the number of the last probe let through (see :meth:`probe_left`)
        self._probe = 0
        #: set when the probe in flight ends (see :meth:`probe_verdict`)
        self._verdict: anyio.Event | None = None
        self.on_open = on_open
        #: (opened?, cool-down seconds): a transition this process caused
        self.on_transition: Callable[[bool, float], object] | None = None
        #: the last failure counted, said while the circuit is open (circuit_cause.py)
        self.cause: FailureCause | None = None
        #: open because the fleet said so, not because of failures seen here
        self.forced = False
        #: a probe ended without a verdict (``shared=``: the fleet's probe lease goes back)
        self.on_probe_left: Callable[[], object] | None = None

    def state(self, now: float) -> Literal["closed", "open", "half_open"]:
        if self.failures < self.threshold:
            return "closed"
        return "open" if now < self.opened_until or self._probing else "half_open"

    def allows(self, now: float) -> bool:
        return self.state(now) != "open"

    @property
    def probing(self) -> bool:
        """A probe is in flight: open until its verdict, whatever the cool-down says."""
        return self._probing and self.failures >= self.threshold

    def claim_probe(self, now: float) -> int | None:
        """A try is admitted (its permit granted, nothing sent yet): half-open, it is the
        probe, and its number is returned at once, so no other waiter passes the circuit
        while it is paced or sent (gptgate/probe_claim.py); open — another try probes, or
        its verdict re-opened the circuit — None: the try waits or goes elsewhere; closed,
        0. Claimed only when sent, every waiter woken by the cool-down's end passed first:
        10 of 10 went at the half-open moment."""
        if self.state(now) == "open":
            return None
        return self.on_attempt(now)

    def on_attempt(self, now: float) -> int:
        """An attempt is sent; when it is the half-open probe, its number (else 0), for
        :meth:`probe_left`."""
        if self.state(now) == "half_open":
            self._probing = True
            self._probe += 1
            return self._probe
        return 0

    def probe_verdict(self) -> anyio.Event | None:
        """Set when the probe in flight ends (a verdict, or none); None: no probe in flight."""
        if not self.probing:
            return None
        if self._verdict is None:
            self._verdict = anyio.Event()
        return self._verdict

    def _probe_over(self) -> None:
        self._probing = False
        if self._verdict is not None:
            self._verdict.set()
            self._verdict = None

    def probe_left(self, probe: int) -> None:
        """Probe ``probe`` ended without a verdict — cancelled (a caller's timeout, a
        hedge's loser, a client gone), refused with a 429, a stream its caller left (one the
        server cut is a failure: gptgate/stream_cut.py): half-open again, so
        the next call probes. Before, the circuit stayed open for good, and a backend that had
        recovered got no call again while another was up (40 of 40 went elsewhere)."""
        if probe and self._probing and probe == self._probe:
            self._probe_over()
            if self.on_probe_left is not None:
                self.on_probe_left()

    def on_success(self) -> None:
        was_open = self.failures >= self.threshold
        self.failures = 0
        self._probe_over()
        self.forced = False
        self._cooldown_s = self.base_cooldown_s
        if was_open and self.on_transition is not None:
            self.on_transition(False, 0.0)

    def on_failure(self, now: float) -> None:
        self.failures += 1
        if self.failures >= self.threshold:
            was_open = self.failures > self.threshold and now < self.opened_until
            if self._probing:
                self._cooldown_s = min(self.max_cooldown_s, self._cooldown_s * 2)
            self._probe_over()
            self.forced = False
            self.opened_until = now + self._cooldown_s
            if not was_open:
                if self.on_open is not None:
                    self.on_open()
                if self.on_transition is not None:
                    self.on_transition(True, self._cooldown_s)

    def force_open(self, now: float, until: float, *, fleets: bool = True) -> None:
        """Another process of the fleet found the backend down (or is probing it): stay open
        until ``until`` (then half-open, as after a cool-down of our own). ``fleets=False``:
        the open stays this process's too (its own key refused: shared/health.py), so the
        fleet's probe's success does not end it."""
        if until <= now:
            return
        was_open = self.state(now) == "open"
        self.failures = max(self.failures, self.threshold)
        self.forced = fleets  # the fleet's open period: its probe's success ends it
        self.opened_until = max(self.opened_until, until)
        if not was_open and self.on_open is not None:
            self.on_open()

    def force_close(self) -> None:
        """Another process's probe succeeded: close a circuit the fleet opened here."""
        if self.forced and not self._probing:
            self.failures = 0
            self.forced = False
            self._cooldown_s = self.base_cooldown_s


class BackendState:
    """Everything live about one backend: its pool, limiter, latency windows and health."""

    def __init__(
        self,
        backend: Backend,
        pool: BackendPool,
        limiter: Limiter,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.backend = backend
        self.name = backend.name
        self.pool = pool
        self.limiter = limiter
        self.latency = LatencyWindow()
        self.ttft = LatencyWindow()
        self.breaker = breaker or CircuitBreaker()
        #: paces below the RPM/TPM the backend reports (x-ratelimit-* headers)
        self.pacer = RateLimitPacer()
        #: per-attempt timeouts learned from the latency distribution (bounded by the config)
        self.attempt_timeouts = AdaptiveTimeout(
            min_s=min(5.0, backend.timeout), max_s=backend.timeout
        )
        self.calls = 0
        self.failures = 0
        self.retries = 0
        #: hedge duplicates sent here (gptgate/hedge.py)
        self.hedges = 0
        #: ``shared=``: this backend's circuit as the fleet sees it (gptgate/shared/health.py)
        self.fleet_health: FleetHealth | None = None
        #: ``Gateway(baseline=...)``: this backend against its baseline (gptgate/drift.py)
        self.drift: DriftMonitor | None = None
        #: ``shared=``: this backend's RPM/TPM budget as the fleet's (gptgate/shared/pacing.py)
        self.fleet_pacer: FleetPacer | None = None
        self.rate_limited = 0
        self.timeouts = 0
        #: ``Backend(signals=True)``: the server's own load (gptgate/signals.py)
        self.signals: SignalReader | None = None
        #: attempts holding a permit while they wait for the RPM/TPM pacer: not at the
        #: server yet, so its reports do not count them (gptgate/signals.py)
        self.pacing = 0
        #: attempts counted in ``calls`` that never reached the server (refused, connect or
        #: pool timeout): no load on it, and no retry budget spent (a free failover)
        self.unsent = 0

    def service_time(self, latency_sensitive: bool) -> float:
        hardware = self.backend.hardware
        if latency_sensitive:
            return self.ttft.ewma if self.ttft.ewma is not None else _TTFT_PRIOR[hardware]
        return self.latency.ewma if self.latency.ewma is not None else _LATENCY_PRIOR[hardware]

    def predicted_s(self, latency_sensitive: bool) -> float:
        """Predicted time to completion (or first token) of one more call."""
        limit = max(1, self.limiter.current_limit)
        ahead = self.limiter.in_flight + self.limiter.queued + 1 - limit
        service = self.service_time(latency_sensitive)
        wait = max(0.0, ahead / limit) * self.service_time(False)
        return wait + service


@dataclass(frozen=True, slots=True)
class RouteRequest:
    private: bool = False
    tier: Literal["small", "large", "auto"] = "auto"
    #: ``tier="auto"``, classified (gptgate/tiers.py): this tier while one of its eligible
    #: backends is up, else the other
    prefer: Literal["small", "large"] | None = None
    backend: str | None = None
    latency_sensitive: bool = False
    prefix_key: str | None = None
    #: estimated tokens of the call, for the cost term
    input_tokens: int = 0
    output_tokens: int = 0
    #: backends whose provider refuses the call's parameters (gptgate/param_fit.py)
    refused: frozenset[str] = frozenset()


def _fits(request: RouteRequest, state: BackendState) -> bool:
    """Does the call fit the backend's context window (unknown: it takes anything) and its
    provider take the call's parameters? The prompt is an estimate (~4 characters a token),
    so only half of it counts, as in the gateway's own refusal: a borderline call is sent
    and the server decides."""
    if state.name in request.refused:
        return False
    window = state.backend.context_tokens
    return window is None or request.output_tokens + request.input_tokens // 2 <= window


class Router:
    """Chooses a backend per call; remembers which backend holds which prompt prefix."""

    def __init__(
        self,
        states: Sequence[BackendState],
        clock: Clock,
        *,
        dollars_to_seconds: float = 100.0,
        affinity_groups: int = 100_000,
        affinity_ttl_s: float = 600.0,
        price_of: Callable[[str, int], Price | None] | None = None,
    ) -> None:
        self.states = list(states)
        #: a backend's price for a prompt size (the ledger's); None: each backend's ``price=``
        self._price_of = price_of
        self.by_name = {s.name: s for s in self.states}
        self.by_limiter = {s.limiter: s for s in self.states}
        self.clock = clock
        #: how many seconds of predicted latency one dollar of cost is worth, for work where
        #: nobody waits (1 cent ≈ 1 s by default)
        self.dollars_to_seconds = dollars_to_seconds
        self._affinity: TTLCache[str, str] = TTLCache(
            maxsize=affinity_groups, ttl=affinity_ttl_s, timer=clock.now
        )

    def eligible(
        self, request: RouteRequest, exclude: frozenset[str] = frozenset()
    ) -> list[BackendState]:
        """The backends the call may go to. A preferred tier counts as up only through a
        backend that has not failed this call (``exclude``): one dead small backend whose
        circuit has not opened yet must not take every retry of a ``tier="auto"`` call."""
        if request.backend is not None:
            state = self.by_name.get(request.backend)
            if state is None:
                known = ", ".join(self.by_name)
                raise NoBackendError(f"unknown backend {request.backend!r}; known: {known}")
            candidates = [state]
        else:
            candidates = self.states
        if request.private:
            candidates = [s for s in candidates if s.backend.private]
        if request.tier != "auto":
            candidates = [s for s in candidates if s.backend.tier == request.tier]
        elif request.prefer is not None:
            preferred = self._preferred(request, candidates, exclude)
            if self._any_up(preferred):
                candidates = self._preferred(request, candidates)
        if not candidates:
            raise NoBackendError(
                f"no backend is eligible (private={request.private}, tier={request.tier})"
            )
        if len(candidates) > 1:
            # a call too long for a backend's context window would be a 400 there: send it
            # where it fits (the gateway refuses it beforehand when it fits nowhere)
            fitting = [s for s in candidates if _fits(request, s)]
            if fitting and len(fitting) < len(candidates):
                candidates = fitting
        return candidates

    def choose(
        self, request: RouteRequest, exclude: frozenset[str] = frozenset()
    ) -> tuple[BackendState, float]:
        """The best backend and how long to wait before using it (non-zero only when every
        eligible backend's circuit is open: we wait for the first to recover instead of
        failing, unlike LiteLLM #3646)."""
        candidates = self.eligible(request, exclude)
        now = self.clock.now()
        healthy = [s for s in candidates if s.breaker.allows(now)]
        if len(healthy) > 1 and exclude:
            # a backend that failed this call once beats one whose circuit is open
            healthy = [s for s in healthy if s.name not in exclude] or healthy
        if not healthy:
            soonest = min(candidates, key=lambda s: s.breaker.opened_until)
            return soonest, max(0.0, soonest.breaker.opened_until - now)
        if len(healthy) == 1:
            return healthy[0], 0.0
        return self._ranked(healthy, request)[0][0], 0.0

    def admits(
        self, request: RouteRequest, state: BackendState, exclude: frozenset[str] = frozenset()
    ) -> bool:
        """May this call run on ``state`` at all (explicit backend, privacy, tier)? The other
        tier only while the preferred one has no eligible backend up outside ``exclude``."""
        if request.backend is not None and request.backend != state.name:
            return False
        if request.private and not state.backend.private:
            return False
        if request.tier != "auto" and state.backend.tier != request.tier:
            return False
        if request.prefer is not None and state.backend.tier != request.prefer:
            # the other tier only while the preferred one has no eligible backend up
            eligible = [
                s for s in self.states
                if (not request.private or s.backend.private)
                and (request.backend is None or request.backend == s.name)
            ]
            if self._any_up(self._preferred(request, eligible, exclude)):
                return False
        return _fits(request, state) or not any(_fits(request, s) for s in self.states)

    @staticmethod
    def _preferred(
        request: RouteRequest,
        candidates: Sequence[BackendState],
        exclude: frozenset[str] = frozenset(),
    ) -> list[BackendState]:
        """The candidates of the preferred tier that fit the call's context window (and have
        not failed it)."""
        return [
            s for s in candidates
            if s.backend.tier == request.prefer and _fits(request, s) and s.name not in exclude
        ]

    def _any_up(self, states: Sequence[BackendState]) -> bool:
        now = self.clock.now()
        return any(s.breaker.allows(now) for s in states)

    def has_alternative(
        self,
        request: RouteRequest,
        exclude: frozenset[str],
        failed: frozenset[str] | None = None,
    ) -> bool:
        """Is there an eligible backend outside ``exclude`` whose circuit lets calls through?
        A preferred tier counts as up only through backends that have not ``failed`` the call
        (by default all of ``exclude``; a hedge avoiding a backend that is merely slow passes
        only the failed ones, and stays in the preferred tier)."""
        now = self.clock.now()
        failed = exclude if failed is None else failed
        return any(
            s.name not in exclude and self.admits(request, s, failed) and s.breaker.allows(now)
            for s in self.states
        )

    def queued_finish_s(self, state: BackendState, request: RouteRequest, position: int) -> float:
        """Predicted seconds until a call with ``position`` calls ahead of it in ``state``'s
        queue completes there (its cost term included, as in the routing score)."""
        rate = state.limiter.completion_rate()
        if rate is None:
            rate = max(1, state.limiter.current_limit) / state.service_time(False)
        wait = (position + 1) / rate
        return wait + state.service_time(request.latency_sensitive) + self._cost_s(state, request)

    def fresh_finish_s(self, state: BackendState, request: RouteRequest) -> float:
        """Predicted seconds until a call sent to ``state`` now completes."""
        return state.predicted_s(request.latency_sensitive) + self._cost_s(state, request)

    def alternatives(
        self, request: RouteRequest, chosen: BackendState, exclude: frozenset[str] = frozenset()
    ) -> list[tuple[BackendState, float]]:
        """The other healthy eligible backends, best first, each with its handicap against
        ``chosen``: how many seconds more its score predicts (0 when it now scores better).

        For late binding: a call held before ``chosen`` (at the prompt-cache gate) may go to
        another backend once it has waited that long — by then the other one is predicted to
        finish it no later."""
        if len(self.states) < 2:
            return []  # the common single-backend gateway: every gated call asks
        now = self.clock.now()
        others = [
            s
            for s in self.eligible(request)
            if s is not chosen and s.name not in exclude and s.breaker.allows(now)
        ]
        if not others:
            return []
        ranked = self._ranked([chosen, *others], request)
        base = next(score for state, score in ranked if state is chosen)
        return [(state, max(0.0, score - base)) for state, score in ranked if state is not chosen]

    def _ranked(
        self, states: Sequence[BackendState], request: RouteRequest
    ) -> list[tuple[BackendState, float]]:
        affine = self._affinity.get(request.prefix_key) if request.prefix_key else None
        scored = [(s, self._score(s, request, affine)) for s in states]
        return sorted(scored, key=lambda pair: pair[1])

    def _cost_s(self, state: BackendState, request: RouteRequest) -> float:
        """The call's price in seconds of latency, for work where nobody waits."""
        if request.latency_sensitive:
            return 0.0
        price = (
            self._price_of(state.name, request.input_tokens)
            if self._price_of is not None
            else state.backend.price
        )
        if price is None:
            return 0.0
        usage = Usage(input_tokens=request.input_tokens, output_tokens=request.output_tokens)
        return price.cost(usage) * self.dollars_to_seconds

    def _score(self, state: BackendState, request: RouteRequest, affine: str | None) -> float:
        score = state.predicted_s(request.latency_sensitive) + self._cost_s(state, request)
        score += server_wait_s(state.signals, state.service_time(False))
        if affine == state.name:
            # the prefix is cached there: prefill is skipped, roughly half the call time
            score -= 0.5 * state.service_time(False)
        return score

    def remember_prefix(self, prefix_key: str | None, backend: str) -> None:
        if prefix_key is not None:
            self._affinity[prefix_key] = backend
