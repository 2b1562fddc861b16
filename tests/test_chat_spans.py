"""`gate.chat` and `gate.stream` spans: the call's INTERNAL span and its attempts' CLIENT spans
carry what an SRE asks first, nest right, are named after the request model, mark failures,
and are all ended on every path (issue 13)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import gptgate as gg
from gptgate.telemetry import NAMES
from tests.mockbackend import USER, Script, backend, error, gateway, ok, stream


class _Open(SpanProcessor):
    """Every span started and not yet ended: nothing may be left open."""

    def __init__(self) -> None:
        self.open: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        self.open[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        assert span.context is not None
        self.open.pop(span.context.span_id, None)


def _tracing() -> tuple[TracerProvider, InMemorySpanExporter, _Open]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    still_open = _Open()
    provider.add_span_processor(still_open)
    return provider, exporter, still_open


def _split(exporter: InMemorySpanExporter) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    spans = exporter.get_finished_spans()
    calls = [s for s in spans if s.kind == SpanKind.INTERNAL and s.name != "outer"]
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    return calls, attempts


def _attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


PRICE = gg.Price(input_per_mtok=1_000.0, output_per_mtok=2_000.0)


async def test_chat_attempt_spans_carry_queue_limit_cost_and_retry_reason() -> None:
    provider, exporter, still_open = _tracing()
    script = Script(error(503), ok("answer"))
    async with gateway(
        backend(script, concurrency=3, price=PRICE), tracer_provider=provider
    ) as gate:
        result = await gate.chat(USER, max_tokens=20)
    calls, attempts = _split(exporter)
    assert len(calls) == 1 and len(attempts) == 2 and not still_open.open
    first, second = (_attrs(s) for s in attempts)
    for attrs in (first, second):
        assert attrs[NAMES["limit"]] == 3
        assert attrs[NAMES["queue_s"]] >= 0.0
        assert NAMES["cost_usd"] in attrs
    assert NAMES["retry_reason"] not in first
    assert second[NAMES["retry_reason"]] == "BackendError"
    assert second[NAMES["cost_usd"]] == pytest.approx(result.cost_usd - first[NAMES["cost_usd"]])
    assert second[NAMES["cost_usd"]] > 0
    assert _attrs(calls[0])[NAMES["cost_usd"]] == pytest.approx(result.cost_usd)
    # no prefix group (one message): nothing claimed about the prompt cache
    assert NAMES["cache_group"] not in first and NAMES["cache_warm"] not in first


async def test_chat_attempt_spans_say_the_cache_group_and_whether_it_was_warm() -> None:
    provider, exporter, _ = _tracing()
    system = {"role": "system", "content": "You are a helpful assistant. " * 400}
    script = Script(ok("answer", prompt=3000, cached=2900))
    async with gateway(backend(script), tracer_provider=provider) as gate:
        for question in ("one", "two"):
            await gate.chat(
                [system, {"role": "user", "content": question}],
                scenario="realtime_chat", stream=False,
            )
    _, attempts = _split(exporter)
    first, second = (_attrs(s) for s in attempts)
    assert first[NAMES["cache_group"]] == second[NAMES["cache_group"]]
    assert str(first[NAMES["cache_group"]]).startswith("p:")
    assert first[NAMES["cache_warm"]] is False  # it warmed the prefix
    assert second[NAMES["cache_warm"]] is True


async def test_chat_call_span_is_named_after_the_request_model() -> None:
    provider, exporter, _ = _tracing()
    async with gateway(backend(Script(ok())), tracer_provider=provider) as gate:
        await gate.chat(USER)  # no model asked for: the routed backend's
        await gate.chat(USER, model="gpt-x")
    calls, _ = _split(exporter)
    assert [s.name for s in calls] == ["chat m", "chat gpt-x"]
    assert _attrs(calls[1])[NAMES["call_request_model"]] == "gpt-x"


async def test_a_failed_chat_marks_its_call_span() -> None:
    provider, exporter, still_open = _tracing()
    async with gateway(backend(Script(error(400))), tracer_provider=provider) as gate:
        with pytest.raises(gg.BadRequestError):
            await gate.chat(USER)
    calls, attempts = _split(exporter)
    assert len(calls) == 1 and len(attempts) == 1 and not still_open.open
    call = calls[0]
    assert call.status.status_code == StatusCode.ERROR
    assert _attrs(call)[NAMES["error_type"]] == "BadRequestError"


async def test_stream_gets_a_call_span_over_the_whole_stream() -> None:
    provider, exporter, still_open = _tracing()
    tracer = provider.get_tracer("app")
    script = Script(error(503), stream(["a", "b", "c"]))
    seen_current: list[trace.Span] = []
    last_read_ns = 0
    with tracer.start_as_current_span("outer") as outer:
        gate = gateway(backend(script), tracer_provider=provider)
        async with gate, gate.stream(USER, max_tokens=10) as s:
            async for _ in s:
                seen_current.append(trace.get_current_span())
                await anyio.sleep(0.005)  # the caller's own work between reads
                last_read_ns = time.time_ns()
        assert trace.get_current_span() is outer
    assert seen_current and all(span is outer for span in seen_current)  # nothing leaked
    calls, attempts = _split(exporter)
    assert len(calls) == 1 and len(attempts) == 2 and not still_open.open
    call = calls[0]
    assert call.name == "chat m"
    assert call.parent is not None and call.parent.span_id == outer.get_span_context().span_id
    assert all(
        a.parent is not None and a.parent.span_id == call.context.span_id for a in attempts
    )
    assert call.end_time is not None and call.end_time >= last_read_ns
    assert _attrs(attempts[1])[NAMES["retry_reason"]] == "BackendError"
    assert call.status.status_code == StatusCode.UNSET


async def test_a_stream_left_by_break_ends_every_span() -> None:
    provider, exporter, still_open = _tracing()
    script = Script(stream(["a", "b", "c", "d"]))
    async with gateway(backend(script), tracer_provider=provider) as gate:
        async with gate.stream(USER) as s:
            async for _ in s:
                break
        assert not still_open.open
        assert trace.get_current_span() is trace.INVALID_SPAN
    calls, attempts = _split(exporter)
    assert len(calls) == 1 and len(attempts) == 1


async def test_a_cancelled_stream_ends_every_span() -> None:
    provider, exporter, still_open = _tracing()
    script = Script(stream(["a", "b", "c", "d"]))
    async with gateway(backend(script), tracer_provider=provider) as gate:
        with anyio.CancelScope() as scope:
            async with gate.stream(USER) as s:
                async for _ in s:
                    scope.cancel()
                    await anyio.sleep(1)
        assert not still_open.open
    calls, attempts = _split(exporter)
    assert len(calls) == 1 and len(attempts) == 1


async def test_a_failed_stream_marks_its_call_span() -> None:
    provider, exporter, still_open = _tracing()
    async with gateway(backend(Script(error(400))), tracer_provider=provider) as gate:
        with pytest.raises(gg.BadRequestError):
            async with gate.stream(USER) as s:
                async for _ in s:
                    pass
    calls, attempts = _split(exporter)
    assert len(calls) == 1 and len(attempts) == 1 and not still_open.open
    assert calls[0].status.status_code == StatusCode.ERROR
    assert _attrs(calls[0])[NAMES["error_type"]] == "BadRequestError"
    assert attempts[0].parent is not None
    assert attempts[0].parent.span_id == calls[0].context.span_id


async def test_no_sdk_makes_no_span_current_and_a_later_global_sdk_still_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The no-SDK fast path builds nothing and leaves the caller's context alone; a tracer
    provider set globally after the gateway was made is used from the next call on."""
    script = Script(ok())
    async with gateway(backend(script)) as gate:
        seen: list[trace.Span] = []
        script.responses = [lambda request: (seen.append(trace.get_current_span()), ok())[1]]
        await gate.chat(USER)
        assert seen == [trace.INVALID_SPAN]
        provider, exporter, still_open = _tracing()
        monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
        await gate.chat(USER, max_tokens=5)
    calls, attempts = _split(exporter)
    assert [s.name for s in calls] == ["chat m"] and len(attempts) == 1 and not still_open.open
    assert attempts[0].parent is not None
    assert attempts[0].parent.span_id == calls[0].context.span_id
    assert _attrs(attempts[0])[NAMES["limit"]] == 4
