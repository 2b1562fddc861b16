"""A call refused because its backend's circuit is open was never sent; a call the backend
failed was. An SRE reading ``error.type`` at 3 a.m. must tell them apart: "we stopped
sending" (the circuit did its job; the cause is in the message) is not "the backend is
failing our requests". The refusal is a ``CircuitOpenError`` — a ``BackendError`` subclass,
so ``except gg.BackendError`` still catches it — and its ``error.type`` on the call's span
and on ``gptgate.client.calls.unsent`` says so; the attempts that failed keep
``BackendError``.

Before, both read ``error.type="BackendError"``.
"""

from __future__ import annotations

import pickle

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from tests.test_unsent_calls_metric import _points, _refused

USER = [{"role": "user", "content": "hi"}]


async def test_a_circuit_refusal_has_its_own_error_type_on_spans_and_metrics() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(_refused))
    gate = gg.Gateway([b], breaker_threshold=2, breaker_cooldown_s=60.0, max_breaker_wait_s=0.0,
                      max_attempts=1, tracer_provider=tracer_provider,
                      meter_provider=MeterProvider(metric_readers=[reader]))
    raised: list[gg.BackendError] = []
    async with gate:
        for _ in range(5):
            with pytest.raises(gg.BackendError) as caught:  # the old catch still catches both
                await gate.chat(USER)
            raised.append(caught.value)
    assert [type(e).__name__ for e in raised] == ["BackendError"] * 2 + ["CircuitOpenError"] * 3
    refusal = raised[-1]
    assert isinstance(refusal, gg.CircuitOpenError)
    assert refusal.backend == "b" and refusal.status is None and not refusal.retryable
    assert refusal.retry_after is not None and "circuit is open" in str(refusal)
    spans = exporter.get_finished_spans()
    calls = [dict(s.attributes or {}) for s in spans if s.kind == SpanKind.INTERNAL]
    attempts = [dict(s.attributes or {}) for s in spans if s.kind == SpanKind.CLIENT]
    assert [c["error.type"] for c in calls] == ["BackendError"] * 2 + ["CircuitOpenError"] * 3
    assert [a["error.type"] for a in attempts] == ["BackendError"] * 2  # the sent ones
    durations = _points(reader, "gen_ai.client.operation.duration")
    assert {p.attributes["error.type"] for p in durations} == {"BackendError"}
    assert sum(p.count for p in durations) == 2
    (unsent,) = _points(reader, "gptgate.client.calls.unsent")
    assert unsent.attributes["error.type"] == "CircuitOpenError" and unsent.value == 3


def test_the_refusal_pickles_as_itself() -> None:
    error = gg.CircuitOpenError("circuit open", backend="b", retry_after=3.0,
                                should_retry=False)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is gg.CircuitOpenError and copy.backend == "b" and copy.retry_after == 3.0
    assert isinstance(copy, gg.BackendError) and not copy.retryable
