"""A stored answer an SDK reads again on ``gate.http_client`` is no new work
(gptgate/sdk_reads.py): the Responses API's background mode polls ``responses.retrieve``
until the answer is done, an app re-reads a response by its id, ``chat.completions.retrieve``
reads a stored completion. Each read of a finished answer carries its usage, and each was
booked again: three reads of one completed response billed it three times, and a stored
completion read back billed twice. Its usage is now booked once per response id — at its
creation when that answered, else at the first read that finds it done.

Its span and metrics were named after the id (``resp_68a… m``, ``gen_ai.operation.name`` =
``"resp_68a…"``): one metric series per response. They are named after the endpoint."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import gptgate as gg
from gptgate.sdk_client import operation_of
from gptgate.sdk_reads import operation_name, stored

BASE_URL = "http://127.0.0.1:9/v1"
PRICE = gg.Price(input_per_mtok=1.0, cached_input_per_mtok=0.1, output_per_mtok=10.0)
RESPONSE_ID = "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"
CHAT_ID = "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"
USAGE = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1280},
         "output_tokens": 120, "output_tokens_details": {"reasoning_tokens": 40},
         "total_tokens": 1620}
CHAT_USAGE = {"prompt_tokens": 1200, "completion_tokens": 90, "total_tokens": 1290,
              "prompt_tokens_details": {"cached_tokens": 1024}}


def _response(status: str) -> dict[str, Any]:
    done = status == "completed"
    output = [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]
    return {"id": RESPONSE_ID, "object": "response", "created_at": 1.0, "status": status,
            "background": True, "error": None, "incomplete_details": None, "model": "m",
            "output": output if done else [], "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "usage": USAGE if done else None}


def _completion() -> dict[str, Any]:
    return {"id": CHAT_ID, "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "Hi."}}],
            "usage": CHAT_USAGE}


class _Server:
    """A background response done at the second poll; a stored chat completion."""

    def __init__(self) -> None:
        self.polls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        if path.endswith("/responses"):
            assert json.loads(request.content)["background"] is True
            return httpx2.Response(200, json=_response("queued"))
        if path.endswith(f"/responses/{RESPONSE_ID}"):
            self.polls += 1
            return httpx2.Response(
                200, json=_response("completed" if self.polls >= 2 else "in_progress"))
        return httpx2.Response(200, json=_completion())  # the create and the retrieve


async def test_a_stored_answer_read_again_is_booked_once() -> None:
    exporter = InMemorySpanExporter()
    tracing = TracerProvider()
    tracing.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    backend = gg.Backend(name="b", model="m", base_url=BASE_URL, api_key="sk-test",
                         transport=httpx2.MockTransport(_Server()), price=PRICE)
    gate = gg.Gateway([backend], tracer_provider=tracing,
                      meter_provider=MeterProvider(metric_readers=[reader]))
    async with gate:
        client = openai.AsyncOpenAI(base_url=BASE_URL, api_key="sk-test", max_retries=0,
                                    http_client=gate.http_client("b"))
        response = await client.responses.create(model="m", input="hi", background=True)
        for _ in range(4):  # in progress, then done three times
            response = await client.responses.retrieve(response.id)
        assert response.status == "completed" and response.output_text == "Done."
        completion = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], store=True)
        again = await client.chat.completions.retrieve(completion.id)
        assert again.choices[0].message.content == "Hi."
        ledger = gate.runner.ledger.entries["b"]
    assert (ledger.input_tokens, ledger.output_tokens) == (1500 + 1200, 120 + 90)
    assert ledger.calls_ok == 2
    names = {span.name for span in exporter.get_finished_spans()}
    assert names == {"chat m", "responses m", "completions m"}
    operations = {
        point.attributes.get("gen_ai.operation.name")
        for metrics in reader.get_metrics_data().resource_metrics
        for scope in metrics.scope_metrics for metric in scope.metrics
        for point in metric.data.data_points  # type: ignore[attr-defined]
        if point.attributes and "gen_ai.operation.name" in point.attributes
    }
    assert operations == {"chat", "responses", "completions"}


def test_an_endpoints_operation_is_named_by_its_path_not_its_ids() -> None:
    assert operation_of("/v1/responses") == "chat"
    assert operation_name(f"/v1/responses/{RESPONSE_ID}") == "responses"
    assert operation_name(f"/v1/responses/{RESPONSE_ID}/input_items") == "input_items"
    assert operation_name(f"/v1/responses/{RESPONSE_ID}/cancel") == "cancel"
    assert operation_name(f"/v1/chat/completions/{CHAT_ID}") == "completions"
    assert operation_name("/v1/files/file-abc123/content") == "content"
    assert operation_name("/v1/models/gpt-4o-mini") == "models"
    assert operation_name("/v1/models") == "models"
    assert operation_name("/") == "request"


def test_only_an_answer_the_server_keeps_is_remembered_at_its_creation() -> None:
    assert stored("/v1/responses", {"model": "m"})
    assert not stored("/v1/responses", {"model": "m", "store": False})
    assert stored("/v1/chat/completions", {"store": True})
    assert not stored("/v1/chat/completions", {"model": "m"})
