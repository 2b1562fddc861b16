"""One call, end to end: route → cache gate → limiter → wire → outcome, with retries.

A :class:`CallRunner` holds the gateway's shared parts; :meth:`CallRunner.attempts` is an async
generator of text deltas over as many attempts as the retry policy allows, so the same code
serves ``gate.chat`` (deltas discarded, or no stream at all) and ``gate.stream`` (deltas shown
to the caller; once one is shown, no retry — it would duplicate output).

Every attempt ends in exactly one outcome on every path, cancellation included: the permit is
released, the cache ticket handed back, the response closed, the span ended, the ledger told.
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import httpx2

from .clock import Clock
from .errors import (
    BackendError,
    GateError,
    GatewayClosedError,
    OverloadedError,
    RateLimitedError,
    RequestTimeout,
    StreamInterruptedError,
)
from .ledger import Ledger
from .limits import Permit
from .limits.budget import RetryBudget
from .outcomes import report_failure
from .results import ChatResult, Usage
from .retry import RetryPolicy
from .routing import BackendState, Router, RouteRequest
from .scenarios import RampPolicy, Scenario
from .telemetry import Telemetry
from .tokens import estimate_text_tokens
from .wire import (
    ChatStreamReader,
    ParsedChat,
    build_chat_body,
    error_for_exception,
    error_for_status,
    parse_chat_response,
    parse_rate_limits,
    request_id,
)

__all__ = ["CallRunner", "CallSpec", "CallState"]


class CacheTicketLike(Protocol):
    #: this call warms its prefix group (the others wait for its first token)
    warmer: bool

    def prefilled(self) -> None: ...

    def observe(self, *, cached_tokens: int, input_tokens: int) -> None: ...

    def release(self) -> None: ...


class CacheGateLike(Protocol):
    async def enter(
        self, backend: str, group: Any, policy: RampPolicy, limit: int
    ) -> CacheTicketLike: ...


@dataclass(slots=True)
class CallSpec:
    """What the caller asked for, resolved once before the first attempt."""

    messages: Sequence[Mapping[str, Any]]
    params: dict[str, Any]
    scenario: Scenario
    stream: bool
    stream_decision: str
    route: RouteRequest
    priority: int
    deadline: float | None
    prompt_tokens: int
    #: the caller sees deltas (gate.stream): no retry after the first one
    visible: bool = False
    prefix: Any = None  # cache.PrefixGroup when the call has a prompt prefix
    max_attempts: int | None = None
    #: per-call HTTP headers (the OpenAI SDK's ``extra_headers``)
    headers: Mapping[str, str] | None = None


@dataclass(slots=True)
class CallState:
    """What the call has done so far; becomes the ChatResult."""

    start: float
    attempts: int = 0
    billed: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    queue_s: float = 0.0
    committed: bool = False
    failed_backends: set[str] = field(default_factory=set)
    result: ChatResult | None = None
    #: its first sent attempt was counted as a request by the retry budget
    funded_retries: bool = False


def _gate_deadline_passed(backend: BackendState) -> OverloadedError:
    return OverloadedError(
        "deadline passed waiting for the prompt-cache gate (warm-up, ramp or turn)",
        backend=backend.name,
    )


#: what a call without max_tokens reserves against a TPM budget (the server counts it too)
_DEFAULT_MAX_TOKENS = 1024


class CallRunner:
    def __init__(
        self,
        *,
        router: Router,
        clock: Clock,
        retry: RetryPolicy,
        ledger: Ledger,
        telemetry: Telemetry,
        cache_gate: CacheGateLike | None = None,
        budget: RetryBudget | None = None,
        max_breaker_wait_s: float = 5.0,
    ) -> None:
        self.router = router
        self.clock = clock
        self.retry = retry
        self.ledger = ledger
        self.telemetry = telemetry
        self.cache_gate = cache_gate
        #: one budget for the gateway: retries ≤ ratio × calls (SRE: no retry storms)
        self.budget = budget
        self.max_breaker_wait_s = max_breaker_wait_s

    # -- the whole call -------------------------------------------------------------------

    async def run(self, spec: CallSpec) -> ChatResult:
        """A non-visible call: retries freely until a result or the last error."""
        state = CallState(start=self.clock.now())

        async def attempt(number: int) -> ChatResult:
            async with aclosing(self._attempt(spec, state, number)) as deltas:
                async for _ in deltas:
                    pass
            assert state.result is not None
            return state.result

        with self.telemetry.call_span(spec.scenario.name, str(spec.params.get("model", ""))):
            try:
                return await self.retry.run(
                    attempt,
                    deadline=spec.deadline,
                    budget=self.budget,
                    max_attempts=spec.max_attempts,
                    on_retry=lambda exc, wait: self._on_retry(state, exc),
                )
            except GateError as error:
                self.record_failed_call(error)
                raise

    def record_failed_call(self, error: GateError) -> None:
        if isinstance(error, GatewayClosedError):
            return  # the gateway's own shutdown: no failed call of the backend's
        if error.backend in self.ledger.entries:
            self.ledger.record_call(error.backend, ok=False)

    async def stream(self, spec: CallSpec, state: CallState) -> AsyncGenerator[str, None]:
        """A visible stream: retries only while nothing has been shown to the caller."""
        number = 0
        max_attempts = spec.max_attempts or self.retry.max_attempts
        while True:
            number += 1
            try:
                async with aclosing(self._attempt(spec, state, number)) as deltas:
                    async for delta in deltas:
                        yield delta
                return
            except GateError as error:
                if state.committed or not self._may_retry(spec, state, error, number, max_attempts):
                    self.record_failed_call(error)
                    raise
                self._on_retry(state, error)
                wait = self.retry.backoff(number, error.retry_after, spec.deadline)
                await self.clock.sleep(wait)

    def _may_retry(
        self, spec: CallSpec, state: CallState, error: GateError, number: int, max_attempts: int
    ) -> bool:
        if number >= max_attempts or not self.retry.retryable(error):
            return False
        if spec.deadline is not None and self.clock.now() >= spec.deadline:
            return False
        return self.budget is None or self.budget.try_spend(self.clock.now())

    def _on_retry(self, state: CallState, error: BaseException) -> None:
        if isinstance(error, GateError) and error.backend:
            state.failed_backends.add(error.backend)
            backend = self.router.by_name.get(error.backend)
            if backend is not None:
                backend.retries += 1

    # -- one attempt ----------------------------------------------------------------------

    async def _attempt(
        self, spec: CallSpec, state: CallState, number: int
    ) -> AsyncGenerator[str, None]:
        clock = self.clock
        backend, wait = self.router.choose(spec.route, frozenset(state.failed_backends))
        if wait > 0:
            allowed = self.max_breaker_wait_s
            if spec.deadline is not None:
                allowed = min(allowed, spec.deadline - clock.now())
            if wait > allowed:
                # fail fast rather than pile calls up behind a dead backend
                raise BackendError(
                    "every eligible backend's circuit is open",
                    backend=backend.name,
                    retry_after=wait,
                    should_retry=False,
                )
            await clock.sleep(wait)
        state.attempts = number
        config = backend.backend
        enqueued = clock.now()
        ticket: CacheTicketLike | None = None
        permit: Permit | None = None
        response: httpx2.Response | None = None
        span = None
        ttft: float | None = None
        sent_at = enqueued
        reader: ChatStreamReader | None = None
        reserved = 0
        attempt_timeout = config.timeout
        try:
            ramp = spec.scenario.ramp
            if self.cache_gate is not None and spec.prefix is not None and ramp is not None:
                backend, ticket = await self._pass_cache_gate(backend, spec, state, ramp)
                config = backend.backend
                attempt_timeout = config.timeout
            permit = await backend.limiter.acquire(priority=spec.priority, deadline=spec.deadline)
            reserved = spec.prompt_tokens + (spec.route.output_tokens or _DEFAULT_MAX_TOKENS)
            pace = backend.pacer.reserve(clock.now(), reserved)
            if pace > 0:
                if spec.deadline is not None and clock.now() + pace > spec.deadline:
                    raise OverloadedError(
                        "rate-limit budget exhausted until past the deadline",
                        backend=backend.name,
                        retry_after=pace,
                    )
                await clock.sleep(pace)
            sent_at = clock.now()
            if self.budget is not None and not state.funded_retries:
                # a request funds retries when it reaches the backend, not when it starts
                # waiting: a job queued behind the gate or the limiter for longer than the
                # budget's window would otherwise find nothing left to retry with
                state.funded_retries = True
                self.budget.record_request(sent_at)
            queue_s = sent_at - enqueued
            state.queue_s += queue_s
            backend.calls += 1
            backend.breaker.on_attempt(sent_at)
            self.telemetry.record_queue(queue_s, backend.name)
            span = self.telemetry.start_attempt(
                provider=config.provider,
                model=config.model,
                host=backend.pool.client.base_url.host,
                port=backend.pool.client.base_url.port,
                stream=spec.stream,
                params=spec.params,
                backend=backend.name,
                hardware=config.hardware,
                attempt=number,
                messages=spec.messages,
            )
            prompt_cache_key = (
                spec.prefix.key
                if spec.prefix is not None and config.supports_prompt_cache_key
                else None
            )
            # a prefix's warm-up streams on the wire: its group is released at the first token
            # (the prefix is cached once prefilled) instead of after the whole answer
            streamed = spec.stream or bool(ticket is not None and ticket.warmer)
            body = build_chat_body(
                config.model,
                spec.messages,
                spec.params,
                stream=streamed,
                prompt_cache_key=prompt_cache_key,
            )
            attempt_timeout = self._attempt_timeout(backend, spec, streamed)
            if spec.deadline is not None:
                attempt_timeout = min(attempt_timeout, spec.deadline - sent_at)
                if attempt_timeout <= 0:
                    raise RequestTimeout("call deadline passed", backend=backend.name)
            request = backend.pool.client.build_request(
                "POST", "chat/completions", content=body, headers=spec.headers
            )
            if streamed:
                parsed = None
                first_byte = min(config.first_byte_timeout or config.timeout, attempt_timeout)
                response = await self._send(backend, request, first_byte, stream=True)
                self._observe_limits(backend, response)
                if response.status_code >= 400:
                    await response.aread()
                    raise error_for_status(
                        response.status_code, response.headers, response.content,
                        backend=backend.name,
                    )
                reader = ChatStreamReader(
                    self._timed_chunks(
                        response, sent_at + attempt_timeout, config.idle_timeout, backend.name
                    ),
                    backend=backend.name,
                    request_id=request_id(response.headers),
                )
                async for delta in reader:
                    if ttft is None:
                        ttft = clock.now() - sent_at
                        if ticket is not None:
                            ticket.prefilled()
                    if spec.visible:
                        state.committed = True
                        yield delta
                parsed = reader.result()
            else:
                response = await self._send(backend, request, attempt_timeout, stream=False)
                self._observe_limits(backend, response)
                if response.status_code >= 400:
                    raise error_for_status(
                        response.status_code, response.headers, response.content,
                        backend=backend.name,
                    )
                parsed = parse_chat_response(
                    response.content,
                    backend=backend.name,
                    status=response.status_code,
                    headers=response.headers,
                )
                if ticket is not None:
                    ticket.prefilled()
            latency = clock.now() - sent_at
            usage = parsed.usage or self._estimated_usage(spec, parsed.text)
            if ticket is not None and parsed.usage is not None:
                # only real usage: an estimate knows no cached tokens and would read as a miss
                ticket.observe(
                    cached_tokens=usage.cached_input_tokens, input_tokens=usage.input_tokens
                )
            backend.pacer.reconcile(reserved, usage.total_tokens)
            backend.attempt_timeouts.observe(latency, usage.output_tokens)
            permit.success(
                latency,
                ttft_s=ttft,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
            self._record_ok(backend, spec, state, parsed, usage, latency, ttft, streamed)
            self.telemetry.end_attempt(
                span,
                provider=config.provider,
                model=config.model,
                duration_s=latency,
                usage=usage,
                ttft_s=ttft,
                response_model=parsed.model,
                response_id=parsed.response_id,
                finish_reason=parsed.finish_reason,
                text=parsed.text,
            )
            span = None
        except GeneratorExit:
            # the caller left a visible stream mid-answer: what was generated is still billed
            if reader is not None and reader.has_content:
                self._record_abandoned(backend, spec, state, reader.accumulator.text)
            raise
        except GateError as error:
            if permit is not None and reserved:
                self._pace_after_failure(backend, error, reserved, spec, attempt_timeout)
            self._record_failure(backend, spec, state, error, permit, sent_at, ttft)
            if span is not None:
                self.telemetry.end_attempt(
                    span,
                    provider=config.provider,
                    model=config.model,
                    duration_s=clock.now() - sent_at,
                    usage=None,
                    ttft_s=ttft,
                    error=error,
                )
                span = None
            raise
        finally:
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            if permit is not None:
                permit.ignore()  # no-op unless cancelled or failed before classification
            if ticket is not None:
                ticket.release()
            if span is not None:
                span.end()

    async def _pass_cache_gate(
        self, chosen: BackendState, spec: CallSpec, state: CallState, ramp: RampPolicy
    ) -> tuple[BackendState, CacheTicketLike]:
        """Pass the prompt-cache gate (warm-up, ramp window, turns) within the call's deadline;
        a call that cannot get through in time is shed like one the limiter cannot admit.

        With other healthy backends, the call is bound late: it waits at ``chosen``'s gate
        and, once it has waited as long as another backend's handicap (how much later the
        router predicts that one would finish it), at that one's too; the first gate to let
        it through gets it. The router cannot see the calls a gate holds, so binding them all
        when a job starts would send a whole ``map`` to the backend that looked best then."""
        assert self.cache_gate is not None
        gate = self.cache_gate
        rivals = self.router.alternatives(spec.route, chosen, frozenset(state.failed_backends))
        remaining = math.inf if spec.deadline is None else spec.deadline - self.clock.now()
        if not rivals:  # one backend: no race to run
            with anyio.move_on_after(self.clock.to_real(max(0.0, remaining))):
                limit = chosen.limiter.current_limit
                return chosen, await gate.enter(chosen.name, spec.prefix, ramp, limit)
            raise _gate_deadline_passed(chosen)
        entrants = [(chosen, 0.0), *rivals]
        admitted: list[tuple[int, BackendState, CacheTicketLike]] = []

        async def wait_at(rank: int, backend: BackendState, handicap: float) -> None:
            if handicap > 0:
                await self.clock.sleep(handicap)
            limit = backend.limiter.current_limit
            ticket = await gate.enter(backend.name, spec.prefix, ramp, limit)
            admitted.append((rank, backend, ticket))
            race.cancel_scope.cancel()  # the other gates hand back what they granted

        try:
            with anyio.move_on_after(self.clock.to_real(max(0.0, remaining))):
                async with anyio.create_task_group() as race:
                    for rank, (backend, handicap) in enumerate(entrants):
                        race.start_soon(wait_at, rank, backend, handicap)
        except BaseException:
            for _, _, ticket in admitted:
                ticket.release()
            raise
        if not admitted:
            raise _gate_deadline_passed(chosen)
        # several gates let it through in the same instant: the best-ranked one keeps it
        admitted.sort(key=lambda entry: entry[0])
        for _, _, ticket in admitted[1:]:
            ticket.release()
        return admitted[0][1], admitted[0][2]

    def _attempt_timeout(self, backend: BackendState, spec: CallSpec, streamed: bool) -> float:
        """The backend's timeout, tightened from the observed latency only when the answer's
        length is bounded (max_tokens) and nothing else watches progress: a stream has its
        idle timeout, and an unbounded answer can legitimately run long — cutting it would
        bill it twice (SEEDS §7: jitter must not trigger false retries)."""
        if streamed or not spec.route.output_tokens:
            return backend.backend.timeout
        return backend.attempt_timeouts.timeout_for(spec.route.output_tokens)

    def _observe_limits(self, backend: BackendState, response: httpx2.Response) -> None:
        info = parse_rate_limits(response.headers)
        if info is not None:
            backend.pacer.observe(
                self.clock.now(),
                limit_requests=info.limit_requests,
                remaining_requests=info.remaining_requests,
                reset_requests_s=info.reset_requests_s,
                limit_tokens=info.limit_tokens,
                remaining_tokens=info.remaining_tokens,
                reset_tokens_s=info.reset_tokens_s,
            )
            # concurrency beyond rate × latency only waits for the pacer: tell the limit
            set_rate = getattr(backend.limiter.limit, "set_rate_ceiling", None)
            if set_rate is not None:
                set_rate(backend.pacer.sustained_rate())

    def _pace_after_failure(
        self,
        backend: BackendState,
        error: GateError,
        reserved: int,
        spec: CallSpec,
        attempt_timeout: float,
    ) -> None:
        """A 429 pauses the whole backend once until its retry-after (not every call on its
        own); what the server did not count is given back to the token budget."""
        if isinstance(error, RateLimitedError):
            if error.retry_after:
                backend.pacer.pause_until(self.clock.now() + error.retry_after)
            backend.pacer.reconcile(reserved, 0)
        else:
            backend.pacer.reconcile(reserved, spec.prompt_tokens if error.billed else 0)
        if isinstance(error, RequestTimeout) and error.billed:
            expected = spec.route.output_tokens or None
            backend.attempt_timeouts.observe_timeout(attempt_timeout, expected)

    async def _send(
        self, backend: BackendState, request: httpx2.Request, timeout: float, *, stream: bool
    ) -> httpx2.Response:
        """Send with a deadline; map transport failures to typed errors."""
        try:
            with anyio.fail_after(self.clock.to_real(timeout)):
                return await backend.pool.client.send(request, stream=stream)
        except TimeoutError:
            raise RequestTimeout(
                "no response before the attempt deadline", backend=backend.name, billed=True
            ) from None
        except httpx2.HTTPError as exc:
            raise error_for_exception(exc, backend=backend.name) from exc
        except RuntimeError as exc:
            if backend.pool.client.is_closed:  # the gateway was closed under this call
                raise GatewayClosedError(
                    "the gateway closed its connections under this call", backend=backend.name
                ) from exc
            raise

    async def _timed_chunks(
        self, response: httpx2.Response, deadline: float, idle_s: float, backend: str
    ) -> AsyncIterator[bytes]:
        """Raw body chunks, each within the idle timeout and all within the attempt deadline."""
        iterator = response.aiter_bytes().__aiter__()
        clock = self.clock
        while True:
            remaining = deadline - clock.now()
            budget = min(idle_s, remaining)
            if budget <= 0:
                raise httpx2.ReadTimeout("stream passed the attempt deadline")
            with anyio.move_on_after(clock.to_real(budget)) as scope:
                try:
                    chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    return
            if scope.cancelled_caught:
                what = "idle between chunks" if budget == idle_s else "past the attempt deadline"
                raise httpx2.ReadTimeout(f"stream {what}")
            yield chunk

    def _estimated_usage(self, spec: CallSpec, text: str) -> Usage:


        return Usage(
            input_tokens=spec.prompt_tokens,
            output_tokens=estimate_text_tokens(text),
            estimated=True,
        )

    # -- bookkeeping ----------------------------------------------------------------------

    def _record_ok(
        self,
        backend: BackendState,
        spec: CallSpec,
        state: CallState,
        parsed: ParsedChat,
        usage: Usage,
        latency: float,
        ttft: float | None,
        streamed: bool,
    ) -> None:
        now = self.clock.now()
        backend.latency.add(latency)
        if ttft is not None:
            backend.ttft.add(ttft)
        backend.breaker.on_success()
        if spec.prefix is not None:
            self.router.remember_prefix(spec.prefix.key, backend.name)
        state.cost_usd += self.ledger.record_attempt(
            backend.name, usage, streamed=streamed, wasted=False
        )
        state.billed = usage if state.billed.total_tokens == 0 else state.billed + usage
        self.ledger.record_call(backend.name, ok=True)
        config = backend.backend
        state.result = ChatResult(
            text=parsed.text,
            finish_reason=parsed.finish_reason,
            backend=backend.name,
            hardware=config.hardware,
            model=parsed.model or config.model,
            streamed=streamed,
            attempts=state.attempts,
            usage=usage,
            billed_usage=state.billed,
            ttft_s=ttft,
            latency_s=now - state.start,
            queue_s=state.queue_s,
            cost_usd=state.cost_usd,
            scenario=spec.scenario.name,
            stream_decision=spec.stream_decision,
            response_id=parsed.response_id,
        )

    def _record_failure(
        self,
        backend: BackendState,
        spec: CallSpec,
        state: CallState,
        error: GateError,
        permit: Permit | None,
        sent_at: float,
        ttft: float | None,
    ) -> None:
        now = self.clock.now()
        if error.backend is None:
            error.backend = backend.name
        if isinstance(error, GatewayClosedError):
            return  # our shutdown, not the backend: no sample, no failure (the permit is ignored)
        if permit is not None and not permit.done:
            report_failure(permit, error, now - sent_at)
        if isinstance(error, RateLimitedError):
            backend.rate_limited += 1
        elif isinstance(error, RequestTimeout):
            backend.timeouts += 1
        if isinstance(error, (BackendError, RequestTimeout)) and not isinstance(
            error, StreamInterruptedError
        ):
            backend.breaker.on_failure(now)
        backend.failures += 1
        wasted = self._wasted_usage(spec, error)
        if wasted is not None:
            state.cost_usd += self.ledger.record_attempt(
                backend.name,
                wasted,
                streamed=spec.stream,
                wasted=True,
                interrupted=isinstance(error, StreamInterruptedError),
            )
            state.billed = state.billed + wasted

    def _record_abandoned(
        self, backend: BackendState, spec: CallSpec, state: CallState, partial: str
    ) -> None:


        usage = Usage(
            input_tokens=spec.prompt_tokens,
            output_tokens=estimate_text_tokens(partial),
            estimated=True,
        )
        state.cost_usd += self.ledger.record_attempt(
            backend.name, usage, streamed=True, wasted=True, interrupted=True
        )
        state.billed = state.billed + usage

    def _wasted_usage(self, spec: CallSpec, error: GateError) -> Usage | None:
        """What a failed attempt probably cost: the prompt once it was sent and processed,
        plus what a cut stream had generated."""
        if isinstance(error, StreamInterruptedError):
            return Usage(
                input_tokens=spec.prompt_tokens,
                output_tokens=error.output_tokens,
                estimated=error.usage_estimated,
            )
        if error.billed:
            return Usage(input_tokens=spec.prompt_tokens, estimated=True)
        return None
