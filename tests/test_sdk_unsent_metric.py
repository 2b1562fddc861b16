"""SDK requests on ``gate.http_client`` that gptgate refused unsent — the circuit open, the
dollar budget spent — are counted in ``gptgate.client.calls.unsent`` as ``gate.chat``'s are:
every request the SDK made is a duration point (it was sent) or an unsent count.

Before, a refusal made up for an SDK (gptgate/local_refusal.py) recorded nothing: with the
only backend refusing connections, 10 requests made 6 duration points and then the traffic
looked stopped, not failing — the dashboard gap ``calls.unsent`` closed for ``gate.chat``.
Over loopback: a closed port; the real ``openai`` package.
"""

from __future__ import annotations

import socket
from typing import Any

import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import gptgate as gg

KEY = "sk-test-0123456789abcdef"
USER = [{"role": "user", "content": "hi"}]
REQUESTS = 10


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], int]]:
    data = reader.get_metrics_data()
    if data is None:
        return []
    return [
        (dict(p.attributes or {}), int(getattr(p, "count", None) or p.value))
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == name for p in m.data.data_points
    ]


async def _run(**options: Any) -> tuple[InMemoryMetricReader, int]:
    reader = InMemoryMetricReader()
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    backend = gg.Backend(name="dead", base_url=url, model="m", api_key=KEY, concurrency=2,
                         timeout=5.0, price=gg.Price(input_per_mtok=1.0, output_per_mtok=1.0))
    failed = 0
    async with gg.Gateway([backend], seed=1, meter_provider=MeterProvider(metric_readers=[reader]),
                          **options) as gate:
        client = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0,
                                    http_client=gate.http_client("dead"))
        for _ in range(REQUESTS):
            with pytest.raises(openai.APIError):
                await client.chat.completions.create(
                    model="m", messages=USER, max_tokens=10,  # type: ignore[arg-type]
                )
            failed += 1
    return reader, failed


async def test_sdk_requests_refused_by_the_open_circuit_are_counted() -> None:
    reader, failed = await _run()
    sent = sum(c for _, c in _points(reader, "gen_ai.client.operation.duration"))
    unsent = _points(reader, "gptgate.client.calls.unsent")
    assert 0 < sent < failed  # the circuit opened after a few
    assert sent + sum(c for _, c in unsent) == failed == REQUESTS
    assert {(a["error.type"], a["gptgate.backend"]) for a, _ in unsent} == {
        ("CircuitOpenError", "dead")
    }


async def test_sdk_requests_the_budget_refused_are_counted() -> None:
    reader, _ = await _run(budget=gg.Budget(usd_per_hour=1e-9, on_exceed="raise"))
    unsent = _points(reader, "gptgate.client.calls.unsent")
    assert not _points(reader, "gen_ai.client.operation.duration")
    assert [(a["error.type"], c) for a, c in unsent] == [("BudgetExceededError", REQUESTS)]
