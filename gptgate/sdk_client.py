"""``gate.http_client(name)``: an ``httpx2.AsyncClient`` for a third-party SDK whose transport
takes a permit of the backend's limiter per request and returns it when the response is
closed, sharing the backend's pooled connections: SDK traffic and gateway traffic obey one
limit.

Each request is an attempt like ``gate.chat``'s: a CLIENT span ``"{operation} {model}"``, the
GenAI metrics, a ledger entry priced with the backend's ``Price``, and ``stats()`` counters.
What the limit learns follows docs/adaptive.md: only chat/completion answers of a known size
teach it; a cut body is a server failure, the caller's break or cancellation is ignored.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import httpx2

from .billed import BilledWork
from .body_bound import body_bound
from .budget import CALLERS, BudgetHold, Callers
from .cached_guess import prefix_of
from .choice_count import choice_count
from .clock import from_real
from .credential_owner import count_refused_key
from .error_body import CLASSIFIED, hold_sdk_retry, read_error_body
from .errors import (
    BackendError,
    BadRequestError,
    BudgetExceededError,
    GateError,
    GatewayClosedError,
    OverloadedError,
    RequestTimeout,
    StreamInterruptedError,
)
from .failover_trail import trail_of
from .fork_rebuild import open_in_child
from .genai_content import request_content
from .guard import (
    _GUARD_PERMIT,
    REFUSED_HEADER,
    GuardedCall,
    GuardedGateway,
    WireEnd,
    classify_exception,
)
from .guard_seat import Seat
from .guard_self_wait import refused as self_wait_refused
from .guard_self_wait import unblocked
from .late_answer import LateAnswer, read_to_its_end
from .limits import Permit
from .local_refusal import local_refusal
from .media_tokens import media_rule
from .observe import ResponseTap
from .operations import GENERATIVE as _GENERATIVE
from .operations import operation_of
from .outcomes import count_failure, report_failure
from .pause_wait import pause_past
from .probe_claim import claim_probe
from .queued_prompt import may_be_prefilled
from .results import Usage
from .routing import BackendState
from .sdk_circuit import through_circuit
from .sdk_failed_calls import SDK_CALL
from .sdk_failover import FAILED_OVER
from .sdk_in_band import in_band_error
from .sdk_pace import Reservation, request_tokens, wait_paced
from .sdk_reads import operation_name, stored
from .sdk_requeue import requeue_refusals
from .stream_cut import EARLY_END, circuit_failure, ended_early, interrupted
from .stream_watch import OpenBody, WatchedByteStream
from .tap_answer import AnswerText
from .telemetry import LINKS, NAMES, endpoint
from .tokens import (
    estimate_prompt_tokens,
    estimate_text_tokens,
    estimate_tools_tokens,
    tokens_for_chars,
)
from .warn_once import warn_once
from .wire.aborted import aborted_error, is_aborted
from .wire.anthropic_server_tools import most_searches

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from .calls import CallRunner

__all__ = ["GuardTransport", "operation_of"]

_log = logging.getLogger("gptgate")

#: request parameters that go on the attempt's span, by their attribute name
_REQUEST_PARAMS = tuple(
    (param, NAMES[key])
    for param, key in (
        ("max_tokens", "request_max_tokens"),
        ("max_completion_tokens", "request_max_tokens"),
        ("max_output_tokens", "request_max_tokens"),
        ("temperature", "request_temperature"),
        ("top_p", "request_top_p"),
    )
)
#: the request model, read without parsing the body (metrics want it on every attempt)
_MODEL = re.compile(rb'"model"\s*:\s*"((?:[^"\\]|\\.)*)"')


class _Attempt:
    """One request the SDK sent: its span, permit and tap, and how it ended (exactly once)."""

    def __init__(
        self, runner: CallRunner, state: BackendState, request: httpx2.Request,
        permit: Permit | None, start: float, queue_s: float, scenario: str | None,
        *, number: int = 1, guarded: GuardedCall | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        self.runner = runner
        self.state = state
        self.request = request
        #: None inside a guarded call (its permit covers this request) until it ``adopt``s it
        self.permit = permit
        self.guarded = guarded
        self.on_end: WireEnd | None = None
        self.cost_usd = 0.0
        self.start = start
        path = request.url.path
        known = operation_of(path)
        self.operation = known or operation_name(path)  # no id in a span's or metric's name
        self.generative = known in _GENERATIVE
        self.model = self._model()
        self.tap: ResponseTap | None = None
        self.ended = False
        #: the dollar budget's reservation, released once the cost is in the ledger
        self.hold: BudgetHold | None = None
        #: an answer read to its end in the background (``abandoned_answers="finish"``)
        self.late: LateAnswer | None = None
        #: a stream gptgate hung up on: the content its caller had read (the rest it drained)
        self.read_chars: int | None = None
        #: this request is its backend's half-open probe (its number), else 0
        self.probe = 0
        #: the caller closed the stream it was reading (not gptgate hanging up on it)
        self.caller_left = False
        #: the body was read to its end (its answer may go on the span: capture_content)
        self.read_whole = False
        #: a refusal sent again: its body is read no further than this bound
        self.cut_at: float | None = None
        #: when the SDK asked (before its wait for a permit): the gateway's deadline counts
        #: from here
        self.asked = start
        self._body = body  # parsed already (its tokens were paced), else when first needed
        #: the guard's seat this request holds (gptgate/guard_seat.py), None: its own permit
        self.seat: Seat | None = None
        #: its open body, while it holds its guard's seat (gptgate/guard_self_wait.py)
        self.open_body: OpenBody[bytes] | None = None
        #: its take from the backend's rate budget (gptgate/sdk_pace.py), settled at its end
        self.pace: Reservation | None = None
        #: the tokens a failed attempt booked (the server may have counted them)
        self.counted_tokens = 0
        #: what the ledger booked for an attempt with no whole answer, and whether its caller
        #: left it: the token metric's points (gptgate/telemetry.py)
        self.booked: Usage | None = None
        self.gone = False
        config = state.backend
        telemetry = runner.telemetry
        telemetry.record_queue(queue_s, state.name)
        url = state.pool.client.base_url
        #: a request failing over: numbered, linked and parented after its tries before
        self.trail = trail_of(request.extensions)
        links = request.extensions.get(LINKS, ())
        parent, extra = None, None
        if self.trail is not None:
            number, links, parent, extra = self.trail.before(number, links)
        self.span: Span = telemetry.start_attempt(
            provider=config.provider, model=self.model, host=url.host,
            port=endpoint(state.name, url)["port"],
            stream=False, params={}, backend=state.name, hardware=config.hardware,
            attempt=number, messages=(), operation=self.operation,
            links=links, parent=parent, extra=extra,
        )
        if self.span.is_recording():  # the body is parsed only for a recording span
            body = self.body()
            attributes: dict[str, Any] = {
                NAMES["request_stream"]: bool(body.get("stream")), NAMES["queue_s"]: queue_s
            }
            if scenario is not None:
                attributes[NAMES["scenario"]] = scenario
            if telemetry.capture_content:
                attributes.update(request_content(body))
            for param, name in _REQUEST_PARAMS:
                value = body.get(param)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    attributes[name] = value
            self.span.set_attributes(attributes)  # one lock and one pass, not one per attribute

    def _model(self) -> str:
        content = _content(self.request) if self.request.method == "POST" else b""
        match = _MODEL.search(content[:4096]) if content else None
        if match is None:
            return self.state.backend.model
        try:
            value = json.loads(b'"' + match.group(1) + b'"')
        except ValueError:
            return self.state.backend.model
        return value if isinstance(value, str) else self.state.backend.model

    def body(self) -> dict[str, Any]:
        """The JSON request body, parsed once and only when needed."""
        if self._body is None:
            self._body = _json_body(self.request)
        return self._body

    def prompt_tokens(self) -> int:
        return _prompt_tokens(self.body())

    def prefix(self) -> str | None:
        """The request's prompt-prefix group (gptgate/cache.py), None without one."""
        messages = self.body().get("messages")
        return prefix_of(messages) if isinstance(messages, list) else None

    def _cut_usage(self, said: Usage | None, prompt: int, output: int) -> Usage:
        """A cut answer's booking (gptgate/cached_guess.py)."""
        return self.runner.cached_guess.cut(self.state.name, self.prefix, said, prompt, output)

    def max_tokens(self) -> int | None:
        return _max_tokens(self.body())

    def adopt(self, permit: Permit, on_end: WireEnd) -> None:
        """The guarded function returned this response unread (an SDK stream): its permit
        follows it to its end, this request reports the outcome, and ``on_end`` hears of it."""
        self.permit = permit
        self.guarded = None
        self.on_end = on_end

    # -- the guard's seat it holds, as a body's next request asks (guard_self_wait.py) -------

    def left_by_this_task(self) -> bool:
        return self.open_body is not None and self.open_body.left_by_this_task()

    def whole(self) -> bool:
        return self.tap is not None and self.tap.complete

    async def end_whole(self) -> None:
        # the caller's close: a whole answer, a success. A sync caller's pump still reading
        # it reads on to its end (its end marker came): the request waits for that
        if self.open_body is not None and not self.open_body.reading:
            await self.open_body.close()

    # -- its body, as the watch tells it (gptgate/stream_watch.py) ---------------------------

    def arrived(self, item: bytes, *, drained: bool) -> None:
        tap = self.tap
        assert tap is not None
        if drained and self.read_chars is None:
            self.read_chars = tap.content_chars
        tap.feed(item, self.runner.clock.now())

    def finished(self) -> None:
        assert self.tap is not None
        self.tap.close(self.runner.clock.now())
        if self.generative and ended_early(self.tap):  # a clean EOF the server cut short
            self._cut(BackendError(EARLY_END, backend=self.state.name))
            return
        self.succeeded()

    def left(self) -> None:
        """The caller closed the body mid-stream (or cancelled its read): the server went on
        generating until it saw the close, past what the caller read — possibly billed, as
        for a stream gptgate hung up on (the SDK's ``break`` + ``close()``: 10-20 tokens a
        stream billed beyond what was booked, -4.1% on a run of them)."""
        tap = self.tap
        if tap is not None and tap.streamed and self.read_chars is None:
            self.read_chars = tap.content_chars
        self.caller_left = True
        self.abandoned()

    def hung_up(self, complete: bool) -> None:
        """gptgate hung up on a body its caller left unread (dropped, or past the idle
        bound), after reading what had arrived: no sample for the limit (the caller's pause
        is no latency of the backend's), and what the caller never read is booked as
        possibly billed — never as certain."""
        if self.ended:
            return
        assert self.tap is not None
        if self.read_chars is None:
            if self.tap.complete:  # its caller had read it whole: nothing was left unread
                self.abandoned()
                return
            self.read_chars = self.tap.content_chars
        if self.permit is not None:
            if complete:
                self.permit.ignore()  # the answer had ended: the server is done with it
            else:
                self.permit.abandon()
        self._wasted(interrupted=not complete)
        self._end(None, self.runner.shutdown_error())  # unread at the shutdown: it cut it

    # -- outcomes ---------------------------------------------------------------------------

    def status_failed(self, status: int, headers: Mapping[str, str], body: bytes) -> GateError:
        """An HTTP error response, classified by its body (the first bytes of it:
        gptgate/error_body.py) as ``gate.chat`` classifies it: the server refused — nothing
        billed, but for a refusal its provider bills (Azure's filtered prompt: its prompt)."""
        error = self.state.pool.dialect.error_for_status(
            status, headers, body, backend=self.state.name
        )
        if error.billed and self.generative:
            self._billed_refusal()
        self._count_failure(error)
        # the backend's own key refused: its failure (a tenant's key: nobody's), which its
        # guarded call's return must not reset
        if count_refused_key(
            self.state, error, (self.request.headers, self.request.url.path),
            self.runner.clock.now(),
        ) and self.guarded is not None:
            self.guarded.wire_failed.add(self.state.name)
        if self.permit is not None:
            report_failure(self.permit, error, self._elapsed())
        self._end(None, error)
        return error

    def _billed_refusal(self) -> None:
        """A refusal billed at its prompt, booked as ``gate.chat`` books it."""
        usage = self._cut_usage(None, self.prompt_tokens(), 0)
        self.counted_tokens = usage.total_tokens
        cost = self.runner.ledger.record_attempt(
            self.state.name, usage, streamed=bool(self.body().get("stream")), wasted=True
        )
        self.cost_usd += cost
        if self.guarded is not None:
            self.guarded.cost_usd += cost

    def succeeded(self) -> None:
        """The body was read to its end."""
        if self.ended:
            return
        tap = self.tap
        assert tap is not None
        if tap.failure is not None and self.request.method != "GET":  # a read: what an
            self._failed_in_band()  # earlier request ended in (a failed background response)
            return
        if self.generative and is_aborted(tap.finish_reason) and self.request.method != "GET":
            self._failed_in_band(aborted_error(  # its server cut it: gptgate/wire/aborted.py
                self.state.name, tap.usage, finish_reason=tap.finish_reason))
            return
        if (tap.malformed or tap.page) and not tap.streamed and self.generative:
            self._malformed(billed=not tap.page)  # a proxy's page: no model ran
            return
        latency = self._elapsed()
        usage: Usage | None = None
        if tap.usage is not None:
            usage = tap.usage
            if self.generative:
                self._billed().observe(latency, usage.output_tokens, None)
                self.runner.cached_guess.answered(self.state.name, usage, self.prefix)
        elif self.generative and tap.content_chars:
            usage = Usage(
                input_tokens=self.prompt_tokens(),
                output_tokens=tokens_for_chars(tap.content_chars),
                estimated=True,
            )
        if self.permit is not None:
            if self.generative and usage is not None:
                self.permit.success(
                    latency, ttft_s=tap.ttft_s, input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                )
                self.state.latency.add(latency)
                if tap.ttft_s is not None:
                    self.state.ttft.add(tap.ttft_s)
                if self.state.drift is not None:  # the tap knows no cached tokens
                    self.state.drift.observe(
                        self.runner.clock.now(), self.permit.inflight, latency, tap.ttft_s,
                        usage.output_tokens,
                    )
            else:
                self.permit.ignore()  # a token-less reply says nothing of the load per token
            self.state.breaker.on_success()
        if usage is not None and self.request.method == "GET":  # a stored answer read again
            usage = usage if self.runner.booked_answers.first_read(tap.response_id) else None
        elif usage is not None and stored(self.request.url.path, self.body()):
            self.runner.booked_answers.booked(tap.response_id)
        if usage is not None:
            ledger = self.runner.ledger
            ledger.learn_model(self.state.name, tap.response_model)
            self.cost_usd += ledger.record_attempt(
                self.state.name, usage, streamed=tap.streamed, wasted=False
            )
            ledger.record_call(self.state.name, ok=True)
            if self.guarded is not None:
                self.guarded.cost_usd += self.cost_usd
                self.guarded.answered(usage, tap.ttft_s, generative=self.generative)
        self.read_whole = True
        self._end(usage, None)

    def cut(self, exc: BaseException) -> None:
        """The body ended early by the server's or the network's doing: a server failure."""
        self._cut(classify_exception(exc, self.state.name))

    def _cut(self, view: GateError) -> None:
        """A cut body (``view``: what cut it), counted as every path counts one
        (gptgate/stream_cut.py): a stream's cut is a ``StreamInterruptedError``."""
        if self.ended:
            return
        tap = self.tap
        assert tap is not None
        error = interrupted(view, self.state.name) if tap.streamed else view
        self._count_failure(error)
        if self.permit is not None:
            report_failure(self.permit, error, self._elapsed())
        self._wasted(interrupted=tap.streamed)
        self._end(None, error)

    def _failed_in_band(self, error: GateError | None = None) -> None:
        """The answer said it failed (gptgate/sdk_in_band.py; ``error``: its server cut it
        off, gptgate/wire/aborted.py): the backend's failure, as ``gate.chat`` reads it — a
        stream that had begun its answer was cut (``StreamInterruptedError``); what it
        generated is booked as waste: the usage it reported, else a stream's or a cut
        answer's output so far (the server ended it: nothing past that), and an error body
        under a 200 nothing, the server having refused. The SDK gets the answer as sent."""
        tap = self.tap
        assert tap is not None
        if error is None:
            error = in_band_error(tap.failure, backend=self.state.name, status=None)
        interrupted = tap.streamed and tap.content_chars > 0
        interrupted = interrupted and not isinstance(error, BadRequestError)
        if interrupted:
            cut = StreamInterruptedError(f"stream cut: {error.message}", backend=self.state.name)
            cut.__cause__ = error
            error = cut
        self._count_failure(error)
        if self.permit is not None:
            report_failure(self.permit, error, self._elapsed())
        self.read_chars = None  # the server ended the answer: none went on past what came
        if tap.usage is not None and self.generative:
            self.cost_usd += self.runner.ledger.record_attempt(
                self.state.name, tap.usage, streamed=tap.streamed, wasted=True,
                interrupted=interrupted,
            )
            if self.guarded is not None:
                self.guarded.cost_usd += self.cost_usd
        elif tap.streamed or error.billed:
            self._wasted(interrupted=interrupted)
        self._end(None, error)

    def _malformed(self, *, billed: bool = True) -> None:
        """A whole body that is no answer (JSON cut short): the server generated the answer
        before sending it, so it is billed in full — booked as ``gate.chat`` books it (the
        prompt, and the output the backend's recent answers suggest, else ``max_tokens``),
        and a failure of the backend's, not a success. Not ``billed``: a proxy's HTML page,
        which no model produced — the failure alone, as on ``gate.chat``."""
        what = "the body is not a readable answer" if billed else "an HTML page, not an API answer"
        error = BackendError(f"malformed response: {what}", backend=self.state.name,
                             billed=billed)
        self._count_failure(error)
        if self.permit is not None:
            report_failure(self.permit, error, self._elapsed())
        if not billed:
            self._end(None, error)
            return
        usage = self._cut_usage(
            None, self.prompt_tokens(), self._billed().malformed(b"", self.max_tokens())
        )
        self.cost_usd += self.runner.ledger.record_attempt(
            self.state.name, usage, streamed=False, wasted=True
        )
        if self.guarded is not None:
            self.guarded.cost_usd += self.cost_usd
        self._end(None, error)

    def abandoned(self) -> None:
        """The caller cancelled or left the body (a ``break``): ignored by the limit, but what
        the server generated until then is possibly billed. A stream left after its end
        marker is whole: a success."""
        if self.ended:
            return
        failed = self.tap is not None and self.tap.failure is not None
        if self.tap is not None and (self.tap.complete or failed):
            self.tap.close(self.runner.clock.now())
            self.succeeded()  # or its failure, which ended the answer (an SDK raised on it)
            return
        if self.permit is not None:  # the server runs it until it notices we left
            self.permit.abandon()
        self.gone = True
        self._wasted(interrupted=self.tap is not None and self.tap.streamed)
        self._end(None, self.runner.shutdown_error())  # a read the shutdown cut: it failed

    def send_failed(self, exc: BaseException) -> None:
        """No response: a timeout waiting for the headers, a reset, a cancellation."""
        if isinstance(exc, Exception):
            view = classify_exception(exc, self.state.name)
            self._count_failure(view)
            if self.permit is not None:
                report_failure(self.permit, view, self._elapsed())
            if isinstance(view, RequestTimeout):
                self._wasted(interrupted=False)
            self._end(None, view)
            return
        if self.permit is not None:  # cancelled: the server may have the request already
            self.permit.abandon()
        self._wasted(interrupted=False)
        self._end(None, self.runner.shutdown_error())  # by the shutdown: it failed

    def _wasted(self, *, interrupted: bool) -> None:
        """The ledger entry of an attempt without a whole answer, as ``gate.chat`` counts it:
        the content that arrived, else the elapsed time through the backend's recent latency
        per token (uncertain: nothing arrived, the server may have billed it or not)."""
        if not self.generative:
            return
        tap = self.tap
        seen = tap is not None and (tap.content_chars > 0 or tap.output_tokens is not None)
        if seen:
            assert tap is not None
            output = tap.output_so_far()
        else:
            output = self._billed().generated_by(self._elapsed(), self.max_tokens())
        if interrupted and self.read_chars is not None:
            # hung up mid-answer: the server went on generating until then, past what the
            # drain read — possibly billed, as for a request cut before its first token.
            # A stream its caller left is guessed at its own pace before the backend taught
            # one: max_tokens for each stream of a preview pattern (two deltas read, then
            # close) booked 80 tokens where the server billed 1-6
            billed, elapsed, most = self._billed(), self._elapsed(), self.max_tokens()
            if self.caller_left and tap is not None:
                guess = billed.generated_by(elapsed, most) or tap.paced_output(elapsed, most)
            else:
                guess = billed.possibly_generated(elapsed, most)
            output = max(output, guess)
        # as gate.chat: no prompt only for an attempt left before any prefill could have ended
        prefilled = seen or output > 0 or may_be_prefilled(self.state.ttft, self._elapsed())
        prompt = self.prompt_tokens() if prefilled else 0
        usage = None
        unread = 0
        if self.read_chars is not None:  # what gptgate drained, the caller never read
            unread = max(0, output - tokens_for_chars(self.read_chars))
        if prompt or output:
            usage = self._cut_usage(tap.usage if seen and tap is not None else None, prompt, output)
            self.counted_tokens = usage.total_tokens
            self.booked = usage
            cost = self.runner.ledger.record_attempt(
                self.state.name, usage, streamed=tap is not None and tap.streamed, wasted=True,
                interrupted=interrupted, uncertain=not seen, unread_tokens=unread,
            )
            self.cost_usd += cost
            if self.guarded is not None:
                self.guarded.cost_usd += cost
        if self.late is not None:  # set right when the answer read on arrives
            self.late.recorded(usage, uncertain=not seen)

    def _count_failure(self, error: GateError) -> None:
        """Counted here, inside a guarded call too: the guard leaves a failure it saw on the
        wire to the wire (``GuardedCall.wire_attempts``)."""
        if isinstance(error, GatewayClosedError):
            return  # our shutdown, none of the backend's (as gate.chat counts)
        if self.guarded is not None and circuit_failure(error) is not None:
            self.guarded.wire_failed.add(self.state.name)
        count_failure(self.state, error, self.runner.clock.now())

    def _billed(self) -> BilledWork:
        work = self.runner.billed_work.get(self.state.name)
        if work is None:
            work = self.runner.billed_work[self.state.name] = BilledWork()
        return work

    def _elapsed(self) -> float:
        return self.runner.clock.now() - self.start

    def _end(self, usage: Usage | None, error: BaseException | None) -> None:
        if self.ended:
            return
        self.ended = True
        if self.pace is not None:  # what the answer did not use goes back to the budget
            self.pace.settle(usage.total_tokens if usage is not None else self.counted_tokens)
        seat, self.seat = self.seat, None
        if seat is not None:  # the guard's permit may cover the body's next request
            seat.free()
        if self.probe:  # a probe that gave no verdict lets the next request probe
            self.state.breaker.probe_left(self.probe)
        if self.hold is not None:
            assert self.runner.spending is not None
            self.runner.spending.release(self.hold)
            self.hold = None
        tap = self.tap
        config = self.state.backend
        # an answer read whole (capture_content): one failed, cut or left shows none, as
        # gate.chat's
        answer = tap.answer if tap is not None and self.read_whole else None
        self.runner.telemetry.end_attempt(
            self.span, provider=config.provider, model=self.model, duration_s=self._elapsed(),
            usage=usage, ttft_s=tap.ttft_s if tap is not None and tap.streamed else None,
            response_model=tap.response_model if tap is not None else None,
            response_id=tap.response_id if tap is not None else None,
            finish_reason=tap.finish_reason if tap is not None else None,
            error=error, operation=self.operation, extra={NAMES["cost_usd"]: self.cost_usd},
            text=answer.text if answer is not None else None,
            raw=answer.raw() if answer is not None else None,
            **endpoint(self.state.name, self.state.pool.client.base_url),
            billed=self.booked, abandoned=self.gone and error is None, late=self.late,
        )
        if self.trail is not None:
            self.trail.after(self.span, error)
        if self.on_end is not None:  # the guarded call's span, after its child's
            self.on_end(error, usage, self.cost_usd)
        if (call := self.request.extensions.get(SDK_CALL)) is not None:  # one failed a call
            self.runner.sdk_calls.ended(call, self.state.name, error)


