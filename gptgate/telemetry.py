"""OpenTelemetry traces and metrics, following the GenAI semantic conventions (v1.41).

One INTERNAL span per call, one CLIENT span per attempt (a failover changes backend and model),
named ``"{operation} {model}"``. The attempts are the GenAI spans (``gen_ai.operation.name``,
``gen_ai.provider.name``): the call's span carries gptgate's own names only, so a GenAI-aware
backend that counts spans with an operation counts each model call once. Every attribute and
metric name lives in :data:`NAMES` so a switch to the renamed conventions is one edit. Prompt
and completion text go on spans only when ``capture_content`` is on. Nothing here ever sees an
API key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .errors import GateError
from .genai_content import input_messages, output_messages

try:  # the global meter provider before one is set (the OpenTelemetry API's own placeholder)
    from opentelemetry.metrics._internal import _ProxyMeterProvider as _UnsetMeterProvider
except ImportError:  # pragma: no cover - another API version: always record
    _UnsetMeterProvider = None  # type: ignore[assignment,misc]
from .results import Usage
from .unsent_calls import UnsentCalls

if TYPE_CHECKING:
    from .late_answer import LateAnswer

__all__ = [
    "LINKS", "NAMES", "Endpoint", "Telemetry", "endpoint", "provider_name", "usage_attributes"
]

_V = TypeVar("_V")

NAMES: dict[str, str] = {
    "operation": "gen_ai.operation.name",
    "provider": "gen_ai.provider.name",
    "request_model": "gen_ai.request.model",
    "request_stream": "gen_ai.request.stream",
    "request_max_tokens": "gen_ai.request.max_tokens",
    "request_temperature": "gen_ai.request.temperature",
    "request_top_p": "gen_ai.request.top_p",
    "response_model": "gen_ai.response.model",
    "response_id": "gen_ai.response.id",
    "finish_reasons": "gen_ai.response.finish_reasons",
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    # the cache and reasoning counts are parts of the input and output counts, as the
    # GenAI conventions ask (never added on top)
    "cached_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_write_tokens": "gen_ai.usage.cache_creation.input_tokens",
    "reasoning_tokens": "gen_ai.usage.reasoning.output_tokens",
    "token_type": "gen_ai.token.type",
    "input_messages": "gen_ai.input.messages",
    "system_instructions": "gen_ai.system_instructions",
    "output_text": "gen_ai.output.messages",
    "server_address": "server.address",
    "server_port": "server.port",
    "error_type": "error.type",
    "metric_duration": "gen_ai.client.operation.duration",
    "metric_tokens": "gen_ai.client.token.usage",
    "metric_ttfc": "gen_ai.client.operation.time_to_first_chunk",
    # gptgate's own
    "backend": "gptgate.backend",
    "hardware": "gptgate.hardware",
    "scenario": "gptgate.scenario",
    "attempt": "gptgate.attempt",
    "queue_s": "gptgate.queue_s",
    "cost_usd": "gptgate.cost_usd",
    "limit": "gptgate.limit",
    "cache_group": "gptgate.cache.group",
    "cache_warm": "gptgate.cache.warm",
    "retry_reason": "gptgate.retry_reason",
    "hedge": "gptgate.hedge",
    "stream_decision": "gptgate.stream_decision",
    "guard_function": "gptgate.guard.function",
    "outcome": "gptgate.outcome",
    # a call's INTERNAL span (gptgate's bookkeeping around its attempts): no gen_ai.* name,
    # or a GenAI-aware backend would count it as one more model call (docs/guide/observability.md)
    "call_operation": "gptgate.operation",
    "call_request_model": "gptgate.request.model",
    "call_response_model": "gptgate.response.model",
    "call_finish_reasons": "gptgate.response.finish_reasons",
    "metric_queue": "gptgate.client.queue.duration",
    "metric_pool_wait": "gptgate.client.pool.wait",
    # tiered serving (docs/tiers.md)
    "tier": "gptgate.tier",
    "tier_reason": "gptgate.tier_reason",
    "escalated": "gptgate.escalated",
    "escalation_reason": "gptgate.escalation_reason",
    "metric_tier": "gptgate.client.tier.calls",
    "metric_unsent": "gptgate.client.calls.unsent",
}

#: a request's extension naming the span contexts a merged request serves (``gate.embed``)
LINKS = "gptgate.trace_links"


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for a ``Backend(provider=...)``: the conventions' well-known
    value where they have one (``azure`` → ``azure.ai.openai``), else gptgate's name."""
    from .providers import PROVIDERS

    preset = PROVIDERS.get(provider)
    return preset.semconv_name or provider if preset is not None else provider


