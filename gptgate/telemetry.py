"""OpenTelemetry traces and metrics, following the GenAI semantic conventions (v1.41).

One INTERNAL span per call, one CLIENT span per attempt (a failover changes backend and model),
named ``"{operation} {model}"``. Every attribute and metric name lives in :data:`NAMES` so a
switch to the renamed conventions is one edit. Prompt and completion text go on spans only when
``capture_content`` is on. Nothing here ever sees an API key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from .results import Usage

__all__ = ["NAMES", "Telemetry"]

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
    "cached_tokens": "gen_ai.usage.cache_read.input_tokens",
    "token_type": "gen_ai.token.type",
    "input_messages": "gen_ai.input.messages",
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
    "stream_decision": "gptgate.stream_decision",
    "metric_queue": "gptgate.client.queue.duration",
    "metric_pool_wait": "gptgate.client.pool.wait",
}

_DURATION_BUCKETS = [0.01 * 2**i for i in range(14)]  # 0.01 … 81.92 s
_TOKEN_BUCKETS = [float(4**i) for i in range(14)]  # 1 … 67,108,864

_SAMPLING_PARAMS = {
    "max_tokens": "request_max_tokens",
    "max_completion_tokens": "request_max_tokens",
    "temperature": "request_temperature",
    "top_p": "request_top_p",
}


class Telemetry:
    """Spans and metrics for the gateway. Pass providers in (tests) or use the globals."""

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

    @contextmanager
    def call_span(self, scenario: str, model: str) -> Iterator[Span]:
        with self.tracer.start_as_current_span(
            f"gptgate chat {model}",
            kind=SpanKind.INTERNAL,
            attributes={NAMES["scenario"]: scenario, NAMES["operation"]: "chat"},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

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
        operation: str = "chat",
    ) -> Span:
        attributes: dict[str, Any] = {
            NAMES["operation"]: operation,
            NAMES["provider"]: provider,
            NAMES["request_model"]: model,
            NAMES["server_address"]: host,
            NAMES["request_stream"]: stream,
            NAMES["backend"]: backend,
            NAMES["hardware"]: hardware,
            NAMES["attempt"]: attempt,
        }
        if port is not None:
            attributes[NAMES["server_port"]] = port
        span = self.tracer.start_span(
            f"{operation} {model}", kind=SpanKind.CLIENT, attributes=attributes
        )
        if span.is_recording():
            for param, key in _SAMPLING_PARAMS.items():
                value = params.get(param)
                if isinstance(value, (int, float)):
                    span.set_attribute(NAMES[key], value)
            if self.capture_content:
                import json

                span.set_attribute(NAMES["input_messages"], json.dumps(list(messages)))
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
        operation: str = "chat",
    ) -> None:
        metric_attributes: dict[str, Any] = {
            NAMES["operation"]: operation,
            NAMES["provider"]: provider,
            NAMES["request_model"]: model,
        }
        if error is not None:
            metric_attributes[NAMES["error_type"]] = type(error).__name__
        self.duration.record(duration_s, metric_attributes)
        if ttft_s is not None:
            self.ttfc.record(ttft_s, metric_attributes)
        if usage is not None and error is None:
            self.tokens.record(
                usage.input_tokens, {**metric_attributes, NAMES["token_type"]: "input"}
            )
            self.tokens.record(
                usage.output_tokens, {**metric_attributes, NAMES["token_type"]: "output"}
            )
        if span.is_recording():
            if usage is not None:
                span.set_attribute(NAMES["input_tokens"], usage.input_tokens)
                span.set_attribute(NAMES["output_tokens"], usage.output_tokens)
                span.set_attribute(NAMES["cached_tokens"], usage.cached_input_tokens)
            if response_model:
                span.set_attribute(NAMES["response_model"], response_model)
            if response_id:
                span.set_attribute(NAMES["response_id"], response_id)
            if finish_reason:
                span.set_attribute(NAMES["finish_reasons"], [finish_reason])
            if text is not None and self.capture_content:
                span.set_attribute(NAMES["output_text"], text)
            if error is not None:
                span.set_attribute(NAMES["error_type"], type(error).__name__)
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    def record_queue(self, queue_s: float, backend: str) -> None:
        self.queue.record(queue_s, {NAMES["backend"]: backend})