async def _head_read(
    refusal: Callable[[httpx2.Response, httpx2.Request, float], Awaitable[httpx2.Response]],
    response: httpx2.Response, request: httpx2.Request, attempt: _Attempt,
) -> httpx2.Response:
    """The response as its dialect reads a stream's head (anthropic_overload.py); a head
    that could not be read (a reset, a timeout) is the attempt's failure, as a send's."""
    try:
        idle_s = attempt.runner.clock.to_real(attempt.state.backend.idle_timeout)
        return await refusal(response, request, idle_s)
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await response.aclose()
        attempt.send_failed(exc)
        raise


def _content(request: httpx2.Request) -> bytes:
    """The request's body, b"" when it is streamed (a file upload's multipart body, read only
    as it is sent): no JSON to size, and reading it here would crash the send
    (``RequestNotRead``: every ``client.files.create`` failed on ``gate.http_client``)."""
    try:
        return request.content
    except httpx2.RequestNotRead:
        return b""


def _json_body(request: httpx2.Request) -> dict[str, Any]:
    content = _content(request)
    try:
        parsed = json.loads(content) if content else {}
    except ValueError:
        parsed = {}
    return parsed if isinstance(parsed, dict) else {}


def _prompt_tokens(body: Mapping[str, Any]) -> int:
    """The request's prompt, estimated: its messages (or a completion's ``prompt``, the
    Responses API's ``input`` and ``instructions``) and its ``tools`` definitions."""
    return _input_tokens(body) + estimate_tools_tokens(body.get("tools"))


