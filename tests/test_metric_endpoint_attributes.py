"""``gen_ai.client.*`` metric points name the server and gptgate's backend
(``server.address``, ``server.port``, ``gptgate.backend``), for ``gate.chat`` and for
``gate.http_client`` alike.

Before, a point carried only ``(operation, provider, model, error)``: two backends serving the
same model (a primary and its fallback, two regions) fell into one series, and a dashboard
could not say which one was slow or failing. The added values are configuration (one set per
backend), never per request, so the series stay bounded."""

from __future__ import annotations

from typing import Any

import httpx2
import openai
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import gptgate as gg
from tests.mockbackend import Script, error, gateway, ok

USER = [{"role": "user", "content": "hi"}]
METRICS = ("gen_ai.client.operation.duration", "gen_ai.client.token.usage")


def _backend(name: str, port: int, script: Script) -> gg.Backend:
    return gg.Backend(
        name=name, base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key="k",
        concurrency=2, timeout=5.0, transport=httpx2.MockTransport(script),
    )


def _points(reader: InMemoryMetricReader, name: str) -> list[dict[str, Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        {**dict(p.attributes or {}), "_count": p.count}
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == name for p in m.data.data_points
    ]


async def test_two_backends_of_one_model_are_two_series() -> None:
    reader = InMemoryMetricReader()
    a = _backend("east", 9101, Script(error(500), ok("hi")))
    b = _backend("west", 9102, Script(ok("hello")))
    async with gateway(a, b, meter_provider=MeterProvider(metric_readers=[reader])) as gate:
        await gate.chat(USER, backend="east")  # a 500 then a success, both on east
        await gate.chat(USER, backend="west")
    durations = _points(reader, METRICS[0])
    seen = {
        (p["gptgate.backend"], p["server.address"], p["server.port"], p.get("error.type"))
        for p in durations
    }
    assert ("east", "127.0.0.1", 9101, None) in seen
    assert ("west", "127.0.0.1", 9102, None) in seen
    assert any(b == "east" and e is not None for b, _, _, e in seen)  # east's failure
    assert not any(b == "west" and e is not None for b, _, _, e in seen)
    tokens = _points(reader, METRICS[1])
    assert {(p["gptgate.backend"], p["server.port"]) for p in tokens} == {
        ("east", 9101), ("west", 9102)
    }


async def test_sdk_requests_name_their_backend_and_server() -> None:
    reader = InMemoryMetricReader()
    a = _backend("east", 9103, Script(ok("hi")))
    async with gateway(a, meter_provider=MeterProvider(metric_readers=[reader])) as gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9103/v1", api_key="k",
            http_client=gate.http_client("east"), max_retries=0,
        )
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
    for name in METRICS:
        points = _points(reader, name)
        assert points
        for point in points:
            assert point["gptgate.backend"] == "east"
            assert point["server.address"] == "127.0.0.1"
            assert point["server.port"] == 9103


async def test_a_default_port_is_named_too() -> None:
    """``server.port`` is required with ``server.address`` by the conventions: a base URL
    without one (``https://host/v1``) is on its scheme's port, not on none."""
    reader = InMemoryMetricReader()
    backend = gg.Backend(
        name="hosted", base_url="https://api.example.test/v1", model="m", api_key="k",
        transport=httpx2.MockTransport(Script(ok("hi"))),
    )
    async with gateway(backend, meter_provider=MeterProvider(metric_readers=[reader])) as gate:
        await gate.chat(USER)
    (point,) = _points(reader, METRICS[0])
    assert point["server.address"] == "api.example.test" and point["server.port"] == 443
