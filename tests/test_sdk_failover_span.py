"""An SDK request that ``gate.http_client("a", fallback=["b"])`` sent again to ``b`` is one
request in its trace: the fallback's CLIENT span is attempt 2, says why
(``gptgate.retry_reason``), links the primary's failed attempt and — with no span of the
caller's around it — is that attempt's child, in its trace. Its metric points name ``b``, the
backend that served it; the primary's name ``a`` with ``error.type``.

Before, both attempts said ``gptgate.attempt=1``, the fallback's gave no reason, and each was
a root span of its own trace: at 3 a.m. a failed-over request looked like two unrelated
requests, one of them failed. Over loopback: a closed port and the simulator, the real
``openai`` package.
"""

from __future__ import annotations

import socket
from typing import Any

import openai
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gptgate as gg
from tests import test_span_usage_once
from tests.test_span_usage_once import KEY, SCALE, USER

base_url = test_span_usage_once.base_url  # the same served simulator (a fixture)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _points(reader: InMemoryMetricReader, name: str) -> list[dict[str, Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        {**dict(p.attributes or {}), "_sum": p.sum}
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == name for p in m.data.data_points
    ]


async def test_a_failed_over_sdk_request_is_one_request_in_its_trace(base_url: str) -> None:
    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    backends = [
        gg.Backend(name="a", base_url=dead, model="m", api_key=KEY, concurrency=4, timeout=10.0),
        gg.Backend(name="b", base_url=base_url, model="m", api_key="sk-other-backend-key",
                   concurrency=4, timeout=60.0),
    ]
    async with gg.Gateway(backends, clock=gg.ScaledClock(SCALE), seed=3, tracer_provider=tracer,
                          meter_provider=MeterProvider(metric_readers=[reader])) as gate:
        client = openai.AsyncOpenAI(base_url=dead, api_key=KEY, max_retries=0,
                                    http_client=gate.http_client("a", fallback=["b"]))
        await client.chat.completions.create(model="m", messages=USER,  # type: ignore[arg-type]
                                             max_tokens=30)
        entry = gate.ledger.entries["b"]
    failed, served = sorted(
        (s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT),
        key=lambda s: s.start_time or 0,
    )
    first, second = dict(failed.attributes or {}), dict(served.attributes or {})
    assert first["gptgate.backend"] == "a" and failed.status.status_code == StatusCode.ERROR
    assert first["error.type"] == "BackendError" and first["gptgate.attempt"] == 1
    assert second["gptgate.backend"] == "b" and "error.type" not in second
    assert second["gptgate.attempt"] == 2 and second["gptgate.retry_reason"] == "BackendError"
    assert failed.context is not None and served.context is not None
    assert served.context.trace_id == failed.context.trace_id
    assert served.parent is not None and served.parent.span_id == failed.context.span_id
    assert [link.context.span_id for link in served.links] == [failed.context.span_id]
    durations = _points(reader, "gen_ai.client.operation.duration")
    assert {(p["gptgate.backend"], p.get("error.type")) for p in durations} == {
        ("a", "BackendError"), ("b", None)
    }
    tokens = _points(reader, "gen_ai.client.token.usage")
    assert {p["gptgate.backend"] for p in tokens} == {"b"}
    assert sum(p["_sum"] for p in tokens) == entry.input_tokens + entry.output_tokens
