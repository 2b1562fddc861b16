"""``gg.ResponseCache``: an exact-match cache of whole chat answers, with single-flight.

Why: a job retried, a page reloaded, a pipeline re-run send the same deterministic request
again and pay for it again. The key is a hash of everything that decides the answer — the
backends the request may reach (their tier and model), the messages, and every parameter
(tools, ``response_format``, each sampling parameter) — never of what only decides *how* it
is sent (scenario, priority, timeout, hedging). Only an exact match hits: no similarity,
which is how LiteLLM's semantic cache returned other questions' answers.

When it is used (``cache=`` on ``gate.chat`` / ``gate.stream`` / map items):
``None`` (default) only for a deterministic request (``temperature=0`` or a ``seed``);
``"use"`` read and write whatever the request; ``"refresh"`` call anyway and overwrite;
``"bypass"`` neither. Never stored: an error, a cut stream, an answer without a finish
reason, one a content filter stopped (``content_filter``, Anthropic's ``refusal``), a
failed-looking small-tier answer kept for want of the large tier (gptgate/tier_fallback.py),
and
— into a ``shared=`` Redis — a private backend's answer unless ``share_private=True``.
Identical requests in flight at once share one call (single-flight); a leader cancelled
mid-call, or out of its own shorter deadline, hands the call to one of its followers, and
each keeps its own deadline (gptgate/flight_deadline.py).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import anyio
from cachetools import TLRUCache

from .errors import BadRequestError, GateError, InvalidConfigError
from .flight_deadline import CallerDeadline
from .response_cache_fleet import answer_or_claim, kept
from .response_cache_loop import LoopHolders
from .results import ChatResult, Usage
from .tier_fallback import watching

if TYPE_CHECKING:
    from .clock import Clock
    from .config import Backend
    from .response_cache_redis import RedisAnswers
    from .shared import Shared

__all__ = [
    "CacheMode",
    "ResponseCache",
    "ResponseCacheStatistics",
    "check_cache_mode",
    "decode_result",
    "encode_result",
    "request_key",
]

CacheMode = Literal["use", "refresh", "bypass"]
_MODES = ("use", "refresh", "bypass")
#: the call options that decide how a request is sent, not what it answers: not in the key
ROUTE_OPTIONS = ("tier", "backend", "private")
#: request parameters that decide how the answer travels, not what it is: not in the key
_HOW_SENT = frozenset({"stream", "stream_options"})


def check_cache_mode(cache: object) -> CacheMode | None:
    if cache is None or cache in _MODES:
        return cache  # type: ignore[return-value]
    modes = ", ".join(map(repr, _MODES))
    raise BadRequestError(f"cache must be one of {modes} or None, got {cache!r}")


def deterministic(params: Mapping[str, Any]) -> bool:
    """``temperature=0`` or a ``seed``: the same request asks for the same answer."""
    temperature = params.get("temperature")
    return (temperature is not None and temperature == 0) or params.get("seed") is not None


def _canonical(value: Any) -> Any:
    """JSON-able with a stable form: mappings sorted, tuples as lists, a whole float as its
    int (``0.0`` is the server's ``0``: the same request), the rest by repr."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda i: str(i[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    dump = getattr(value, "model_dump", None)  # a pydantic response_format class instance
    if callable(dump):
        return _canonical(dump())
    return repr(value)


def _identity(backend: Backend) -> tuple[str, ...]:
    """What decides a backend's answers: its tier and model — and an Azure deployment named
    otherwise than its model, since the deployment (not ``model=``, a label there) is what
    answers: two deployments under one model name shared answers. A deployment named as its
    model, or the same deployment name on two resources (a region beside another), keeps
    one key, as does every backend without a deployment (its keys are what they were)."""
    deployment = backend.deployment
    if deployment is None or deployment == backend.model:
        return (backend.tier, backend.model)
    return (backend.tier, backend.model, deployment)


def request_key(
    backends: Sequence[Backend],
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    *,
    tier: str = "auto",
    backend: str | None = None,
    private: bool = False,
) -> str:
    """The cache key of a request: a SHA-256 of the models it may reach (each eligible
    backend's :func:`_identity`), the messages and every parameter, normalised — a parameter
    given as None is the server's default, as one not given; ``stream`` and
    ``stream_options`` only decide how the answer travels."""
    params = {k: v for k, v in params.items() if v is not None and k not in _HOW_SENT}
    reach = sorted(
        {
            _identity(b)
            for b in backends
            if (tier == "auto" or b.tier == tier)
            and (backend is None or b.name == backend)
            and (not private or b.private)
        }
    )
    document = {
        "reach": reach,
        "tier": tier,
        "backend": backend,
        "private": private,
        "messages": _canonical(messages),
        "params": _canonical(params),
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def encode_result(result: ChatResult) -> bytes:
    """A cacheable answer as JSON bytes (what the store holds and ``bytes`` counts)."""
    return json.dumps(asdict(result), separators=(",", ":"), default=str).encode()


def decode_result(data: bytes) -> ChatResult:
    fields = json.loads(data)
    fields["usage"] = Usage(**fields["usage"])
    fields["billed_usage"] = Usage(**fields["billed_usage"])
    return ChatResult(**fields)


def served_from_cache(result: ChatResult, latency_s: float) -> ChatResult:
    """A cached answer as a new call's result: nothing billed, nothing sent."""
    return replace(
        result, from_cache=True, cost_usd=0.0, attempts=0, queue_s=0.0, ttft_s=None,
        latency_s=latency_s, billed_usage=Usage(),
    )


@dataclass(frozen=True, slots=True)
class ResponseCacheStatistics:
    """Counters of one backend's answers (or of all, from ``ResponseCache.statistics()``):
    ``hits`` served from the store, ``shared`` served by joining an identical call in flight
    (single-flight), ``misses`` sent, ``stored`` answers written and their ``bytes``."""

    hits: int = 0
    shared: int = 0
    misses: int = 0
    stored: int = 0
    bytes: int = 0
    #: answers the store holds now (this process's memory)
    entries: int = 0
    #: ``shared=``: Redis operations that failed or overran (the local store answered)
    shared_errors: int = 0

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.shared + self.misses
        return (self.hits + self.shared) / total if total else None


class _Counts:
    __slots__ = ("bytes", "hits", "misses", "shared", "stored")

    def __init__(self) -> None:
        self.hits = self.shared = self.misses = self.stored = self.bytes = 0


class _Flight:
    """One call in flight that identical requests wait for."""

    __slots__ = ("budget_s", "done", "error", "result")

    def __init__(self, budget_s: float | None) -> None:
        self.done = anyio.Event()
        self.result: ChatResult | None = None
        self.error: GateError | None = None
        self.budget_s = budget_s  # the leader's time: a follower with more may take over


class ResponseCache:
    """Whole answers by exact request (see the module docstring).

    ``ttl_s``: how long an answer is served; ``max_entries``: the in-memory store's bound (least
    recently used out first). ``shared``: a Redis URL or ``gg.Shared`` that a fleet's gateways
    share answers through (under ``{namespace}:rc:``); Redis down or slower than its
    ``op_budget_s`` is an outage as for the fleet: one warning, this process's memory answers
    alone until Redis does again. ``share_private``: store private backends' answers in the
    shared Redis too (by default they stay in this process's memory)."""

    def __init__(
        self,
        ttl_s: float = 3600.0,
        max_entries: int = 10_000,
        *,
        shared: Shared | str | None = None,
        share_private: bool = False,
    ) -> None:
        if isinstance(ttl_s, bool) or not isinstance(ttl_s, (int, float)) or not ttl_s > 0:
            raise InvalidConfigError(f"ResponseCache ttl_s must be a number > 0, got {ttl_s!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise InvalidConfigError(
                f"ResponseCache max_entries must be an int >= 1, got {max_entries!r}"
            )
        self.ttl_s = float(ttl_s)
        self.max_entries = max_entries
        self.share_private = share_private
        self._shared_config = shared
        self.redis: RedisAnswers | None = None
        if shared is not None:
            from .response_cache_redis import RedisAnswers
            from .shared import Shared as SharedConfig

            config = shared if isinstance(shared, SharedConfig) else SharedConfig(shared)
            self.redis = RedisAnswers(config, ttl_s=self.ttl_s)
        self._timer: Callable[[], float] = time.monotonic
        #: per key being stored: the seconds it may be served for, when less than ``ttl_s``
        #: (an answer read from Redis, for what is left of its TTL there)
        self._lifetimes: dict[str, float] = {}
        self._store: TLRUCache[str, bytes] = self._new_store()
        self._flights: dict[str, _Flight] = {}
        self._counts: dict[str, _Counts] = {}
        self._pid = os.getpid()
        #: the open gateways using it, and the thread of the event loop they run on
        self._holders = LoopHolders()

    def _new_store(self) -> TLRUCache[str, bytes]:
        def expires(key: str, value: bytes, now: float) -> float:
            return now + self._lifetimes.pop(key, self.ttl_s)

        return TLRUCache(maxsize=self.max_entries, ttu=expires, timer=lambda: self._timer())

    def bind(self, clock: Clock) -> None:
        """Count the TTL on the gateway's clock (a test's virtual time). A gateway rebuilt in
        a forked child (``SyncGateway`` after ``fork()``) starts with no calls in flight and
        its own counters: the parent's flights wait on the parent's event loop."""
        self._timer = clock.now
        self._forked()

    def _forked(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._flights = {}
            self._counts = {}
            self._holders = LoopHolders()

    def hold(self) -> None:
        """A gateway opens on the running event loop with this cache: refused while gateways
        on another loop hold it open — its single-flight events and its store belong to one
        loop's thread (an identical call waiting across loops crashed with asyncio's "bound
        to a different event loop")."""
        self._forked()
        self._holders.hold()

    def release(self) -> bool:
        """A gateway holding it closed; True when none holds it any more."""
        return self._holders.release()

    def count(self, backend: str) -> _Counts:
        counts = self._counts.get(backend)
        if counts is None:
            counts = self._counts[backend] = _Counts()
        return counts

    def statistics(self, backend: str | None = None) -> ResponseCacheStatistics:
        """Counters of one backend's answers, or of all of them."""
        chosen = [self._counts.get(backend, _Counts())] if backend else list(self._counts.values())
        return ResponseCacheStatistics(
            hits=sum(c.hits for c in chosen),
            shared=sum(c.shared for c in chosen),
            misses=sum(c.misses for c in chosen),
            stored=sum(c.stored for c in chosen),
            bytes=sum(c.bytes for c in chosen),
            entries=len(self._store),
            shared_errors=self.redis.errors if self.redis is not None else 0,
        )

    def clear(self) -> None:
        """Forget every answer this process holds (a shared Redis keeps its own)."""
        self._store.clear()

    # -- the store ------------------------------------------------------------------------

    async def get(self, key: str) -> ChatResult | None:
        data = self._store.get(key)
        if data is None and self.redis is not None:
            found = await self.redis.get_aged(key)
            if found is not None:
                data, left = found
                if left is not None and left < self.ttl_s:  # stored there a while ago
                    self._lifetimes[key] = left
                self._store[key] = data
        return decode_result(data) if data is not None else None

    async def put(self, key: str, result: ChatResult, *, private: bool) -> None:
        """Store a whole answer (nothing else is ever given here)."""
        data = encode_result(replace(result, from_cache=False))
        self._store[key] = data
        counts = self.count(result.backend)
        counts.stored += 1
        counts.bytes += len(data)
        if self.redis is not None and (self.share_private or not private):
            await self.redis.put(key, data)

    # -- one call -------------------------------------------------------------------------

    async def serve(
        self,
        key: str,
        mode: CacheMode | None,
        call: Callable[[float | None], Awaitable[ChatResult]],
        *,
        clock: Clock,
        is_private: Callable[[str], bool],
        on_hit: Callable[[ChatResult], None],
        fleet: bool = True,
        budget_s: float | None = None,
    ) -> ChatResult:
        """The answer to one request: from the store, from an identical call in flight (in
        this process, or with ``fleet`` in another of a shared Redis), or from
        ``call(timeout)`` (then stored when whole), within this caller's own ``budget_s``
        (gptgate/flight_deadline.py)."""
        start = clock.now()
        deadline = CallerDeadline(clock, budget_s)
        def hit(answer: ChatResult) -> ChatResult:
            result = served_from_cache(answer, clock.now() - start)
            self.count(result.backend).hits += 1
            on_hit(result)
            return result

        if mode != "refresh":
            cached = await self.get(key)
            if cached is not None:
                return hit(cached)

        def joined(answer: ChatResult) -> ChatResult:
            result = served_from_cache(answer, clock.now() - start)
            self.count(result.backend).shared += 1
            on_hit(result)
            return result

        while True:
            flight = self._flights.get(key)
            if flight is None:
                # an identical call of this process may have been answered while this one
                # waited for Redis (a lookup that failed, or read late): serve its answer
                stored = self._store.get(key) if mode != "refresh" else None
                if stored is not None:
                    return hit(decode_result(stored))
                fleet_wide = fleet and mode != "refresh"
                result, sent = await self._lead(key, call, is_private, deadline, fleet=fleet_wide)
                return result if sent else joined(result)
            await deadline.wait(flight.done)
            if flight.result is not None:
                return joined(flight.result)
            if flight.error is not None and not deadline.outlasts(flight.budget_s, flight.error):
                raise copy.copy(flight.error)
            # the leader was cancelled before an answer, or ran out of its own shorter time:
            # one of us leads now

    async def _lead(
        self,
        key: str,
        call: Callable[[float | None], Awaitable[ChatResult]],
        is_private: Callable[[str], bool],
        deadline: CallerDeadline,
        *,
        fleet: bool,
    ) -> tuple[ChatResult, bool]:
        """The answer, and whether this process sent the call (else another process of the
        fleet did: gptgate/response_cache_fleet.py), within the leader's own deadline."""
        flight = self._flights[key] = _Flight(deadline.left())
        redis = self.redis if fleet else None
        try:
            data = (
                await answer_or_claim(redis, key, deadline.left) if redis is not None else None
            )
            if data is not None:
                self._store[key] = data
                flight.result = decode_result(data)
                return flight.result, False
            with watching() as for_want_of_large:  # gptgate/tier_fallback.py
                async with kept(redis, key):  # renewed while the call runs
                    result = flight.result = await call(deadline.left())
            self.count(result.backend).misses += 1
            if cacheable(result) and not for_want_of_large:
                # stored before the claim goes: the fleet finds it
                await self.put(key, result, private=is_private(result.backend))
        except GateError as error:
            flight.error = error
            raise
        finally:
            del self._flights[key]
            flight.done.set()
            if redis is not None:  # the claim this process holds, if any: also one taken
                # just before a cancellation reached answer_or_claim (a no-op without one)
                with anyio.CancelScope(shield=True):  # bounded by op_budget_s
                    await redis.release(key)
        return result, True

    async def aclose(self) -> None:
        if self.redis is not None:
            await self.redis.aclose()

    def __repr__(self) -> str:
        shared = f", shared={self.redis.shared!r}" if self.redis is not None else ""
        return f"ResponseCache(ttl_s={self.ttl_s:g}, max_entries={self.max_entries}{shared})"


#: finish reasons of an answer a content filter stopped (Anthropic's ``refusal`` arrives
#: mapped to ``content_filter``): filters change and a retry with other settings is the
#: remedy, so replaying one to every identical request would make it permanent. ``error``
#: (OpenRouter's, among its normalised reasons): the generation ended in the provider's error
#: under a 200, its text partial (an OpenAI-wire answer so ended now fails its attempt:
#: gptgate/wire/aborted.py; kept here for any path that still returns one). ``length`` is
#: stored: the same ``max_tokens`` cuts the answer the same way, and a larger one is another
#: key.
NOT_STORED_FINISH = frozenset({"content_filter", "error"})


def cacheable(result: ChatResult) -> bool:
    """A whole answer: it ended on the server's own terms (a finish reason), not a cut, and
    no content filter stopped it."""
    return (
        result.finish_reason is not None
        and result.finish_reason not in NOT_STORED_FINISH
        and not result.from_cache
    )
