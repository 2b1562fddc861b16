"""A request an SDK sends on ``gate.http_client`` carries ``gptgate.cost_usd`` on its span, as
a ``gate.chat`` attempt does, so a guarded call's span cost is the sum of its requests' (the
failed tries' included). Before, SDK spans had no cost at all: every guarded call's cost was
on the guard's span and on none of its requests."""

from __future__ import annotations

import contextlib

import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.telemetry import NAMES
from gptgate.testing import FaultPlan, LoopClock, run_virtual, sim_backend

PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=2.0)


def test_sdk_request_spans_carry_their_cost_and_add_up_to_the_guarded_call() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spent: list[float] = []

    async def main() -> None:
        clock = LoopClock()
        backend, _ = sim_backend(
            "gpu", name="g1", clock=clock, api_key="sk-test", price=PRICE,
            faults=FaultPlan(seed=2, error_rate=0.3),
        )
        gate = gg.Gateway([backend], clock=clock, tracer_provider=provider)
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=backend.base_url,
            http_client=gate.http_client("g1"), max_retries=0,
        )

        @gate.guard(scenario="realtime_chat")
        async def answer(question: str) -> None:
            await client.chat.completions.create(
                model=backend.model, max_tokens=20,
                messages=[{"role": "user", "content": question}],
            )

        async with gate:
            for i in range(20):
                # a call whose tries all failed: its span still counts
                with contextlib.suppress(openai.APIError):
                    await answer(f"q{i}")
            for _ in range(3):  # unguarded, straight on the client
                with contextlib.suppress(openai.APIError):
                    await client.chat.completions.create(
                        model=backend.model, max_tokens=20,
                        messages=[{"role": "user", "content": "alone"}],
                    )
            spent.append(gate.ledger.entries["g1"].cost_usd)

    run_virtual(main)
    spans = exporter.get_finished_spans()
    requests = [s for s in spans if s.kind == SpanKind.CLIENT]
    guards = [s for s in spans if s.kind == SpanKind.INTERNAL]

    def cost(span: ReadableSpan) -> float:
        value = (span.attributes or {})[NAMES["cost_usd"]]
        assert isinstance(value, float)
        return value

    assert len(guards) == 20 and len(requests) > 23  # the seed fails some tries
    assert all(NAMES["cost_usd"] in (s.attributes or {}) for s in requests)
    for guard in guards:
        own = [r for r in requests if r.parent and r.parent.span_id == guard.context.span_id]
        assert own and sum(cost(r) for r in own) == pytest.approx(cost(guard), abs=1e-12)
    assert sum(cost(r) for r in requests) == pytest.approx(spent[0], abs=1e-12)
