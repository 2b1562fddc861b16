"""A ``tier="auto"`` call escalated to the large tier is still one call in its trace: one
INTERNAL span, with the small answer's attempt and the large one's as its children, its
``gptgate.cost_usd`` the whole call's (``r.cost_usd``, both answers) and its tier attributes
the outcome (``tier=large``, ``escalated``, ``escalation_reason``). Before, the escalation was
a second call span in a trace of its own: one ``gate.chat`` counted as two calls, the small
answer's cost on one trace and the large one's on another, neither the call's."""

from __future__ import annotations

from typing import Any

import httpx2
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gptgate as gg
from gptgate.telemetry import NAMES
from tests.mockbackend import Script, completion, error, gateway, ok

PRICE_SMALL = gg.Price(input_per_mtok=1.0, output_per_mtok=1.0)
PRICE_LARGE = gg.Price(input_per_mtok=10.0, output_per_mtok=10.0)
ASK = [{"role": "user", "content": "hi?"}]


def _backends(small: Script, large: Script) -> list[gg.Backend]:
    return [
        gg.Backend(name="small", base_url="http://127.0.0.1:9/v1", model="s", tier="small",
                   concurrency=2, transport=httpx2.MockTransport(small), price=PRICE_SMALL),
        gg.Backend(name="large", base_url="http://127.0.0.1:10/v1", model="L", tier="large",
                   concurrency=2, transport=httpx2.MockTransport(large), price=PRICE_LARGE),
    ]


def _tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_an_escalated_call_is_one_call_span_over_both_answers() -> None:
    provider, exporter = _tracing()
    empty = httpx2.Response(200, json=completion(""))
    outer = provider.get_tracer("app")
    async with gateway(*_backends(Script(empty), Script(ok("a long answer"))),
                       tracer_provider=provider) as gate:
        with outer.start_as_current_span("request"):
            result = await gate.chat(ASK, tier="auto", max_tokens=20)
    assert result.escalated and result.tier == "large"
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.name == "request"]
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL and s.name != "request"]
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert len(calls) == 1, [s.name for s in calls]
    (call,) = calls
    assert call.parent is not None and call.parent.span_id == root.context.span_id
    assert [_attrs(a)[NAMES["backend"]] for a in attempts] == ["small", "large"]
    assert all(
        a.parent is not None and a.parent.span_id == call.context.span_id for a in attempts
    )
    attributes = _attrs(call)
    assert attributes[NAMES["cost_usd"]] == result.cost_usd
    assert attributes[NAMES["tier"]] == "large"
    assert attributes[NAMES["escalated"]] is True
    assert attributes[NAMES["escalation_reason"]] == "empty"
    assert call.status.status_code == StatusCode.UNSET


async def test_a_failed_escalation_keeps_the_small_answer_and_one_unfailed_call_span() -> None:
    provider, exporter = _tracing()
    empty = httpx2.Response(200, json=completion(""))
    async with gateway(*_backends(Script(empty), Script(error(400))),
                       tracer_provider=provider, max_attempts=1) as gate:
        result = await gate.chat(ASK, tier="auto", max_tokens=20)
    assert not result.escalated and result.backend == "small"
    spans = exporter.get_finished_spans()
    (call,) = [s for s in spans if s.kind == SpanKind.INTERNAL]
    assert call.status.status_code == StatusCode.UNSET  # the caller got an answer
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert len(attempts) == 2 and all(
        a.parent is not None and a.parent.span_id == call.context.span_id for a in attempts
    )
    assert _attrs(call)[NAMES["cost_usd"]] == result.cost_usd


async def test_a_call_that_fails_outright_marks_its_one_span_failed() -> None:
    provider, exporter = _tracing()
    async with gateway(*_backends(Script(error(400)), Script(error(400))),
                       tracer_provider=provider, max_attempts=1) as gate:
        try:
            await gate.chat(ASK, tier="auto", max_tokens=20)
        except gg.BadRequestError:
            pass
        else:  # pragma: no cover - the call must fail
            raise AssertionError("a 400 from every backend must fail the call")
    (call,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.INTERNAL]
    assert call.status.status_code == StatusCode.ERROR
    assert _attrs(call)[NAMES["error_type"]] == "BadRequestError"
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current
