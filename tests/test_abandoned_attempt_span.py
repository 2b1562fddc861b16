"""An attempt gptgate hung up on — a hedge's loser, a call its caller cancelled — carries on
its span what the ledger booked for it (``gptgate.cost_usd``, the possibly billed tokens as
``gen_ai.usage.*``) and ``gptgate.outcome="abandoned"``: a call's attempts add up to the
call's cost. Before, such a span ended bare, so the money a hedge's loser (or a timeout)
possibly cost showed on the call's span and on no attempt's."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.telemetry import NAMES
from gptgate.testing import FaultPlan, LoopClock, run_virtual, sim_backend


def _cost(span: ReadableSpan) -> float:
    value = (span.attributes or {}).get(NAMES["cost_usd"], 0.0)
    assert isinstance(value, float)
    return value


def test_hedged_calls_attempts_add_up_to_the_call_cost() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        clock = LoopClock()
        backend, _ = sim_backend(
            "gpu", name="g1", clock=clock, price=gg.Price(input_per_mtok=1, output_per_mtok=2),
            faults=FaultPlan(seed=3, stall_rate=0.08, stall_s=20),
        )
        async with gg.Gateway([backend], clock=clock, tracer_provider=provider) as gate:
            items = [
                {"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 50}
                for i in range(300)
            ]
            results = await gate.map(items, hedge=True)
            assert all(isinstance(r, gg.ChatResult) for r in results)

    run_virtual(main)
    spans = exporter.get_finished_spans()
    attempts: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        if span.kind == SpanKind.CLIENT:
            assert span.parent is not None
            attempts.setdefault(span.parent.span_id, []).append(span)
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL]
    abandoned = [
        a for a in (a for group in attempts.values() for a in group)
        if (a.attributes or {}).get(NAMES["outcome"]) == "abandoned"
    ]
    assert abandoned, "the seed must make some hedges lose"
    assert any(_cost(a) > 0 for a in abandoned)
    assert all(NAMES["input_tokens"] in (a.attributes or {}) for a in abandoned if _cost(a))
    for call in calls:
        own = attempts[call.context.span_id]
        assert sum(_cost(a) for a in own) == pytest.approx(_cost(call), abs=1e-12)