def _input_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages")
    media = media_rule([("openai", body.get("model"))])  # an image by its model's rule
    if isinstance(messages, list):
        system = body.get("system")  # Anthropic's system prompt, beside the messages
        extra = [{"role": "system", "content": system}] if system else []
        return estimate_prompt_tokens(
            [*extra, *(m for m in messages if isinstance(m, Mapping))], media
        )
    instructions = body.get("instructions")  # the Responses API's system prompt
    told = estimate_text_tokens(instructions) if isinstance(instructions, str) else 0
    for key in ("prompt", "input"):
        value = body.get(key)
        if isinstance(value, str):
            return told + estimate_text_tokens(value)
        if isinstance(value, list):
            # strings (a completion's prompts, an embedding's inputs), or the Responses API's
            # input items: messages whose content is text or parts with text
            items = [v for v in value if isinstance(v, Mapping)]
            return (
                told
                + sum(estimate_text_tokens(v) for v in value if isinstance(v, str))
                + (estimate_prompt_tokens(items, media) if items else 0)
            )
    return told


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    """The most output the request may be billed: ``n`` choices of ``max_tokens`` each
    (gptgate/choice_count.py; one choice's held let ``n=3`` spend three times the hold)."""
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value * choice_count(body)
    return None


def _request_tokens(request: httpx2.Request, body: Mapping[str, Any]) -> int:
    """The tokens ``request`` (``body``: its JSON) reserves at its backend's rate budget
    (gptgate/sdk_pace.py)."""
    generative = operation_of(request.url.path) in _GENERATIVE
    return request_tokens(_prompt_tokens(body), _max_tokens(body), generative=generative)


