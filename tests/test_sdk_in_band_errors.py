"""An SDK answer on ``gate.http_client`` that says it failed is the backend's failure, as on
``gate.chat`` (gptgate/sdk_in_band.py): an ``{"error": ...}`` chunk in a chat stream (vLLM,
OpenRouter), an ``{"error": ...}`` body under a 200, the Responses API's ``response.failed``
and ``error`` events. Each was a success before: the circuit never opened on a backend that
failed every Responses call, the limit took a failure for a fast answer, the span carried no
error, and a failed stream was booked as a whole answer. One that failed after its answer had
begun is a cut stream (``StreamInterruptedError``), as on ``gate.chat``: a failure for the
limit and ``stats()``, its output so far booked as waste, and — the server cut it — one
strike for the circuit, as every path counts a cut stream (gptgate/stream_cut.py).

A failure of the request's own (the Responses API's ``invalid_image``, ``invalid_prompt``, …)
is a ``BadRequestError``: no strike against the backend, as a 400 on ``gate.chat``; and a
``response.incomplete`` (``max_output_tokens`` reached) stays an answer, billed as the
server counted it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import gptgate as gg

BASE_URL = "http://127.0.0.1:9/v1"
PRICE = gg.Price(input_per_mtok=1.0, cached_input_per_mtok=0.1, output_per_mtok=10.0)
USAGE = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1280},
         "output_tokens": 120, "output_tokens_details": {"reasoning_tokens": 40},
         "total_tokens": 1620}


def _response(status: str, **fields: Any) -> dict[str, Any]:
    """A Responses API ``Response`` object, as the server sends it."""
    return {"id": "resp_1", "object": "response", "created_at": 1.0, "status": status,
            "error": None, "incomplete_details": None, "instructions": None, "model": "m",
            "output": [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "text": {"format": {"type": "text"}}, "usage": None, **fields}


def _responses_stream(last: dict[str, Any], text: tuple[str, ...] = ()) -> bytes:
    """``response.created``, ``text``'s deltas, then ``last`` — named events, no ``[DONE]``."""
    events = [
        {"type": "response.created", "sequence_number": 0, "response": _response("in_progress")},
        *({"type": "response.output_text.delta", "sequence_number": i, "item_id": "msg_1",
           "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []}
          for i, piece in enumerate(text, start=1)),
        last,
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def _failed(
    code: str, usage: dict[str, Any] | None = None, text: tuple[str, ...] = ()
) -> bytes:
    error = {"code": code, "message": f"it failed: {code}"}
    return _responses_stream({"type": "response.failed", "sequence_number": 3,
                              "response": _response("failed", error=error, usage=usage)}, text)


def _chat_stream_error(text: str = "") -> bytes:
    delta = {"role": "assistant", "content": text}
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    error = {"error": {"message": "upstream died", "type": "server_error", "code": 500}}
    return f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(error)}\n\n".encode()


SSE = {"content-type": "text/event-stream; charset=utf-8"}


def _gateway(body: Callable[[], httpx2.Response]) -> tuple[gg.Gateway, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    backend = gg.Backend(name="b", model="m", base_url=BASE_URL, api_key="sk-test",
                         transport=httpx2.MockTransport(lambda _: body()), price=PRICE)
    return gg.Gateway([backend], tracer_provider=provider, breaker_threshold=2), exporter


def _client(gate: gg.Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=BASE_URL, api_key="sk-test", max_retries=0,
                              http_client=gate.http_client("b"))


async def _responses_streamed(client: openai.AsyncOpenAI) -> None:
    stream = await client.responses.create(model="m", input="hi", stream=True)
    async for _ in stream:
        pass


async def _chat_streamed(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    async for _ in stream:
        pass


async def _chat(client: openai.AsyncOpenAI) -> None:
    await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


CASES = {
    "responses response.failed": (
        lambda: httpx2.Response(200, content=_failed("server_error"), headers=SSE),
        _responses_streamed),
    "responses error event": (
        lambda: httpx2.Response(200, headers=SSE, content=_responses_stream(
            {"type": "error", "sequence_number": 3, "code": "server_error",
             "message": "An error occurred while processing your request.", "param": None})),
        _responses_streamed),
    "chat stream error chunk": (
        lambda: httpx2.Response(200, content=_chat_stream_error(), headers=SSE), _chat_streamed),
    "chat error body under 200": (
        lambda: httpx2.Response(200, json={"error": {"message": "upstream overloaded",
                                                     "type": "server_error", "code": 502}}),
        _chat),
}


@pytest.mark.parametrize("case", CASES)
async def test_an_answer_that_says_it_failed_is_the_backends_failure(case: str) -> None:
    body, call = CASES[case]
    gate, exporter = _gateway(body)
    async with gate:
        client = _client(gate)
        for _ in range(2):
            with contextlib.suppress(openai.APIError):  # the SDK's reading of a chat error chunk
                await call(client)
        stats = gate.stats()["b"]
        ledger = gate.runner.ledger.entries["b"]
    assert stats.failures == 2 and stats.circuit == "open"
    assert ledger.calls_ok == 0 and ledger.output_tokens == 0
    if case == "chat error body under 200":
        assert ledger.attempts == 0  # the server refused: nothing generated, as on gate.chat
    else:  # the prompt it had begun on, as gate.chat books a stream failed before its answer
        assert ledger.attempts == 2 and ledger.wasted_tokens == ledger.input_tokens > 0
    spans = exporter.get_finished_spans()
    assert [s.status.status_code for s in spans] == [StatusCode.ERROR] * 2


CUT = {
    "responses response.failed": lambda: _failed("server_error", text=("Hello", " there")),
    "chat stream error chunk": lambda: _chat_stream_error("Hello there"),
}


@pytest.mark.parametrize("case", CUT)
async def test_an_answer_failed_after_it_began_is_a_cut_stream(case: str) -> None:
    gate, exporter = _gateway(lambda: httpx2.Response(200, content=CUT[case](), headers=SSE))
    async with gate:
        with contextlib.suppress(openai.APIError):
            await (_responses_streamed if case.startswith("responses") else _chat_streamed)(
                _client(gate))
        stats = gate.stats()["b"]
        ledger = gate.runner.ledger.entries["b"]
    assert (stats.failures, stats.circuit, ledger.calls_ok) == (1, "closed", 0)
    assert ledger.interrupted_streams == 1
    assert ledger.output_tokens == ledger.wasted_tokens - ledger.input_tokens == 3  # 11 chars
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["error.type"] == "StreamInterruptedError"


async def test_a_failed_response_with_usage_is_booked_as_the_server_counted_it() -> None:
    gate, _ = _gateway(
        lambda: httpx2.Response(200, content=_failed("server_error", USAGE), headers=SSE))
    async with gate:
        await _responses_streamed(_client(gate))
        ledger = gate.runner.ledger.entries["b"]
    assert (ledger.input_tokens, ledger.cached_input_tokens) == (1500, 1280)
    assert ledger.output_tokens == ledger.wasted_tokens - 1500 == 120
    assert ledger.calls_ok == 0 and gate.stats()["b"].failures == 1


async def test_a_response_failed_on_the_requests_own_fault_leaves_the_circuit_closed() -> None:
    gate, exporter = _gateway(
        lambda: httpx2.Response(200, content=_failed("invalid_image"), headers=SSE))
    async with gate:
        client = _client(gate)
        for _ in range(3):
            await _responses_streamed(client)
        stats = gate.stats()["b"]
    assert stats.circuit == "closed" and stats.failures == 3
    spans = exporter.get_finished_spans()
    assert {s.attributes["error.type"] for s in spans} == {"BadRequestError"}


async def test_an_incomplete_response_is_an_answer_billed_as_counted() -> None:
    incomplete = {"type": "response.incomplete", "sequence_number": 3,
                  "response": _response("incomplete", usage=USAGE,
                                        incomplete_details={"reason": "max_output_tokens"})}
    gate, _ = _gateway(
        lambda: httpx2.Response(200, content=_responses_stream(incomplete), headers=SSE))
    async with gate:
        await _responses_streamed(_client(gate))
        ledger = gate.runner.ledger.entries["b"]
        stats = gate.stats()["b"]
    assert (ledger.calls_ok, ledger.input_tokens, ledger.output_tokens) == (1, 1500, 120)
    assert ledger.wasted_tokens == 0 and stats.failures == 0


async def test_a_stored_failed_response_read_again_is_no_new_failure() -> None:
    """A read (GET) finds what an earlier request ended in: polling a background response
    that failed, or downloading a batch's result line that carries its request's error, is
    no failure of the backend's now — each poll counted one, and opened the circuit."""
    failed = _response("failed", error={"code": "server_error", "message": "it failed"})
    gate, exporter = _gateway(lambda: httpx2.Response(200, json=failed))
    async with gate:
        client = _client(gate)
        for _ in range(3):
            response = await client.responses.retrieve("resp_1")
            assert response.status == "failed"
        stats = gate.stats()["b"]
    assert (stats.failures, stats.circuit) == (0, "closed")
    assert all(s.status.status_code != StatusCode.ERROR for s in exporter.get_finished_spans())


async def test_a_stream_left_at_its_incomplete_event_is_a_whole_answer() -> None:
    """``response.incomplete`` ends a Responses stream as ``response.completed`` does: a
    caller that stops reading there left nothing unread — booked as the server counted it,
    not as a stream cut with its output guessed."""
    incomplete = {"type": "response.incomplete", "sequence_number": 3,
                  "response": _response("incomplete", usage=USAGE,
                                        incomplete_details={"reason": "max_output_tokens"})}
    events = _responses_stream(incomplete, ("Hello", " there"))

    async def held_open() -> AsyncIterator[bytes]:
        yield events
        await anyio.sleep_forever()  # the server holds the connection after its last event

    gate, _ = _gateway(lambda: httpx2.Response(200, content=held_open(), headers=SSE))
    async with gate:
        stream = await _client(gate).responses.create(model="m", input="hi", stream=True)
        async for event in stream:
            if event.type == "response.incomplete":
                break
        await stream.close()
        ledger = gate.runner.ledger.entries["b"]
    assert (ledger.calls_ok, ledger.output_tokens, ledger.wasted_tokens) == (1, 120, 0)
    assert ledger.interrupted_streams == 0
