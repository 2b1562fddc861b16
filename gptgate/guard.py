"""``@gate.guard(...)``: an existing async call site (an SDK call inside) under the gateway.

Each guarded call is routed, waits for a permit of its backend's limiter (within its deadline),
and is retried by the gateway's policy and budget, honouring the server's ``retry-after`` and
``x-should-retry`` read from the SDK's exception; the caller still sees the SDK's own
exceptions. What its permit teaches the limit, its span (guard_span.py) and its ledger entry
come from the requests its body sent through ``gate.http_client`` (sdk_client.py) when there
were any, else from the usage its return value carries. docs/guide.md, "The two adoption paths
together", says what users can count on.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, ParamSpec, Protocol, TypeVar

import anyio
import httpx2
from cachetools import LRUCache

from .clock import Clock
from .credential_owner import count_refused_key, refused_request
from .error_body import body_of
from .errors import (
    BackendError,
    BadRequestError,
    GateError,
    MisaddressedRequestError,
    OutOfFundsError,
    OverloadedError,
    RateLimitedError,
    RequestTimeout,
)
from .fork_rebuild import open_in_child
from .guard_manager import entered
from .guard_nested import covers, settle, settled
from .guard_seat import Seat
from .guard_site import CallSite, served_elsewhere
from .guard_span import GuardSpan
from .guard_stream import follow_returned
from .guard_unseen_key import note_unseen_key
from .limits import Limiter, Permit
from .observe import usage_from
from .outcomes import count_failure, report_failure
from .pause_wait import pause_past
from .probe_claim import claim_probe
from .results import Usage
from .routing import BackendState, CircuitBreaker, RouteRequest
from .scenarios import Scenario, scenario_for_call
from .shed import Refusals
from .wire import parse_retry_after, parse_should_retry

if TYPE_CHECKING:
    from .calls import CallRunner
    from .clock import Clock
    from .config import GatewayConfig
    from .lifecycle import CallRegistry
    from .sdk_clients_made import ClientsMade

#: the guarded call whose body is running: a request the body makes on the same backend
#: through ``gate.http_client`` runs under its permit (one call, one permit). Without it, 4
#: guarded calls holding the 4 permits would each wait for a fifth — forever.
_GUARD_PERMIT: ContextVar[GuardedCall | None] = ContextVar("gptgate_guard_permit", default=None)

#: how a request the body sent tells the guarded call it ended: (error, usage, cost)
WireEnd = Callable[[BaseException | None, Usage | None, float], None]


class WireRequest(Protocol):
    """A request the guarded body sent through ``gate.http_client`` (sdk_client's attempt)."""

    @property
    def ended(self) -> bool: ...

    def adopt(self, permit: Permit, on_end: WireEnd) -> None:
        """Take over the guarded call's permit: the body returned while this response is still
        being read (an SDK stream), so the permit follows it to its end."""


@dataclass(slots=True)
class GuardedCall:
    """A guarded call's try in progress, as the requests its body makes see it."""

    limiter: Limiter
    permit: Permit
    #: the gateway's clock, and how long a stream the body returned may sit unread (the
    #: backend's ``idle_timeout``): a sync guard follows its caller's stream by them
    clock: Clock | None = None
    idle_s: float | None = None
    #: the guarded call's deadline (a clock reading, None: none): a sync guard's caller
    #: reads its stream in its own thread, told to stop there
    deadline: float | None = None
    #: requests its body sent through ``gate.http_client`` on the guard's backend: they were
    #: seen on the wire, so their tokens, cost and failures are counted there, not again
    wire_attempts: int = 0
    #: backends its body's requests went to through ``gate.http_client`` other than the
    #: guard's: each ran on a permit of its own there, and the wire counted its tokens, cost
    #: and failures on that backend (gptgate/guard_site.py)
    elsewhere: list[str] = field(default_factory=list)
    #: backends whose circuit one of those requests counted a failure on — a stream the
    #: body read whole, cut before its ``[DONE]`` (the SDK raises nothing): the try's return
    #: is then no success for that circuit (it reset the run the wire counted)
    wire_failed: set[str] = field(default_factory=set)
    #: the stream a sync guard's function returned was left by its caller before its end:
    #: no verdict for the circuit, as on the async guard (gptgate/stream_cut.py)
    caller_left: bool = False
    #: those whose body may still be read after the guarded function returns
    open_requests: list[WireRequest] = field(default_factory=list)
    #: the failover order (primary first) of the ``fallback=`` client those requests went
    #: through, when one did: the call site follows it (gptgate/guard_site.py)
    failover: tuple[str, ...] = ()
    #: the permit as those requests hold it: one at a time (gptgate/guard_seat.py)
    seat: Seat = field(default_factory=Seat)
    #: tokens of the generative answers of known size those requests read (the limit's sample)
    input_tokens: int = 0
    output_tokens: int = 0
    sized: bool = False
    ttft_s: float | None = None
    cost_usd: float = 0.0
    #: the try's body is running: a guard entered inside it may run under its permit
    #: (gptgate/guard_nested.py), not one entered by a task it left behind
    running: bool = True
    #: what escaped guards nested in the body on other backends: retried and counted there
    settled: list[BaseException] = field(default_factory=list)

    def answered(self, usage: Usage, ttft_s: float | None, *, generative: bool) -> None:
        """A request of the body read a whole answer."""
        if generative:
            self.sized = True
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            if self.ttft_s is None:
                self.ttft_s = ttft_s


__all__ = ["REFUSED_HEADER", "GuardedGateway", "classify_exception", "make_guard"]

P = ParamSpec("P")
R = TypeVar("R")


class GuardedGateway(Protocol):
    """What the guard needs of the gateway (``Gateway`` is one). Named here, not imported,
    so that gateway.py imports this module and this module does not import gateway.py."""

    @property
    def runner(self) -> CallRunner: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def config(self) -> GatewayConfig: ...

    def default_deadline_s(self, route: RouteRequest, max_attempts: int | None = None) -> float:
        ...

    def backend_state(self, name: str) -> BackendState: ...

    @property
    def clients_made(self) -> ClientsMade:
        """The failover orders of the SDK clients it made (gptgate/sdk_clients_made.py)."""

    @property
    def calls(self) -> CallRegistry:
        """The calls in flight (gptgate/lifecycle.py): a stream's body registers there."""

    def register_call(self) -> AbstractContextManager[None]:
        """A scope for a call's body that the gateway's shutdown ends (its grace, then a
        ``GatewayClosedError``), as it ends ``gate.chat``'s."""


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


#: on a response gptgate made up instead of sending a request (an SDK retry the retry budget
#: could not pay for): the gateway's refusal, no failure of the backend's
REFUSED_HEADER = "x-gptgate-refused"


def _headers_of(exc: BaseException) -> Mapping[str, str] | None:
    """The response headers an SDK's status error carries (openai's ``APIStatusError``)."""
    headers = getattr(getattr(exc, "response", None), "headers", None)
    return headers if isinstance(headers, Mapping) else None


#: the HTTP stacks and SDKs whose timeout and connection errors are the backend's failures:
#: module → its (timeout, connection) exception class names
_FOREIGN = {
    "httpx": ("TimeoutException", "TransportError"),
    "openai": ("APITimeoutError", "APIConnectionError"),  # they wrap no HTTP stack's
    "anthropic": ("APITimeoutError", "APIConnectionError"),
}


def _imported(name: str) -> bool:
    """``name`` is imported, and far enough (another thread may be importing it now)."""
    module = sys.modules.get(name)
    return module is not None and all(hasattr(module, c) for c in _FOREIGN[name])


def _sdk_classes(
    loaded: tuple[bool, ...],
) -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """The timeout and connection exception classes of the HTTP stacks SDKs are built on
    (httpx2, and httpx, openai and anthropic) — by type, never by name: a user's own
    ``CacheConnectionError`` is no LLM failure. Only those already imported (``loaded``):
    an SDK's exception cannot exist before its SDK is, and importing one here, on the
    gateway's loop, stood every call still for the 1–2 s ``import anthropic`` takes."""
    timeouts: list[type[BaseException]] = [httpx2.TimeoutException, TimeoutError]
    transport: list[type[BaseException]] = [httpx2.TransportError]
    for (name, (timeout, connection)), imported in zip(_FOREIGN.items(), loaded, strict=True):
        if imported:
            module = sys.modules[name]
            timeouts.append(getattr(module, timeout))
            transport.append(getattr(module, connection))
    return tuple(timeouts), tuple(transport)


#: per set of imported SDKs, their classes (an SDK imported later is looked at then)
_CLASSES: dict[
    tuple[bool, ...], tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]
] = {}