class Endpoint(TypedDict):
    """Where an attempt went, for its metric points (``Telemetry.end_attempt``'s keywords)."""

    backend: str
    host: str
    port: int | None


_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint(backend: str, url: Any) -> Endpoint:
    """A backend's name and its base URL's host and port (``url``: an ``httpx2.URL``; a URL
    naming no port is on its scheme's — the conventions require ``server.port`` with
    ``server.address``)."""
    port = url.port if url.port is not None else _DEFAULT_PORTS.get(url.scheme)
    return Endpoint(backend=backend, host=url.host, port=port)


#: operations that generate no output: their usage is input tokens only (the conventions
#: define no output count for them; a 0 per request skewed the output-size histogram)
_INPUT_ONLY = frozenset({"embeddings"})


def usage_attributes(usage: Usage, operation: str = "chat") -> dict[str, int]:
    """A span's ``gen_ai.usage.*`` attributes (cache writes and reasoning only when some:
    most providers have neither; no output count for an embedding)."""
    attributes = {
        NAMES["input_tokens"]: usage.input_tokens,
        NAMES["cached_tokens"]: usage.cached_input_tokens,
    }
    if operation not in _INPUT_ONLY:
        attributes[NAMES["output_tokens"]] = usage.output_tokens
    if usage.cache_write_input_tokens:
        attributes[NAMES["cache_write_tokens"]] = usage.cache_write_input_tokens
    if usage.reasoning_tokens:
        attributes[NAMES["reasoning_tokens"]] = usage.reasoning_tokens
    return attributes


_DURATION_BUCKETS = [0.01 * 2**i for i in range(14)]  # 0.01 … 81.92 s
_TOKEN_BUCKETS = [float(4**i) for i in range(14)]  # 1 … 67,108,864

_SAMPLING_PARAMS = {
    "max_tokens": NAMES["request_max_tokens"],
    "max_completion_tokens": NAMES["request_max_tokens"],
    "temperature": NAMES["request_temperature"],
    "top_p": NAMES["request_top_p"],
}


#: distinct attribute sets kept per cache; past it a cache starts over (the SDK's own
#: cardinality limit is 2,000 per metric)
_CACHE_MAX = 1024