#: what an SDK request without max_tokens reserves under a dollar budget (as gate.chat)
_BUDGET_OUTPUT_TOKENS = 1024


def _sdk_attempt(request: httpx2.Request) -> int:
    """Which try of one SDK call this request is: Stainless-built SDKs (openai's) say so in
    ``x-stainless-retry-count``; 1 for any other client."""
    value = request.headers.get("x-stainless-retry-count")
    if value is None or not value.isdigit():
        return 1
    return int(value) + 1


#: the response extension that carries a local refusal's own ``GateError``
REFUSAL_EXTENSION = "gptgate_refusal"


def _over_budget(
    request: httpx2.Request, backend: str, error: BudgetExceededError
) -> httpx2.Response:
    """The answer to an SDK request the dollar budget has no room for: a 429 that tells the
    SDK not to retry and says why (spend, budget, when room frees up), nothing sent."""
    return local_refusal(
        request, 429, refused="dollar-budget", kind="gptgate_budget_exceeded",
        message=f"gptgate: {error.message}", retry_after=error.retry_after,
        # gptgate's own callers on this path (gate.embed) raise the typed error itself
        extensions={REFUSAL_EXTENSION: error},
    )


def _give_back(
    runner: CallRunner, state: BackendState, hold: BudgetHold | None, permit: Permit, probe: int
) -> None:
    """What an admitted request that is not sent after all took: its permit (unused), its
    half-open probe, its dollar reservation."""
    permit.ignore()
    if probe:
        state.breaker.probe_left(probe)
    if hold is not None:
        assert runner.spending is not None
        runner.spending.release(hold)


