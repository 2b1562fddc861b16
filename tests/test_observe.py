"""What SDK traffic tells the limit: tokens (and a stream's first token) from the response the
SDK reads through ``gate.http_client``, or from what a ``@gate.guard``-ed function returns."""

from __future__ import annotations

import json
from typing import Any

from gptgate.observe import MAX_JSON_BYTES, ResponseTap, usage_from
from tests.mockbackend import (
    USER,
    RecordingLimit,
    Script,
    backend,
    completion,
    gateway,
    ok,
    sse,
    stream,
)


def _sse_events(*chunks: dict[str, Any]) -> list[bytes]:
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def test_a_json_body_read_in_pieces_gives_its_usage() -> None:
    body = json.dumps(completion("x" * 400, prompt=1200)).encode()
    tap = ResponseTap("application/json; charset=utf-8", start=0.0)
    for i in range(0, len(body), 7):
        tap.feed(body[i : i + 7], now=0.5)
    tap.close(now=1.0)
    assert (tap.input_tokens, tap.output_tokens, tap.ttft_s) == (1200, 100, None)


def test_a_stream_gives_its_first_content_token_time_and_usage() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    text = {"choices": [{"index": 0, "delta": {"content": "Hel"}}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 7}}
    role_bytes, text_bytes, usage_bytes, done = _sse_events(role, text, usage)
    tap = ResponseTap("text/event-stream", start=10.0)
    tap.feed(role_bytes, now=10.2)  # a role-only chunk is not the first token
    tap.feed(text_bytes[:9], now=10.4)  # an event split across reads
    tap.feed(text_bytes[9:] + usage_bytes, now=10.5)
    tap.feed(done, now=11.0)
    tap.close(now=11.0)
    assert tap.ttft_s is not None and abs(tap.ttft_s - 0.5) < 1e-9
    assert (tap.input_tokens, tap.output_tokens) == (30, 7)


def test_what_cannot_be_read_leaves_the_counts_unknown() -> None:
    for content_type, body in [
        ("application/json", b"{not json"),
        ("text/plain", json.dumps(completion()).encode()),
        ("application/json", b" " * (MAX_JSON_BYTES + 1)),
    ]:
        tap = ResponseTap(content_type, start=0.0)
        tap.feed(body, now=1.0)
        tap.close(now=1.0)
        assert (tap.input_tokens, tap.output_tokens, tap.ttft_s) == (None, None, None)


def _tokens(result: object) -> tuple[int, int, int] | None:
    usage = usage_from(result)
    return None if usage is None else (
        usage.input_tokens, usage.output_tokens, usage.cached_input_tokens
    )


def test_usage_from_an_sdk_result() -> None:
    class Usage:
        prompt_tokens = 12
        completion_tokens = 34

    class Completion:
        usage = Usage()

    class ResponsesUsage:  # the Responses API's names, as a pydantic model dumps them
        def model_dump(self) -> dict[str, object]:
            return {
                "input_tokens": 30, "output_tokens": 7,
                "input_tokens_details": {"cached_tokens": 20},
            }

    class Response:
        usage = ResponsesUsage()

    assert _tokens(Completion()) == (12, 34, 0)
    assert _tokens(Response()) == (30, 7, 20)
    assert _tokens(completion("x" * 40, prompt=5)) == (5, 10, 0)
    assert _tokens("plain text") is None
    assert _tokens({"usage": None}) is None


async def test_http_client_reports_tokens_and_first_token_to_the_limit() -> None:
    script = Script(ok("y" * 80, prompt=900), stream(["a", "b", "c"]))
    async with gateway(backend(script)) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder
        client = gate.http_client("mock")
        body = {"model": "m", "messages": USER}
        response = await client.post("http://127.0.0.1:9/v1/chat/completions", json=body)
        assert response.json()["choices"][0]["message"]["content"] == "y" * 80
        async with client.stream(
            "POST", "http://127.0.0.1:9/v1/chat/completions", json={**body, "stream": True}
        ) as streamed:
            received = b"".join([chunk async for chunk in streamed.aiter_bytes()])
        assert received == sse(["a", "b", "c"])  # the SDK gets every byte, unchanged
        await client.aclose()
    plain, streaming = recorder.samples
    assert (plain.kind, plain.input_tokens, plain.output_tokens) == ("ok", 900, 20)
    assert plain.ttft_s is None
    assert (streaming.kind, streaming.input_tokens, streaming.output_tokens) == ("ok", 10, 3)
    assert streaming.ttft_s is not None and 0.0 <= streaming.ttft_s <= streaming.latency_s


async def test_guard_reports_the_usage_a_function_returns() -> None:
    async with gateway(backend(Script(ok()))) as gate:
        recorder = RecordingLimit()
        gate.backend_state("mock").limiter.limit = recorder

        @gate.guard()
        async def sdk_call() -> dict[str, Any]:
            return completion("z" * 48, prompt=700)

        await sdk_call()
    (sample,) = recorder.samples
    assert (sample.kind, sample.input_tokens, sample.output_tokens) == ("ok", 700, 12)
