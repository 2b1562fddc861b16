"""The gateway's side of the response cache: when a call uses it, and what a hit records.

``Gateway.chat`` / ``Gateway.stream`` ask :meth:`CachedCalls.applies`; when it says yes they
hand the call here. A hit is a call all the same: an INTERNAL span ``chat {model}`` with
``gptgate.cache_hit=true`` and the answer's model, backend and finish reason, a ledger line at
$0 (``LedgerEntry.response_cache_hits``), and the counters of ``stats()[backend].response_cache``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import BadRequestError
from .response_cache import (
    CacheMode,
    ResponseCache,
    ResponseCacheStatistics,
    check_cache_mode,
    deterministic,
    request_key,
)
from .results import ChatResult
from .telemetry import NAMES

if TYPE_CHECKING:
    from .calls import CallRunner, CallSpec
    from .gateway import ChatStream, Gateway

__all__ = ["CACHE_HIT", "CachedCalls"]

#: the span attribute of an answer served from the response cache
CACHE_HIT = "gptgate.cache_hit"


class CachedCalls:
    """A gateway's response cache (None: calls go straight through, ``cache="bypass"``)."""

    def __init__(self, gate: Gateway, cache: ResponseCache | None) -> None:
        if cache is not None and not isinstance(cache, ResponseCache):
            raise BadRequestError(
                f"response_cache must be a gptgate.ResponseCache, got {type(cache).__name__}"
            )
        self._gate = gate
        self.cache = cache
        #: this gateway holds the cache open (on its loop: gptgate/response_cache_loop.py)
        self._holding = False
        if cache is not None:
            cache.bind(gate.clock)

    def applies(self, mode: object, params: Mapping[str, Any]) -> bool:
        """Does this call go through the cache? ``cache="use"``/``"refresh"`` without a
        ``ResponseCache`` is a ``BadRequestError`` (it would silently do nothing)."""
        checked = check_cache_mode(mode)
        if self.cache is None:
            if checked in ("use", "refresh"):
                raise BadRequestError(
                    f"cache={checked!r} needs Gateway(response_cache=gg.ResponseCache(...))"
                )
            return False
        if checked is None:
            return deterministic(params)
        return checked != "bypass"

    def key(
        self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any], *,
        tier: str, backend: str | None, private: bool,
    ) -> str:
        return request_key(
            self._gate.config.backends, messages, params, tier=tier, backend=backend,
            private=private,
        )

    async def chat(
        self,
        key: str,
        mode: CacheMode | None,
        call: Callable[[float | None], Awaitable[ChatResult]],
        budget_s: float | None,
        *,
        judge: Callable[[ChatResult], Awaitable[bool]] | None = None,
    ) -> ChatResult:
        """The answer, within the caller's ``budget_s`` (``call(timeout)`` sends it with what
        is left of that, when this caller is the one to send).

        ``judge`` is a ``tier="auto"`` caller's ``accept``: it is not in the key, so a small
        answer stored (or answered to an identical call in flight) for another caller is
        judged again here, and one it rejects is sent as ``cache="refresh"`` would — the
        tiering escalates it, and the large answer replaces the stored one."""
        assert self.cache is not None
        clock = self._gate.clock
        start = clock.now()
        # a call of the gateway's while the cache holds it (waiting for an identical call
        # in flight, here or in another process; its claim released): the close waits for it
        # within the grace, then ends it (GatewayClosedError) before the cache's Redis closes
        with self._gate.register_call():
            result = await self.cache.serve(
                key, mode, call, clock=clock, is_private=self.is_private,
                on_hit=self.hit, fleet=self.answers_reach_redis(), budget_s=budget_s,
            )
        if judge is None or not result.from_cache or result.tier != "small":
            return result
        if await judge(result):
            return result
        left = None if budget_s is None else max(0.0, budget_s - (clock.now() - start))
        with self._gate.register_call():
            return await self.cache.serve(
                key, "refresh", call, clock=clock, is_private=self.is_private,
                on_hit=self.hit, fleet=self.answers_reach_redis(), budget_s=left,
            )

    def answers_reach_redis(self) -> bool:
        """Can an answer be shared through Redis at all? Not when every backend is private
        (and ``share_private`` is off): then waiting for another process's call is in vain."""
        assert self.cache is not None
        return self.cache.share_private or any(
            not b.private for b in self._gate.config.backends
        )

    def stream(
        self, runner: CallRunner, spec: CallSpec, key: str, mode: CacheMode | None
    ) -> ChatStream:
        from .response_cache_stream import ReplayingStream  # it subclasses gateway's class

        gate = self._gate
        return ReplayingStream(
            runner, spec, gate.clock, gate._calls, gate._tiering, cached=self, key=key,
            mode=mode,
        )

    def is_private(self, backend: str) -> bool:
        return any(b.private for b in self._gate.config.backends if b.name == backend)

    def hit(self, result: ChatResult) -> None:
        """Record a served answer: its span and its $0 ledger line."""
        gate = self._gate
        telemetry = gate._telemetry
        requested = next(
            (b.model for b in gate.config.backends if b.name == result.backend), result.model
        )
        span = telemetry.start_call(result.scenario, requested)
        if span.is_recording():
            span.set_attributes({
                CACHE_HIT: True,
                NAMES["backend"]: result.backend,
                NAMES["call_response_model"]: result.model,
                NAMES["call_finish_reasons"]: [result.finish_reason or ""],
            })
        telemetry.end_call(span, cost_usd=0.0)
        entry = gate.ledger.entries.get(result.backend)
        if entry is not None:
            entry.response_cache_hits += 1

    def statistics(self, backend: str) -> ResponseCacheStatistics | None:
        return self.cache.statistics(backend) if self.cache is not None else None

    async def start(self) -> None:
        if self.cache is None:
            return
        self.cache.hold()  # refused while a gateway on another loop holds it
        self._holding = True
        if self.cache.redis is not None:
            await self.cache.redis.start()

    async def aclose(self) -> None:
        """Let the cache go; its Redis closes with the last gateway holding it."""
        if self.cache is None or not self._holding:
            return
        self._holding = False
        if self.cache.release():
            await self.cache.aclose()