def classify_exception(
    exc: BaseException, backend: str, dialect: StatusClassifier | None = None
) -> GateError:
    """A gptgate view of a foreign exception (an SDK's, httpx's), to decide on retries and
    on the limit's signal; the original is what the caller sees. An HTTP status error whose
    body it carries is classified by that body with the backend's ``dialect``, as
    ``gate.chat`` classifies it (an empty account's 429 is no rate limit: error_body.py).
    Anything that is neither an HTTP status nor a timeout or transport error of a known HTTP
    stack is the application's own: a bare ``GateError`` (never retried, not the backend's
    fault)."""
    if isinstance(exc, GateError):
        return exc
    status = _status_of(exc)
    name = type(exc).__name__
    if status is not None:
        headers = _headers_of(exc)
        if headers is not None and headers.get(REFUSED_HEADER):
            return OverloadedError(name, backend=backend, should_retry=False)
        body = body_of(exc) if dialect is not None else None
        if body and dialect is not None:
            return dialect.error_for_status(status, headers, body, backend=backend)
        cls: type[GateError]
        if status == 402:  # Payment Required: an empty account whatever it says (out_of_funds.py)
            cls = OutOfFundsError
        elif status == 429:
            cls = RateLimitedError
        elif status == 408:
            cls = RequestTimeout
        elif status == 409 or status >= 500:
            cls = BackendError
        else:
            cls = BadRequestError
        # the server's own say on when (and whether) to try again, as gate.chat honours it
        return cls(
            name, backend=backend, status=status,
            retry_after=parse_retry_after(headers) if headers is not None else None,
            should_retry=parse_should_retry(headers) if headers is not None else None,
        )
    loaded = tuple(_imported(name) for name in _FOREIGN)
    classes = _CLASSES.get(loaded)
    if classes is None:
        classes = _CLASSES[loaded] = _sdk_classes(loaded)
    timeouts, transport = classes
    if isinstance(exc, timeouts):  # before transport: openai's timeout is a connection error
        return RequestTimeout(name, backend=backend)
    if isinstance(exc, transport):
        return BackendError(name, backend=backend)
    return GateError(name, backend=backend)  # an application error: never retried


