"""A call that fails without sending anything — its backend's circuit open, shed, no backend
eligible — is counted in a metric. The GenAI duration histogram is recorded per attempt, so
before, such calls made no metric point at all: with the only backend refusing connections,
100 failed calls made 8 points, and a dashboard saw the traffic stop rather than fail."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import gptgate as gg

UNSENT = "gptgate.client.calls.unsent"


def _refused(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


async def test_calls_failed_at_an_open_circuit_are_counted() -> None:
    reader = InMemoryMetricReader()
    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(_refused))
    gate = gg.Gateway([b], breaker_threshold=2, breaker_cooldown_s=60.0, max_breaker_wait_s=0.0,
                      max_attempts=1, meter_provider=MeterProvider(metric_readers=[reader]))
    async with gate:
        for _ in range(10):
            try:
                await gate.chat([{"role": "user", "content": "hi"}])
            except gg.BackendError:
                pass
            else:
                raise AssertionError("a refused connection answered")
        try:
            async with gate.stream([{"role": "user", "content": "hi"}]) as stream:
                async for _ in stream:
                    pass
        except gg.BackendError:
            pass
    attempts = sum(p.count for p in _points(reader, "gen_ai.client.operation.duration"))
    assert attempts == 2  # the two that opened the circuit
    unsent = _points(reader, UNSENT)
    assert len(unsent) == 1
    point = unsent[0]
    assert point.value == 9  # 8 calls and the stream, never sent
    assert dict(point.attributes) == {
        "error.type": "CircuitOpenError", "gptgate.backend": "b", "gptgate.scenario": "default",
    }


async def test_a_call_sent_and_failed_is_not_counted_as_unsent() -> None:
    reader = InMemoryMetricReader()
    b = gg.Backend(name="b", base_url="http://127.0.0.1:9/v1", model="m", api_key="EMPTY",
                   transport=httpx2.MockTransport(_refused))
    gate = gg.Gateway([b], breaker_threshold=5, max_attempts=1,
                      meter_provider=MeterProvider(metric_readers=[reader]))
    async with gate:
        for _ in range(3):
            with contextlib.suppress(gg.BackendError):
                await gate.chat([{"role": "user", "content": "hi"}])
    assert _points(reader, UNSENT) == []