def _unpaced(
    runner: CallRunner, state: BackendState, guarded: GuardedCall | None,
    hold: BudgetHold | None, permit: Permit | None, probe: int,
) -> None:
    """A request not sent after its pacer's wait (past its bound, or cancelled): what it
    took goes back — the guard's seat, or its own permit, probe and dollar reservation."""
    if guarded is not None:
        guarded.wire_attempts -= 1
        guarded.seat.free()
    elif permit is not None:
        _give_back(runner, state, hold, permit, probe)


def _paused(
    request: httpx2.Request, backend: str, left: float, *, budget: bool = False
) -> httpx2.Response:
    """The answer to an SDK request whose backend is paused past the request's bound — or
    (``budget``) whose RPM/TPM budget has no room for it before then: the 429 the server
    would give, with its ``retry-after``, unsent and not retried by the SDK."""
    if budget:
        message = (
            f"gptgate: backend {backend!r}'s rate budget (RPM/TPM, from its x-ratelimit "
            f"headers) has no room for this request for {left:.1f} s, past this request's "
            f"timeout (its pool timeout, or the gateway's deadline_s); the request was not "
            f"sent — raise the client's timeout to wait its turn"
        )
    else:
        message = (
            f"gptgate: backend {backend!r} is rate-limited (a 429's retry-after) for "
            f"{left:.1f} s more, past this request's timeout; the request was not sent"
        )
    return local_refusal(
        request, 429, refused="paused", kind="gptgate_rate_limit_paused", message=message,
        retry_after=left,
    )

