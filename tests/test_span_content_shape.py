"""With ``capture_content=True`` the prompt and the answer go on the attempt's span in the
shape the GenAI semantic conventions define for ``gen_ai.input.messages`` and
``gen_ai.output.messages``: a JSON array of ``{"role", "parts": [...]}`` messages (an output
message also carries its ``finish_reason``). Before, the input was OpenAI's own message list
and the output the bare answer text — not JSON at all — so a trace backend that reads the
conventions (Langfuse, Datadog LLM Observability, Grafana's GenAI views) showed neither."""

from __future__ import annotations

import json
from typing import Any

import httpx2
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gptgate.genai_content import input_messages, output_messages
from gptgate.telemetry import NAMES
from tests.mockbackend import Script, backend, completion, gateway, ok, stream

PIXEL = "iVBORw0KGgo="
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [
        {"type": "text", "text": "what is in these?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
    ]},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "lookup", "arguments": '{"sku": "A1"}'},
    }]},
    {"role": "tool", "tool_call_id": "call_1", "content": "3 in stock"},
]


def _tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _attempt(exporter: InMemorySpanExporter) -> dict[str, Any]:
    spans: list[ReadableSpan] = [
        s for s in exporter.get_finished_spans() if s.kind == SpanKind.CLIENT
    ]
    assert len(spans) == 1
    return dict(spans[0].attributes or {})


EXPECTED_INPUT = [
    {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
    {"role": "user", "parts": [
        {"type": "text", "content": "what is in these?"},
        {"type": "uri", "modality": "image", "uri": "https://example.com/cat.png"},
        {"type": "blob", "modality": "image", "mime_type": "image/png", "content": PIXEL},
    ]},
    {"role": "assistant", "parts": [
        {"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"sku": "A1"}},
    ]},
    {"role": "tool", "parts": [
        {"type": "tool_call_response", "id": "call_1", "response": "3 in stock"},
    ]},
]


async def test_captured_prompt_and_answer_follow_the_conventions_message_shape() -> None:
    provider, exporter = _tracing()
    async with gateway(
        backend(Script(ok("the answer"))), tracer_provider=provider, capture_content=True
    ) as gate:
        await gate.chat(MESSAGES)
    attributes = _attempt(exporter)
    assert json.loads(attributes[NAMES["input_messages"]]) == EXPECTED_INPUT
    assert json.loads(attributes[NAMES["output_text"]]) == [{
        "role": "assistant",
        "parts": [{"type": "text", "content": "the answer"}],
        "finish_reason": "stop",
    }]


async def test_a_tool_call_answer_is_a_tool_call_part_with_the_conventions_finish_reason() -> None:
    body = completion("")
    body["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_9", "type": "function",
        "function": {"name": "lookup", "arguments": '{"sku": "B2"}'},
    }]}
    body["choices"][0]["finish_reason"] = "tool_calls"
    provider, exporter = _tracing()
    async with gateway(
        backend(Script(httpx2.Response(200, json=body))),
        tracer_provider=provider, capture_content=True,
    ) as gate:
        await gate.chat([{"role": "user", "content": "stock of B2?"}], tools=[{
            "type": "function",
            "function": {"name": "lookup", "parameters": {"type": "object"}},
        }])
    (message,) = json.loads(_attempt(exporter)[NAMES["output_text"]])
    assert message == {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "call_9", "name": "lookup",
                   "arguments": {"sku": "B2"}}],
        "finish_reason": "tool_call",
    }


async def test_a_streamed_answer_is_captured_in_the_same_shape() -> None:
    provider, exporter = _tracing()
    async with gateway(
        backend(Script(stream(["the ", "answer"]))),
        tracer_provider=provider, capture_content=True,
    ) as gate, gate.stream([{"role": "user", "content": "q"}]) as s:
        assert "".join([t async for t in s]) == "the answer"
    attributes = _attempt(exporter)
    assert json.loads(attributes[NAMES["input_messages"]]) == [
        {"role": "user", "parts": [{"type": "text", "content": "q"}]}
    ]
    (message,) = json.loads(attributes[NAMES["output_text"]])
    assert message["parts"] == [{"type": "text", "content": "the answer"}]
    assert message["finish_reason"] == "stop"


def test_arguments_that_are_not_json_stay_a_string_and_unknown_parts_keep_their_type() -> None:
    converted = json.loads(input_messages([
        {"role": "assistant", "tool_calls": [
            {"id": "c", "function": {"name": "f", "arguments": "not json {"}}
        ]},
        {"role": "user", "content": [{"type": "input_audio", "input_audio": {"format": "wav"}}]},
    ]))
    assert converted[0]["parts"] == [
        {"type": "tool_call", "id": "c", "name": "f", "arguments": "not json {"}
    ]
    assert converted[1]["parts"] == [{"type": "input_audio", "input_audio": {"format": "wav"}}]
    # an answer with no text and no tool call still says why it ended
    assert json.loads(output_messages("", "length", None)) == [
        {"role": "assistant", "parts": [], "finish_reason": "length"}
    ]
