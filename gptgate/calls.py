"""One call, end to end: route → cache gate → limiter → wire → outcome, with retries.

A :class:`CallRunner` holds the gateway's shared parts; :meth:`CallRunner.attempts` is an async
generator of text deltas over as many attempts as the retry policy allows, so the same code
serves ``gate.chat`` (deltas discarded, or no stream at all) and ``gate.stream`` (deltas shown
to the caller; once one is shown, no retry — it would duplicate output).

Every attempt ends in exactly one outcome on every path, cancellation included: the permit is
released, the cache ticket handed back, the response closed, the span ended, the ledger told.
"""

from __future__ import annotations

import functools
import math
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import httpx2
from opentelemetry.trace import Span

from .billed import BilledWork
from .budget import BudgetGate, BudgetHold, Callers
from .cached_guess import CachedGuess, prefix_of
from .call_outcome import ended_call
from .call_span_shared import SharedCallSpan
from .choice_count import choice_count
from .circuit_cause import open_circuit_error
from .clock import Clock
from .context_failover import fitting, move_elsewhere, refused_for_length
from .credential_failover import credentials_refused_here, refused_credentials
from .errors import (
    BackendError,
    BudgetExceededError,
    GateError,
    GatewayClosedError,
    OverloadedError,
    RateLimitedError,
    RequestTimeout,
    RequestTooLargeError,
    StreamInterruptedError,
)
from .guard_inner import inner_permit, settle_inner
from .hedge import HedgePolicy
from .hedge_race import HedgeRace
from .hedge_timing import refused_as_full
from .late_answer import LateAnswer, Spawn, read_to_its_end
from .ledger import Ledger
from .lifecycle import CANCELLED
from .limits import Permit
from .limits.budget import RetryBudget
from .limits.limiter import Rerouted
from .limits.rate_feed import tell_rate_budget
from .map_demand import MapBacklog
from .media_tokens import call_media_rule
from .outcomes import count_failure, report_failure
from .pause_wait import wait_turn
from .probe_claim import await_verdict, claim_probe
from .queued_prompt import may_be_prefilled
from .relocate import QueuedCall
from .results import ChatResult, Usage
from .retry import RetryPolicy
from .routing import BackendState, Router, RouteRequest
from .scenarios import RampPolicy, Scenario
from .sdk_failed_calls import SdkCalls
from .sdk_reads import BookedAnswers
from .shed import Refusals
from .stream_cut import by_caller
from .telemetry import NAMES, Endpoint, Telemetry, endpoint
from .tokens import sure_prompt_tokens, tokens_for_chars
from .wire import ChatStreamReader, ParsedChat, error_for_exception, request_id
from .wire.aborted import refuse_aborted
from .wire.answer_chars import answer_chars
from .wire.anthropic_server_tools import most_searches
from .wire.html_page import html_stream_error, is_html_page
from .wire.stream_usage import learn_refusal

if TYPE_CHECKING:
    from .shared.pacing import PaceSeq, PendingTake

__all__ = ["CallRunner", "CallSpec", "CallState"]


class CacheTicketLike(Protocol):
    #: this call warms its prefix group (the others wait for its first token)
    warmer: bool

    @property
    def bypassed(self) -> bool: ...

    def prefilled(self) -> None: ...

    def paced(self) -> None: ...

    def observe(
        self, *, cached_tokens: int, input_tokens: int, output_tokens: int | None = None
    ) -> None: ...

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
    #: without a deadline: give up a wait whose queue has not moved for this long
    stall_s: float | None = None
    #: the caller sees deltas (gate.stream): no retry after the first one
    visible: bool = False
    prefix: Any = None  # cache.PrefixGroup when the call has a prompt prefix
    max_attempts: int | None = None
    #: per-call HTTP headers (the OpenAI SDK's ``extra_headers``)
    headers: Mapping[str, str] | None = None
    #: tail hedging (gptgate/hedge.py): None = never
    hedge: HedgePolicy | None = None
    #: tiered serving (gptgate/tiers.py): gptgate.tier, tier_reason, escalated for its spans
    tier_attributes: Mapping[str, Any] | None = None
    #: the large tier asked again for a small answer (a failure keeps that answer)
    escalation: bool = False
    #: the call span this run shares with the call's other runs (gptgate/call_span_shared.py)
    shared_span: SharedCallSpan | None = None


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
    #: backends whose context window refused its prompt: never routed to again (a retry
    #: after a move would meet the same refusal: context_failover.py)
    too_long_for: set[str] = field(default_factory=set)
    result: ChatResult | None = None
    #: its first sent attempt was counted as a request by the retry budget
    funded_retries: bool = False
    #: the call's INTERNAL span, parent of every attempt's CLIENT span
    span: Span | None = None
    #: the span is named after a model (the caller's, or the first routed backend's)
    named: bool = False
    #: the error type of the attempt before the one about to be sent
    retry_reason: str | None = None
    #: the backend of the latest sent attempt, when it was sent (a hedge waiting for budget
    #: queues by it), and an event set at each send (hedging)
    sent_to: BackendState | None = None
    sent_at: float = 0.0
    on_sent: anyio.Event | None = None
    #: this state is a hedge's duplicate (its attempt span says gptgate.hedge=true), and when
    #: it took its room in the hedge budget (given back if it is never sent)
    hedge: bool = False
    hedge_spent_at: float | None = None
    #: a duplicate's call (its first request's send): a permit may be lent once that is lost
    hedge_of: CallState | None = None


def _deadline_cut_stream(backend: str) -> RequestTimeout:
    return RequestTimeout(
        "call deadline passed while streaming", backend=backend, billed=True, deadline=True
    )


def _answered_nothing(error: GateError) -> bool:
    """A timed-out attempt of which not a byte of answer arrived: whether the server billed it
    (queued, generating, or hung) cannot be known — the ledger's estimate is marked
    uncertain."""
    return isinstance(error, RequestTimeout) and error.billed and not error.output_tokens


#: a hedge's duplicate has waited its turn already: it goes ahead of the limiter's queue
def _gate_deadline_passed(backend: BackendState) -> OverloadedError:
    return OverloadedError(
        "deadline passed waiting for the prompt-cache gate (warm-up, ramp or turn)",
        backend=backend.name,
    )


#: what a call without max_tokens reserves against a TPM budget (the server counts it too)
_DEFAULT_MAX_TOKENS = 1024


def output_bound(spec: CallSpec, backend: BackendState | None = None) -> int:
    """The most output an attempt may generate: ``max_tokens`` (else, with ``backend``, what
    its dialect sends without one — Anthropic's required default —, else the 1024 a TPM
    budget reserves) for each of its ``n`` choices (gptgate/choice_count.py)."""
    given = spec.route.output_tokens
    if not given and backend is not None:
        given = backend.pool.dialect.default_max_tokens(spec.params) or 0
    return (given or _DEFAULT_MAX_TOKENS) * choice_count(spec.params)


