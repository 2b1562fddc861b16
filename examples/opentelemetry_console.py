"""OpenTelemetry: gptgate's spans and metrics, printed by the SDK's console exporters.

What it shows
    * ``gg.Gateway(..., tracer_provider=, meter_provider=)`` with the OpenTelemetry SDK's
      ``ConsoleSpanExporter`` and ``ConsoleMetricExporter`` (any exporter works the same way:
      OTLP to a collector, Jaeger, ...);
    * one INTERNAL span per call and one CLIENT span per attempt (``chat {model}``), under
      the GenAI semantic conventions (``gen_ai.*``) plus gptgate's own attributes
      (``gptgate.backend``, ``gptgate.attempt``, ``gptgate.cost_usd``, ...);
    * a failed call: ERROR status and ``error.type`` on its span, one attempt span per try;
    * the metrics ``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` and
      ``gen_ai.client.operation.time_to_first_chunk``.

How to run
    python examples/opentelemetry_console.py          # one line per span and per metric
    python examples/opentelemetry_console.py --json   # the exporters' full JSON output

No API key, no network: gptgate's simulator of a GPU server, in-process, 20x faster than real
time. Prompt and answer text stay off spans unless ``capture_content=True``.
"""

from __future__ import annotations

import argparse
import asyncio

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import gptgate as gg
from gptgate.sim import SimEngine, SimTransport

SHOWN = ("gptgate.backend", "gptgate.attempt", "gptgate.scenario", "gen_ai.request.model",
         "gptgate.request.model",
         "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gptgate.cost_usd",
         "gptgate.retry_reason", "error.type")


def span_line(span: ReadableSpan) -> str:
    """A one-line view of a span (the default formatter prints it as indented JSON)."""
    attributes = span.attributes or {}
    shown = " ".join(f"{k}={attributes[k]!r}" for k in SHOWN if k in attributes)
    duration_ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
    return (f"span {span.name!r} [{span.kind.name}, {span.status.status_code.name}] "
            f"{duration_ms:.0f} ms {shown}\n")


def metrics_lines(data: MetricsData) -> str:
    lines = []
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                points = list(metric.data.data_points)
                counts = sum(getattr(p, "count", 1) for p in points)
                lines.append(f"metric {metric.name} ({metric.unit}): {len(points)} series, "
                             f"{counts} measurements\n")
    return "".join(lines)


async def main(full_json: bool) -> None:
    resource = Resource.create({"service.name": "gptgate-example"})
    tracer_provider = TracerProvider(resource=resource)
    span_exporter = ConsoleSpanExporter() if full_json else ConsoleSpanExporter(formatter=span_line)
    tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    metric_exporter = (
        ConsoleMetricExporter() if full_json else ConsoleMetricExporter(formatter=metrics_lines)
    )
    # exported every minute, and once more when the provider shuts down (at the end here)
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=60_000)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])

    clock = gg.ScaledClock(20)
    backend = gg.Backend(
        name="gpu-sim", base_url="http://127.0.0.1:8000/v1", model="gpt-5.5", hardware="gpu",
        price=gg.Price(input_per_mtok=1.25, output_per_mtok=10.0),
        transport=SimTransport(SimEngine("gpu", clock=clock, seed=9)),
    )
    gate = gg.Gateway([backend], clock=clock, seed=9, tracer_provider=tracer_provider,
                      meter_provider=meter_provider)
    async with gate:
        await gate.chat([{"role": "user", "content": "Hello!"}], max_tokens=20)
        messages = [{"role": "user", "content": "Tell me a short story."}]
        async with gate.stream(messages, scenario="realtime_chat", max_tokens=30) as stream:
            async for _ in stream:
                pass
        try:  # the simulator answers 503 to every attempt of this call: 2 tries, then fails
            await gate.chat([{"role": "user", "content": "Fail, please."}], max_tokens=20,
                            max_attempts=2, extra_headers={"x-sim-fault": "503"})
        except gg.BackendError as error:
            print(f"call failed as scripted: {type(error).__name__} (status {error.status})")
    tracer_provider.shutdown()
    meter_provider.shutdown()  # the final metric export


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="gptgate's telemetry on the console.")
    parser.add_argument("--json", action="store_true", help="the exporters' full JSON")
    asyncio.run(main(parser.parse_args().json))
