"""A GenAI-aware backend (Dash0, Datadog LLM Observability, Langfuse…) counts every span that
carries ``gen_ai.operation.name`` as one model call, and groups it by
``gen_ai.provider.name``. gptgate's model calls are its attempts' CLIENT spans — each names
its provider, since a failover changes it. The call's INTERNAL parent (``chat {model}``) is
gptgate's own bookkeeping around them: it carries ``gptgate.operation`` and
``gptgate.request.model``, no ``gen_ai.*`` attribute, so a trace with N attempts counts N
calls, not N + 1 — and a response-cache hit, which calls no model, counts none.

Before, the INTERNAL span carried ``gen_ai.operation.name="chat"`` (and the request model)
without a provider: one call retried once read as three chats, one of them provider-less.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gptgate.telemetry import NAMES
from tests.mockbackend import USER, Script, backend, error, gateway, ok, stream


def _tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _genai_calls(spans: tuple[ReadableSpan, ...]) -> list[ReadableSpan]:
    """What a GenAI-aware backend counts as model calls."""
    return [s for s in spans if NAMES["operation"] in (s.attributes or {})]


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_retried_chat_counts_its_attempts_not_its_call_span() -> None:
    provider, exporter = _tracing()
    script = Script(error(503), ok("answer"), stream(["a", "b"]))
    async with gateway(backend(script), tracer_provider=provider) as gate:
        await gate.chat(USER, model="gpt-x")
        async with gate.stream(USER) as s:
            async for _ in s:
                pass
    spans = exporter.get_finished_spans()
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL]
    assert len(attempts) == 3 and len(calls) == 2
    counted = _genai_calls(spans)
    assert counted == attempts  # 3 model calls, not 5
    assert all(_attrs(s)[NAMES["provider"]] == "openai" for s in counted)
    for call in calls:
        attributes = _attrs(call)
        assert not [k for k in attributes if k.startswith("gen_ai.")], attributes
        assert attributes[NAMES["call_operation"]] == "chat"
    assert [_attrs(c).get(NAMES["call_request_model"]) for c in calls] == ["gpt-x", None]
    assert [c.name for c in calls] == ["chat gpt-x", "chat m"]
