"""The Gateway: lifecycle and the public verbs; it wires the stages of a call together.

``async with Gateway(...) as gate`` opens one pooled client per backend and a task group for
background work (micro-batch timers); leaving it drains what was accepted and closes every
connection. Nothing is lost: every accepted call ends in a result or a typed error.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import logging
import math
import os
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import AbstractContextManager, aclosing
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, ParamSpec, TypeVar

import anyio
import anyio.lowlevel
import httpx2
from cachetools import TTLCache
from opentelemetry import metrics, trace

from .backend_stats import BackendStats, fleet_statistics, limit_phase, on_the_backend
from .background import Background
from .baseline import Baseline
from .batch import BatchJob, RetryMode, submit_batch, take_up_batch
from .batch_api import BatchLimits
from .batching import ItemHandle, MicroBatcher
from .budget import BudgetGate, BudgetStatus
from .cache import CacheGate, prefix_key
from .cache_slots import slot_cached
from .call_checks import check_params as _check_params
from .call_checks import is_int as _is_int
from .call_checks import validate_messages as _validate_messages
from .calls import CallRunner, CallSpec, CallState
from .clock import Clock, SystemClock
from .config import Backend, GatewayConfig
from .drift import DriftMonitor, DriftPolicy, check_baseline_arg, drift_monitors
from .embed import Embedder
from .errors import (
    BadRequestError,
    GateError,
    GatewayClosedError,
    OverloadedError,
    RequestTooLargeError,
)
from .fork_rebuild import NOT_OPEN_HERE, open_in_child, rebuildable
from .guard import make_guard
from .guard_parens import refuse_bare
from .hedge import HedgePolicy, resolve_hedge
from .ledger import Ledger
from .lifecycle import CallRegistry
from .limits import FixedLimit, Limit, Limiter
from .limits.budget import RetryBudget
from .map_pull import stamp_deadline, take_slot, time_left_real
from .media_fit import refused_media
from .media_tokens import call_media_rule
from .opened import Opened
from .param_fit import refused_by
from .pool import BackendPool, PoolStatistics
from .prices import price_source
from .process_bound import refuse_pickle
from .relocate import Relocator
from .response_cache import CacheMode, ResponseCache
from .response_cache_calls import CachedCalls
from .results import ChatResult
from .retry import RetryPolicy
from .routing import BackendState, CircuitBreaker, Router, RouteRequest
from .scenarios import BatchPolicy, RampPolicy, Scenario, decide_stream, scenario_for_call
from .scrub import remember_call_headers
from .sdk_client import GuardTransport
from .sdk_clients_made import ClientsMade
from .sdk_failover import FailoverTransport, check_fallbacks
from .shared.fleet import FleetAdmission, FleetClient
from .shared.pacing import FleetPacer
from .shared.scope import fleet_scope
from .shared.warmup import FleetWarmup, fleet_keys
from .signals import ServerSignals, SignalGauges
from .snapshot import (
    MAX_HIT_RATES,
    BackendSnapshot,
    GatewaySnapshot,
    LimitState,
    limit_state,
)
from .state_file import StateFile, load_warm, state_source
from .telemetry import NAMES, Telemetry
from .tiers import (
    Accept,
    TierClassifier,
    Tiering,
    TierStats,
    check_accept,
    check_classifier,
    served_by,
)
from .tokens import estimate_prompt_tokens, estimate_tools_tokens, sure_prompt_tokens
from .warm import refresh_each, warm_each

__all__ = ["BackendStats", "ChatStream", "Gateway"]

log = logging.getLogger("gptgate")

P = ParamSpec("P")
R = TypeVar("R")

#: set while a call runs that the gateway accepted before it began closing (a micro-batched
#: item, a ``map`` item already pulled): it still gets the shutdown grace
_ACCEPTED: ContextVar[bool] = ContextVar("gptgate_accepted", default=False)

_NOT_OPEN = "the gateway is not open: use `async with gate:` (or await start())"

#: a batched item's absolute deadline, from submission to the call (never a chat argument)
_DEADLINE_KEY = "_gptgate_deadline"


def _check_max_pending(max_pending: object) -> int | None:
    if max_pending is None:
        return None
    if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
        raise BadRequestError(f"max_pending must be an int >= 1 (or None), got {max_pending!r}")
    return max_pending


def _check_grace(grace_s: object) -> float:
    if (
        isinstance(grace_s, bool)
        or not isinstance(grace_s, (int, float))
        or not math.isfinite(grace_s)
        or grace_s < 0
    ):
        raise BadRequestError(f"grace_s must be a finite number of seconds >= 0, got {grace_s!r}")
    return float(grace_s)


@dataclass(slots=True)
class _EarlierSessions:
    """A backend's counters from before the last ``start()`` (which builds its live state
    afresh), so that ``stats()`` never goes backwards when the gateway is re-opened."""

    calls: int = 0
    failures: int = 0
    retries: int = 0
    rate_limited: int = 0
    timeouts: int = 0
    admitted: int = 0
    shed: int = 0
    pool_waits: int = 0
    pool_wait_total_s: float = 0.0
    pool_wait_max_s: float = 0.0
    pool_stale_retries: int = 0
    limit_events: dict[str, int] = field(default_factory=dict)

    def add(self, state: BackendState) -> None:
        self.calls += state.calls
        self.failures += state.failures
        self.retries += state.retries
        self.rate_limited += state.rate_limited
        self.timeouts += state.timeouts
        limiter = state.limiter.statistics()
        self.admitted += limiter.admitted
        self.shed += limiter.shed
        pool = state.pool.statistics()
        self.pool_waits += pool.waits
        self.pool_wait_total_s += pool.wait_total_s
        self.pool_wait_max_s = max(self.pool_wait_max_s, pool.wait_max_s)
        self.pool_stale_retries += pool.stale_retries
        self.limit_events = self.events(limit_phase(state.limiter.limit)[1])

    def events(self, live: Mapping[str, int]) -> dict[str, int]:
        names = [*live, *(k for k in self.limit_events if k not in live)]
        return {k: live.get(k, 0) + self.limit_events.get(k, 0) for k in names}

    def pool(self, live: PoolStatistics) -> PoolStatistics:
        return dataclasses.replace(
            live,
            waits=live.waits + self.pool_waits,
            wait_total_s=live.wait_total_s + self.pool_wait_total_s,
            wait_max_s=max(live.wait_max_s, self.pool_wait_max_s),
            stale_retries=live.stale_retries + self.pool_stale_retries,
        )


def _check_call_options(
    timeout: object, priority: object, max_attempts: object, headers: object
) -> None:
    """Refuse a malformed call argument before anything is queued or sent, naming it: a
    wrong type would otherwise surface later as an untyped error (``priority`` only under
    contention) or be silently read as "no deadline" / "the default"."""
    if timeout is not None and not (
        isinstance(timeout, (int, float))
        and not isinstance(timeout, bool)
        and math.isfinite(timeout)
        and timeout > 0
    ):
        raise BadRequestError(
            f"timeout must be a positive, finite number of seconds (or None), got {timeout!r}"
        )
    if priority is not None and not _is_int(priority):
        raise BadRequestError(f"priority must be an int (higher goes first), got {priority!r}")
    if max_attempts is not None and not (_is_int(max_attempts) and 1 <= max_attempts <= 20):  # type: ignore[operator]
        raise BadRequestError(
            f"max_attempts must be an int from 1 to 20 (or None), got {max_attempts!r}"
        )
    if headers is not None and not (
        isinstance(headers, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
    ):
        raise BadRequestError("extra_headers must be a mapping of str header names to str values")


def _with_index(index: int, error: BadRequestError) -> BadRequestError:
    """A map item's own mistake, named by its index (a server's 400 is left as it came)."""
    if error.status is not None or error.message.startswith(f"item {index}"):
        return error
    named = copy.copy(error)  # of the same class (RequestTooLargeError keeps its counts)
    named.message = f"item {index}: {error.message}"
    named.args = (named.message,)
    named.__cause__ = error
    return named


def _check_route_options(private: object, stream: object, cache_key: object) -> None:
    """Flags that would otherwise be read by truthiness (``private="no"`` as True)."""
    if not isinstance(private, bool):
        raise BadRequestError(f"private must be True or False, got {private!r}")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequestError(f"stream must be True, False or None, got {stream!r}")
    if cache_key is not None and not isinstance(cache_key, str):
        raise BadRequestError(f"cache_key must be a str (or None), got {cache_key!r}")


class ChatStream:
    """``async with gate.stream(...) as s: async for text in s: ...``; then ``s.result``.

    Nothing is sent until iteration starts. Before the first token a failure is retried (or
    failed over) invisibly; after it, a failure raises ``StreamInterruptedError`` with the
    partial text. Leaving the block early closes the stream and gives its connection back.
    """

    def __init__(
        self,
        runner: CallRunner,
        spec: CallSpec,
        clock: Clock,
        calls: CallRegistry | None = None,
        tiering: Tiering | None = None,
    ) -> None:
        self._runner = runner
        self._calls = calls
        self._spec = spec
        #: classifies a tier="auto" stream when it starts (never escalated: see docs/tiers.md)
        self._tiering = tiering
        self._state = CallState(start=clock.now())
        self._iterator: AsyncGenerator[str, None] | None = None
        self._parts: list[str] = []

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[str]:
        if self._iterator is not None:
            raise RuntimeError("a ChatStream can be iterated only once")
        self._iterator = self._collect()
        return self._iterator

    async def _collect(self) -> AsyncGenerator[str, None]:
        if self._tiering is not None:
            self._spec, _ = await self._tiering.prepare(self._spec)
        source = self._runner.stream(self._spec, self._state)
        if self._calls is not None:  # the gateway's shutdown may end it (GatewayClosedError)
            source = self._calls.stream(source)
        async with aclosing(source) as deltas:
            async for delta in deltas:
                self._parts.append(delta)
                yield delta

    async def aclose(self) -> None:
        """Close the stream now (also done on leaving ``async with``), returning its permit
        and connection even if the caller stopped reading mid-answer."""
        if self._iterator is not None:
            with anyio.CancelScope(shield=True):
                await self._iterator.aclose()

    @property
    def text(self) -> str:
        """What has arrived so far."""
        return "".join(self._parts)

    @property
    def result(self) -> ChatResult:
        result = self._state.result
        if result is None:
            raise RuntimeError("the stream has not completed")
        tier = self._spec.tier_attributes  # the decision prepare() recorded for the spans
        if tier is not None and result.tier is None:
            result = self._state.result = served_by(
                result, self._runner, tier[NAMES["tier"]], tier[NAMES["tier_reason"]]
            )
        return result


class Gateway:
    """The client-side LLM gateway (docs/architecture.md: one call, end to end)."""

    @rebuildable  # in a forked child: built again from these arguments (fork_rebuild.py)
    def __init__(
        self,
        backends: Sequence[Backend] | None = None,
        *,
        config: GatewayConfig | None = None,
        clock: Clock | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        state: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        tier_classifier: TierClassifier | None = None,
        tier_accept: Accept | None = None,
        baseline: str | os.PathLike[str] | Baseline | None = None,
        drift_policy: DriftPolicy | None = None,
        response_cache: ResponseCache | None = None,
        **options: Any,
    ) -> None:
        #: warm start: a path (read on start, written on exit) or a dict from ``snapshot()``
        self._state_source = state_source(state)
        #: drift watch: a baseline file (read on the first start) or a Baseline (docs/drift.md)
        self._baseline = check_baseline_arg(baseline)
        if drift_policy is not None and not isinstance(drift_policy, DriftPolicy):
            raise BadRequestError(
                f"drift_policy must be a gptgate.DriftPolicy, got {type(drift_policy).__name__}"
            )
        self._drift_policy = drift_policy or DriftPolicy()
        #: per backend, built on the first start and kept across re-opening
        self._drift: dict[str, DriftMonitor] | None = None
        self._meter_provider = meter_provider
        #: ``Backend(signals=True)``: the servers' own load, as OTel gauges (gptgate/signals.py)
        self._signals = SignalGauges(meter_provider)
        classifier = check_classifier(tier_classifier) if tier_classifier is not None else None
        accept = check_accept(tier_accept, "tier_accept")
        if config is None:
            config = GatewayConfig(backends=list(backends or []), **options)
        elif backends is not None or options:
            raise TypeError("pass either config= or backends/options, not both")
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self._telemetry = Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            capture_content=config.capture_content,
        )
        self._default_scenario = scenario_for_call(config.default_scenario)
        #: tier="auto": small vs large, and escalation (gptgate/tiers.py, docs/tiers.md)
        self._tiering = Tiering(
            tiers=frozenset(b.tier for b in config.backends),
            classifier=classifier,
            accept=accept,
            meter_provider=meter_provider,
        )
        self._states: dict[str, BackendState] = {}
        self._runner: CallRunner | None = None
        #: the SDK clients' failover orders, which a pinned guard follows (sdk_clients_made.py)
        self.clients_made = ClientsMade()
        #: price=None: the genai-prices table's, when it knows the model (gptgate/prices.py)
        self._ledger = Ledger({b.name: price_source(b) for b in config.backends})
        #: the dollar budget (docs/budget.md): told every cost the ledger counts
        self._spending = (
            BudgetGate(config.budget, self.clock, meter_provider)
            if config.budget is not None
            else None
        )
        if self._spending is not None:
            self._ledger.on_cost = self._spending.record
        #: the background task group's own task, while open (gptgate/background.py)
        self._background: Background | None = None
        self._closing = anyio.Event()
        self._batchers: dict[Scenario, MicroBatcher[dict[str, Any], ChatResult]] = {}
        self.cache_gate = CacheGate(clock=self.clock)
        #: prefix key → the prefix messages, kept only for keep-warm (bounded, expiring)
        self._prefixes: TTLCache[str, list[Mapping[str, Any]]] = TTLCache(
            maxsize=10_000, ttl=3 * config.keep_warm_interval_s, timer=self.clock.now
        )
        self.keep_warm_calls = 0
        self.retry_budget: RetryBudget | None = None
        self._open = False
        self._max_timeout_s = max(b.timeout for b in config.backends)
        #: whose formula prices an image part (gptgate/media_tokens.py)
        self._media = call_media_rule(config.backends, None)
        #: … and a call pinned to one backend's (``backend=``): taken once, not per call
        self._media_pinned = {b.name: call_media_rule(config.backends, b.name)
                              for b in config.backends}
        #: the smallest context window of any backend (inf when one is unknown): a call
        #: within it fits every backend, and is not checked further
        self._min_context = min(
            math.inf if b.context_tokens is None else b.context_tokens for b in config.backends
        )
        self._earlier: dict[str, _EarlierSessions] = {
            b.name: _EarlierSessions() for b in config.backends
        }
        #: the calls in flight, for a shutdown that ends each one on purpose
        self._calls = CallRegistry()
        #: set when a hosted micro-batcher has drained (closing waits for them)
        self._hosts_done: list[anyio.Event] = []
        #: which event loop has it open: its queues and events live there (gptgate/opened.py)
        self._opened = Opened(at_exit=self._save_state)  # state= still saved at exit if open
        #: ``shared=``: the fleet's Redis while open (gptgate/shared/)
        self._fleet: FleetClient | None = None
        #: closing: when the backends have noticed the requests it hung up on
        self._noticed_by = -math.inf
        #: FleetClient keyword arguments (tests inject a fleet clock, poll and probe periods)
        self._fleet_options: dict[str, Any] = {}
        #: ``gate.embed`` (gptgate/embed.py); a SyncGateway's embed calls the same verb
        self._embedder = Embedder(self)
        #: ``response_cache=`` (gptgate/response_cache.py, docs/response-cache.md)
        self._cached = CachedCalls(self, response_cache)

    #: not sent to another process, nor copied: a TypeError naming what to send
    __reduce_ex__ = refuse_pickle

    # -- lifecycle ------------------------------------------------------------------------

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the pools and the background tasks, from any task of the event loop
        (``aclose`` may run in another one). Opening it while another loop (thread) has it
        open is a ``GateError``; so is opening it twice."""
        self._opened.claim()
        try:
            await self._open_here()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._release(save=False)
            raise
        self._opened.opened()

    @property
    def _task_group(self) -> anyio.abc.TaskGroup | None:
        return None if self._background is None else self._background.task_group

    async def _lost(self) -> None:
        """The loop is ending with the gateway open (never closed): close what it holds, so
        that a later loop may open it again — and write ``state=``, as any exit does."""
        if self._opened.begin_close(lost=True):
            await self._release(save=True)

    async def _open_here(self) -> None:
        await self._connect_fleet()  # first: Shared(required=True) may fail the start
        await self._cached.start()  # a response cache's Redis (required=True may fail it)
        self._closing = anyio.Event()
        self._calls = CallRegistry()
        self._hosts_done = []
        self._background = Background(on_lost=self._lost)
        task_group = await self._background.open()
        warm = self._load_state()
        for backend in self.config.backends:
            previous = self._states.get(backend.name)
            if previous is not None:
                self._earlier[backend.name].add(previous)
            pool = BackendPool(backend, self.clock)
            # a provider caching only longer prefixes (Anthropic per model) is gated by them
            self.cache_gate.set_min_prefix_tokens(
                backend.name, getattr(pool.dialect, "min_cacheable", 0)
            )
            if slot_cached(backend):  # llama.cpp: a prompt cached in one slot only
                self.cache_gate.set_slot_cache(backend.name)
            limiter = Limiter(
                self._warm_limit(backend, warm),
                clock=self.clock,
                max_inflight=backend.pool_size,
                name=backend.name,
                on_limit_change=functools.partial(self.cache_gate.update_limit, backend.name),
                abandon_grace_s=backend.abandon_grace_s,
                defer=self._defer,
            )
            breaker = CircuitBreaker(
                threshold=self.config.breaker_threshold,
                cooldown_s=self.config.breaker_cooldown_s,
                max_cooldown_s=self.config.breaker_max_cooldown_s,
            )
            self._states[backend.name] = BackendState(backend, pool, limiter, breaker)
        if self._drift is None:
            self._drift = (
                {} if self._baseline is None else drift_monitors(
                    self._baseline, self.config.backends, self._drift_policy,
                    meter_provider=self._meter_provider,
                )
            )
        for name, state in self._states.items():
            state.drift = self._drift.get(name)
        router = Router(list(self._states.values()), self.clock, price_of=self._ledger.price)
        #: moves queued calls off a backend whose circuit opens, and onto idle backends
        self.relocator = Relocator(router, self.clock)
        for state in self._states.values():
            state.limiter.on_release = self.relocator.on_release
            state.breaker.on_open = functools.partial(self.relocator.evacuate, state.name)
        ratio = self.config.retry_budget_ratio
        self.retry_budget = (
            RetryBudget(ratio, self.config.retry_budget_min_per_s) if ratio is not None else None
        )
        retry = RetryPolicy(
            max_attempts=self.config.max_attempts,
            backoff_base_s=self.config.backoff_base_s,
            backoff_cap_s=self.config.backoff_cap_s,
            max_retry_after_s=self.config.max_retry_after_s,
            clock=self.clock,
            seed=self.config.seed,
        )
        self._runner = CallRunner(
            router=router,
            clock=self.clock,
            retry=retry,
            ledger=self._ledger,
            telemetry=self._telemetry,
            cache_gate=self.cache_gate,
            budget=self.retry_budget,
            max_breaker_wait_s=self.config.max_breaker_wait_s,
            spending=self._spending,
            spawn=self._spawn,
            shut_down=lambda: self._calls.cancelled,
        )
        await self._start_fleet(task_group)
        self._signals.start(self._states.values(), self.clock, task_group, self._fleet)
        self._open = True
        if self.config.keep_warm:
            task_group.start_soon(self._keep_warm_loop)

    async def aclose(self, grace_s: float | None = None) -> None:
        """Close: new calls are refused at once (``GatewayClosedError``); the calls in flight
        — queued ones and micro-batched items included — get ``grace_s`` (default
        ``config.shutdown_grace_s``) to finish; what is left is then cancelled and ends in
        ``GatewayClosedError``, handing back its permit, cache ticket and connection. Nothing
        waits longer than ``grace_s`` + 1 s, and nothing of it counts against a backend's
        health. Idempotent: a close while another task's is under way returns once that one
        has ended."""
        grace = self.config.shutdown_grace_s if grace_s is None else _check_grace(grace_s)
        if not self._opened.begin_close():
            await self._opened.wait_closed()  # another task's close: return once it ends
            return
        calls = self._calls
        calls.closing = True
        self._closing.set()  # the batchers flush what they hold and drain
        try:
            with anyio.move_on_after(self.clock.to_real(grace)):
                await self._drained()
        finally:
            with anyio.CancelScope(shield=True):
                await calls.cancel_all()
                with anyio.move_on_after(self.clock.to_real(1.0)):
                    await self._drained()
                    # requests hung up on just now run on until their backend notices
                    await self.clock.sleep(max(0.0, self._noticed_by - self.clock.now()))
                await self._release(save=True)

    async def _release(self, *, save: bool) -> None:
        """Stop the background tasks, close the pools and the fleet, give the loop back."""
        try:
            if self._background is not None:
                background, self._background = self._background, None
                await background.close()
        finally:
            self._open = False
            self._batchers.clear()
            try:
                for state in self._states.values():
                    await state.pool.aclose()
                if self._fleet is not None:
                    fleet, self._fleet = self._fleet, None
                    await fleet.aclose()
                await self._cached.aclose()
                if save:
                    self._save_state()
            finally:
                self._opened.release()

    async def _start_fleet(self, task_group: anyio.abc.TaskGroup) -> None:
        """``shared=``: every backend's circuit breaker is the fleet's (gptgate/shared/
        health.py); every backend takes fleet-wide permits too (and honours the fleet's 429
        pauses): a fixed limit is the fleet's, and ``concurrency="auto"`` learns one limit for
        the fleet (a leader computes it from every process's samples).
        Never fails: an unreachable Redis is an outage (local limits, a warning), and with
        ``Shared(required=True)`` the connect before it failed the start."""
        fleet = self._fleet
        if fleet is None:
            return
        for state in self._states.values():
            backend = state.backend
            scope = fleet_scope(backend)  # its name, or its fleet_key (shared/scope.py)
            state.fleet_health = fleet.health(
                name=backend.name, base_url=backend.base_url, model=backend.model,
                breaker=state.breaker, probe_s=self.clock.to_real(backend.timeout), scope=scope,
            )
            state.fleet_pacer = FleetPacer.for_backend(fleet, backend, state.pacer)
            if isinstance(backend.concurrency, int):
                state.limiter.admission = fleet.admission(
                    name=backend.name,
                    base_url=backend.base_url,
                    model=backend.model,
                    limit=backend.concurrency,
                    on_pause=functools.partial(self._fleet_pause, state),
                    scope=scope,
                )
            else:  # "auto": one limit for the fleet, computed by a leader (shared/auto.py)
                auto = fleet.auto_admission(
                    name=backend.name,
                    base_url=backend.base_url,
                    model=backend.model,
                    own=state.limiter.limit,
                    factory=functools.partial(self._limit_from, backend),
                    on_pause=functools.partial(self._fleet_pause, state),
                    scope=scope,
                )
                auto.local.on_grow = state.limiter.poke
                state.limiter.admission = auto
                state.limiter.limit = auto.local
            if isinstance(state.limiter.admission, FleetAdmission):
                # a call's RPM/TPM take rides with its permit's acquire: one round trip
                state.limiter.admission.rider = state.fleet_pacer.rider
        await fleet.start(task_group)
        # one warm-up per prefix across the fleet (gptgate/shared/warmup.py)
        warmup = FleetWarmup(
            fleet, keys=fleet_keys(fleet, self._states.values()), task_group=task_group
        )
        self.cache_gate._fleet_warmup = warmup
        warmup.live_groups = self.cache_gate.live_groups  # the fleet's ramp windows
        warmup.on_members = self.cache_gate.set_fleet_members
        task_group.start_soon(warmup.run)  # the fleet's hit counts (gptgate/shared/warmup.py)

    async def _connect_fleet(self) -> None:
        """``shared=``: the fleet's connection, opened before anything else of the gateway,
        so that ``Shared(required=True)`` fails the start with nothing left open."""
        if self.config.shared is not None:
            fleet = FleetClient(self.config.shared, clock=self.clock, **self._fleet_options)
            await fleet.connect()
            self._fleet = fleet

    def _defer(self, hold: float | anyio.Event, then: Callable[[], None]) -> None:
        """``then()`` ``hold`` seconds later on the gateway's clock, or once the event
        ``hold`` is set: the slot of a request we hung up on, freed after its backend's
        ``abandon_grace_s`` or when its answer has been read to its end (``Permit.abandon``).
        At once when the gateway is closing, and at the latest when it closes."""
        if not self._spawn(functools.partial(self._after, hold, then)):
            then()
            if not isinstance(hold, anyio.Event):  # closing waits for that, not the slot
                self._noticed_by = max(self._noticed_by, self.clock.now() + hold)

    async def _after(self, hold: float | anyio.Event, then: Callable[[], None]) -> None:
        try:
            if isinstance(hold, anyio.Event):
                await hold.wait()
            else:
                await self.clock.sleep(hold)
        finally:
            then()

    def _spawn(self, task: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Run ``task`` in the gateway's task group (cancelled when it closes); False when
        the gateway is closing: the caller does the work itself."""
        task_group = self._task_group
        if task_group is None or self._calls.closing:
            return False
        task_group.start_soon(task)
        return True

    def _fleet_pause(self, state: BackendState, seconds: float) -> None:
        """Another process saw a 429: pause this backend here too, until its retry-after."""
        state.pacer.pause_until(self.clock.now() + seconds)

    async def _drained(self) -> None:
        """Until every hosted batcher has drained and no call is in flight."""
        for done in list(self._hosts_done):
            await done.wait()
        await self._calls.wait_idle()

    # -- warm start (gptgate/snapshot.py) -------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Per backend, what a later gateway needs to start warm: model, base_url, the
        adaptive limit's state (``None`` for a fixed limit or one still in slow start) and the
        prefix groups' hit rates; JSON-able. Pass it (or a path) as ``Gateway(state=...)``."""
        backends: dict[str, BackendSnapshot] = {}
        for backend in self.config.backends:
            live = self._states.get(backend.name)
            export = getattr(live.limiter.limit, "export_state", None) if live else None
            groups = sorted(self.cache_gate.statistics(backend.name), key=lambda g: -g.samples)
            backends[backend.name] = BackendSnapshot(
                model=backend.model,
                base_url=backend.base_url,
                limit=limit_state(export()) if callable(export) else None,
                hit_rates={
                    g.key: g.hit_rate for g in groups[:MAX_HIT_RATES] if g.hit_rate is not None
                },
            )
        snapshot = GatewaySnapshot(version=1, taken_at=time.time(), backends=backends)
        return snapshot.document()

    def _load_state(self) -> dict[str, LimitState]:
        """The saved limit state per backend that may start warm (logged and skipped when
        stale, foreign or not valid state: never a failed start)."""
        return load_warm(
            self._state_source, self.config.backends, max_age_s=self.config.state_max_age_s
        )

    def _warm_limit(self, backend: Backend, warm: Mapping[str, LimitState]) -> Limit:
        limit = self._make_limit(backend)
        saved = warm.get(backend.name)
        restore = getattr(limit, "restore", None)
        if saved is not None and callable(restore):
            try:
                restore(saved.model_dump())
            except ValueError as error:
                log.warning("state for backend %r ignored, starting cold: %s", backend.name, error)
                limit = self._make_limit(backend)
        return limit

    def _save_state(self) -> None:
        """On exit, with ``state=`` a path: merge the snapshot into it (gptgate/state_file.py)."""
        if isinstance(self._state_source, StateFile):
            self._state_source.save(self.snapshot(), max_age_s=self.config.state_max_age_s)

    def _limit_from(self, backend: Backend, initial: int) -> Limit:
        """A fresh limit for ``backend`` starting at ``initial`` (``shared=`` auto)."""
        return self._make_limit(backend.model_copy(update={"initial_concurrency": initial}))

    def _make_limit(self, backend: Backend) -> Limit:
        if isinstance(backend.concurrency, int):
            return FixedLimit(backend.concurrency)
        from . import limits

        factory = getattr(limits, "LLMLimit", None)
        if factory is None:  # pragma: no cover - until the adaptive limit lands
            return FixedLimit(backend.initial_concurrency)
        limit: Limit = factory(
            initial=min(backend.initial_concurrency, backend.max_concurrency),
            min_limit=backend.min_concurrency,
            max_limit=backend.max_concurrency,
            latency_bound_s=backend.timeout,
        )
        window = backend.concurrency_window
        if isinstance(window, tuple) and hasattr(limit, "set_window"):
            limit.set_window(*window)
        return limit

    @property
    def runner(self) -> CallRunner:
        """The call machinery, for a call about to start: refused (``GatewayClosedError``)
        when the gateway is not open or is closing, and a clear error instead of a silent
        hang when called from another event loop than the one that opened it."""
        if self._runner is None or not self._open:
            raise GatewayClosedError(NOT_OPEN_HERE if self._opened.auto else _NOT_OPEN)
        if self._calls.closing and not _ACCEPTED.get():
            self._calls.check()
        self._opened.check_loop()
        return self._runner

    # -- the verbs ------------------------------------------------------------------------

    def _spec(
        self,
        messages: object,
        *,
        scenario: str | Scenario | None,
        stream: bool | None,
        private: bool,
        tier: Literal["small", "large", "auto"],
        backend: str | None,
        priority: int | None,
        timeout: float | None,
        max_attempts: int | None,
        visible: bool,
        params: dict[str, Any],
        cache_key: str | None = None,
        hedge: bool | HedgePolicy | None = None,
    ) -> CallSpec:
        checked = _validate_messages(messages)
        resolved = self._resolve(scenario)
        params = dict(params)  # the caller's stays whole: gate.stream keys the cache by it
        headers = params.pop("extra_headers", None)
        _check_call_options(timeout, priority, max_attempts, headers)
        remember_call_headers(headers)  # a caller's own Authorization: masked in errors
        _check_route_options(private, stream, cache_key)
        _check_params(params)
        if tier not in ("small", "large", "auto"):
            raise BadRequestError("tier must be 'small', 'large' or 'auto'")
        if backend is not None and (not isinstance(backend, str) or backend not in self._states):
            known = ", ".join(self._states)
            raise BadRequestError(f"unknown backend {backend!r}; known: {known}")
        if "stream" in params:
            explicit = params.pop("stream")
            stream = bool(explicit) if stream is None else stream
        if visible:
            do_stream, decision = True, "explicit"
        else:
            do_stream, decision = decide_stream(resolved, checked, params, stream)
        policy = resolve_hedge(hedge, resolved.hedge)
        if policy is not None and decision in ("short_output", "default"):
            # hedged on its first token: a slow one says a bad replica or batch early, whatever
            # the answer's length, and a loser cancelled before it is rarely billed
            do_stream, decision = True, "hedge"
        if "model" in params:  # its own model: priced by its rule (where it may go)
            media = call_media_rule(self.config.backends, backend, params["model"])
        elif backend is not None:  # pinned to one backend: priced by that one's
            media = self._media_pinned.get(backend) or call_media_rule(
                self.config.backends, backend)
        else:
            media = self._media
        prompt_tokens = estimate_prompt_tokens(checked, media) + estimate_tools_tokens(
            params.get("tools")
        )
        max_out = params.get("max_completion_tokens") or params.get("max_tokens") or 0
        prefix = self._prefix(checked, cache_key) if resolved.ramp is not None else None
        route = RouteRequest(
            private=private,
            tier=tier,
            backend=backend,
            latency_sensitive=resolved.latency_sensitive,
            # the router prefers the backend that last served this prompt prefix (cached there)
            prefix_key=prefix.key if prefix is not None else None,
            input_tokens=prompt_tokens,
            output_tokens=max_out if isinstance(max_out, int) else 0,
            refused=refused_by(self._states.values(), params)
            | refused_media(self._states.values(), checked, params.get("model")),
        )
        if route.output_tokens + prompt_tokens // 2 > self._min_context:
            sure = sure_prompt_tokens(checked, params.get("tools"), media)
            self._refuse_if_no_context_fits(route, sure)
        deadline_s = timeout or resolved.deadline_s or self.config.deadline_s
        return CallSpec(
            messages=checked,
            params=params,
            scenario=resolved,
            stream=do_stream,
            stream_decision=decision,
            route=route,
            priority=resolved.priority if priority is None else priority,
            deadline=self.clock.now() + deadline_s if deadline_s else None,
            # no deadline chosen: a queue that stops moving is still given up on
            stall_s=None if deadline_s else self.default_deadline_s(route, max_attempts),
            prompt_tokens=prompt_tokens,
            visible=visible,
            max_attempts=max_attempts,
            prefix=prefix,
            headers=headers,
            hedge=policy,
        )

    def _refuse_if_no_context_fits(self, route: RouteRequest, prompt: int) -> None:
        """A call too long for the context window of every backend it may go to fails before
        it is sent (and before it waits for a permit): the server would refuse it with a 400
        on each of them. Run only when the call exceeds the smallest known window, so the
        common call pays one comparison. As for the rate-limit check, the prompt is an
        estimate (~4 characters a token) and only half of it counts: a borderline call is
        sent and the server decides (``prompt``: without the guessed size of an image it
        cannot read). A backend whose window is unknown takes anything."""
        windows = [s.backend.context_tokens for s in self.runner.router.eligible(route)]
        if any(w is None for w in windows):
            return
        largest = max(w for w in windows if w is not None)
        if route.output_tokens + prompt // 2 > largest:
            requested = route.output_tokens + prompt
            raise RequestTooLargeError(
                f"request too large: about {requested} tokens (prompt + max_tokens) exceed "
                f"the context window of every eligible backend (largest: {largest} tokens)",
                limit=largest,
                requested=requested,
            )

    def default_deadline_s(self, route: RouteRequest, max_attempts: int | None = None) -> float:
        """The bound on a call when neither it, its scenario nor the gateway sets a deadline
        (the documented ``GatewayConfig.deadline_s=None``): attempts × the largest backend
        timeout, plus the back-off cap between attempts.

        It bounds each attempt's own time (its timeout) and every *stalled* wait: a call gives
        up when its backend's queue has not moved for that long (a call queued behind a stuck
        one). A queue that moves is waited on — a batch job's last items are not shed just
        because the job is long; choose a deadline for that."""
        attempts = max_attempts or self.config.max_attempts
        timeout = self._max_timeout_s
        return attempts * timeout + (attempts - 1) * self.config.backoff_cap_s

    def _prefix(self, messages: Sequence[Mapping[str, Any]], cache_key: str | None) -> Any:
        group = prefix_key(messages, cache_key)
        if group is not None and self.config.keep_warm:
            self._prefixes[group.key] = list(messages[:-1])
        return group

    async def _keep_warm_loop(self) -> None:
        """Every interval, refresh each backend's hot prefix groups with a minimal call."""
        interval = self.config.keep_warm_interval_s
        while True:
            with anyio.move_on_after(self.clock.to_real(interval)):
                await self._closing.wait()
            if self._closing.is_set():
                return
            await refresh_each(list(self._states), self._refresh_backend)

    async def _refresh_backend(self, name: str) -> None:
        """Refresh one backend's hot prefix groups (backends at once: gptgate/warm.py)."""
        for key in self.cache_gate.hot_groups(name, self.config.keep_warm_min_rate_per_min):
            prefix = self._prefixes.get(key)
            if not prefix:
                continue
            try:
                await self.chat(
                    [*prefix, {"role": "user", "content": "."}],
                    backend=name, max_tokens=1, stream=False, scenario="default",
                    max_attempts=1,
                )
                self.keep_warm_calls += 1
            except GateError as error:
                log.info("keep-warm of a prefix on %s failed: %s", name, error)

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        stream: bool | None = None,
        private: bool = False,
        tier: Literal["small", "large", "auto"] = "auto",
        backend: str | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        cache_key: str | None = None,
        hedge: bool | HedgePolicy | None = None,
        accept: Accept | None = None,
        cache: CacheMode | None = None,
        **params: Any,
    ) -> ChatResult:
        """One chat completion. Any OpenAI parameter (``max_tokens``, ``tools``, …) passes
        through. ``stream`` forces the wire mode; by default the scenario's stream rule picks
        it (the whole answer is returned either way). ``timeout`` is the call's total deadline.
        ``cache_key`` names the prompt-prefix group explicitly (default: every message but the
        last); it is sent as ``prompt_cache_key`` to backends that support it. ``hedge``
        (True or a HedgePolicy; default: the scenario's) sends one duplicate once the call
        has waited past its backend's p95 (docs/guide.md "Hedging"). ``accept(result) -> bool``
        judges a ``tier="auto"`` call's small-tier answer: False asks the large tier once
        (docs/tiers.md; default: the gateway's ``tier_accept``). ``cache`` ("use",
        "refresh", "bypass"; default: use when deterministic) reads and fills the
        ``response_cache`` (docs/response-cache.md).
        """
        await open_in_child(self)  # in a forked child, its first call opens it (fork_rebuild.py)
        judge = check_accept(accept)
        if judge is not None and (tier != "auto" or backend is not None):
            raise BadRequestError(
                "accept applies to tier='auto' calls only: an explicit tier or backend is "
                "never escalated"
            )
        if self._cached.applies(cache, params):
            key = self._cached.key(messages, params, tier=tier, backend=backend, private=private)
            budget_s = timeout or self._resolve(scenario).deadline_s or self.config.deadline_s
            return await self._cached.chat(key, cache, lambda left: self.chat(
                messages, scenario=scenario, stream=stream, private=private,
                tier=tier, backend=backend, priority=priority, timeout=left,
                max_attempts=max_attempts, cache_key=cache_key, hedge=hedge, accept=accept,
                cache="bypass", **params,
            ), budget_s, judge=self._tiering.judge_of(judge) if tier == "auto" else None)
        runner = self.runner
        spec = self._spec(
            messages,
            scenario=scenario,
            stream=stream,
            private=private,
            tier=tier,
            backend=backend,
            priority=priority,
            timeout=timeout,
            max_attempts=max_attempts,
            visible=False,
            params=params,
            cache_key=cache_key,
            hedge=hedge,
        )
        result: ChatResult | None = None
        with self._calls.call(new=not _ACCEPTED.get()):
            result = await self._tiering.run(runner, spec, judge)
        assert result is not None
        return result

    async def embed(
        self,
        texts: str | Sequence[str],
        *,
        model: str | None = None,
        private: bool = False,
        backend: str | None = None,
        timeout: float | None = None,
        **params: Any,
    ) -> Any:
        """Embedding vectors: a list in order for a list of texts, one vector for one string.
        Concurrent calls are merged into one request per ``embed_window_s`` and split at the
        backends' caps (docs/embeddings.md); ``timeout`` is the call's deadline, as for
        ``chat``; ``params`` (``dimensions``, …) pass through to the provider, and
        ``extra_headers`` go as HTTP headers."""
        _check_call_options(timeout, None, None, params.get("extra_headers"))
        return await self._embedder.embed(
            texts, model=model, private=private, backend=backend, timeout=timeout, **params
        )

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        private: bool = False,
        tier: Literal["small", "large", "auto"] = "auto",
        backend: str | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        max_attempts: int | None = None,
        cache_key: str | None = None,
        hedge: bool | HedgePolicy | None = None,
        accept: object = None,
        cache: CacheMode | None = None,
        **params: Any,
    ) -> ChatStream:
        """Stream the answer to the caller: ``async with gate.stream(m) as s: async for t in s``.

        ``hedge`` (True or a HedgePolicy; default: the scenario's) sends one duplicate once
        the call has waited past its backend's p95 time to first token, and only until a token
        has been shown: the first racer to produce one is the stream (docs/guide.md
        "Hedging")."""
        if accept is not None:
            raise BadRequestError(
                "accept is not supported on gate.stream: a visible stream is never escalated"
                " (its text is shown as it arrives; use gate.chat)"
            )
        runner = self.runner
        spec = self._spec(
            messages,
            scenario=scenario,
            stream=True,
            private=private,
            tier=tier,
            backend=backend,
            priority=priority,
            timeout=timeout,
            max_attempts=max_attempts,
            visible=True,
            params=params,
            cache_key=cache_key,
            hedge=hedge,
        )
        if self._cached.applies(cache, params):  # a cached answer replayed (response cache)
            key = self._cached.key(messages, params, tier=tier, backend=backend, private=private)
            return self._cached.stream(runner, spec, key, cache)
        return ChatStream(runner, spec, self.clock, self._calls, self._tiering)

    async def map(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        max_pending: int | None = None,
        on_result: Callable[[int, ChatResult | GateError], None] | None = None,
        **common: Any,
    ) -> list[ChatResult | GateError]:
        """Run many calls; results in input order, a failed item holds its ``GateError``.

        Items are pulled from ``items`` only as fast as they can be in flight (plus a small
        margin), so a generator of a million prompts never sits in memory as requests. Each
        item is a dict of ``chat`` keyword arguments (``messages`` required); a malformed one
        is a failed item (``BadRequestError`` naming its index). A scenario with a batch policy
        sends items through its micro-batcher (grouped by prompt prefix).

        Cancelling the ``map`` cancels its items: unsent ones are never sent. If ``items``
        itself raises, the items already started are cancelled and that exception is raised.

        ``on_result(index, outcome)`` is called as each item ends (in completion order, with
        what its slot of the returned list will hold), so a job can show progress or stream
        results out before the last one; keep it quick, it runs on the event loop. If it
        raises, the job stops as when ``items`` raises, and that exception is raised.
        """
        await open_in_child(self)  # in a forked child, its first call opens it (fork_rebuild.py)
        backlog = self.runner.backlog  # fails fast when closed
        pending = _check_max_pending(max_pending)
        if on_result is not None and not callable(on_result):
            raise BadRequestError(
                f"on_result must be callable (or None), not {type(on_result).__name__}"
            )
        try:
            source = iter(items)
        except TypeError:
            raise BadRequestError("items must be an iterable of dicts of chat arguments") from None
        resolved = self._resolve(scenario)
        batcher = await self._batcher_for(resolved)
        ceiling = sum(b.ceiling for b in self.config.backends)
        bound = pending or max(64, 2 * ceiling)
        if pending is None and resolved.ramp is not None:
            # the cache gate holds a cold prefix's calls behind its warm-up: look far enough
            # ahead that other prefixes' calls keep the backend busy meanwhile
            bound = max(bound, 1024, 20 * ceiling)
        slots = anyio.Semaphore(bound)
        results: list[ChatResult | GateError | None] = []
        failed: list[Exception] = []

        def report(index: int, scope: anyio.CancelScope) -> None:
            """Hand an ended item to ``on_result``; if that raises, the job fails with it."""
            outcome = results[index]
            if on_result is None or outcome is None or failed:
                return
            try:
                on_result(index, outcome)
            except Exception as error:
                failed.append(error)
                scope.cancel()

        async def one(index: int, kwargs: dict[str, Any]) -> None:
            try:
                results[index] = await self._map_item(batcher, kwargs)
            except BadRequestError as error:
                results[index] = _with_index(index, error)
            except GateError as error:
                results[index] = error
            finally:
                slots.release()
            report(index, tg.cancel_scope)

        # a sized job's unsent items are demand its rate ceiling can see (gptgate/map_demand.py)
        with backlog.job(items) as job:
            async with anyio.create_task_group() as tg:
                for index in itertools.count():
                    await take_slot(slots)
                    try:
                        item = next(source)
                    except StopIteration:
                        break
                    except Exception as error:  # the producer failed: so has the job
                        failed.append(error)
                        tg.cancel_scope.cancel()
                        break
                    results.append(None)
                    job.pulled()
                    try:
                        kwargs = self._item_kwargs(index, item, common, resolved)
                    except GateError as error:
                        results[index] = error
                        slots.release()
                        report(index, tg.cancel_scope)
                        if failed:
                            break
                        continue
                    tg.start_soon(one, index, kwargs)
        if failed:
            raise failed[0]
        return [r if r is not None else GateError("item did not complete") for r in results]

    def _item_kwargs(
        self, index: int, item: object, common: Mapping[str, Any], scenario: Scenario
    ) -> dict[str, Any]:
        """One ``map`` item as ``chat`` keyword arguments, or the ``BadRequestError`` (naming
        the item) that it fails with; refused when the gateway began closing meanwhile."""
        self._calls.check()
        if not isinstance(item, Mapping):
            raise BadRequestError(
                f"item {index} must be a dict of chat arguments, not {type(item).__name__}"
            )
        kwargs = {**common, **item}
        keys = [k for k in kwargs if not isinstance(k, str)]
        if keys:
            raise BadRequestError(f"item {index} has non-string keys: {keys[:3]!r}")
        if "messages" not in kwargs:
            raise BadRequestError(f"item {index} has no 'messages'")
        try:
            _validate_messages(kwargs["messages"])
        except BadRequestError as error:
            raise _with_index(index, error) from None
        kwargs.setdefault("scenario", scenario)
        # its deadline runs from now, when the job pulls it (docs/guide/deadlines.md)
        return stamp_deadline(kwargs, _DEADLINE_KEY, self._deadline_s(kwargs), self.clock)

    async def _map_item(
        self, batcher: MicroBatcher[dict[str, Any], ChatResult] | None, kwargs: dict[str, Any]
    ) -> ChatResult:
        if batcher is None:
            return await self._chat_kwargs(kwargs)
        handle = await self._submit_to(batcher, kwargs)
        try:
            return await handle
        except BaseException:
            handle.cancel()  # the job was cancelled: so is its item (a no-op once it ended)
            raise

    async def submit(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        scenario: str | Scenario | None = None,
        **kwargs: Any,
    ) -> ItemHandle[ChatResult]:
        """Hand one call to the scenario's micro-batcher and return at once with a handle
        (``await handle`` → ``ChatResult`` or the error). For producers that trickle: items
        are collected by the batch policy (size or time, whichever first) and flushed by prefix
        group; ``submit`` waits only when the batcher's pending bound is reached."""
        await open_in_child(self)  # in a forked child, its first call opens it (fork_rebuild.py)
        self.runner  # noqa: B018 - fail fast when closed
        resolved = self._resolve(scenario)
        batcher = await self._batcher_for(resolved, always=True)
        assert batcher is not None
        return await self._submit_to(
            batcher, {**kwargs, "messages": messages, "scenario": resolved}
        )

    async def _submit_to(
        self, batcher: MicroBatcher[dict[str, Any], ChatResult], kwargs: dict[str, Any]
    ) -> ItemHandle[ChatResult]:
        """Hand an item to ``batcher``. Its deadline runs from now (from when ``map`` pulled
        it) — the time it waits to be flushed counts — so it is carried as a clock reading
        until the call starts."""
        kwargs = stamp_deadline(kwargs, _DEADLINE_KEY, self._deadline_s(kwargs), self.clock)
        try:
            # a full batcher (``max_pending``) makes ``submit`` wait for room: within the
            # deadline only, as a full limiter queue would
            with anyio.move_on_after(time_left_real(kwargs.get(_DEADLINE_KEY), self.clock)):
                return await batcher.submit(kwargs)
        except anyio.ClosedResourceError:  # the gateway began closing while we waited
            raise GatewayClosedError("the gateway is closing: no new calls are accepted") from None
        raise OverloadedError(
            f"deadline passed waiting for room in the micro-batcher (max_pending "
            f"{batcher.policy.max_pending})"
        )

    def _resolve(self, scenario: str | Scenario | None) -> Scenario:
        return self._default_scenario if scenario is None else scenario_for_call(scenario)

    def _deadline_s(self, kwargs: Mapping[str, Any]) -> float | None:
        """The deadline an item's call will have (``timeout``, else its scenario's, else the
        gateway's); None when none applies or ``timeout`` is invalid (the call refuses it)."""
        timeout = kwargs.get("timeout")
        if timeout is not None:
            valid = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
            return float(timeout) if valid and 0 < timeout < math.inf else None
        scenario = kwargs.get("scenario")
        scenario_s = scenario.deadline_s if isinstance(scenario, Scenario) else None
        return scenario_s or self.config.deadline_s

    async def _chat_kwargs(self, kwargs: dict[str, Any]) -> ChatResult:
        """An item accepted before any close began (batched, or pulled by ``map``): it runs
        through the shutdown grace rather than being refused as a new call, within what is
        left of the deadline it had when it was submitted (or pulled)."""
        deadline = kwargs.pop(_DEADLINE_KEY, None)
        if deadline is not None:
            left = deadline - self.clock.now()
            if left <= 0:
                raise OverloadedError("deadline passed before the item's call started")
            kwargs["timeout"] = left
        messages = kwargs.pop("messages", None)
        accepted = _ACCEPTED.set(True)
        try:
            return await self.chat(messages, **kwargs)
        except TypeError as error:
            raise BadRequestError(f"bad item: {error}") from None
        finally:
            _ACCEPTED.reset(accepted)

    async def _batcher_for(
        self, scenario: Scenario, *, always: bool = False
    ) -> MicroBatcher[dict[str, Any], ChatResult] | None:
        policy = scenario.batch
        if policy is None or (scenario.batch_only_offline and not scenario.offline):
            if not always:
                return None
            policy = BatchPolicy.REALTIME
        batcher = self._batchers.get(scenario)
        if batcher is None:
            if self._task_group is None or self._calls.closing:
                raise GatewayClosedError("the gateway is closing: no new calls are accepted")
            done = anyio.Event()
            self._hosts_done.append(done)
            batcher = await self._task_group.start(self._host_batcher, scenario, policy, done)
            self._batchers[scenario] = batcher
        return batcher

    async def _host_batcher(
        self,
        scenario: Scenario,
        policy: BatchPolicy,
        done: anyio.Event,
        *,
        task_status: anyio.abc.TaskStatus[MicroBatcher[dict[str, Any], ChatResult]],
    ) -> None:
        """Runs a scenario's batcher inside the gateway's task group until close, then lets
        it flush and drain: nothing accepted is dropped."""

        def group_of(kwargs: dict[str, Any]) -> str | None:
            messages = kwargs.get("messages")
            if not isinstance(messages, Sequence) or isinstance(messages, str):
                return None
            try:
                group = prefix_key(messages, kwargs.get("cache_key"))
            except Exception:
                return None
            return group.key if group is not None else None

        try:
            async with MicroBatcher(
                policy, self._chat_kwargs, clock=self.clock, group_of=group_of
            ) as batcher:
                task_status.started(batcher)
                await self._closing.wait()
        finally:
            done.set()

    async def batch(
        self,
        items: Iterable[Mapping[str, Any]],
        *,
        job_dir: str | os.PathLike[str],
        backend: str | None = None,
        retry: RetryMode = None,
        scenario: str | Scenario | None = None,
        poll_s: float = 30.0,
        limits: BatchLimits | None = None,
        **common: Any,
    ) -> BatchJob:
        """An offline job through ``backend``'s Batch API at the batch price, durable in
        ``job_dir``: the same items again resume it, never send it twice (docs/batch.md).
        ``retry``: send failed items again ``"live"`` (``scenario``) or as a ``"batch"``."""
        return await submit_batch(
            self, items, backend=backend, job_dir=job_dir, retry=retry, scenario=scenario,
            poll_s=poll_s, limits=limits, common=common, spending=self._spending,
        )

    async def take_up_batch(self, items: Iterable[Mapping[str, Any]], **options: Any) -> BatchJob:
        """The job ``batch(items, job_dir=..., ...)`` recorded, sending nothing: to see or
        cancel it (``gptgate.batch.take_up_batch``, docs/batch.md)."""
        return await take_up_batch(self, items, **options)

    async def warm(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        backend: str | None = None,
        private: bool = False,
        tier: Literal["small", "large", "auto"] = "auto",
    ) -> list[ChatResult | GateError]:
        """Pre-warm a prompt prefix (e.g. a system prompt) off-peak: one minimal request
        (``max_tokens=1``) per eligible backend, since each backend has its own cache
        (LiteLLM #6784 needs one call per deployment), all at once (gptgate/warm.py)."""
        await open_in_child(self)  # in a forked child, its first call opens it (fork_rebuild.py)
        checked = list(_validate_messages(messages))
        if checked[-1].get("role") != "user":
            checked.append({"role": "user", "content": "."})
        route = RouteRequest(private=private, tier=tier, backend=backend)
        targets = [s.name for s in self.runner.router.eligible(route)]
        group = prefix_key(checked)

        def warmed(name: str) -> None:  # the first real call of this prefix need not warm it
            if group is not None:
                limit = self.backend_state(name).limiter.current_limit
                self.cache_gate.mark_warm(name, group, RampPolicy(), limit)

        return await warm_each(targets, lambda name: self.chat(
            checked, backend=name, max_tokens=1, stream=False, scenario="default"
        ), warmed)

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, BackendStats]:
        """Per backend: limit, in flight, queued, pool wait, latency percentiles, TTFT,
        cache hit rate, retries, tokens and cost."""
        snapshot: dict[str, BackendStats] = {}
        for name, state in self._states.items():
            limiter = state.limiter.statistics()
            entry = self._ledger.entries[name]
            phase, events = limit_phase(state.limiter.limit)
            earlier = self._earlier[name]
            fleet = fleet_statistics(state.limiter.admission)
            in_flight, queued = on_the_backend(limiter.in_flight, limiter.queued, fleet)
            snapshot[name] = BackendStats(
                name=name,
                hardware=state.backend.hardware,
                limit=min(limiter.limit, fleet.in_force) if fleet else limiter.limit,
                local_limit=limiter.limit,
                in_flight=in_flight,
                abandoned_holding=limiter.holding,
                queued=queued,
                admitted=limiter.admitted + earlier.admitted,
                shed=limiter.shed + earlier.shed,
                pool=earlier.pool(state.pool.statistics()),
                latency_p50_s=state.latency.percentile(0.5),
                latency_p95_s=state.latency.percentile(0.95),
                latency_p99_s=state.latency.percentile(0.99),
                ttft_p50_s=state.ttft.percentile(0.5),
                ttft_p95_s=state.ttft.percentile(0.95),
                calls=state.calls + earlier.calls,
                failures=state.failures + earlier.failures,
                retries=state.retries + earlier.retries,
                rate_limited=state.rate_limited + earlier.rate_limited,
                timeouts=state.timeouts + earlier.timeouts,
                cache_hit_rate=entry.hit_rate,
                input_tokens=entry.input_tokens,
                cached_input_tokens=entry.cached_input_tokens,
                output_tokens=entry.output_tokens,
                wasted_tokens=entry.wasted_tokens,
                uncertain_tokens=entry.uncertain_tokens,
                streamed_attempts=entry.streamed_attempts,
                plain_attempts=entry.plain_attempts,
                cost_usd=entry.cost_usd,
                circuit=state.breaker.state(self.clock.now()),
                cache_waiting=self.cache_gate.waiting(name),
                limit_phase=phase,
                limit_events=earlier.events(events),
                fleet=fleet,
                fleet_cache_hit_rate=self.cache_gate.fleet_hit_rate(name),
                fleet_pacing=state.fleet_pacer.statistics() if state.fleet_pacer else None,
                hedges=state.hedges,
                escalated=entry.escalated,
                drift=state.drift.status if state.drift is not None else None,
                cache_write_input_tokens=entry.cache_write_input_tokens,
                reasoning_tokens=entry.reasoning_tokens,
                web_search_requests=entry.web_search_requests,
                server=state.signals.snapshot() if state.signals else ServerSignals(),
                response_cache=self._cached.statistics(name),
            )
        return snapshot

    def budget_status(self) -> BudgetStatus | None:
        """The dollar budget (``budget=``): spend and reservations in the sliding hour, the
        budget, calls waiting, throttled and refused; None without a budget."""
        return self._spending.status() if self._spending is not None else None

    def tier_stats(self) -> TierStats:
        """``tier="auto"`` calls per classifier rule: how many went small, how many small
        answers were escalated to the large tier (docs/tiers.md)."""
        return self._tiering.stats()

    @property
    def ledger(self) -> Ledger:
        return self._ledger

    def backend_state(self, name: str) -> BackendState:
        try:
            return self._states[name]
        except KeyError:
            pass
        self._configured(name)
        raise GateError("the gateway is not open: use `async with gate:` (or await start())")

    @property
    def calls(self) -> CallRegistry:
        """The calls in flight, which closing the gateway ends (an SDK's bodies too)."""
        return self._calls

    def register_call(self) -> AbstractContextManager[None]:
        """The scope a guarded call's body runs in: the shutdown gives it the grace, then
        cancels it with ``GatewayClosedError``, as it does ``gate.chat``'s."""
        return self._calls.call(new=not _ACCEPTED.get())

    def _configured(self, name: str) -> Backend:
        """The configured backend called ``name``, or a BadRequestError naming the known ones."""
        for backend in self.config.backends:
            if backend.name == name:
                return backend
        known = ", ".join(b.name for b in self.config.backends)
        raise BadRequestError(f"unknown backend {name!r}; known: {known}")

    # -- other call sites -----------------------------------------------------------------

    def guard(
        self,
        _bare: None = None,
        /,
        *,
        scenario: str | Scenario | None = None,
        backend: str | None = None,
        private: bool = False,
        tier: Literal["small", "large", "auto"] = "auto",
        retry: bool = True,
    ) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
        """Decorate an existing async call site (any SDK inside) with admission control,
        priority, retries under the gateway's policy and budget, ``stats()``, a span per call
        and a ledger entry from the usage it returns (docs/guide.md: "The two adoption paths
        together"). Raises ``TypeError`` at decoration for anything but an ``async def``."""
        refuse_bare(_bare, "gate.guard")  # @gate.guard without (): gptgate/guard_parens.py
        return make_guard(
            self, scenario=scenario, backend=backend, private=private, tier=tier, retry=retry
        )

    def http_client(
        self,
        backend: str,
        *,
        priority: int | None = None,
        scenario: str | Scenario | None = None,
        fallback: Sequence[str] | None = None,
        fallback_models: Mapping[str, Mapping[str, str]] | None = None,
        **client_options: Any,
    ) -> httpx2.AsyncClient:
        """An ``httpx2.AsyncClient`` for a third-party SDK (``openai.AsyncOpenAI(
        http_client=gate.http_client("gpu-local"))``): its requests share the backend's pool
        and pass through its limiter, so SDK traffic counts against the same limit, and each
        is an attempt with a span, metrics, a ledger entry and ``stats()`` counters.

        ``priority`` (else the ``scenario``'s, else 5) orders its requests in the admission
        queue beside ``gate.chat``'s. It may be built before the gateway opens (SDK clients are
        often made at import time): the backend's live state is looked up at each request,
        which raises ``GatewayClosedError`` while the gateway is not open. An unknown name
        fails here. ``fallback`` (backends of the same wire, in order) takes a request the
        primary cannot serve, rewritten for it; ``fallback_models={"b": {"m-a": "m-b"}}``
        names the model sent there (gptgate/sdk_failover.py)."""
        transport = self.sdk_transport(
            backend, priority=priority, scenario=scenario, fallback=fallback,
            fallback_models=fallback_models,
        )
        timeout = client_options.pop("timeout", httpx2.Timeout(self._configured(backend).timeout))
        return httpx2.AsyncClient(transport=transport, timeout=timeout, **client_options)

    def sdk_transport(
        self, backend: str, *, priority: int | None, scenario: str | Scenario | None,
        fallback: Sequence[str] | None = None,
        fallback_models: Mapping[str, Mapping[str, str]] | None = None,
    ) -> httpx2.AsyncBaseTransport:
        """The transport behind ``http_client`` (SyncGateway's sync client wraps it)."""
        self._configured(backend)
        resolved = scenario_for_call(scenario) if scenario is not None else None
        if priority is None:
            priority = resolved.priority if resolved is not None else 5
        elif isinstance(priority, bool) or not isinstance(priority, int):
            raise BadRequestError(f"priority must be an int, got {priority!r}")
        fallbacks = check_fallbacks(self.config.backends, backend, fallback, fallback_models)
        self.clients_made.made(backend, fallbacks.names if fallbacks else ())
        made = {name: GuardTransport(
            self, name, priority, resolved.name if resolved is not None else None,
            resolved.deadline_s if resolved is not None else None,
        ) for name in (backend, *(fallbacks.names if fallbacks else ()))}
        return made[backend] if fallbacks is None else FailoverTransport(
            self, backend, fallbacks, made)

    def __repr__(self) -> str:
        names = ", ".join(self._states or (b.name for b in self.config.backends))
        return f"Gateway(backends=[{names}], open={self._open})"
