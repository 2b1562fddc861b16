"""``gate.embed`` calls merged into one request: the request's span links every caller's span
(OpenTelemetry's way to tie one operation to several traces), so each caller's trace leads to
the request that served it. Before, the merged request was a child of whichever caller's
task sent it, and the other callers' traces showed no embeddings request at all."""

from __future__ import annotations

import anyio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual, sim_backend


def test_a_merged_embeddings_request_links_every_callers_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")

    async def main() -> None:
        clock = LoopClock()
        backend, _ = sim_backend(
            "gpu", name="g", clock=clock, embedding_model="text-embedding-3-small"
        )
        async with gg.Gateway([backend], clock=clock, tracer_provider=provider) as gate:

            async def caller(i: int) -> None:
                with tracer.start_as_current_span(f"request-{i}"):
                    await gate.embed([f"text {i}", f"more {i}"])

            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(caller, i)
            assert gate.stats()["g"].calls == 1  # the three callers' texts: one request

    run_virtual(main)
    spans = exporter.get_finished_spans()
    callers = {s.context.span_id for s in spans if s.name.startswith("request-")}
    (sent,) = [s for s in spans if s.kind == SpanKind.CLIENT]
    linked = {link.context.span_id for link in sent.links}
    assert sent.parent is not None
    assert callers == linked | {sent.parent.span_id}
    assert callers <= linked  # every caller linked, the parent's too (one rule for all)