class _Current:
    """Makes a span current for a block: a bare attach/detach of the context, without
    ``trace.use_span``'s generator-based context manager (it records nothing on an
    exception here anyway: the call's outcome is marked by :meth:`Telemetry.end_call`)."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span) -> None:
        self._span = span
        self._token: object = None

    def __enter__(self) -> Span:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        return self._span

    def __exit__(self, *exc_info: object) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]


class Telemetry:
    """Spans and metrics for the gateway. Pass providers in (tests) or use the globals.

    With an SDK configured, the attribute sets that repeat from call to call (a backend's
    attempt attributes, a metric point's ``(operation, provider, model, error, backend,
    server)``) are built
    once and reused: the SDK copies what it is given, so a shared dict is never mutated, and
    rebuilding them per call was most of what gptgate itself paid for its telemetry."""

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        self.tracer = trace.get_tracer("gptgate", tracer_provider=tracer_provider)
        meter = metrics.get_meter("gptgate", meter_provider=meter_provider)
        self.capture_content = capture_content
        #: providers passed in are used as given; the globals are looked at on every call
        #: (an SDK may be configured after the gateway was made)
        self._own_tracer = tracer_provider is not None
        self._own_meter = meter_provider is not None

        def histogram(key: str, unit: str, description: str, buckets: list[float]) -> Any:
            return meter.create_histogram(
                NAMES[key],
                unit=unit,
                description=description,
                explicit_bucket_boundaries_advisory=buckets,
            )

        self.duration = histogram(
            "metric_duration", "s", "GenAI operation duration", _DURATION_BUCKETS
        )
        self.tokens = histogram(
            "metric_tokens", "{token}", "Tokens used per operation", _TOKEN_BUCKETS
        )
        self.ttfc = histogram(
            "metric_ttfc", "s", "Time to the first chunk of a streamed answer", _DURATION_BUCKETS
        )
        self.queue = histogram(
            "metric_queue", "s", "Time a call waited for admission", _DURATION_BUCKETS
        )
        #: calls that failed with no attempt sent (gptgate/unsent_calls.py)
        self.unsent = UnsentCalls(meter, NAMES["metric_unsent"])
        #: (scenario, model) → (span name, attributes) of a call's span
        self._call_attributes: dict[tuple[str, str | None], tuple[str, dict[str, Any]]] = {}
        #: what an attempt's span starts with that depends only on its backend and request
        self._attempt_attributes: dict[tuple[Any, ...], tuple[str, dict[str, Any]]] = {}
        #: (operation, provider, model, error type, outcome, backend, host, port) → a point's
        #: (duration, input, output) attributes
        self._metric_attributes: dict[
            tuple[Any, ...],
            tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
        ] = {}
        #: backend → a queue point's attributes
        self._queue_attributes: dict[str, dict[str, Any]] = {}

    @property
    def tracing(self) -> bool:
        """Whether spans can record: with no SDK configured, a call builds no attributes and
        makes no span current (each would be a no-op, paid for on the hot path)."""
        return self._own_tracer or not isinstance(
            trace.get_tracer_provider(), trace.ProxyTracerProvider
        )

    @property
    def metering(self) -> bool:
        """Whether metric points can be recorded (a meter provider given, or one set)."""
        return (
            self._own_meter
            or _UnsetMeterProvider is None
            or not isinstance(metrics.get_meter_provider(), _UnsetMeterProvider)
        )

    def start_call(self, scenario: str, model: str | None) -> Span:
        """The call's INTERNAL span, ``"chat {request model}"`` (just ``"chat"`` until the
        model is known: see :meth:`name_call`), with ``gptgate.operation`` and
        ``gptgate.request.model`` — no ``gen_ai.*`` attribute: its attempts' CLIENT spans are
        the model calls, each with its provider. Not made current: a stream's span lives in an
        async generator, whose context would leak to the caller between yields — its
        attempts are parented to it explicitly (:meth:`parent_of`)."""
        if not self.tracing:
            return trace.INVALID_SPAN
        key = (scenario, model)
        cached = self._call_attributes.get(key)
        if cached is None:
            attributes: dict[str, Any] = {
                NAMES["scenario"]: scenario, NAMES["call_operation"]: "chat"
            }
            if model:
                attributes[NAMES["call_request_model"]] = model
            cached = _remember(
                self._call_attributes, key, (f"chat {model}" if model else "chat", attributes)
            )
        return self.tracer.start_span(cached[0], kind=SpanKind.INTERNAL, attributes=cached[1])

    @staticmethod
    def name_call(span: Span, model: str) -> None:
        """Name a call the caller gave no model after the model of its first routed backend."""
        if span.is_recording():
            span.update_name(f"chat {model}")

    @staticmethod
    def end_call(
        span: Span, *, error: BaseException | None = None, cost_usd: float | None = None
    ) -> None:
        """End the call's span; a failed call says so (``error.type``, ERROR status)."""
        if span.is_recording():
            if cost_usd is not None:
                span.set_attribute(NAMES["cost_usd"], cost_usd)
            if error is not None:
                span.set_attribute(NAMES["error_type"], type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    def abandoned(
        self,
        span: Span,
        usage: Usage | None,
        cost_usd: float,
        *,
        provider: str | None = None,
        model: str | None = None,
        operation: str = "chat",
        backend: str | None = None,
        host: str | None = None,
        port: int | None = None,
        late: LateAnswer | None = None,
    ) -> None:
        """An attempt gptgate hung up on (a hedge's loser, a cancelled call, a stream its
        caller left): what the ledger booked for it, on its span so that a call's attempts
        add up to its cost, and in ``gen_ai.client.token.usage`` (``gptgate.outcome=
        "abandoned"``) so that the metric adds up to the bill — an answer still read to its
        end (``late``) at its real usage, once it is known. No duration point: it is
        neither a success nor the backend's failure."""
        if provider is not None and model is not None and self.metering:
            self._record_tokens(
                provider, model, usage, None, operation, (backend, host, port), "abandoned", late
            )
        if span.is_recording():
            attributes: dict[str, Any] = {NAMES["outcome"]: "abandoned",
                                          NAMES["cost_usd"]: cost_usd}
            if usage is not None:
                attributes.update(usage_attributes(usage, operation))
            span.set_attributes(attributes)

    @staticmethod
    def parent_of(span: Span | None) -> Context | None:
        """The context that makes ``span`` the parent of an attempt's span."""
        if span is None or span is trace.INVALID_SPAN:
            return None
        return trace.set_span_in_context(span)

    @staticmethod
    def use_call(span: Span) -> AbstractContextManager[Any]:
        """Make a call's span current while it runs (nothing to do for the no-op span)."""
        if span is trace.INVALID_SPAN:
            return nullcontext()
        return _Current(span)

    @contextmanager
    def call_span(self, scenario: str, model: str | None) -> Iterator[Span]:
        """The call's span, current while the block runs; a ``GateError`` out of it marks
        the span failed (a cancellation does not: the caller chose it)."""
        span = self.start_call(scenario, model)
        error: BaseException | None = None
        try:
            with self.use_call(span):
                yield span
        except GateError as exc:
            error = exc
            raise
        finally:
            self.end_call(span, error=error)

    def start_attempt(
        self,
        *,
        provider: str,
        model: str,
        host: str,
        port: int | None,
        stream: bool,
        params: Mapping[str, Any],
        backend: str,
        hardware: str,
        attempt: int,
        messages: Sequence[Mapping[str, Any]],
        parent: Span | None = None,
        extra: Mapping[str, Any] | None = None,
        operation: str = "chat",
        links: Sequence[trace.SpanContext] = (),
    ) -> Span:
        """An attempt's CLIENT span; ``links``: the callers a merged request serves besides
        its parent (``gate.embed``)."""
        if not self.tracing:
            return trace.INVALID_SPAN
        key = (operation, provider, model, host, port, stream, backend, hardware)
        cached = self._attempt_attributes.get(key)
        if cached is None:
            fixed: dict[str, Any] = {
                NAMES["operation"]: operation,
                NAMES["provider"]: provider_name(provider),
                NAMES["request_model"]: model,
                NAMES["server_address"]: host,
                NAMES["request_stream"]: stream,
                NAMES["backend"]: backend,
                NAMES["hardware"]: hardware,
            }
            if port is not None:
                fixed[NAMES["server_port"]] = port
            cached = _remember(self._attempt_attributes, key, (f"{operation} {model}", fixed))
        # all at the start, in one pass (the SDK cleans and locks once per call it is given)
        attributes = {**cached[1], NAMES["attempt"]: attempt}
        if extra:
            attributes.update(extra)
        if params:
            for param, name in _SAMPLING_PARAMS.items():
                if isinstance(value := params.get(param), (int, float)):
                    attributes[name] = value
        # a parent that is already current (gate.chat's call span) needs no context of its own
        context = (
            None if parent is None or parent is trace.get_current_span()
            else self.parent_of(parent)
        )
        span = self.tracer.start_span(
            cached[0], context, kind=SpanKind.CLIENT, attributes=attributes,
            links=[trace.Link(c) for c in links] if links else None,
        )
        if self.capture_content and messages and span.is_recording():  # opted in, if kept
            span.set_attribute(NAMES["input_messages"], input_messages(messages))
        return span

    def end_attempt(
        self,
        span: Span,
        *,
        provider: str,
        model: str,
        duration_s: float,
        usage: Usage | None,
        ttft_s: float | None,
        response_model: str | None = None,
        response_id: str | None = None,
        finish_reason: str | None = None,
        text: str | None = None,
        error: BaseException | None = None,
        extra: Mapping[str, Any] | None = None,
        operation: str = "chat",
        raw: Mapping[str, Any] | None = None,
        backend: str | None = None,
        host: str | None = None,
        port: int | None = None,
        billed: Usage | None = None,
        abandoned: bool = False,
        late: LateAnswer | None = None,
    ) -> None:
        """End an attempt's span; ``text`` and ``raw`` (the answer's body, for its tool
        calls) go on it only with ``capture_content``. ``backend``, ``host`` and ``port``
        label its metric points, so two backends serving one model are two series.
        ``billed``: what the ledger booked for an attempt with no whole answer (a timeout
        after the send, a cut stream) — counted in ``gen_ai.client.token.usage`` as the
        conventions ask (billable tokens), under its ``error.type``; ``abandoned``: the
        caller left it (:meth:`abandoned`'s points, no duration); ``late``: its answer is
        still read to its end (``abandoned_answers="finish"``) — its token points wait for
        its real bill (gptgate/late_answer.py)."""
        if self.metering:
            where = (backend, host, port)
            if abandoned:
                self._record_tokens(provider, model, billed, None, operation, where,
                                    "abandoned", late)
            elif error is None:
                self._record_attempt(provider, model, duration_s, usage, ttft_s, None,
                                     operation, where)
            else:  # the duration now; the tokens when the bill is known
                self._record_attempt(provider, model, duration_s, None, ttft_s, error,
                                     operation, where)
                self._record_tokens(provider, model, billed, error, operation, where, None, late)
        if span.is_recording():
            # set at once: one lock, not one per attribute
            attributes: dict[str, Any] = dict(extra) if extra else {}
            counted = usage if usage is not None else billed  # a failure's: what was billed
            if counted is not None:
                attributes.update(usage_attributes(counted, operation))
            if response_model:
                attributes[NAMES["response_model"]] = response_model
            if response_id:
                attributes[NAMES["response_id"]] = response_id
            if finish_reason:
                attributes[NAMES["finish_reasons"]] = [finish_reason]
            if text is not None and self.capture_content:
                attributes[NAMES["output_text"]] = output_messages(text, finish_reason, raw)
            if error is not None:
                attributes[NAMES["error_type"]] = type(error).__name__
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            span.set_attributes(attributes)
        span.end()

    def _record_tokens(
        self,
        provider: str,
        model: str,
        booked: Usage | None,
        error: BaseException | None,
        operation: str,
        where: tuple[str | None, str | None, int | None],
        outcome: str | None,
        late: LateAnswer | None,
    ) -> None:
        """The token points of an attempt with no whole answer: what the ledger booked for
        it, or — its answer still read to its end (``late``) — what it holds once that ends."""

        def record(usage: Usage) -> None:
            self._record_attempt(provider, model, None, usage, None, error, operation, where,
                                 outcome=outcome)

        if late is not None and late.tokens(record):
            return
        if booked is not None:
            record(booked)

    def _record_attempt(
        self,
        provider: str,
        model: str,
        duration_s: float | None,
        usage: Usage | None,
        ttft_s: float | None,
        error: BaseException | None,
        operation: str,
        endpoint: tuple[str | None, str | None, int | None],
        outcome: str | None = None,
    ) -> None:
        """An attempt's points: its duration (None: none, an attempt the caller left) and
        the tokens booked for it (``usage``), labelled by its outcome."""
        error_type = type(error).__name__ if error is not None else None
        key = (operation, provider, model, error_type, outcome, *endpoint)
        points = self._metric_attributes.get(key)
        if points is None:
            base: dict[str, Any] = {
                NAMES["operation"]: operation,
                NAMES["provider"]: provider_name(provider),
                NAMES["request_model"]: model,
            }
            # configuration, one set per backend: bounded, unlike a per-request value
            backend, host, port = endpoint
            if backend:
                base[NAMES["backend"]] = backend
            if host:
                base[NAMES["server_address"]] = host
                if port is not None:
                    base[NAMES["server_port"]] = port
            if error_type is not None:
                base[NAMES["error_type"]] = error_type
            if outcome is not None:
                base[NAMES["outcome"]] = outcome
            points = _remember(self._metric_attributes, key, (
                base,
                {**base, NAMES["token_type"]: "input"},
                {**base, NAMES["token_type"]: "output"},
            ))
        if duration_s is not None:
            self.duration.record(duration_s, points[0])
        if ttft_s is not None:
            self.ttfc.record(ttft_s, points[0])
        if usage is not None:
            self.tokens.record(usage.input_tokens, points[1])
            if operation not in _INPUT_ONLY:
                self.tokens.record(usage.output_tokens, points[2])

    def record_queue(self, queue_s: float, backend: str) -> None:
        if self.metering:
            attributes = self._queue_attributes.get(backend)
            if attributes is None:
                attributes = _remember(
                    self._queue_attributes, backend, {NAMES["backend"]: backend}
                )
            self.queue.record(queue_s, attributes)


def _remember(cache: dict[Any, Any], key: Any, value: _V) -> _V:
    """Keep ``value`` under ``key``; a cache full of distinct keys (a caller's many models)
    starts over rather than grow without bound."""
    if len(cache) >= _CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value
