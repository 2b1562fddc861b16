"""``gate.stats()``'s per-backend snapshot, and the two readings of a backend's limit and
admission it is built from: a small type of its own, so the gateway module holds the calls
and not the dashboard's shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .drift import DriftStatus
from .limits import FixedLimit, Limit
from .pool import PoolStatistics
from .response_cache import ResponseCacheStatistics
from .shared.fleet import FleetStatistics
from .shared.pacing import FleetPacerStatistics
from .signals import ServerSignals

__all__ = ["BackendStats", "fleet_statistics", "limit_phase", "on_the_backend"]


@dataclass(frozen=True, slots=True)
class BackendStats:
    """A snapshot of one backend, for dashboards and alerts (``gate.stats()``).

    Every counter (``calls``, ``failures``, ``retries``, ``shed``, tokens, …) is monotonic over
    the Gateway's lifetime, across re-opening it. ``calls`` counts attempts sent to the backend
    (a call shed by the limiter or the cache gate, or whose deadline passed first, is in
    ``shed`` or nowhere); ``failures`` counts sent attempts the backend failed (not those cut by
    the caller's own deadline); ``retries`` counts retry attempts sent to this backend — where
    the retry went, not where the failed attempt was.
    """

    name: str
    hardware: str
    #: the limit in force: what admission applies now — with ``shared=`` the lower of this
    #: process's own limit and the fleet's (the fleet's limit, or this process's share of it
    #: during an outage; 1 before the fleet was seen: docs/guide/many-processes.md)
    limit: int
    #: calls holding a permit; with ``shared=``, not those still waiting for the fleet's
    #: (``fleet.waiting``): they are in ``queued``
    in_flight: int
    queued: int
    admitted: int
    shed: int
    pool: PoolStatistics
    latency_p50_s: float | None
    latency_p95_s: float | None
    latency_p99_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    calls: int
    failures: int
    retries: int
    rate_limited: int
    timeouts: int
    cache_hit_rate: float | None
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    wasted_tokens: int
    streamed_attempts: int
    plain_attempts: int
    cost_usd: float
    circuit: str
    #: calls held by the prompt-cache gate: behind a warm-up, at a ramp window, or waiting for
    #: their prefix group's turn (see docs/caching.md) — not yet at the limiter
    cache_waiting: int = 0
    #: where the limit is: ``"fixed"``, or for ``concurrency="auto"`` ``"slow start"`` (still
    #: doubling) or ``"probing"`` (around the knee it found); ``"adaptive"`` for another Limit
    limit_phase: str = "fixed"
    #: estimated tokens of attempts that answered nothing before they ended (a timeout or a
    #: cancellation with no byte of answer): counted in the tokens above, possibly not billed
    uncertain_tokens: int = 0
    #: why the adaptive limit moved, counts per cause (``LLMLimit``: ``slow_start_exit``,
    #: ``loss``, ``queue``, ``delay``; empty for a fixed limit) — "why is the limit 12?"
    limit_events: Mapping[str, int] = field(default_factory=dict)
    #: tail-hedge duplicates sent to this backend (docs/guide.md "Hedging")
    hedges: int = 0
    #: answers of this backend asked again of the large tier (tiered serving, docs/tiers.md)
    escalated: int = 0
    #: the fleet's view with ``shared=`` (fleet-wide permits, outage state); None without
    fleet: FleetStatistics | None = None
    #: against its baseline with ``Gateway(baseline=...)`` (docs/drift.md); None when not
    #: checked (no baseline, or none that fits this backend)
    drift: DriftStatus | None = None
    #: ``shared=``: the prompt-cache hit rate over every process of the fleet (None without)
    fleet_cache_hit_rate: float | None = None
    #: ``shared=``: this process's calls paced by the fleet's RPM/TPM budget (None without)
    fleet_pacing: FleetPacerStatistics | None = None
    #: of ``in_flight``: slots still taken by requests we hung up on (a timeout, a cancelled
    #: call, a stream left), for the backend's ``abandon_grace_s`` — it still runs them
    abandoned_holding: int = 0
    #: this process's own limit, before the fleet's: the configured ``concurrency`` or the
    #: adaptive limit (with ``shared=`` auto, the fleet's published one), within the pool
    local_limit: int = 0
    #: of ``input_tokens``: written to the provider's prompt cache (Anthropic bills them
    #: dearer); of ``output_tokens``: spent reasoning (docs/providers.md "Usage and prices")
    cache_write_input_tokens: int = 0
    reasoning_tokens: int = 0
    #: searches a server-side web search tool made (Anthropic's), in ``cost_usd`` at
    #: ``Price.web_search_per_k``
    web_search_requests: int = 0
    #: ``Backend(signals=True)``: the server's own load at the last read (docs/signals.md);
    #: every field None when off or never read
    server: ServerSignals = field(default_factory=ServerSignals)
    #: ``response_cache=``: this backend's answers served again from the cache (hits, joined
    #: calls in flight), sent (misses) and stored (bytes); None without a response cache
    response_cache: ResponseCacheStatistics | None = None


def fleet_statistics(admission: object) -> FleetStatistics | None:
    """The fleet's view of a backend's admission (``shared=``); None without a fleet."""
    statistics = getattr(admission, "statistics", None)
    return statistics() if callable(statistics) else None


def on_the_backend(
    in_flight: int, queued: int, fleet: FleetStatistics | None
) -> tuple[int, int]:
    """``stats()``'s in flight and queued: a call that holds this process's permit but still
    waits for the fleet's (``shared=``) is queued, not in flight — two processes on a fleet
    limit of 2 each showed 2 in flight while the backend had 2 in all."""
    waiting = fleet.waiting if fleet is not None else 0
    return in_flight - waiting, queued + waiting


def limit_phase(limit: Limit) -> tuple[str, dict[str, int]]:
    """The phase and the per-cause move counts of a backend's limit, for ``stats()``."""
    if isinstance(limit, FixedLimit):
        return "fixed", {}
    events = getattr(limit, "events", None)
    counts = {str(k): int(v) for k, v in events.items()} if isinstance(events, Mapping) else {}
    slow_start = getattr(limit, "in_slow_start", None)
    if slow_start is None:
        return "adaptive", counts
    return ("slow start" if slow_start else "probing"), counts
