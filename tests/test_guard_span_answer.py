"""With ``capture_content=True``, an SDK request made inside a ``@gate.guard``-ed function
puts its answer on its own span as ``gen_ai.output.messages``, as one on
``gate.http_client`` alone does (tests/test_sdk_span_answer.py): non-streamed, streamed and
read inside the guarded function, or streamed and returned by it to be read after; with
capture off, nothing. The guarded request's span is its own CLIENT span (the guard's is
INTERNAL), so the answer belongs there."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.telemetry import NAMES
from tests.mockbackend import Script
from tests.test_sdk_span_answer import EXPECTED, USER, _openai_json, _openai_stream

BASE = "http://127.0.0.1:9/v1"

#: case → (response, streamed, the stream is returned by the guarded function unread)
CASES: dict[str, tuple[Callable[[], httpx2.Response], bool, bool]] = {
    "json": (_openai_json, False, False),
    "stream-read-inside": (_openai_stream, True, False),
    "stream-returned": (_openai_stream, True, True),
}


async def _spans(case: str, capture: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The guarded SDK request's CLIENT span and the guard's INTERNAL span."""
    respond, stream, returned = CASES[case]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = gg.Backend(
        name="b", model="m", api_key="k", concurrency=2, timeout=5.0, base_url=BASE,
        transport=httpx2.MockTransport(Script(respond())),
    )
    async with gg.Gateway([backend], seed=1, tracer_provider=provider,
                          capture_content=capture) as gate:
        client = openai.AsyncOpenAI(
            api_key="k", base_url=BASE, http_client=gate.http_client("b"), max_retries=0,
        )

        @gate.guard(backend="b")
        async def ask() -> Any:
            if not stream:
                return await client.chat.completions.create(
                    model="m", messages=USER,  # type: ignore[arg-type]
                )
            chunks = await client.chat.completions.create(
                model="m", messages=USER, stream=True,  # type: ignore[arg-type]
            )
            if returned:
                return chunks
            async for _ in chunks:
                pass
            return None

        result = await ask()
        if returned:
            async for _ in result:
                pass
    spans = exporter.get_finished_spans()
    (client_span,) = [dict(s.attributes or {}) for s in spans if s.kind == SpanKind.CLIENT]
    (guard_span,) = [dict(s.attributes or {}) for s in spans if s.kind == SpanKind.INTERNAL]
    return client_span, guard_span


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_guarded_requests_answer_is_on_its_span_with_capture(case: str) -> None:
    span, _ = await _spans(case, capture=True)
    assert json.loads(span[NAMES["output_text"]]) == EXPECTED


@pytest.mark.parametrize("case", sorted(CASES))
async def test_no_guarded_answer_without_capture(case: str) -> None:
    span, guard = await _spans(case, capture=False)
    for attributes in (span, guard):
        assert NAMES["output_text"] not in attributes
        assert NAMES["input_messages"] not in attributes


async def test_a_guard_retry_shows_the_answer_only_on_the_try_that_read_it() -> None:
    """The guard retries its body after a 500: the failed request's span shows no answer,
    the one that read it whole shows it (streamed, read inside the guarded function)."""
    from tests.mockbackend import error

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = gg.Backend(
        name="b", model="m", api_key="k", concurrency=2, timeout=5.0, base_url=BASE,
        transport=httpx2.MockTransport(Script(error(500), _openai_stream())),
    )
    async with gg.Gateway([backend], seed=1, tracer_provider=provider, capture_content=True,
                          max_attempts=2, backoff_base_s=0.001, backoff_cap_s=0.001) as gate:
        client = openai.AsyncOpenAI(
            api_key="k", base_url=BASE, http_client=gate.http_client("b"), max_retries=0,
        )

        @gate.guard(backend="b")
        async def ask() -> None:
            chunks = await client.chat.completions.create(
                model="m", messages=USER, stream=True,  # type: ignore[arg-type]
            )
            async for _ in chunks:
                pass

        await ask()
    failed, answered = [dict(s.attributes or {}) for s in exporter.get_finished_spans()
                        if s.kind == SpanKind.CLIENT]
    assert NAMES["output_text"] not in failed
    assert json.loads(answered[NAMES["output_text"]]) == EXPECTED