class _Attempt:
    """One attempt's state, with one method per stage of a call (docs/architecture.md).

    Read it as a ledger of what is held: ``admit`` takes the dollar budget's reservation,
    the cache ticket and the permit, ``pace`` a reservation of the backend's token budget,
    ``dispatch`` the span, and ``open_stream`` / ``read_body`` the response. ``release`` (run
    on every path) hands back the dollar reservation (the outcome has put the real cost in
    the ledger), the ticket, the permit, the span and the response; the token reservation is
    settled by the outcome, ``succeed`` or ``fail`` (a cancelled one stays counted: its
    tokens may be billed).
    """

    __slots__ = (
        "attempt_timeout", "backend", "clock", "config", "cut_by_deadline", "enqueued", "hold",
        "late", "limit", "number", "output_reserved", "pace_seq", "permit", "probe", "reader",
        "reserved", "response", "runner", "sent", "sent_at", "span", "spec", "state", "streamed",
        "take", "ticket", "ttft",
    )

    def __init__(
        self, runner: CallRunner, spec: CallSpec, state: CallState, number: int,
        backend: BackendState,
    ) -> None:
        self.runner = runner
        self.clock = runner.clock
        self.spec = spec
        self.state = state
        self.number = number
        #: the routed backend; admission may move the call to another one
        self.backend = backend
        self.config = backend.backend
        self.enqueued = self.sent_at = self.clock.now()
        self.attempt_timeout = self.config.timeout
        self.ticket: CacheTicketLike | None = None
        self.permit: Permit | None = None
        #: the dollar budget's reservation, held until the attempt's cost is in the ledger
        self.hold: BudgetHold | None = None
        #: the backend's limit when the permit was granted
        self.limit = 0
        self.reserved = 0
        #: of which output (``max_tokens``): what an output budget apart took, and settles
        self.output_reserved = 0
        #: the take's place in the fleet's rate budget (``shared=``), None when paced locally
        self.pace_seq: PaceSeq | None = None
        #: ``shared=``: the take that rode with the permit's acquire (one round trip)
        self.take: PendingTake | None = None
        #: on the wire as SSE (the caller's choice, or a prefix's warm-up)
        self.streamed = spec.stream
        #: the call's deadline, not the backend's timeout, bounds this attempt
        self.cut_by_deadline = False
        #: the request went to the transport: the server may bill from here on
        self.sent = False
        #: this attempt is its backend's half-open probe (its number), else 0
        self.probe = 0
        self.span: Span | None = None
        self.response: httpx2.Response | None = None
        self.reader: ChatStreamReader | None = None
        self.ttft: float | None = None
        #: an answer read in the background after this attempt gave up on it: its real bill
        self.late: LateAnswer | None = None

    # -- CacheGate, Limiter ----------------------------------------------------------------

    async def admit(self) -> None:
        """Through the dollar budget, the prompt-cache gate and the limiter: takes the
        budget's reservation, the ticket and the permit (with ``shared=``, the RPM/TPM take
        too, in the permit's round trip)."""
        runner, routed, spec = self.runner, self.backend, self.spec
        # a hedge's duplicate or an escalation refused is no call refused: the call goes on
        self.hold = await runner.admit_budget(
            spec, routed, counted=not (self.state.hedge or spec.escalation)
        )
        fleet = routed.fleet_pacer
        if fleet is not None:
            tokens = spec.prompt_tokens + output_bound(spec, routed)
            self.take = fleet.ride_along(tokens, spec.deadline)
        try:
            self.backend, self.ticket, self.permit, self.probe = await runner._admit(
                spec, self.state, routed
            )
        finally:
            if self.take is not None:
                self.take.detach()
        if self.take is not None and self.take.result is not None:
            self.pace_seq = self.take.result[1]  # taken: given back if the call ends here
        if self.hold is not None and self.backend is not routed:  # moved: its price
            assert runner.spending is not None
            runner.spending.resize(self.hold, runner.budget_estimate(spec, self.backend))
        self.config = self.backend.backend
        self.attempt_timeout = self.config.timeout
        self.limit = self.backend.limiter.current_limit

    async def pace(self) -> None:
        """Reserve the call's tokens at the backend's rate-limit pacer; wait for them only
        when they come before the deadline."""
        spec, clock, backend = self.spec, self.clock, self.backend
        # the max_tokens sent (Anthropic's default, without one): what the server counts
        self.output_reserved = output = output_bound(spec, backend)
        self.reserved = spec.prompt_tokens + output
        take = self.take
        if take is not None and take.result is not None and take.pacer is backend.fleet_pacer:
            # taken with the permit: its delay counts from then, and a 429 pause still holds
            delay, self.pace_seq = take.result
            now = clock.now()
            pace = max(take.at + delay - now, backend.pacer.paused_until - now, 0.0)
        elif backend.fleet_pacer is not None:  # shared=: the fleet's budget
            pace, self.pace_seq = await backend.fleet_pacer.reserve(
                clock.now(), self.reserved, spec.deadline
            )
        else:
            if self.state.hedge:  # a duplicate cuts a stall now or never: ahead of the queue
                pace = backend.pacer.reserve_ahead(clock.now(), self.reserved, output)
            else:
                pace = backend.pacer.reserve(clock.now(), self.reserved, output)
            self.pace_seq = backend.pacer.sequence()  # its report's place (limits/pacing.py)
        pauses = backend.pacer.pauses
        if pace > 0 and self.ticket is not None:
            self.ticket.paced()  # its latency is the budget's (gptgate/cache_release.py)
        left = await wait_turn(backend, clock, pace, pauses, spec.deadline)
        if left is not None:
            raise OverloadedError(
                "rate-limit budget exhausted until past the deadline",
                backend=backend.name,
                retry_after=left,
            )

    # -- Wire ------------------------------------------------------------------------------

    def prepare(self) -> httpx2.Request:
        """The request, and the attempt's time bounds; nothing is sent yet."""
        spec, backend, config, ticket = self.spec, self.backend, self.config, self.ticket
        sent_at = self.sent_at = self.clock.now()
        prompt_cache_key = (
            spec.prefix.key
            if spec.prefix is not None and config.supports_prompt_cache_key
            else None
        )
        # a prefix's warm-up streams on the wire: its group is released at the first token
        # (the prefix is cached once prefilled) instead of after the whole answer
        streamed = self.streamed = spec.stream or bool(ticket is not None and ticket.warmer)
        body = backend.pool.dialect.build_body(
            config.model,
            spec.messages,
            spec.params,
            stream=streamed,
            prompt_cache_key=prompt_cache_key,
        )
        inflight = self.permit.inflight if self.permit is not None else None
        timeout = self.attempt_timeout = self.runner._attempt_timeout(
            backend, spec, streamed, inflight
        )
        if spec.deadline is not None:
            self.cut_by_deadline = spec.deadline - sent_at < timeout
            timeout = self.attempt_timeout = min(timeout, spec.deadline - sent_at)
            if timeout <= 0:
                # nothing was sent: the caller's deadline says nothing about the backend
                raise RequestTimeout(
                    "call deadline passed before the send", backend=backend.name, deadline=True
                )
        return backend.pool.client.build_request(
            "POST", self.runner._chat_url(backend), content=body, headers=spec.headers
        )

    def dispatch(self) -> None:
        """From here on the request counts as sent: it funds retries, is counted on its
        backend, and has a span (ended by the outcome, or by ``release``)."""
        runner, spec, state, backend = self.runner, self.spec, self.state, self.backend
        config, sent_at = self.config, self.sent_at
        if runner.budget is not None and not state.funded_retries:
            # a request funds retries when it reaches the backend, not when it starts
            # waiting: a job queued behind the gate or the limiter for longer than the
            # budget's window would otherwise find nothing left to retry with
            state.funded_retries = True
            runner.budget.record_request(sent_at)
        queue_s = sent_at - self.enqueued
        state.queue_s += queue_s
        self.sent = True
        state.sent_to, state.sent_at = backend, sent_at
        runner.hedge_progress(backend.name).sent(sent_at)
        if state.on_sent is not None:
            state.on_sent.set()
        backend.calls += 1
        if self.number > 1:
            backend.retries += 1  # counted where the retry goes, not where it came from
        self.probe = self.probe or backend.breaker.on_attempt(sent_at)
        runner.telemetry.record_queue(queue_s, backend.name)
        self.span = runner.telemetry.start_attempt(
            provider=config.provider,
            model=config.model,
            host=backend.pool.client.base_url.host,
            port=self._endpoint()["port"],
            stream=spec.stream,
            params=spec.params,
            backend=backend.name,
            hardware=config.hardware,
            attempt=self.number,
            messages=spec.messages,
            parent=state.span,
            extra=self._described(queue_s) if runner.telemetry.tracing else None,
        )
        if state.span is not None and not state.named:
            state.named = True
            runner.telemetry.name_call(state.span, config.model)

    def _described(self, queue_s: float) -> dict[str, Any]:
        """What an SRE asks of an attempt first: how long it queued, at what limit, in which
        prompt-cache group (and whether its prefix was warm), and why it is a retry."""
        spec, ticket = self.spec, self.ticket
        attributes: dict[str, Any] = {NAMES["queue_s"]: queue_s, NAMES["limit"]: self.limit}
        if spec.prefix is not None:
            attributes[NAMES["cache_group"]] = spec.prefix.key
            if ticket is not None and not ticket.bypassed:
                attributes[NAMES["cache_warm"]] = not ticket.warmer
        if self.number > 1 and self.state.retry_reason is not None:
            attributes[NAMES["retry_reason"]] = self.state.retry_reason
        if self.state.hedge:
            attributes[NAMES["hedge"]] = True
        if spec.tier_attributes:
            attributes.update(spec.tier_attributes)
        return attributes

    async def open_stream(self, request: httpx2.Request) -> ChatStreamReader:
        """Send for an SSE answer: the headers within the first-byte timeout, then a reader
        of deltas, each within the idle timeout and all within the attempt's bound."""
        runner, backend, config = self.runner, self.backend, self.config
        own_first_byte = config.first_byte_timeout or config.timeout
        first_byte = min(own_first_byte, self.attempt_timeout)
        response = self.response = await runner._send(
            backend, request, first_byte, stream=True,
            deadline=self.cut_by_deadline and self.attempt_timeout <= own_first_byte,
        )
        runner._observe_limits(backend, response, self.pace_seq)
        dialect = backend.pool.dialect
        if response.status_code >= 400:
            await response.aread()
            raise learn_refusal(getattr(dialect, "stream_usage", None), dialect.error_for_status(
                response.status_code, response.headers, response.content, backend=backend.name
            ))
        page = await html_stream_error(response, backend.name)  # a proxy's page, not SSE
        if page is not None:
            raise page
        self.reader = dialect.stream_reader(
            runner._timed_chunks(
                response, self.sent_at + self.attempt_timeout, config.idle_timeout,
                backend.name, caller_deadline=self.cut_by_deadline,
            ),
            backend=backend.name,
            request_id=request_id(response.headers),
        )
        return self.reader

    def first_token(self) -> None:
        """The first delta: time to first token; the prefix is cached, its group may go."""
        self.ttft = self.clock.now() - self.sent_at
        if self.ticket is not None:
            self.ticket.prefilled()
        self.progressed()

    def progressed(self) -> None:
        """The first token (SSE) or the answer (JSON) came: when a hedge may go learns."""
        progress = self.runner.hedge_progress(self.backend.name)
        progress.shown(self.sent_at, self.clock.now(), first_token=self.streamed)

    async def read_body(self, request: httpx2.Request) -> ParsedChat:
        """Send for a JSON answer and read it whole, within the attempt's bound."""
        runner, spec, backend = self.runner, self.spec, self.backend
        response = None
        if self.config.abandoned_answers == "finish":
            response = await self._read_in_background(request)
        if response is None:
            response = await runner._send(
                backend, request, self.attempt_timeout, stream=False,
                deadline=self.cut_by_deadline, max_tokens=spec.route.output_tokens,
            )
        self.response = response
        runner._observe_limits(backend, response, self.pace_seq)
        if response.status_code >= 400:
            raise backend.pool.dialect.error_for_status(
                response.status_code, response.headers, response.content, backend=backend.name
            )
        parsed = runner._parse_body(backend, response, response.content, spec.route.output_tokens)
        if self.ticket is not None:
            self.ticket.prefilled()
        return parsed

    async def _read_in_background(self, request: httpx2.Request) -> httpx2.Response | None:
        """``abandoned_answers="finish"``: the backend generates a non-streamed answer whole
        even when we hang up, so we never do (gptgate/late_answer.py, ``read_to_its_end``):
        an attempt cut here (a timeout, a cancelled call) keeps its slot until the answer has
        ended — hung up on, its slot was handed on while the server still ran it, and
        timeouts fed on themselves (docs/guide/deadlines.md)."""
        runner, backend, spec = self.runner, self.backend, self.spec
        self.late = late = LateAnswer(runner.ledger, backend.name)

        def usage_of(response: httpx2.Response) -> Usage | None:
            try:
                return runner._parse_body(
                    backend, response, response.content, spec.route.output_tokens
                ).usage
            except GateError as error:  # an aborted answer's usage is on its error
                return error.usage_so_far

        def timed_out() -> RequestTimeout:
            return RequestTimeout(
                "call deadline passed waiting for the response" if self.cut_by_deadline
                else "no response before the attempt deadline (the backend finishes it)",
                backend=backend.name, billed=True, deadline=self.cut_by_deadline,
            )

        return await read_to_its_end(
            late,
            lambda: runner._send(
                backend, request, self.config.timeout, stream=False,
                max_tokens=spec.route.output_tokens,
            ),
            usage_of,
            spawn=runner.spawn,
            permit=self.permit,
            wait_s=self.clock.to_real(self.attempt_timeout),
            timed_out=timed_out,
        )

    # -- Outcome: exactly one of these, then release ---------------------------------------

    def succeed(self, parsed: ParsedChat) -> None:
        """Feed the answer back: cache gate, pacer, timeouts, limit, stats, ledger, span."""
        runner, spec, backend, ticket = self.runner, self.spec, self.backend, self.ticket
        permit, span, ttft, config = self.permit, self.span, self.ttft, self.config
        assert permit is not None and span is not None
        latency = self.clock.now() - self.sent_at
        cost_before = self.state.cost_usd
        usage = parsed.usage or runner._estimated_usage(spec, parsed)
        if ticket is not None and parsed.usage is not None:
            # only real usage: an estimate knows no cached tokens and would read as a miss
            ticket.observe(
                cached_tokens=usage.cached_input_tokens, input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
            )
        backend.pacer.reconcile(
            self.reserved, usage.total_tokens, reserved_output=self.output_reserved,
            actual_output=usage.output_tokens, cached=usage.cached_input_tokens)
        if backend.fleet_pacer is not None:
            backend.fleet_pacer.reconcile(self.pace_seq, self.reserved, usage.total_tokens)
        backend.attempt_timeouts.observe(latency, usage.output_tokens, permit.inflight)
        if parsed.usage is not None and self.response is not None:
            body_bytes = None if self.streamed else self.response.num_bytes_downloaded
            runner._billed(backend).observe(latency, usage.output_tokens, body_bytes)
        permit.success(
            latency, ttft_s=ttft, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
        )
        runner._record_ok(backend, spec, self.state, parsed, usage, latency, ttft, self.streamed)
        if backend.drift is not None:
            backend.drift.observe(
                self.clock.now(), permit.inflight, latency, ttft, usage.output_tokens,
                None if usage.estimated else usage.input_tokens, usage.cached_input_tokens,
                spec.prefix,
            )
        runner.telemetry.end_attempt(
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
            raw=parsed.raw,
            extra={NAMES["cost_usd"]: self.state.cost_usd - cost_before},
            **self._endpoint(),
        )
        self.span = None

    def fail(self, error: GateError) -> None:
        """A typed failure at any stage: give back the unbilled reservation, tell the limit,
        stats and ledger what it was (``_record_failure``), end the span with the error."""
        runner, backend, spec = self.runner, self.backend, self.spec
        if error.unsent and self.sent:
            backend.unsent += 1
        if self.permit is not None and self.reserved:
            runner._pace_after_failure(
                backend, error, self.reserved, spec, self.attempt_timeout, self.permit.inflight,
                self.pace_seq, self.output_reserved,
            )
        cost_before = self.state.cost_usd
        billed = runner._record_failure(
            backend, spec, self.state, error, self.permit, self.sent_at, self.sent, self.late
        )
        # too long for this backend's window: another may hold it (gptgate/context_failover.py)
        move_elsewhere(error, runner.router, spec.route, self.state.failed_backends,
                       self.state.too_long_for)
        # its key refused: the backend's failure, not the call's (credential_failover.py)
        credentials_refused_here(error, backend, spec.headers, runner.router, spec.route,
                                 self.state.failed_backends, self.clock.now())
        if self.span is not None:
            runner.telemetry.end_attempt(
                self.span,
                provider=self.config.provider,
                model=self.config.model,
                duration_s=self.clock.now() - self.sent_at,
                usage=None,
                ttft_s=self.ttft,
                error=error,
                extra={NAMES["cost_usd"]: self.state.cost_usd - cost_before},
                billed=billed,
                late=self.late,
                **self._endpoint(),
            )
            self.span = None

    def _endpoint(self) -> Endpoint:
        return endpoint(self.backend.name, self.backend.pool.client.base_url)

    def abandon(self) -> None:
        """The caller left a visible stream mid-answer, or cancelled the call: what the
        server did for a request it received is still billed."""
        if self.sent:
            cost_before = self.state.cost_usd
            usage = self.runner._record_abandoned(
                self.backend, self.spec, self.state, self.reader, self.clock.now() - self.sent_at,
                self.late,
            )
            if self.span is not None:  # what was booked for it, on its own span too
                self.runner.telemetry.abandoned(
                    self.span, usage, self.state.cost_usd - cost_before,
                    provider=self.config.provider, model=self.config.model, late=self.late,
                    **self._endpoint(),
                )

    async def release(self) -> None:
        """Hand back what the stages took, on every path; each is a no-op once settled."""
        if self.hold is not None:  # admit: the outcome has put the real cost in the ledger
            assert self.runner.spending is not None
            self.runner.spending.release(self.hold)
            self.hold = None
        if self.response is not None:  # open_stream / read_body
            with anyio.CancelScope(shield=True):
                await self.response.aclose()
        if self.permit is not None:  # admit: no-op unless cancelled or failed unclassified
            if self.sent:  # we hung up on a request the backend may still be running
                self.permit.abandon()
            else:
                self.permit.ignore()
        if self.ticket is not None:  # admit
            self.ticket.release()
        if self.probe:  # admit: a probe that gave no verdict lets the next call probe
            self.backend.breaker.probe_left(self.probe)
        if self.span is not None:  # dispatch: ended here only when cancelled
            self.runner.telemetry.end_call(self.span, error=self.runner.shutdown_error())
            self.span = None


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
        spending: BudgetGate | None = None,
        spawn: Spawn | None = None,
        shut_down: Callable[[], bool] | None = None,
    ) -> None:
        self.router = router
        #: True once the gateway's shutdown has cancelled what was left (lifecycle.py)
        self._shut_down = shut_down
        self.clock = clock
        self.retry = retry
        self.ledger = ledger
        self.telemetry = telemetry
        self.cache_gate = cache_gate
        #: one budget for the gateway: retries ≤ ratio × calls (SRE: no retry storms)
        self.budget = budget
        self.max_breaker_wait_s = max_breaker_wait_s
        #: the dollar budget (gptgate/budget.py), None without one
        self.spending = spending
        #: runs a task in the gateway's task group (False when closing): an abandoned
        #: answer read to its end in the background (``abandoned_answers="finish"``)
        self.spawn = spawn
        #: per backend: what its recent answers looked like, to estimate the unanswered ones
        self.billed_work: dict[str, BilledWork] = {}
        #: per backend and prompt prefix: what its last whole answer read from the cache
        self.cached_guess = CachedGuess(clock)
        #: answers whose usage an SDK's request booked: one read again books nothing
        self.booked_answers = BookedAnswers()
        #: SDK calls matched to their retries: one failed call each (sdk_failed_calls.py)
        self.sdk_calls = SdkCalls(ledger)
        #: per backend: its client and the absolute chat URL (joined once, not per request)
        self._chat_urls: dict[str, tuple[httpx2.AsyncClient, httpx2.URL]] = {}
        #: tail hedging (gptgate/hedge_race.py): the race, its budgets and backends' progress
        self.hedging = HedgeRace(clock, router, self._attempt)
        self.hedge_budgets = self.hedging.budgets
        self.hedge_progress = self.hedging.progress
        #: the calls ``gate.map`` jobs have yet to pull (gptgate/map_demand.py)
        self.backlog = MapBacklog()

    def _chat_url(self, backend: BackendState) -> httpx2.URL:
        """The dialect's chat URL under the client's base (``{base_url}chat/completions`` for
        OpenAI) — once per client: the join parses the URL again and was a tenth of a call's
        own CPU."""
        client = backend.pool.client
        cached = self._chat_urls.get(backend.name)
        if cached is None or cached[0] is not client:
            url = backend.pool.dialect.chat_url(client.base_url)
            cached = self._chat_urls[backend.name] = (client, url)
        return cached[1]

    # -- the whole call -------------------------------------------------------------------

    async def run(self, spec: CallSpec) -> ChatResult:
        """A non-visible call: retries freely until a result or the last error."""
        state = CallState(start=self.clock.now())

        async def attempt(number: int) -> ChatResult:
            if spec.hedge is not None and spec.stream:
                # on the wire as SSE: raced to the first token, as a visible stream is (a slow
                # first token says a bad replica or batch, whatever the answer's length; the
                # loser, cancelled before it, is rarely billed); the deltas are not shown
                watched = replace(spec, visible=True)
                hedged = self.hedging.hedged_stream(watched, state, number, spec.hedge, hidden=True)
                async with aclosing(hedged) as d:
                    async for _ in d:
                        pass
                state.committed = False
                assert state.result is not None
                return state.result
            if spec.hedge is not None:
                return await self.hedging.hedged(spec, state, number, spec.hedge)
            async with aclosing(self._attempt(spec, state, number)) as deltas:
                async for _ in deltas:
                    pass
            assert state.result is not None
            return state.result

        shared = spec.shared_span
        if shared is None:
            span = self._start_call(spec, state)
        else:  # its opener ends it, with the whole call's outcome
            span = shared.adopt(state, spec.tier_attributes)
        with ended_call(
            self.shutdown_error,
            lambda failure: self._end_call(span, state, failure, spec.scenario.name, shared),
            self._failed_call,
        ), self.telemetry.use_call(span):
            return await self.retry.run(
                attempt,
                deadline=spec.deadline,
                budget=self.budget,
                max_attempts=spec.max_attempts,
                on_retry=lambda exc, wait: self._on_retry(state, exc),
                failover=lambda error: self.is_failover(spec.route, error),
                refusals=Refusals(self.clock, spec.deadline, spec.stall_s),
            )

    def _end_call(
        self, span: Span, state: CallState, failure: GateError | None, scenario: str,
        shared: SharedCallSpan | None = None,
    ) -> None:
        """A run ends its call span, or tells the span its runs share what it cost; a
        failure with nothing sent is counted (gptgate/unsent_calls.py)."""
        if shared is None:
            self.telemetry.end_call(span, error=failure, cost_usd=state.cost_usd)
            if failure is not None and state.sent_to is None and self.telemetry.metering:
                self.telemetry.unsent.record(failure, scenario)
        else:
            shared.ran(state)

    def _failed_call(self, error: GateError) -> None:
        self.record_failed_call(error)
        settle_inner(error)  # retried and counted here: not again by a guard around it

    def open_call_span(self, spec: CallSpec) -> SharedCallSpan:
        """A call span for several runs of one call (tier escalation)."""
        state = CallState(start=self.clock.now())
        return SharedCallSpan(self._start_call(spec, state), named=state.named)

    def _start_call(self, spec: CallSpec, state: CallState) -> Span:
        """The call's INTERNAL span, named after the model the caller asked for (or, at the
        first send, the routed backend's)."""
        model = spec.params.get("model")
        requested = model if isinstance(model, str) and model else None
        state.named = requested is not None
        span = state.span = self.telemetry.start_call(spec.scenario.name, requested)
        if spec.tier_attributes and span.is_recording():
            span.set_attributes(spec.tier_attributes)
        return span

    def shutdown_error(self) -> GatewayClosedError | None:
        """What a call cancelled now raises to its caller when the gateway's shutdown cancelled
        it (None: its caller's own cancellation, which is no failure): its spans say so."""
        if self._shut_down is not None and self._shut_down():
            return GatewayClosedError(CANCELLED)
        return None

    def record_failed_call(self, error: GateError) -> None:
        if isinstance(error, (GatewayClosedError, BudgetExceededError)):
            return  # the gateway's own shutdown or budget: no failed call of the backend's
        if error.backend in self.ledger.entries:
            self.ledger.record_call(error.backend, ok=False)

    async def stream(self, spec: CallSpec, state: CallState) -> AsyncGenerator[str, None]:
        """A visible stream: retries only while nothing has been shown to the caller.

        Its call span covers the whole stream, the caller's reads included, and ends on every
        path (completion, error, cancellation, the caller leaving). It is never made current:
        this generator's context would leak to the caller between yields."""
        span = self._start_call(spec, state)
        with ended_call(
            self.shutdown_error,
            lambda failure: self._end_call(span, state, failure, spec.scenario.name),
            settle_inner,  # retried and counted here: not again by a guard around it
        ):
            async with aclosing(self._stream_attempts(spec, state)) as deltas:
                async for delta in deltas:
                    if delta:  # not the "" of an answer begun without text (stream_start.py)
                        yield delta

    async def _stream_attempts(
        self, spec: CallSpec, state: CallState
    ) -> AsyncGenerator[str, None]:
        number = 0
        max_attempts = spec.max_attempts or self.retry.max_attempts
        refusals = Refusals(self.clock, spec.deadline, spec.stall_s)
        while True:
            number += 1
            if spec.hedge is not None:
                source = self.hedging.hedged_stream(spec, state, number, spec.hedge)
            else:
                source = self._attempt(spec, state, number)
            try:
                async with aclosing(source) as deltas:
                    async for delta in deltas:
                        yield delta
                return
            except GateError as error:
                refusals.note(error)
                if state.committed or not self._may_retry(spec, error, refusals, max_attempts):
                    self.record_failed_call(error)
                    raise
                failover = self.is_failover(spec.route, error)
                self._on_retry(state, error)
                if not failover:
                    await self.clock.sleep(self.retry.backoff(
                        refusals.attempt_number(number), error.retry_after, spec.deadline
                    ))

    def _may_retry(
        self, spec: CallSpec, error: GateError, refusals: Refusals, max_attempts: int
    ) -> bool:
        """A stream's retry, as ``RetryPolicy.run`` decides a call's (gptgate.shed: a refusal
        requeued spends neither an attempt nor the budget)."""
        if (max_attempts <= 1 and not error.moved) or not self.retry.retryable(error):
            return False
        if refusals.stop(max_attempts):
            return False
        if spec.deadline is not None and self.clock.now() >= spec.deadline:
            return False
        if self.budget is None or refusals.free or self.is_failover(spec.route, error):
            return True
        return self.budget.try_spend(self.clock.now())

    def is_failover(self, route: RouteRequest, error: GateError) -> bool:
        """A retry that moves the call off a backend that never got the request, or whose
        circuit is now open, onto another healthy one: it adds no load where load hurts, so
        the retry budget (which exists to stop retry storms) does not pay for it. A dead
        backend's queued calls would otherwise each fail once and find the budget spent."""
        name = error.backend
        failed = self.router.by_name.get(name) if name is not None else None
        if failed is None:
            return False
        if refused_for_length(error) or refused_credentials(error):  # moved on, see
            return error.retryable  # context_failover.py and credential_failover.py
        if not (error.unsent or not failed.breaker.allows(self.clock.now())):
            return False
        # any healthy backend will do, one that failed this call before included (the router
        # prefers it to a dead one too)
        return self.router.has_alternative(route, frozenset({failed.name}))

    def _on_retry(self, state: CallState, error: BaseException) -> None:
        # the retry is counted on the backend it is sent to (see _attempt), not this one
        state.retry_reason = type(error).__name__
        if isinstance(error, GateError) and error.backend:
            state.failed_backends.add(error.backend)

    # -- one attempt ----------------------------------------------------------------------

    async def _route(
        self, spec: CallSpec, state: CallState, exclude: frozenset[str]
    ) -> BackendState:
        return await self.route(fitting(spec.route, state.too_long_for), exclude, spec.deadline)

    async def route(
        self, request: RouteRequest, exclude: frozenset[str], deadline: float | None
    ) -> BackendState:
        """The backend for the next try (of a call or a guarded call); waits for an open
        circuit only within ``max_breaker_wait_s`` and the deadline."""
        clock = self.clock
        backend, wait = self.router.choose(request, exclude)
        while wait <= 0 and backend.breaker.probing:  # another try probes it: its verdict
            await await_verdict(backend, clock, deadline, self.max_breaker_wait_s)
            backend, wait = self.router.choose(request, exclude)
        if wait > 0:
            allowed = self.max_breaker_wait_s
            if deadline is not None:
                allowed = min(allowed, deadline - clock.now())
            if wait > allowed:
                # fail fast rather than pile calls up behind a dead backend
                raise open_circuit_error(
                    backend, self.router.eligible(request, exclude), wait
                )
            await clock.sleep(wait)
        return backend

    def budget_estimate(self, spec: CallSpec, backend: BackendState) -> float:
        """The most this attempt can cost at ``backend``'s price: the whole prompt uncached
        and ``max_tokens`` of answer (without one, what the backend's dialect sends — an
        Anthropic call's 4,096 or thinking budget + 4,096 — else the 1024 tokens a TPM budget
        reserves), and the searches a web search tool may make (its ``max_uses``)."""
        price = self.ledger.price(backend.name, spec.prompt_tokens)
        if price is None:
            return 0.0
        output = output_bound(spec, backend)
        searches = most_searches(spec.params) * price.web_search_per_k / 1000
        return price.most_cost(spec.prompt_tokens, output) + searches

    async def admit_budget(
        self, spec: CallSpec, backend: BackendState, counted: bool = True
    ) -> BudgetHold | None:
        """Reserve the attempt's most expensive outcome under the dollar budget, waiting
        (throttle) or failing (raise) when there is no room; a backend without a price is
        free and passes. ``counted=False``: see ``BudgetGate.admit``."""
        return await self.admit_cost(
            backend, self.budget_estimate(spec, backend), spec.priority, spec.deadline, counted
        )

    async def admit_cost(
        self,
        backend: BackendState,
        usd: float,
        priority: int,
        deadline: float | None,
        counted: bool = True,
        *,
        embedding: bool = False,
        callers: Callers | None = None,
    ) -> BudgetHold | None:
        """``admit_budget`` for a try whose cost is estimated elsewhere (an SDK request;
        ``embedding``, ``callers``: as :meth:`BudgetGate.admit`'s)."""
        if self.spending is None or self.ledger.price(backend.name) is None:
            return None
        return await self.spending.admit(
            usd, priority=priority, deadline=deadline, counted=counted,
            embedding=embedding, callers=callers,
        )

    async def admit_guarded(
        self, backend: BackendState, priority: int, deadline: float | None
    ) -> BudgetHold | None:
        """A guarded try's reservation: its tokens are unknown until its function returns,
        so it reserves the backend's mean cost per attempt so far, or before any a typical
        call's (``_DEFAULT_MAX_TOKENS`` of prompt and of answer; reserving nothing let a first
        burst of guarded calls all pass together) within what the budget holds."""
        price = self.ledger.price(backend.name)
        if self.spending is None or price is None:
            return None
        entry = self.ledger.entries.get(backend.name)
        learned = entry.cost_usd / entry.attempts if entry is not None and entry.attempts else None
        typical = price.most_cost(_DEFAULT_MAX_TOKENS, _DEFAULT_MAX_TOKENS)
        return await self.spending.admit(
            self.spending.unsized_estimate(learned, typical),
            priority=priority, deadline=deadline, guarded=True,
        )

    async def _admit(
        self, spec: CallSpec, state: CallState, backend: BackendState
    ) -> tuple[BackendState, CacheTicketLike | None, Permit, int]:
        """From the routed ``backend``: pass the prompt-cache gate and wait for a permit;
        with it, the half-open probe (its number, else 0: gptgate/probe_claim.py).

        A call queued at a backend that dies (its circuit opens) or falls far behind its
        peers is moved while it waits (gptgate/relocate.py): it is routed again, or admitted
        by the other backend directly. Nothing was sent, so a move is no retry."""
        avoid = frozenset(state.failed_backends)
        ramp = spec.scenario.ramp
        gated = self.cache_gate is not None and spec.prefix is not None and ramp is not None
        while True:
            ticket: CacheTicketLike | None = None
            try:
                if gated:
                    assert ramp is not None
                    backend, ticket = await self._pass_cache_gate(backend, spec, avoid, ramp)
                    if not backend.breaker.allows(self.clock.now()) and (
                        self.router.has_alternative(spec.route, avoid | {backend.name})
                    ):
                        raise Rerouted()  # its circuit opened while the call was held
                self._refuse_if_too_large(backend, spec)
                tag = QueuedCall(spec.route, avoid, gated)
                permit = await inner_permit(  # a running guard's seat, if it covers the call
                    backend.limiter, self.hedging.lent_from(spec, state), self.clock,
                    priority=spec.priority, deadline=spec.deadline, tag=tag, stall_s=spec.stall_s,
                )
            except Rerouted as move:
                if ticket is not None:
                    ticket.release()
                if move.to is not None:  # a peer will serve it sooner: queue there
                    backend = self.router.by_limiter[move.to]
                else:  # its backend died: route again, elsewhere
                    avoid = avoid | {backend.name}
                    backend = await self._route(spec, state, avoid)
                continue
            except BaseException:
                if ticket is not None:
                    ticket.release()
                raise
            if permit.limiter is not backend.limiter:  # handed over to an idle backend
                backend = self.router.by_limiter[permit.limiter]
            probe = await self._claim_probe(backend, permit, ticket)
            if probe is None:
                # its circuit is open (another try, here or in the fleet, probes it): the
                # call is routed as around any open circuit
                backend = await self._route(spec, state, avoid)
                continue
            return backend, ticket, permit, probe

    async def _claim_probe(
        self, backend: BackendState, permit: Permit, ticket: CacheTicketLike | None
    ) -> int | None:
        """A half-open backend is probed by one try (of the fleet, with ``shared=``)."""
        probe = None
        try:
            probe = await claim_probe(backend, permit, self.clock)
        finally:
            if probe is None and ticket is not None:  # refused or cancelled: hand it back
                ticket.release()
        return probe

    async def _attempt(
        self, spec: CallSpec, state: CallState, number: int
    ) -> AsyncGenerator[str, None]:
        """One try, stage by stage (docs/architecture.md; see ``_Attempt``): route, cache
        gate and limiter, pacing, the wire, the outcome. It ends in exactly one of ``succeed``,
        ``fail`` or ``abandon``; then ``release`` hands back whatever a stage still holds."""
        backend = await self._route(spec, state, frozenset(state.failed_backends))
        state.attempts = number
        attempt = _Attempt(self, spec, state, number, backend)
        try:
            await attempt.admit()
            await attempt.pace()
            request = attempt.prepare()
            attempt.dispatch()
            if attempt.streamed:
                reader = await attempt.open_stream(request)
                async for delta in reader:
                    if attempt.ttft is None:
                        attempt.first_token()
                    if spec.visible:  # "" (output began without text) shows nothing
                        state.committed = state.committed or bool(delta)
                        yield delta
                parsed = reader.result()
            else:
                parsed = await attempt.read_body(request)
                attempt.progressed()
            attempt.succeed(parsed)
        except (GeneratorExit, anyio.get_cancelled_exc_class()):
            attempt.abandon()
            raise
        except GateError as error:
            attempt.fail(error)
            raise
        finally:
            await attempt.release()

    async def _pass_cache_gate(
        self, chosen: BackendState, spec: CallSpec, exclude: frozenset[str], ramp: RampPolicy
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
        rivals = self.router.alternatives(spec.route, chosen, exclude)
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

    def _refuse_if_too_large(self, backend: BackendState, spec: CallSpec) -> None:
        """Fail at once, sending nothing, when the backend's tokens-per-minute limit is known
        and this call asks for more: it would be a 429 "Request too large" on every try, and
        waiting for the budget would hold up every other call. max_tokens is exact but the
        prompt is an estimate (~4 characters a token; a real tokenizer may need half as
        many), so only half of it counts here: a borderline call is sent and the server's
        429 decides (see ``wire.too_large``)."""
        limit = backend.pacer.token_limit
        if limit is None:
            return
        need = spec.route.output_tokens + spec.prompt_tokens // 2
        if need > limit:  # the guessed size of an image it cannot read: not a refusal
            media = call_media_rule([backend.backend], None, spec.params.get("model"))
            prompt = sure_prompt_tokens(spec.messages, spec.params.get("tools"), media)
            need = spec.route.output_tokens + prompt // 2
        if need > limit:
            requested = spec.route.output_tokens + prompt
            raise RequestTooLargeError(
                f"request too large: about {requested} tokens (prompt + max_tokens) exceed "
                f"the backend's limit of {int(limit)} tokens per minute",
                backend=backend.name,
                limit=int(limit),
                requested=requested,
            )

    def _attempt_timeout(
        self, backend: BackendState, spec: CallSpec, streamed: bool, inflight: int | None
    ) -> float:
        """The backend's timeout, tightened from the observed latency only when the answer's
        length is bounded (max_tokens) and nothing else watches progress: a stream has its
        idle timeout, and an unbounded answer can legitimately run long — cutting it would
        bill it twice (jitter must not trigger false retries)."""
        if streamed or not spec.route.output_tokens:
            return backend.backend.timeout
        return backend.attempt_timeouts.timeout_for(spec.route.output_tokens, inflight)

    def _observe_limits(
        self, backend: BackendState, response: httpx2.Response, seq: PaceSeq | None = None
    ) -> None:
        if response.status_code < 400:
            backend.pacer.relax(self.clock.now())
        info = backend.pool.dialect.rate_limits(response.headers)
        if info is not None:
            if backend.fleet_pacer is not None:  # shared=: corrects the fleet's budget too
                backend.fleet_pacer.observe(self.clock.now(), info, seq)
            backend.pacer.observe(
                self.clock.now(),
                seq=seq if backend.fleet_pacer is None else None,
                limit_requests=info.limit_requests,
                remaining_requests=info.remaining_requests,
                reset_requests_s=info.reset_requests_s,
                limit_tokens=info.limit_tokens,
                remaining_tokens=info.remaining_tokens,
                reset_tokens_s=info.reset_tokens_s,
                limit_output_tokens=info.limit_output_tokens,
                remaining_output_tokens=info.remaining_output_tokens,
                reset_output_tokens_s=info.reset_output_tokens_s,
            )
            # concurrency beyond rate × latency only waits for the pacer: tell the limit
            limit = backend.limiter.limit
            set_rate = getattr(limit, "set_rate_ceiling", None)
            if set_rate is not None:
                fleet = backend.fleet_pacer
                # a fleet-wide limit (shared= auto) is bounded by the fleet's whole rate; with
                # one process's share, 4 workers held it at 2-3 (0.44x of a fixed limit)
                whole = bool(getattr(limit, "fleet_wide", False))
                set_rate(
                    fleet.sustained_rate(whole=whole) if fleet
                    else backend.pacer.sustained_rate()
                )
                if fleet is None:  # the ceiling binds once the budget is spent
                    tell_rate_budget(limit, backend.pacer, self.clock.now(),
                                     backend.limiter.queued + backend.limiter.in_flight,
                                     self.backlog.ahead())

    def _pace_after_failure(
        self,
        backend: BackendState,
        error: GateError,
        reserved: int,
        spec: CallSpec,
        attempt_timeout: float,
        inflight: int,
        seq: PaceSeq | None = None,
        output_reserved: int = 0,
    ) -> None:
        """A 429 pauses the whole backend once until its retry-after (not every call on its
        own); what the server did not count is given back to the token budget."""
        counted = 0 if isinstance(error, RateLimitedError) else (
            spec.prompt_tokens + error.output_tokens if error.billed else 0
        )
        if backend.fleet_pacer is not None:  # shared=: to the budget it was taken from
            backend.fleet_pacer.reconcile(seq, reserved, counted)
        if isinstance(error, RateLimitedError):
            if error.retry_after:  # the fleet's pause: count_failure, on every path
                backend.pacer.pause_until(self.clock.now() + error.retry_after)
            backend.pacer.reconcile(reserved, 0, reserved_output=output_reserved)
        else:
            billed = spec.prompt_tokens + error.output_tokens if error.billed else 0
            backend.pacer.reconcile(reserved, billed, reserved_output=output_reserved,
                                    actual_output=error.output_tokens if error.billed else 0)
        if isinstance(error, RequestTimeout) and error.billed and not error.deadline:
            expected = spec.route.output_tokens or None
            backend.attempt_timeouts.observe_timeout(attempt_timeout, expected, inflight)

    async def _send(
        self,
        backend: BackendState,
        request: httpx2.Request,
        timeout: float,
        *,
        stream: bool,
        deadline: bool = False,
        max_tokens: int = 0,
    ) -> httpx2.Response:
        """Send with a deadline; map transport failures to typed errors. ``deadline``: the
        timeout is what is left of the call's deadline, not the backend's own.

        ``stream=False`` reads the body within the same deadline. The server sends a body once
        the answer is generated, so one cut (or timed out) after the headers was billed in full:
        the error says so, with the output estimated from what arrived and Content-Length."""
        response: httpx2.Response | None = None
        try:
            with anyio.fail_after(self.clock.to_real(timeout)):
                response = await backend.pool.client.send(request, stream=True)
                if not stream:
                    await response.aread()
            return response
        except TimeoutError:
            if deadline:
                message = "call deadline passed waiting for the response"
            else:
                message = "no response before the attempt deadline"
            error: GateError = RequestTimeout(
                message, backend=backend.name, billed=True, deadline=deadline
            )
            cause: BaseException | None = None
        except httpx2.HTTPError as exc:
            error, cause = error_for_exception(exc, backend=backend.name), exc
        except RuntimeError as exc:
            if backend.pool.client.is_closed:  # the gateway was closed under this call
                raise GatewayClosedError(
                    "the gateway closed its connections under this call", backend=backend.name
                ) from exc
            raise
        if response is not None:  # the headers came: the body was cut
            if response.status_code < 400:
                self._cut_body(backend, response, error, max_tokens)
            with anyio.CancelScope(shield=True):
                await response.aclose()
        raise error from cause

    def _cut_body(
        self, backend: BackendState, response: httpx2.Response, error: GateError, max_tokens: int
    ) -> None:
        """A non-streamed body cut after its headers: generated (and billed) in full."""
        error.billed = True
        length = response.headers.get("content-length")
        size = int(length) if length is not None and length.isdigit() else None
        error.output_tokens = self._billed(backend).cut_body(b"", size, max_tokens or None)

    def _billed(self, backend: BackendState) -> BilledWork:
        work = self.billed_work.get(backend.name)
        if work is None:
            work = self.billed_work[backend.name] = BilledWork()
        return work

    def _parse_body(
        self, backend: BackendState, response: httpx2.Response, content: bytes, max_tokens: int
    ) -> ParsedChat:
        """Parse a 2xx body; one that is not a chat completion was still generated, and is
        counted as billed (an in-band ``{"error": ...}`` is not: the server refused, nor is a
        proxy's HTML page: no model ran, gptgate/wire/html_page.py)."""
        try:
            parsed = backend.pool.dialect.parse_response(
                content, backend=backend.name, status=response.status_code,
                headers=response.headers,
            )
        except BackendError as error:
            page = is_html_page(content, response.headers.get("content-type", ""))
            if error.message.startswith("malformed response") and not page:
                error.billed = True
                error.output_tokens = self._billed(backend).malformed(content, max_tokens or None)
            raise
        return refuse_aborted(parsed, backend.name, request_id(response.headers))

    async def _timed_chunks(
        self,
        response: httpx2.Response,
        deadline: float,
        idle_s: float,
        backend: str,
        *,
        caller_deadline: bool = False,
    ) -> AsyncIterator[bytes]:
        """Raw body chunks, each within the idle timeout and all within the attempt deadline
        (``caller_deadline``: that is the call's deadline, whose passing is no backend fault)."""
        iterator = response.aiter_bytes().__aiter__()
        clock = self.clock
        while True:
            remaining = deadline - clock.now()
            budget = min(idle_s, remaining)
            if budget <= 0:
                if caller_deadline:
                    raise _deadline_cut_stream(backend)
                raise httpx2.ReadTimeout("stream passed the attempt deadline")
            with anyio.move_on_after(clock.to_real(budget)) as scope:
                try:
                    chunk = await iterator.__anext__()
                except StopAsyncIteration:
                    return
            if scope.cancelled_caught:
                if caller_deadline and budget < idle_s:
                    raise _deadline_cut_stream(backend)
                what = "idle between chunks" if budget == idle_s else "past the attempt deadline"
                raise httpx2.ReadTimeout(f"stream {what}")
            yield chunk

    def _estimated_usage(self, spec: CallSpec, parsed: ParsedChat) -> Usage:
        """An answer the server sent no usage for, at all it generated (answer_chars.py)."""
        return Usage(
            input_tokens=spec.prompt_tokens,
            output_tokens=tokens_for_chars(answer_chars(parsed.raw, parsed.text)),
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
        self.ledger.learn_model(backend.name, parsed.model)  # an Azure deployment's model
        backend.latency.add(latency)
        if ttft is not None:
            backend.ttft.add(ttft)
        backend.breaker.on_success()
        if spec.prefix is not None:
            self.router.remember_prefix(spec.prefix.key, backend.name)
        self.cached_guess.answered(backend.name, usage, functools.partial(_prefix_of, spec))
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
            raw=parsed.raw,  # tool calls, logprobs, a provider's extras: never dropped
        )

    def _record_failure(
        self,
        backend: BackendState,
        spec: CallSpec,
        state: CallState,
        error: GateError,
        permit: Permit | None,
        sent_at: float,
        sent: bool,
        late: LateAnswer | None = None,
    ) -> Usage | None:
        """Only a sent attempt the backend failed counts against it (stats, breaker); one shed
        before the send, or cut by the caller's own deadline, does not. The ledger still counts
        what was possibly billed (set right by ``late`` when the answer still comes); returned,
        for the token metric."""
        now = self.clock.now()
        if error.backend is None:
            error.backend = backend.name
        if isinstance(error, GatewayClosedError):
            # our shutdown, not the backend: no sample, no failure, and no request left running
            if permit is not None:
                permit.ignore()
            return None
        if permit is not None and not permit.done:
            report_failure(permit, error, now - sent_at)
        if sent and not by_caller(error):
            self._count_backend_failure(backend, error, now)
            if refused_as_full(error, backend.pacer, now):  # no duplicate takes a place
                self.hedge_progress(backend.name).refused(now)
        wasted = self._wasted_usage(backend, spec, error, now - sent_at)
        if wasted is not None:
            state.cost_usd += self.ledger.record_attempt(
                backend.name,
                wasted,
                streamed=spec.stream,
                wasted=True,
                interrupted=isinstance(error, StreamInterruptedError),
                uncertain=_answered_nothing(error),
            )
            state.billed = state.billed + wasted
        if late is not None:
            late.recorded(wasted, uncertain=_answered_nothing(error))
        return wasted

    def _count_backend_failure(self, backend: BackendState, error: GateError, now: float) -> None:
        count_failure(backend, error, now)

    def _record_abandoned(
        self,
        backend: BackendState,
        spec: CallSpec,
        state: CallState,
        reader: ChatStreamReader | None,
        elapsed_s: float,
        late: LateAnswer | None = None,
    ) -> Usage | None:
        """An attempt sent and then cancelled (or a stream the caller left): the prompt, and
        what had been generated — a stream's output received (text, reasoning, a tool call's
        pieces), or else the elapsed time through
        the backend's latency per token — is possibly billed (set right by ``late`` when the
        answer still comes)."""
        seen = reader is not None and reader.accumulator.has_output
        said: Usage | None = None
        if seen:
            assert reader is not None
            output, _ = reader.accumulator.output_tokens()
            prompt, said = spec.prompt_tokens, reader.accumulator.usage
        else:
            prompt, output = self._generated_by(backend, spec, elapsed_s)
        usage = None
        if prompt or output:
            usage = self._cut_usage(backend, spec, said, prompt, output)
            streamed = reader is not None
            state.cost_usd += self.ledger.record_attempt(
                backend.name, usage, streamed=streamed, wasted=True, interrupted=streamed,
                uncertain=not seen,
            )
            state.billed = state.billed + usage
        if late is not None:
            late.recorded(usage, uncertain=not seen)
        return usage

    def _generated_by(
        self, backend: BackendState, spec: CallSpec, elapsed_s: float
    ) -> tuple[int, int]:
        """(prompt, output) tokens the server possibly billed for an attempt it was working on
        for ``elapsed_s`` when the client left it, having seen none of its answer: the output
        through the backend's latency-per-token line; the prompt unless the attempt left before
        any prefill of the backend's could have ended (gptgate/queued_prompt.py)."""
        output = self._billed(backend).generated_by(elapsed_s, spec.route.output_tokens)
        prefilled = output > 0 or may_be_prefilled(backend.ttft, elapsed_s)
        return (spec.prompt_tokens if prefilled else 0), output

    def _wasted_usage(
        self, backend: BackendState, spec: CallSpec, error: GateError, elapsed_s: float
    ) -> Usage | None:
        """What a failed attempt probably cost: the prompt once it was sent and processed,
        plus what a cut stream had generated or a cut or malformed body had (all of it), or
        what a server working on it until a timeout had generated by then."""
        if isinstance(error, StreamInterruptedError):
            usage = self._cut_usage(
                backend, spec, error.usage_so_far, spec.prompt_tokens, error.output_tokens
            )
            return replace(usage, estimated=error.usage_estimated)
        if not error.billed:
            return None
        if _answered_nothing(error):
            prompt, output = self._generated_by(backend, spec, elapsed_s)
            if not prompt and not output:
                return None
            return self._cut_usage(backend, spec, None, prompt, output)
        return self._cut_usage(
            backend, spec, error.usage_so_far, spec.prompt_tokens, error.output_tokens
        )

    def _cut_usage(
        self, backend: BackendState, spec: CallSpec, said: Usage | None, prompt: int, output: int
    ) -> Usage:
        """A cut attempt's booking (gptgate/cached_guess.py)."""
        prefix = functools.partial(_prefix_of, spec)
        return self.cached_guess.cut(backend.name, prefix, said, prompt, output)


def _prefix_of(spec: CallSpec) -> str | None:
    """The call's prompt-prefix group: the cache gate's when it has one, else hashed now."""
    return spec.prefix.key if spec.prefix is not None else prefix_of(spec.messages)