def _refused(request: httpx2.Request, backend: str) -> httpx2.Response:
    """The answer to an SDK retry the budget cannot pay for: a 503 that tells the SDK not to
    retry (``x-should-retry: false``) and says why, instead of a request sent."""
    message = (
        f"gptgate: the retry budget is spent, so the SDK's retry was not sent to backend "
        f"{backend!r} (set max_retries=0 on the SDK client and let the gateway retry)"
    )
    return local_refusal(
        request, 503, refused="retry-budget", kind="gptgate_retry_budget_spent",
        message=message,
    )


async def _read_in_background(
    state: BackendState, request: httpx2.Request, attempt: _Attempt
) -> httpx2.Response | None:
    """``abandoned_answers="finish"`` for an SDK's request, as for ``gate.chat``
    (gptgate/late_answer.py, ``read_to_its_end``): the answer is read to its end in the
    background, bounded by the backend's ``timeout``, and waited for as long as the SDK's own
    read timeout; a request the SDK gives up on (that timeout, a cancellation, a guard's
    deadline) keeps its slot — its own permit or the guard's — until the answer has ended."""
    runner = attempt.runner
    clock = runner.clock
    attempt.late = late = LateAnswer(runner.ledger, state.name)
    timeouts = request.extensions.get("timeout")
    timeouts = dict(timeouts) if isinstance(timeouts, Mapping) else {}
    wait_s = timeouts.get("read")
    bound = clock.to_real(state.backend.timeout)
    request.extensions = {**request.extensions, "timeout": {**timeouts, "read": bound}}

    async def send() -> httpx2.Response:
        response = await state.pool.transport.handle_async_request(request)
        try:
            await response.aread()
        finally:
            await response.aclose()
        return response

    def usage_of(response: httpx2.Response) -> Usage | None:
        tap = ResponseTap(response.headers.get("content-type", ""), attempt.start)
        tap.feed(response.content, clock.now())
        tap.close(clock.now())
        return tap.usage

    return await read_to_its_end(
        late, send, usage_of,
        spawn=runner.spawn,
        permit=attempt.permit if attempt.guarded is None else attempt.guarded.permit,
        wait_s=wait_s if isinstance(wait_s, (int, float)) else None,
        timed_out=lambda: httpx2.ReadTimeout(
            "no response within the read timeout (the backend finishes it)", request=request
        ),
    )


