"""With ``capture_content=True``, an SDK request on ``gate.http_client`` puts its answer on
its span as ``gen_ai.output.messages`` — text and tool calls, streamed or not, OpenAI's and
Anthropic's formats — as ``gate.chat``'s spans do; with capture off, nothing.

Before, those spans carried the prompt but never the answer: a user who turned capture on to
read what the model said found only half the exchange."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anthropic
import anyio
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

USER = [{"role": "user", "content": "look"}]
EXPECTED = [{
    "role": "assistant",
    "parts": [
        {"type": "text", "content": "Hello"},
        {"type": "tool_call", "id": "call_1", "name": "look", "arguments": {"q": 1}},
    ],
    "finish_reason": "tool_call",
}]


def _sse(
    events: list[dict[str, Any]], *, named: bool = False, done: bool = True
) -> httpx2.Response:
    lines = []
    for event in events:
        if named:
            lines.append(f"event: {event['type']}")
        lines.append(f"data: {json.dumps(event)}\n")
    if done:
        lines.append("data: [DONE]\n")
    return httpx2.Response(
        200, content=("\n".join(lines) + "\n").encode(),
        headers={"content-type": "text/event-stream"},
    )


def _openai_json() -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Hello", "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "look", "arguments": "{\"q\": 1}"},
            }],
        }}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14},
    })


def _openai_stream() -> httpx2.Response:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return _sse([
        chunk({"role": "assistant", "content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "look", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\": "}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({}, "tool_calls"),
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9,
                                  "total_tokens": 14}},
    ])


def _anthropic_json() -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [
            {"type": "text", "text": "Hello"},
            {"type": "tool_use", "id": "call_1", "name": "look", "input": {"q": 1}},
        ],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 9},
    })


def _anthropic_stream() -> httpx2.Response:
    return _sse([
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "Hel"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "lo"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "call_1", "name": "look", "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": "{\"q\": "}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ], named=True, done=False)


async def _openai(gate: gg.Gateway, stream: bool) -> None:
    client = openai.AsyncOpenAI(
        api_key="k", base_url="http://127.0.0.1:9/v1", http_client=gate.http_client("b"),
        max_retries=0,
    )
    if stream:
        chunks = await client.chat.completions.create(
            model="m", messages=USER, stream=True,  # type: ignore[arg-type]
        )
        async for _ in chunks:
            pass
    else:
        await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]


async def _anthropic(gate: gg.Gateway, stream: bool) -> None:
    client = anthropic.AsyncAnthropic(
        api_key="k", base_url="http://127.0.0.1:9", http_client=gate.http_client("b"),
        max_retries=0,
    )
    if stream:
        events = await client.messages.create(
            model="claude", max_tokens=20, messages=USER, stream=True,  # type: ignore[arg-type]
        )
        async for _ in events:
            pass
    else:
        await client.messages.create(
            model="claude", max_tokens=20, messages=USER,  # type: ignore[arg-type]
        )


CASES: dict[str, tuple[str, Callable[[], httpx2.Response], bool]] = {
    "openai-json": ("openai", _openai_json, False),
    "openai-stream": ("openai", _openai_stream, True),
    "anthropic-json": ("anthropic", _anthropic_json, False),
    "anthropic-stream": ("anthropic", _anthropic_stream, True),
}


async def _span(case: str, capture: bool) -> dict[str, Any]:
    provider_name, respond, stream = CASES[case]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = gg.Backend(
        name="b", provider=provider_name, model="m", api_key="k", concurrency=2, timeout=5.0,
        base_url="http://127.0.0.1:9" + ("/v1" if provider_name == "openai" else ""),
        transport=httpx2.MockTransport(Script(respond())),
    )
    send: Callable[[gg.Gateway, bool], Awaitable[None]] = (
        _openai if provider_name == "openai" else _anthropic
    )
    async with gg.Gateway([backend], seed=1, tracer_provider=provider,
                          capture_content=capture) as gate:
        await send(gate, stream)
    (span,) = [dict(s.attributes or {}) for s in exporter.get_finished_spans()
               if s.kind == SpanKind.CLIENT]
    return span


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_answer_is_on_the_span_with_capture(case: str) -> None:
    span = await _span(case, capture=True)
    assert json.loads(span[NAMES["output_text"]]) == EXPECTED


@pytest.mark.parametrize("case", sorted(CASES))
async def test_no_answer_without_capture(case: str) -> None:
    span = await _span(case, capture=False)
    assert NAMES["output_text"] not in span
    assert NAMES["input_messages"] not in span


def test_a_long_streamed_answer_is_kept_to_a_bound() -> None:
    from gptgate.observe import ResponseTap
    from gptgate.tap_answer import MAX_ANSWER_CHARS, AnswerText

    tap = ResponseTap("text/event-stream", 0.0)
    tap.answer = AnswerText()
    piece = "x" * 1000
    event = json.dumps({"choices": [{"index": 0, "delta": {"content": piece}}]})
    events = 2 * MAX_ANSWER_CHARS // len(piece)
    for i in range(events):
        tap.feed(f"data: {event}\n\n".encode(), float(i))
    tap.close(1.0)
    text = tap.answer.text
    assert len(text) == MAX_ANSWER_CHARS
    # the tap's own counts are untouched by the bound
    assert tap.content_chars == events * len(piece)


async def test_a_stream_its_caller_left_shows_no_answer() -> None:
    """Only an answer read whole goes on the span: a stream left after its first chunk is
    no answer the model gave (as ``gate.chat``'s interrupted streams show none)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    whole = _openai_stream().content
    first = whole[: whole.index(b"\n\n") + 2]  # the first event; the rest never comes

    async def body() -> AsyncIterator[bytes]:
        yield first
        await anyio.sleep_forever()

    def respond(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            200, content=body(), headers={"content-type": "text/event-stream"}
        )

    backend = gg.Backend(
        name="b", model="m", api_key="k", concurrency=2, timeout=5.0,
        base_url="http://127.0.0.1:9/v1", transport=httpx2.MockTransport(Script(respond)),
    )
    async with gg.Gateway([backend], seed=1, tracer_provider=provider,
                          capture_content=True) as gate:
        client = openai.AsyncOpenAI(
            api_key="k", base_url="http://127.0.0.1:9/v1", http_client=gate.http_client("b"),
            max_retries=0,
        )
        chunks = await client.chat.completions.create(
            model="m", messages=USER, stream=True,  # type: ignore[arg-type]
        )
        async for _ in chunks:
            break
        await chunks.close()
    (span,) = [dict(s.attributes or {}) for s in exporter.get_finished_spans()
               if s.kind == SpanKind.CLIENT]
    assert NAMES["output_text"] not in span
