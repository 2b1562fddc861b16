"""The SDK side of ``n > 1`` and refusals (gate.http_client): a streamed refusal counts as
output, and a request is held at ``n × max_tokens`` as ``gate.chat``'s calls are.

* ResponseTap estimates a stream that sent no usage (the SDK's default: no
  ``include_usage``): a streamed ``delta.refusal`` was booked no output.
* An SDK request's reservation under a dollar budget was one choice's ``max_tokens``."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.observe import ResponseTap


def _sse(chunks: list[dict[str, Any]]) -> bytes:
    return ("".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n").encode()


def _chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def _tap(body: bytes) -> ResponseTap:
    tap = ResponseTap("text/event-stream", 0.0)
    tap.feed(body, 1.0)
    tap.close(1.0)
    return tap


def test_an_n2_sdk_stream_without_usage_counts_both_choices() -> None:
    """Fine already: a chunk carries one choice, so choices[0] is each choice in turn."""
    chunks = [_chunk(i, {"content": "x" * 40}) for i in (0, 1)]
    chunks += [_chunk(1, {}, "stop"), _chunk(0, {}, "stop")]
    assert _tap(_sse(chunks)).output_so_far() == 20  # 80 characters


def test_a_streamed_sdk_refusal_counts_as_output() -> None:
    chunks = [_chunk(0, {"role": "assistant", "refusal": ""}),
              _chunk(0, {"refusal": "I'm sorry, I cannot help."}), _chunk(0, {}, "stop")]
    assert _tap(_sse(chunks)).output_so_far() == 7  # 25 characters


async def test_an_sdk_request_is_held_at_n_times_max_tokens() -> None:
    sent: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": i, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "ok"}} for i in range(3)],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}})

    backend = gg.Backend(name="b", provider="openai", model="m",
                         base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                         transport=httpx2.MockTransport(answer),
                         price=gg.Price(input_per_mtok=0.0, output_per_mtok=1_000_000.0))
    budget = gg.Budget(usd_per_hour=250.0, on_exceed="raise")
    async with gg.Gateway([backend], budget=budget) as gate:
        client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                                    http_client=gate.http_client("b"), max_retries=0)
        with pytest.raises(Exception):  # noqa: B017 - whichever error the SDK maps it to
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=100, n=3)
    assert sent == []  # $300 at most does not fit $250
