"""With ``capture_content=True``, a request the official SDKs send on ``gate.http_client``
puts its prompt on its span like ``gate.chat`` does, in the conventions' message shape —
Anthropic's ``system`` as ``gen_ai.system_instructions``, its content blocks (text, image,
``tool_use``, ``tool_result``) as parts. Before, every SDK span said
``gen_ai.input.messages = "[]"``: a prompt of no messages, which is false, on exactly the
spans a user turned capture on to read."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import gptgate as gg
from gptgate.sim import ANTHROPIC_PROFILE
from gptgate.telemetry import NAMES
from gptgate.testing import LoopClock, run_virtual, sim_backend

PIXEL = "iVBORw0KGgo="


def _client_spans(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [
        dict(s.attributes or {}) for s in exporter.get_finished_spans()
        if s.kind == SpanKind.CLIENT
    ]


def test_anthropic_sdk_prompt_and_system_on_the_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        clock = LoopClock()
        backend, _ = sim_backend(
            ANTHROPIC_PROFILE, name="claude", clock=clock, provider="anthropic",
            base_url="http://127.0.0.1:8000", api_key="sk-ant-test",
        )
        gate = gg.Gateway([backend], clock=clock, tracer_provider=provider,
                          capture_content=True)
        client = anthropic.AsyncAnthropic(
            api_key="sk-ant-test", base_url="http://127.0.0.1:8000",
            http_client=gate.http_client("claude"), max_retries=0,
        )
        async with gate:
            await client.messages.create(
                model=backend.model, max_tokens=20,
                system=[{"type": "text", "text": "be brief"}],
                messages=[
                    {"role": "user", "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image", "source": {
                            "type": "base64", "media_type": "image/png", "data": PIXEL}},
                    ]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "tu_1", "name": "look", "input": {"q": 1}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "tu_1", "content": "a pixel"},
                    ]},
                ],
            )

    run_virtual(main)
    (span,) = _client_spans(exporter)
    assert json.loads(span[NAMES["system_instructions"]]) == [
        {"type": "text", "content": "be brief"}
    ]
    assert json.loads(span[NAMES["input_messages"]]) == [
        {"role": "user", "parts": [
            {"type": "text", "content": "what is this?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png", "content": PIXEL},
        ]},
        {"role": "assistant", "parts": [
            {"type": "tool_call", "id": "tu_1", "name": "look", "arguments": {"q": 1}},
        ]},
        {"role": "user", "parts": [
            {"type": "tool_call_response", "id": "tu_1", "response": "a pixel"},
        ]},
    ]


def test_openai_sdk_prompt_on_the_span_and_nothing_without_capture() -> None:
    for capture in (True, False):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))

        async def main(capture: bool = capture, provider: TracerProvider = provider) -> None:
            clock = LoopClock()
            backend, _ = sim_backend("gpu", name="gpu", clock=clock, api_key="sk-test")
            gate = gg.Gateway([backend], clock=clock, tracer_provider=provider,
                              capture_content=capture)
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url=backend.base_url,
                http_client=gate.http_client("gpu"), max_retries=0,
            )
            async with gate:
                await client.chat.completions.create(
                    model=backend.model, max_tokens=10,
                    messages=[{"role": "user", "content": "my question"}],
                )
                await client.embeddings.create(model="e", input=["not a chat"])

        run_virtual(main)
        chat, embeddings = _client_spans(exporter)
        if capture:
            assert json.loads(chat[NAMES["input_messages"]]) == [
                {"role": "user", "parts": [{"type": "text", "content": "my question"}]}
            ]
        else:
            assert NAMES["input_messages"] not in chat
        # no messages in the request: no claim that there were none
        assert NAMES["input_messages"] not in embeddings
