"""``SyncGateway.guard``: a guarded function's SDK requests on ``gate.http_client`` are children
of the guard's span, as they are under the async ``@gate.guard``. Before, in sync code the
requests' spans were the guard span's siblings (children of whatever span was current around
the guarded call), so a trace showed the guard with no request under it and its cost on no
child."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from tests.mockbackend import error, ok


def _replies(*responses: Callable[[], httpx2.Response]) -> Any:
    """Fresh responses in order, the last repeated (the sync portal reads each one's body)."""
    sent: list[int] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(1)
        return responses[min(len(sent), len(responses)) - 1]()

    return handler


def test_sync_guarded_requests_are_children_of_the_guard_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    backend = gg.Backend(
        name="g", base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-test",
        concurrency=2,
        transport=httpx2.MockTransport(_replies(lambda: error(503), lambda: ok("hi"))),
    )
    with gg.SyncGateway(
        backends=[backend], tracer_provider=provider, backoff_base_s=0.001,
        backoff_cap_s=0.01,
    ) as gate:
        client = openai.OpenAI(
            api_key="sk-test", base_url=backend.base_url, http_client=gate.http_client("g"),
            max_retries=0,
        )

        @gate.guard(scenario="realtime_chat")
        def answer() -> None:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "q"}], max_tokens=5
            )

        with tracer.start_as_current_span("request"):
            answer()
    spans = exporter.get_finished_spans()
    (guard,) = [s for s in spans if s.name.startswith("guard ")]
    (request,) = [s for s in spans if s.name == "request"]
    assert guard.parent is not None and guard.parent.span_id == request.context.span_id
    tries = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert len(tries) == 2  # the 503, then the answer
    assert all(t.parent is not None and t.parent.span_id == guard.context.span_id for t in tries)