class GuardTransport(httpx2.AsyncBaseTransport):
    """The transport behind ``gate.http_client(name)``.

    Given a backend's name, it looks up the live state at each request: the client may be
    built before the gateway opens, and outlive a re-open (which builds the state afresh);
    a closed gateway's client raises ``GatewayClosedError`` instead of sending."""

    def __init__(
        self, gate: GuardedGateway, state: BackendState | str, priority: int = 5,
        scenario: str | None = None, deadline_s: float | None = None,
    ) -> None:
        self._gate = gate
        self._state = state
        self._priority = priority
        self._scenario = scenario
        #: the scenario's deadline (None: the gateway's ``deadline_s``)
        self._deadline_s = deadline_s

    def _retry_funded(self, runner: CallRunner, state: BackendState) -> bool:
        """An SDK's own retry (``max_retries``) spends the gateway's retry budget like any
        other: SDK retries and the gateway's multiply otherwise (one guarded call meeting
        429s sent 9 requests). Said once per backend, with the way out."""
        warn_once(  # once per backend: SDK clients are often built per request
            _log, state, "sdk_retries",
            "the SDK on gate.http_client(%r) retries on its own (max_retries, default 2): "
            "its retries spend the gateway's retry budget; pass max_retries=0 to let "
            "gptgate alone retry", state.name,
        )
        return runner.budget is None or runner.budget.try_spend(runner.clock.now())

    def _backend(self) -> BackendState:
        if isinstance(self._state, BackendState):
            return self._state
        self._gate.runner  # noqa: B018 - GatewayClosedError before anything else
        return self._gate.backend_state(self._state)

    def _wait_deadline(self, request: httpx2.Request) -> float | None:
        """Until when (gateway clock) the request may wait for a permit or budget room: its
        pool timeout — real seconds, as httpx counts every timeout — and the gateway's
        deadline (the scenario's ``deadline_s``, else ``GatewayConfig.deadline_s``), the
        earlier; None: no bound. Read as gateway seconds, a scaled clock cut the SDK's wait
        short: under ``ScaledClock(5)`` its 10 s became 2 real seconds, and every queue
        predicted longer was shed at once."""
        clock = self._gate.clock
        now = clock.now()
        timeouts = request.extensions.get("timeout")
        pool = timeouts.get("pool") if isinstance(timeouts, Mapping) else None
        ends = [now + from_real(clock, pool)] if isinstance(pool, (int, float)) else []
        deadline_s = self._deadline_s or self._gate.config.deadline_s
        if deadline_s:
            ends.append(now + deadline_s)
        return min(ends, default=None)

    async def _acquire(
        self, state: BackendState, request: httpx2.Request, deadline: float | None
    ) -> Permit:
        """A permit, waited for no longer than the request's own pool timeout (httpx's model
        for "waiting for a connection") or the gateway's deadline (``deadline``, read at the
        request's start: ``_wait_deadline``): past it, ``httpx2.PoolTimeout`` (the SDK's own
        timeout error)."""
        try:
            return await state.limiter.acquire(priority=self._priority, deadline=deadline)
        except OverloadedError as exc:
            if deadline is None:
                raise
            raise httpx2.PoolTimeout(
                f"no permit of backend {state.name!r} in time: {exc.message}",
                request=request,
            ) from exc

    async def _admitted(
        self, runner: CallRunner, state: BackendState, request: httpx2.Request,
        bound: float | None,
    ) -> tuple[BudgetHold | None, Permit, int] | httpx2.Response:
        """The request's budget hold, permit and half-open probe (its number, else 0), past
        the circuit (the probe taken by another try, here or in the fleet with ``shared=``,
        the circuit is waited for again: gptgate/probe_claim.py); or the refusal to answer
        unsent."""
        while True:
            refused = await through_circuit(runner, state, request, bound)
            if refused is not None:
                return refused
            try:
                hold = await self._admit_cost(runner, state, request, bound)
            except BudgetExceededError as exc:
                return _over_budget(request, state.name, exc)
            probe = None
            try:
                permit = await self._acquire(state, request, bound)
                probe = await claim_probe(state, permit, runner.clock)
            finally:
                if probe is None and hold is not None:
                    assert runner.spending is not None
                    runner.spending.release(hold)
            if probe is not None:
                try:  # a 429's pause, this process's or the fleet's (heard with the permit)
                    left = await pause_past(state, runner.clock, bound)
                except BaseException:
                    _give_back(runner, state, hold, permit, probe)
                    raise
                if left is None:
                    return hold, permit, probe
                _give_back(runner, state, hold, permit, probe)
                return _paused(request, state.name, left)

    async def _admit_cost(
        self, runner: CallRunner, state: BackendState, request: httpx2.Request,
        deadline: float | None,
    ) -> BudgetHold | None:
        """The dollar budget's reservation for the request: its prompt and, for a chat or
        completion, ``max_tokens`` (1024 without) at the backend's price; waited for
        (throttle) no longer than the request's pool timeout, as a permit is."""
        if runner.spending is None:
            return None
        body = _json_body(request)
        prompt = _prompt_tokens(body)
        price = runner.ledger.price(state.name, prompt)
        if price is None:
            return None
        operation = operation_of(request.url.path)
        generative = operation in _GENERATIVE  # an embedding: no output
        output = (_max_tokens(body) or _BUDGET_OUTPUT_TOKENS) if generative else 0
        # and the searches a web search tool may make, as gate.chat reserves them
        searches = most_searches(body) * price.web_search_per_k / 1000
        callers = request.extensions.get(CALLERS)  # gate.embed's (gptgate/embed.py)
        return await runner.admit_cost(
            state, price.most_cost(prompt, output) + searches, self._priority, deadline,
            embedding=operation == "embeddings",
            callers=callers if isinstance(callers, Callers) else None,
        )

    async def _send(
        self, state: BackendState, request: httpx2.Request, attempt: _Attempt
    ) -> httpx2.Response:
        """The request to the backend's pool: as it is, or — a non-streamed answer from a
        backend that finishes what it is hung up on — read to its end in the background."""
        if (
            state.backend.abandoned_answers == "finish"
            and attempt.generative
            and not attempt.body().get("stream")
        ):
            response = await _read_in_background(state, request, attempt)
            if response is not None:
                return response
        return await state.pool.transport.handle_async_request(request)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """One SDK request, registered with the gateway's calls from its wait for a permit
        to its headers (its body after that, gptgate/stream_watch.py): closing the gateway
        gives it the grace, then cancels it with ``GatewayClosedError`` and hands back its
        permit, as it does ``gate.chat``'s."""
        await open_in_child(self._gate)  # in a forked child, its first request opens it
        runner = self._gate.runner  # GatewayClosedError when closed, closing or not open
        # looked up once, as the request is accepted: looked up again after its answer, a
        # closing gateway refused it there — over a refusal nobody then read or closed (its
        # pooled connection out) and a call accepted before the close failed in its grace
        state = self._backend()
        counted = _GUARD_PERMIT.get() is None  # a guarded call is its guard's to count
        # another host than the backend's: refused unsent, its call failed
        runner.sdk_calls.accepted(state, request, counted=counted)
        # read at its start: every resend of a refusal is cut there (gptgate/sdk_requeue.py)
        bound = self._wait_deadline(request)
        with self._gate.calls.call(new=False):
            response = await self._handle(runner, state, request, bound)
            if _GUARD_PERMIT.get() is None:  # a guard retries its own body's refusals
                response = await requeue_refusals(
                    response, request, state=state, clock=self._gate.clock,
                    retry=runner.retry, bound=bound,
                    resend=lambda cut_at: self._handle(
                        runner, state, request, cut_at, requeued=True
                    ),
                )
                refused = response.headers.get(REFUSED_HEADER)
                if refused:  # unsent: its call failed, counted as gate.chat's
                    runner.sdk_calls.refused(request, state.name, refused)
                if refused and runner.telemetry.metering:
                    runner.telemetry.unsent.record_refusal(refused, state.name, self._scenario)
        return response

    async def _handle(
        self, runner: CallRunner, state: BackendState, request: httpx2.Request,
        bound: float | None, *, requeued: bool = False,
    ) -> httpx2.Response:
        """One request through the limiter to the backend, its waits ending at ``bound`` (read
        at the request's start); ``requeued``: a refusal sent again, whose body ends there
        too (gptgate/sdk_requeue.py)."""
        held = _GUARD_PERMIT.get()
        clock = self._gate.clock
        number = _sdk_attempt(request)
        cut_at = bound if requeued else None
        if number > 1 and not requeued and not self._retry_funded(runner, state):
            return _refused(request, state.name)
        permit: Permit | None
        hold: BudgetHold | None = None
        probe = 0
        enqueued = clock.now()
        guarded = held if held is not None and held.limiter is state.limiter else None
        admitted: tuple[BudgetHold | None, Permit, int] | httpx2.Response | None = None
        if guarded is not None and not await unblocked(guarded.seat, state.limiter):
            return self_wait_refused(request, state.name, state.backend.idle_timeout)
        if guarded is not None:
            # the guard's permit covers one of its body's requests at a time; one sent while
            # it covers another takes the seat or a permit of its own, whichever comes first
            admitted = await guarded.seat.take_or(
                lambda: self._admitted(runner, state, request, bound)
            )
            if admitted is not None:
                guarded = None
        if guarded is not None:
            # inside a guarded call on this backend: its permit covers this request, and the
            # guard reports the outcome (one call, one permit — never a wait on itself);
            # the span and the ledger are still this attempt's
            guarded.wire_attempts += 1
            permit = None
        else:
            if held is not None and admitted is None:
                held.elsewhere.append(state.name)  # a guarded body's request to another backend
            if admitted is None:
                admitted = await self._admitted(runner, state, request, bound)
            if isinstance(admitted, httpx2.Response):
                return admitted
            hold, permit, probe = admitted
        try:  # its tokens' place in the backend's rate budget, as gate.chat's (sdk_pace.py)
            body = _json_body(request)  # parsed once: its tokens here, its attempt's span after
            pace, left = await wait_paced(state, clock, _request_tokens(request, body), bound)
        except BaseException:
            _unpaced(runner, state, guarded, hold, permit, probe)
            raise
        if left is not None:
            _unpaced(runner, state, guarded, hold, permit, probe)
            paused = state.pacer.paused_until > clock.now()
            return _paused(request, state.name, left, budget=not paused)
        if (guarded is None or number > 1) and not requeued:
            state.calls += 1
        if number > 1 or requeued or request.extensions.get(FAILED_OVER):
            state.retries += 1  # a failover's too, as gate.chat counts it (no budget spent)
        elif guarded is None and runner.budget is not None:
            runner.budget.record_request(clock.now())  # a first request funds retries
        start = clock.now()
        attempt = _Attempt(
            runner, state, request, permit, start, start - enqueued, self._scenario,
            number=number, guarded=guarded, body=body,
        )
        attempt.hold = hold
        if guarded is not None:
            attempt.seat = guarded.seat  # freed when this request's body ends
        if guarded is None:  # a guarded one is its guard's try (which the guard counts)
            attempt.probe = probe or state.breaker.on_attempt(start)
        attempt.cut_at = cut_at
        attempt.asked = enqueued
        attempt.pace = pace
        return await self._sent(runner, state, request, attempt)

    async def _sent(
        self, runner: CallRunner, state: BackendState, request: httpx2.Request,
        attempt: _Attempt,
    ) -> httpx2.Response:
        """The request sent and its response's body watched (gptgate/stream_watch.py): the
        permit comes back when the body is read to its end, closed, dropped unread, left
        unread past the backend's ``idle_timeout``, or closed by the gateway's shutdown."""
        clock = self._gate.clock
        start = attempt.start
        try:
            response = await self._send(state, request, attempt)
        except BaseException as exc:
            attempt.send_failed(exc)
            raise
        refusal = getattr(state.pool.dialect, "stream_refusal", None)
        if refusal is not None:  # a refusal sent as a stream's first event (Anthropic's 529)
            response = await _head_read(refusal, response, request, attempt)
        status = response.status_code
        # its x-ratelimit-* headers correct the budget, at its take's place (as gate.chat's)
        runner._observe_limits(state, response, attempt.pace.seq if attempt.pace else None)
        if status >= 400:  # classified by its body, which the SDK still reads whole
            try:
                head = await read_error_body(
                    response, clock.to_real(state.backend.idle_timeout)
                )
            except BaseException:  # cancelled while reading it: still a refusal, permit back
                attempt.status_failed(status, response.headers, b"")
                raise
            error = attempt.status_failed(status, response.headers, head)
            response.extensions = {**response.extensions, CLASSIFIED: error}
            hold_sdk_retry(response, error.retryable)
            return response
        attempt.tap = tap = ResponseTap(response.headers.get("content-type", ""), start)
        if runner.telemetry.capture_content and attempt.span.is_recording():
            tap.answer = AnswerText()  # the answer for the span (gptgate/tap_answer.py)
        if response.is_closed:  # a pre-read body: the call is over already
            now = clock.now()
            tap.feed(response.content, now)
            tap.close(now)
            attempt.succeeded()
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        idle_s = state.backend.idle_timeout
        bound = body_bound(
            clock, state.backend, request, asked=attempt.asked, sent=start,
            deadline_s=self._deadline_s or self._gate.config.deadline_s, streamed=tap.streamed,
        )
        body = OpenBody(
            response.stream, attempt, clock=clock, backend=state.name,
            silence_s=idle_s if tap.streamed else None, unread_s=idle_s,
            drain=attempt.generative,
            cut_at=attempt.cut_at if attempt.cut_at is not None else bound.cut_at,
            quiet_s=bound.quiet_s, events=(lambda: tap.events) if tap.streamed else None,
        )
        response.stream = facade = WatchedByteStream(body)
        try:  # a stream is watched as it is read; a JSON body the SDK reads at once
            body.watch(facade, self._gate.calls, runner.spawn if tap.streamed else None)
        except GatewayClosedError:  # the shutdown's grace ran out meanwhile
            await body.close()
            raise
        if attempt.guarded is not None:
            attempt.guarded.open_requests.append(attempt)
        if attempt.seat is not None:  # a request of its body waiting on it: guard_self_wait
            attempt.open_body = body
            attempt.seat.holder = attempt
        return response
