"""``gate.submit`` (the micro-batcher) runs each item in its submitter's context: its call span
is a child of the span current where it was submitted, and a context variable (a request id a
logging filter reads) is the submitter's. Before, a flushed batch's items all ran in the
context of whoever flushed it: four web requests' calls, submitted under four request spans,
all landed in the first request's trace."""

from __future__ import annotations

import contextvars

import anyio
import anyio.lowlevel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.batching import MicroBatcher
from gptgate.testing import LoopClock, run_virtual, sim_backend

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def test_submitted_calls_are_children_of_their_own_request_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")

    async def main() -> None:
        clock = LoopClock()
        backend, _ = sim_backend("gpu", name="g", clock=clock)
        async with gg.Gateway([backend], clock=clock, tracer_provider=provider) as gate:
            handles = []
            for i in range(4):
                with tracer.start_as_current_span(f"request-{i}"):
                    handles.append(await gate.submit(
                        [{"role": "user", "content": f"q{i}"}], scenario="batch_content",
                        max_tokens=10,
                    ))
            for handle in handles:
                await handle

    run_virtual(main)
    spans = exporter.get_finished_spans()
    requests = {s.context.span_id: s.name for s in spans if s.name.startswith("request-")}
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL and s.name.startswith("chat")]
    assert len(calls) == 4
    parents = sorted(requests[c.parent.span_id] for c in calls if c.parent is not None)
    assert parents == ["request-0", "request-1", "request-2", "request-3"]


async def test_each_item_sees_its_submitters_context_variables() -> None:
    async def run_item(item: int) -> tuple[int, str]:
        await anyio.lowlevel.checkpoint()
        return item, REQUEST_ID.get()

    policy = gg.BatchPolicy(max_size=3, max_wait_s=60.0)
    async with MicroBatcher(policy, run_item) as batcher:
        handles = []
        for i in range(3):  # the third submit flushes the batch
            token = REQUEST_ID.set(f"req-{i}")
            handles.append(await batcher.submit(i))
            REQUEST_ID.reset(token)
        seen = [await h for h in handles]
    assert seen == [(0, "req-0"), (1, "req-1"), (2, "req-2")]
    assert REQUEST_ID.get() == "-"
