"""``gen_ai.client.token.usage`` adds up to the ledger: every token gptgate booked as billed is
in the metric, for ``gate.stream`` and an SDK stream on ``gate.http_client`` alike — a stream
its caller left mid-answer included (its points say ``gptgate.outcome="abandoned"``), and such
an attempt is no fast success in ``gen_ai.client.operation.duration``.

Before, an attempt without a whole answer recorded no token point: a stream cut by its caller
(a preview, a hedge's loser, a cancelled call) was billed and booked by the ledger but absent
from the metric — a dashboard's token spend ran below the bill — and an SDK stream its caller
left recorded a duration point with no ``error.type``, its short duration read as a fast
success. Over loopback, against the simulator; the ledger is the reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import gptgate as gg
from tests.simserve import unlimited_gpu

SCALE = 50.0
KEY = "sk-test-0123456789abcdef"
USER = [{"role": "user", "content": "Tell me about connection pools."}]


@pytest.fixture
def base_url() -> Iterator[str]:
    with unlimited_gpu(200, seed=5, scale=SCALE) as url:
        yield url


def _gateway(url: str, reader: InMemoryMetricReader) -> gg.Gateway:
    backend = gg.Backend(name="sim", base_url=url, model="m", api_key=KEY, concurrency=4,
                         timeout=60.0)
    return gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=3,
                      meter_provider=MeterProvider(metric_readers=[reader]))


def _points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], int, float]]:
    data = reader.get_metrics_data()
    if data is None:
        return []
    return [
        (dict(p.attributes or {}), p.count, p.sum)
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name == name for p in m.data.data_points
    ]


def _tokens(reader: InMemoryMetricReader, kind: str) -> float:
    return sum(s for a, _, s in _points(reader, "gen_ai.client.token.usage")
               if a["gen_ai.token.type"] == kind)


def _check(reader: InMemoryMetricReader, ledger: gg.Ledger, whole: int) -> None:
    entry = ledger.entries["sim"]
    assert entry.interrupted_streams == 1 and entry.output_tokens > 0
    assert _tokens(reader, "input") == entry.input_tokens
    assert _tokens(reader, "output") == entry.output_tokens
    left = [a for a, _, _ in _points(reader, "gen_ai.client.token.usage")
            if a.get("gptgate.outcome") == "abandoned"]
    assert len(left) == 2  # its input and output points, told apart
    # only the whole answers have a duration point: the left stream is no success
    assert sum(c for _, c, _ in _points(reader, "gen_ai.client.operation.duration")) == whole


async def test_a_stream_its_caller_left_is_in_the_token_metric(base_url: str) -> None:
    reader = InMemoryMetricReader()
    async with _gateway(base_url, reader) as gate:
        await gate.chat(USER, max_tokens=20)
        async with gate.stream(USER, max_tokens=400) as stream:
            seen = 0
            async for _ in stream:
                seen += 1
                if seen == 3:
                    break
        ledger = gate.ledger
    _check(reader, ledger, whole=1)


async def test_an_sdk_stream_its_caller_left_is_in_the_token_metric(base_url: str) -> None:
    reader = InMemoryMetricReader()
    async with _gateway(base_url, reader) as gate:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY,
                                    http_client=gate.http_client("sim"), max_retries=0)
        await client.chat.completions.create(model="m", messages=USER,  # type: ignore[arg-type]
                                             max_tokens=20)
        stream = await client.chat.completions.create(
            model="m", messages=USER, max_tokens=400, stream=True,  # type: ignore[arg-type]
        )
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 3:
                break
        await stream.close()
        ledger = gate.ledger
    _check(reader, ledger, whole=1)


async def test_embeddings_have_input_tokens_only(base_url: str) -> None:
    """An embedding generates no output: no ``output`` point of 0 per request (it dragged the
    output-size histogram toward 0 and counted embeddings as answers), no
    ``gen_ai.usage.output_tokens`` on its span — the conventions define neither for it."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    backend = gg.Backend(name="sim", base_url=base_url, model="m", api_key=KEY, concurrency=4,
                         timeout=60.0, embedding_model="e")
    async with gg.Gateway([backend], clock=gg.ScaledClock(SCALE), seed=3, tracer_provider=tracer,
                          meter_provider=MeterProvider(metric_readers=[reader])) as gate:
        await gate.embed(["hello", "world"])
        client = openai.AsyncOpenAI(base_url=base_url, api_key=KEY,
                                    http_client=gate.http_client("sim"), max_retries=0)
        await client.embeddings.create(model="e", input="hello")
        entry = gate.ledger.entries["sim"]
    points = [a for a, _, _ in _points(reader, "gen_ai.client.token.usage")]
    assert {a["gen_ai.operation.name"] for a in points} == {"embeddings"}
    assert {a["gen_ai.token.type"] for a in points} == {"input"}
    assert _tokens(reader, "input") == entry.input_tokens > 0
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.usage.input_tokens"] > 0
        assert "gen_ai.usage.output_tokens" not in attributes
