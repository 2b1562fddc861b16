"""``gen_ai.provider.name`` on spans and metric points is the GenAI conventions' well-known
value where they name the provider: ``azure.ai.openai`` for Azure OpenAI, ``gcp.gemini`` for
the Gemini API, ``mistral_ai`` for Mistral (the rest are the same as gptgate's names, or
have none and keep gptgate's). Before, it was gptgate's own key (``azure``, ``gemini``,
``mistral``), so a dashboard or alert on the conventions' values missed those backends'
calls and tokens entirely."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GenAiProviderNameValues,
)
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.telemetry import NAMES
from tests.mockbackend import Script, gateway, ok

WELL_KNOWN = {v.value for v in GenAiProviderNameValues}


@pytest.mark.parametrize(
    ("provider", "options", "expected"),
    [
        ("azure", {"base_url": "https://res.openai.azure.com", "deployment": "gpt-4o-prod"},
         "azure.ai.openai"),
        ("gemini", {"base_url": "https://generativelanguage.googleapis.com/v1beta/openai"},
         "gcp.gemini"),
        ("mistral", {"base_url": "https://api.mistral.ai/v1"}, "mistral_ai"),
        ("openai", {}, "openai"),
        ("deepseek", {"base_url": "https://api.deepseek.com"}, "deepseek"),
        ("vllm", {}, "vllm"),  # no well-known value: gptgate's name
    ],
)
async def test_provider_name_is_the_conventions_value(
    provider: str, options: dict[str, Any], expected: str
) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    options.setdefault("base_url", "http://127.0.0.1:9/v1")
    mock = gg.Backend(
        name="mock", provider=provider, model="m", api_key="k",
        transport=httpx2.MockTransport(Script(ok("hi"))), **options,
    )
    async with gateway(
        mock, tracer_provider=tracer_provider,
        meter_provider=MeterProvider(metric_readers=[reader]),
    ) as gate:
        await gate.chat([{"role": "user", "content": "hi"}])
    (attempt,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT]
    assert (attempt.attributes or {})[NAMES["provider"]] == expected
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        dict(p.attributes or {})
        for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
        if m.name.startswith("gen_ai.") for p in m.data.data_points
    ]
    assert points and {p[NAMES["provider"]] for p in points} == {expected}


def test_every_provider_with_a_well_known_value_uses_it() -> None:
    from gptgate.telemetry import provider_name

    named = {"openai", "anthropic", "deepseek", "groq"}
    for name in gg.PROVIDERS:
        shown = provider_name(name)
        if name in named:
            assert shown == name
        assert shown in WELL_KNOWN or shown == name
    assert {provider_name(n) for n in ("azure", "gemini", "mistral")} <= WELL_KNOWN
