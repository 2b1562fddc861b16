"""What gptgate pays for its own telemetry with an OpenTelemetry SDK configured (issue 13,
"Overhead"): attribute sets built once and reused must still say the right thing per call,
backend and error type; an attempt's span gets its request attributes in one pass, at its
start (where a sampler sees them); the caches stay bounded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx2
import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

import gptgate as gg
from gptgate import telemetry as telemetry_module
from gptgate.results import Usage
from gptgate.telemetry import NAMES, Telemetry
from tests.mockbackend import USER, Script, backend, error, gateway, ok


class _Seen(Sampler):
    """Samples everything, and keeps the attributes each span was started with."""

    def __init__(self) -> None:
        self.started: list[tuple[str, dict[str, Any]]] = []

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        self.started.append((name, dict(attributes or {})))
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "seen"


def _points(reader: InMemoryMetricReader, name: str) -> dict[frozenset[Any], int]:
    """Each attribute set of metric ``name`` and how many values were recorded with it."""
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[frozenset[Any], int] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        count = getattr(point, "count", 0)
                        found[frozenset((point.attributes or {}).items())] = count
    return found


def _base(model: str = "m", **more: str) -> dict[str, str]:
    return {
        NAMES["operation"]: "chat", NAMES["provider"]: "openai",
        NAMES["request_model"]: model, **more,
    }


def _at(backend: str, model: str = "m", **more: str) -> dict[str, object]:
    """A point's attributes for an attempt on one of the mock backends (127.0.0.1:9)."""
    return {
        **_base(model, **more), NAMES["backend"]: backend,
        NAMES["server_address"]: "127.0.0.1", NAMES["server_port"]: 9,
    }


async def test_an_attempts_request_attributes_are_all_there_at_its_start() -> None:
    sampler = _Seen()
    provider = TracerProvider(sampler=sampler)
    async with gateway(
        backend(Script(ok("a"))), tracer_provider=provider
    ) as gate:
        await gate.chat(USER, max_tokens=20, temperature=0.5)
    (attempt,) = [attrs for name, attrs in sampler.started if NAMES["attempt"] in attrs]
    # the sampling parameters and gptgate's own are given to the sampler, not set later
    assert attempt[NAMES["request_max_tokens"]] == 20
    assert attempt[NAMES["request_temperature"]] == 0.5
    assert attempt[NAMES["limit"]] == 4 and attempt[NAMES["queue_s"]] >= 0.0
    assert attempt[NAMES["backend"]] == "mock" and attempt[NAMES["request_model"]] == "m"


async def test_reused_attribute_sets_do_not_leak_from_one_call_into_the_next() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    script = Script(error(503), ok("a"))
    async with gateway(backend(script), tracer_provider=provider) as gate:
        await gate.chat(USER, max_tokens=20, temperature=0.5)  # 503, then a retry
        await gate.chat(USER)
    attempts = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    first, retry, plain = (dict(s.attributes or {}) for s in attempts)
    assert first[NAMES["error_type"]] == "BackendError" and first[NAMES["attempt"]] == 1
    assert retry[NAMES["attempt"]] == 2 and retry[NAMES["retry_reason"]] == "BackendError"
    assert NAMES["error_type"] not in retry
    assert retry[NAMES["request_temperature"]] == 0.5
    # the next call asked for no sampling parameters and is no retry
    assert plain[NAMES["attempt"]] == 1
    for key in ("request_temperature", "request_max_tokens", "retry_reason", "error_type"):
        assert NAMES[key] not in plain
    calls = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.INTERNAL]
    assert [dict(s.attributes or {}).get(NAMES["scenario"]) for s in calls] == [
        "default", "default"
    ]


async def test_metric_points_carry_the_right_attributes_per_error_type_and_backend() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    other = gg.Backend(
        name="other", base_url="http://127.0.0.1:9/v1", model="m2", concurrency=4,
        timeout=5.0, transport=httpx2.MockTransport(Script(ok("b"))),
    )
    script = Script(error(503), ok("a"), error(429), ok("a"), error(503), ok("a"))
    async with gateway(backend(script), other, meter_provider=meters) as gate:
        for _ in range(3):
            await gate.chat(USER, max_tokens=20, backend="mock")
        await gate.chat(USER, max_tokens=20, backend="other")
    assert _points(reader, NAMES["metric_duration"]) == {
        frozenset(_at("mock").items()): 3,
        frozenset(_at("mock", **{NAMES["error_type"]: "BackendError"}).items()): 2,
        frozenset(_at("mock", **{NAMES["error_type"]: "RateLimitedError"}).items()): 1,
        frozenset(_at("other", "m2").items()): 1,
    }
    # tokens: successes only, one input and one output point each, never an error type
    assert _points(reader, NAMES["metric_tokens"]) == {
        frozenset(_at("mock", **{NAMES["token_type"]: kind}).items()): 3
        for kind in ("input", "output")
    } | {
        frozenset(_at("other", "m2", **{NAMES["token_type"]: kind}).items()): 1
        for kind in ("input", "output")
    }
    assert _points(reader, NAMES["metric_queue"]) == {
        frozenset({NAMES["backend"]: "mock"}.items()): 6,
        frozenset({NAMES["backend"]: "other"}.items()): 1,
    }


def test_the_attribute_caches_start_over_past_their_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(telemetry_module, "_CACHE_MAX", 3)
    reader = InMemoryMetricReader()
    tel = Telemetry(
        tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader])
    )
    models = [f"model-{i}" for i in range(10)]
    for model in models:
        span = tel.start_attempt(
            provider="openai", model=model, host="127.0.0.1", port=None, stream=False,
            params={}, backend="b", hardware="gpu", attempt=1, messages=(),
        )
        tel.end_attempt(
            span, provider="openai", model=model, duration_s=0.1,
            usage=Usage(input_tokens=1, output_tokens=2), ttft_s=None,
        )
        assert len(tel._metric_attributes) <= 3 and len(tel._attempt_attributes) <= 3
    # every model's points are still right after the caches started over
    assert _points(reader, NAMES["metric_duration"]) == {
        frozenset(_base(model).items()): 1 for model in models
    }


def test_use_call_makes_the_span_current_and_restores_the_context_on_error() -> None:
    provider = TracerProvider()
    tel = Telemetry(tracer_provider=provider)
    outer = provider.get_tracer("t").start_span("outer")
    with trace.use_span(outer, end_on_exit=True):
        span = tel.start_call("default", "m")
        with pytest.raises(ValueError), tel.use_call(span):
            assert trace.get_current_span() is span
            raise ValueError("the caller's")
        assert trace.get_current_span() is outer
        tel.end_call(span)
    assert trace.get_current_span() is trace.INVALID_SPAN