class StatusClassifier(Protocol):
    """A backend's dialect, as far as classifying an error response goes."""

    def error_for_status(
        self, status: int, headers: Mapping[str, str] | None, body: bytes, *, backend: str
    ) -> GateError: ...


def _is_the_applications(view: GateError) -> bool:
    """The classified error says nothing about the backend (see ``classify_exception``): the
    application's own, or its SDK's request addressed to another host (refused unsent)."""
    return type(view) is GateError or isinstance(view, MisaddressedRequestError)


class ReturnedStreamCut(Exception):
    """A stream a guarded sync function returned failed while its caller read it
    (gptgate/sync_guard.py): classified as the try's failure, never tried again (the caller
    holds the stream)."""

    def __init__(self, original: Exception) -> None:
        super().__init__(str(original))
        self.original = original


class _AnotherProbes(Exception):
    """A half-open backend another try (here, or in the fleet) probes: the try is routed again."""


class _ForeignFailure(GateError):
    """Carries the original exception through the retry policy."""

    def __init__(self, view: GateError, original: BaseException) -> None:
        super().__init__(
            view.message,
            backend=view.backend,
            status=view.status,
            retry_after=view.retry_after,
            unsent=view.unsent,
        )
        self.retryable = view.retryable
        self.original = original
        #: a nested guard's failure on another backend, recorded there already
        self.settled = False


def make_guard(
    gate: GuardedGateway,
    *,
    scenario: str | Scenario | None,
    backend: str | None,
    private: bool,
    tier: Literal["small", "large", "auto"],
    retry: bool,
) -> Callable[[Callable[P, Awaitable[R]]], Callable[P, Awaitable[R]]]:
    resolved = scenario_for_call(scenario)
    route = RouteRequest(
        private=private,
        tier=tier,
        backend=backend,
        latency_sensitive=resolved.latency_sensitive,
    )

    def decorator(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        if not inspect.iscoroutinefunction(fn):
            # a sync function would run (and a sync SDK call be sent and billed) before the
            # guard could see anything; an async generator is no call
            kind = "an async generator" if inspect.isasyncgenfunction(fn) else "not async"
            raise TypeError(
                f"@gate.guard wraps async functions (async def ... return); "
                f"{getattr(fn, '__qualname__', fn)!r} is {kind}"
            )
        function = getattr(fn, "__qualname__", None) or repr(fn)
        #: response ids this call site returned lately: the same id again is the
        #: application's cache answering — no new work for the backend, the limit or the bill
        seen = _SeenResponses()
        site = CallSite()  # where its requests really go (an SDK bound to one backend)

        @functools.wraps(fn)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            outer = _GUARD_PERMIT.get()
            if covers(gate, route, outer):
                # part of the guarded try it runs in: its permit, deadline and retry policy
                # (a second permit of the same limit, held by callers that each wait for
                # theirs, would never come — gptgate/guard_nested.py)
                return await fn(*args, **kwargs)
            await open_in_child(gate)  # in a forked child, its first call opens it
            runner = gate.runner  # GatewayClosedError when not open or closing
            call = _GuardRun(gate, runner, route, resolved, retry, seen, function, site)
            try:
                return await call.run(lambda: fn(*args, **kwargs))
            except Exception as exc:
                settle(outer, exc)  # inside another guarded try: not its to retry or count
                raise

        return guarded

    return decorator


class _SeenResponses:
    """The last few response ids a call site returned (a bounded LRU)."""

    __slots__ = ("_ids",)

    def __init__(self, size: int = 4096) -> None:
        self._ids: LRUCache[str, bool] = LRUCache(maxsize=size)

    def repeated(self, result: object) -> bool:
        rid = result.get("id") if isinstance(result, dict) else getattr(result, "id", None)
        if not isinstance(rid, str) or not rid:
            return False
        if rid in self._ids:
            return True
        self._ids[rid] = True
        return False


class _GuardRun:
    """One guarded call: its tries (routed, admitted, retried under the gateway's policy and
    budget), its span, its ledger entry, and what its permit teaches the limit."""

    def __init__(
        self, gate: GuardedGateway, runner: CallRunner, route: RouteRequest,
        scenario: Scenario, retry: bool, seen: _SeenResponses, function: str,
        site: CallSite,
    ) -> None:
        self.gate = gate
        self.runner = runner
        self.clock = gate.clock
        self.route = route
        self.scenario = scenario
        self.retry = retry
        self.seen = seen
        self.site = site
        # the call's own work is the SDK's to bound; its wait for a permit is not endless
        deadline_s = scenario.deadline_s or gate.config.deadline_s
        self.deadline = self.clock.now() + deadline_s if deadline_s else None
        self.stall_s = (
            None if deadline_s else gate.default_deadline_s(route, None if retry else 1)
        )
        self.failed: set[str] = set()
        #: what its body raised that is raised as it is (not the backend's failure)
        self.body_error: BaseException | None = None
        self.span = GuardSpan(runner.telemetry, function, scenario.name)

    async def run(self, body: Callable[[], Awaitable[R]]) -> R:
        span = self.span
        try:
            with self.gate.register_call(), self.runner.telemetry.use_call(span.span):

                async def attempt(number: int) -> R:
                    return await self._attempt(number, body)

                if not self.retry:
                    result = await attempt(1)
                else:
                    result = await self.runner.retry.run(
                        attempt, deadline=self.deadline, budget=self.runner.budget,
                        refusals=Refusals(self.clock, self.deadline, self.stall_s),  # shed.py
                        failover=lambda error: self.runner.is_failover(
                            self._site_route(), error
                        ),
                    )
        except _ForeignFailure as failure:
            original = failure.original
            if not failure.settled:
                self.runner.record_failed_call(failure)
            span.end("error", error=original)
        except Exception as exc:
            if isinstance(exc, GateError) and exc is not self.body_error:
                # refused before its body ran (an open circuit, a pause, the permit's wait):
                # a failed call, as gate.chat's
                self.runner.record_failed_call(exc)
            span.end("error", error=exc)
            raise
        except BaseException:
            span.end("cancelled")
            raise
        else:
            return result
        # raised outside the handler, the SDK's exception keeps its own chain
        raise original

    def _site_route(self) -> RouteRequest:
        """The next try's route, as the call site knows where its requests go."""
        return self.site.route(self.route, self._allows, self.gate.clients_made.sends_to)

    def _allows(self, name: str) -> bool:
        """``name``'s circuit lets a try through now."""
        return self.gate.backend_state(name).breaker.allows(self.clock.now())

    async def _attempt(self, number: int, body: Callable[[], Awaitable[R]]) -> R:
        """One try: the dollar budget's admission, then the permit and the body."""
        runner = self.runner
        # an open circuit is waited for within bounds, as gate.chat does
        route = self._site_route()
        while True:
            state = await runner.route(route, frozenset(self.failed), self.deadline)
            hold = await runner.admit_guarded(state, self.scenario.priority, self.deadline)
            try:
                return await self._admitted(number, body, state)
            except _AnotherProbes:
                continue  # its breaker is open now: routed again, as around any open circuit
            finally:
                if hold is not None:  # the try's cost is in the ledger (a stream's: so far)
                    assert runner.spending is not None
                    runner.spending.release(hold)

    async def _admitted(
        self, number: int, body: Callable[[], Awaitable[R]], state: BackendState
    ) -> R:
        runner, clock = self.runner, self.clock
        permit = await state.limiter.acquire(
            priority=self.scenario.priority, deadline=self.deadline, stall_s=self.stall_s
        )
        probe = await claim_probe(state, permit, clock)
        if probe is None:
            raise _AnotherProbes()  # another try (here, or in the fleet) probes the backend
        await self._past_pause(state, permit, probe)
        start = clock.now()
        if number == 1 and runner.budget is not None:
            runner.budget.record_request(start)  # a first try funds retries, as gate.chat's
        state.calls += 1
        if number > 1:
            state.retries += 1  # on the backend the retry goes to
        self.span.backend, self.span.tries = state.name, number
        call = GuardedCall(
            state.limiter, permit, clock, state.backend.idle_timeout, deadline=self.deadline
        )
        token = _GUARD_PERMIT.set(call)
        probe = probe or state.breaker.on_attempt(start)
        try:
            # a stream manager returned unentered is entered here, on this try's permit
            result = await _within(self.deadline, clock, state.name, entered(body()))
        except BaseException as exc:
            try:
                if isinstance(exc, Exception):
                    self._failed(state, call, exc, clock.now() - start, number)
                    self.body_error = exc  # the caller's or the application's, raised as is
                else:  # cancelled: no sample, but the backend may still run its request
                    permit.abandon()
            finally:
                state.breaker.probe_left(probe)  # after the verdict: a no-op when there was one
            raise
        finally:
            call.running = False
            _GUARD_PERMIT.reset(token)
            self.site.fails_over(call.failover)
        try:
            return self._succeeded(state, call, result, clock.now() - start, number, probe)
        except BaseException:
            state.breaker.probe_left(probe)
            raise

    async def _past_pause(self, state: BackendState, permit: Permit, probe: int) -> None:
        """A 429's pause of the backend (this process's, or the fleet's heard with the
        permit) waited out, as ``gate.chat`` waits it; one past the call's deadline is an
        ``OverloadedError`` at once (gptgate/pause_wait.py)."""
        try:
            left = await pause_past(state, self.clock, self.deadline)
        except BaseException:
            _unsent(state, permit, probe)
            raise
        if left is not None:
            _unsent(state, permit, probe)
            raise OverloadedError(
                f"backend {state.name!r} is rate-limited (a 429's retry-after) until past the "
                f"call's deadline", backend=state.name, retry_after=left,
            )

    def _failed(
        self, state: BackendState, call: GuardedCall, exc: Exception, latency: float,
        number: int,
    ) -> None:
        """Report a failed try. A failure of the backend's is raised as ``_ForeignFailure``
        (the retry policy reads its view); the caller's deadline and the application's own
        errors return, to be raised as they are."""
        permit = call.permit
        if settled(call, exc):
            # a nested guard's on another backend: retried and counted there, never again
            # here (attempts would multiply), nor this backend's failure
            permit.ignore()
            failure = _ForeignFailure(classify_exception(exc, state.name), exc)
            failure.retryable, failure.settled = False, True
            raise failure from exc
        if isinstance(exc, RequestTimeout) and exc.deadline:
            permit.abandon()  # the caller's deadline says nothing of the backend
            return
        cut = exc.original if isinstance(exc, ReturnedStreamCut) else None
        original = exc if cut is None else cut
        view = classify_exception(original, state.name, state.pool.dialect)
        if _is_the_applications(view):
            permit.ignore()  # the application's own error: none of the backend's
            return
        if self.site.unborne(self.route, state.name, call.failover):
            permit.ignore()  # its body went to the pinned backend on its own: not this one's
            assert self.route.backend is not None
            failure = _ForeignFailure(classify_exception(original, self.route.backend), original)
            failure.retryable = False  # the SDK's own error, not a retry refused by the pin
            raise failure from original
        served = self._elsewhere(state, call, number)
        if served is not None:  # another backend's failure, counted on its wire
            view = classify_exception(original, served)
        else:
            report_failure(permit, view, latency)
            if not call.wire_attempts and not isinstance(view, OverloadedError):
                count_failure(state, view, self.clock.now())  # the wire counts what it saw
                if not count_refused_key(  # the backend's own key refused (credential_owner.py)
                    state, view, refused_request(original), self.clock.now()
                ):
                    note_unseen_key(state, view, original)  # or one it could not see
            self.failed.add(state.name)
        failure = _ForeignFailure(view, original)
        failure.billed = call.sized  # a refusal after the try's work: no free requeue (shed.py)
        if cut is not None:
            failure.retryable = False  # the caller has read part of it: no second try
        raise failure from original  # the retry policy decides on its view

    def _succeeded(
        self, state: BackendState, call: GuardedCall, result: R, latency: float, number: int,
        probe: int,
    ) -> R:
        """What a try that returned teaches the limit, the circuit, the bill and the span;
        the result to return (a stream from another client: its watched facade,
        gptgate/guard_stream.py). A returned stream's verdict — and its half-open probe's —
        comes at its end (gptgate/stream_cut.py): a success once read whole, a failure when
        the server cut it, neither when its caller left it. Counted a success when the
        function returned, a backend cutting every stream never opened its circuit."""
        permit = call.permit
        self.span.wired = bool(call.wire_attempts or call.elsewhere)  # their spans: the usage
        if self._elsewhere(state, call, number) is not None:
            # another backend's answer: its wire taught its limit and booked it there
            self.span.end("ok", usage=usage_from(result))
            state.breaker.probe_left(probe)
            return result
        breaker = state.breaker
        still_read = [request for request in call.open_requests if not request.ended]
        if still_read:
            # a stream returned to the caller: the permit follows it to its end, and so do
            # the span and the verdict (the request reports them when it ends)
            still_read[-1].adopt(permit, self._stream_ended(probe, breaker))
            return result
        followed, returned = follow_returned(
            result, permit, self._foreign_stream_ended(probe, breaker),
            classify=lambda exc: classify_exception(exc, state.name, state.pool.dialect),
            clock=self.clock,
            backend=state.name, idle_s=state.backend.idle_timeout, calls=self.gate.calls,
            spawn=self.runner.spawn, cut_at=self.deadline, state=state,
        )
        if followed:  # a stream another client reads: the permit follows it as well
            return returned  # type: ignore[return-value]
        if call.caller_left or state.name in call.wire_failed:  # no success (stream_cut.py)
            breaker.probe_left(probe)
        else:
            breaker.on_success()
            breaker.probe_left(probe)
        usage: Usage | None = None
        cost: float | None = None
        repeated = self.seen.repeated(result)
        if call.wire_attempts:
            if call.sized:
                permit.success(
                    latency, ttft_s=call.ttft_s, input_tokens=call.input_tokens,
                    output_tokens=call.output_tokens,
                )
                state.latency.add(latency)
            else:
                permit.ignore()  # no generative answer of known size: no load per token
            usage = usage_from(result)
            cost = call.cost_usd
        elif (usage := usage_from(result)) is not None and not repeated:
            # the SDK's own client: its return value is all the guard can see
            permit.success(
                latency, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens
            )
            state.latency.add(latency)
            ledger = self.runner.ledger
            cost = ledger.record_attempt(state.name, usage, streamed=False, wasted=False)
            ledger.record_call(state.name, ok=True)
        else:
            usage = None
            permit.ignore()  # no usage (or an application cache hit): not the backend's work
        self.span.end("ok", usage=usage, cost_usd=cost)
        return result

    def _elsewhere(self, state: BackendState, call: GuardedCall, number: int) -> str | None:
        """The backend that did this try's work when it was not the guard's (an SDK bound to
        another through ``gate.http_client``): the try is then none of ``state``'s — its
        permit goes back unsampled and its call uncounted — and the call site learns where
        its requests go (gptgate/guard_site.py)."""
        served = served_elsewhere(call.wire_attempts, call.elsewhere)
        if served is None:
            return None
        call.permit.ignore()
        state.calls -= 1  # counted by the wire where it went
        if number > 1:
            state.retries -= 1
        self.span.backend = served
        self.site.learn(self.route, served, self.runner.router)
        return served

    def _foreign_stream_ended(
        self, probe: int, breaker: CircuitBreaker
    ) -> Callable[[BaseException | None], None]:
        def ended(error: BaseException | None) -> None:
            breaker.probe_left(probe)  # after the stream's verdict: then a no-op
            if error is None:
                self.span.end("ok")
            else:
                self.span.end("error", error=error)

        return ended

    def _stream_ended(self, probe: int, breaker: CircuitBreaker) -> WireEnd:
        def ended(error: BaseException | None, usage: Usage | None, cost: float) -> None:
            breaker.probe_left(probe)  # after the request's verdict: then a no-op
            self.span.wired = True  # a request on gate.http_client: its span has the usage
            if error is None:
                self.span.end("ok", usage=usage, cost_usd=cost)
            else:
                self.span.end("error", usage=usage, cost_usd=cost, error=error)

        return ended


def _unsent(state: BackendState, permit: Permit, probe: int) -> None:
    """A try not sent after all: its permit goes back unused, and its half-open probe."""
    permit.ignore()
    if probe:
        state.breaker.probe_left(probe)


async def _within(
    deadline: float | None, clock: Clock, backend: str, body: Awaitable[R]
) -> R:
    """The guarded body, cut at the call's deadline (when it has one) with
    ``RequestTimeout(deadline=True)``: a retry started late would otherwise run its whole SDK
    timeout past it."""
    if deadline is None:
        return await body
    with anyio.move_on_after(clock.to_real(max(0.0, deadline - clock.now()))) as scope:
        return await body
    assert scope.cancelled_caught
    raise RequestTimeout(
        "call deadline passed in the guarded function", backend=backend, deadline=True
    )
