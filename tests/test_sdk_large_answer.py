"""A JSON answer past the tap's buffer (``MAX_JSON_BYTES``, 4 MiB) on ``gate.http_client`` is
booked at the usage the server sent (gptgate/large_answer.py). Past the buffer the tap gave
up: no usage, no booking, nothing for the limit — a 4,000-token answer with
``top_logprobs=20`` (5 MB of logprobs) was booked $0 where ``gate.chat`` booked it whole,
and so was a Responses API answer carrying a generated image (its base64 in the body)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.observe import MAX_JSON_BYTES

BASE_URL = "http://127.0.0.1:9/v1"
PRICE = gg.Price(input_per_mtok=1.0, cached_input_per_mtok=0.1, output_per_mtok=10.0)


def _logprobs_answer(request: httpx2.Request) -> httpx2.Response:
    top = [{"token": "abd", "logprob": -1.234567, "bytes": [97, 98, 100]}] * 20
    entries = [{"token": "abc", "logprob": -0.123456, "bytes": [97, 98, 99], "top_logprobs": top}
               for _ in range(4000)]
    return httpx2.Response(200, json={
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG", "object": "chat.completion",
        "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": entries},
                     "message": {"role": "assistant", "content": "abc" * 4000}}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 4000, "total_tokens": 5200,
                  "prompt_tokens_details": {"cached_tokens": 1024}},
        "system_fingerprint": "fp"})


IMAGE_RESPONSE_ID = "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b"


def _image_answer(request: httpx2.Request) -> httpx2.Response:
    image = "iVBORw0KGgo" + "A" * (4 * 1024 * 1024)  # a PNG's base64, past 4 MiB
    return httpx2.Response(200, json={
        "id": IMAGE_RESPONSE_ID, "object": "response", "created_at": 1.0,
        "status": "completed", "error": None, "incomplete_details": None, "model": "m",
        "output": [{"type": "image_generation_call", "id": "ig_1", "status": "completed",
                    "result": image},
                   {"type": "message", "id": "msg_1", "status": "completed",
                    "role": "assistant", "content": [
                        {"type": "output_text", "text": "Here it is.", "annotations": []}]}],
        "parallel_tool_calls": True, "tool_choice": "auto",
        "tools": [{"type": "image_generation"}],
        "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 60, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 960},
        "user": None, "metadata": {}})


def _gateway(answer: Any) -> gg.Gateway:
    backend = gg.Backend(name="b", model="m", base_url=BASE_URL, api_key="sk-test",
                         transport=httpx2.MockTransport(answer), price=PRICE)
    return gg.Gateway([backend])


def _client(gate: gg.Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=BASE_URL, api_key="sk-test", max_retries=0,
                              http_client=gate.http_client("b"))


async def test_a_long_logprobs_answer_is_booked_as_gate_chat_books_it() -> None:
    assert len(_logprobs_answer(httpx2.Request("POST", BASE_URL)).content) > MAX_JSON_BYTES
    async with _gateway(_logprobs_answer) as gate:
        answer = await _client(gate).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], logprobs=True,
            top_logprobs=20)
        assert answer.choices[0].logprobs is not None
        sdk = gate.runner.ledger.entries["b"]
        booked = (sdk.input_tokens, sdk.cached_input_tokens, sdk.output_tokens, sdk.cost_usd)
        result = await gate.chat([{"role": "user", "content": "hi"}], logprobs=True,
                                 top_logprobs=20)
        entry = gate.runner.ledger.entries["b"]
    assert booked[:3] == (1200, 1024, 4000) and booked[3] > 0
    assert entry.cost_usd == pytest.approx(2 * booked[3]) and entry.estimated_attempts == 0
    assert result.usage.output_tokens == 4000


async def test_a_responses_answer_with_a_generated_image_is_booked_once() -> None:
    async with _gateway(_image_answer) as gate:
        client = _client(gate)
        response = await client.responses.create(
            model="m", input="draw a cat", tools=[{"type": "image_generation"}])
        assert response.output_text == "Here it is."
        await client.responses.retrieve(response.id)  # a stored read of the same answer
        entry = gate.runner.ledger.entries["b"]
    assert (entry.input_tokens, entry.output_tokens, entry.calls_ok) == (900, 60, 1)
    body = json.dumps(_image_answer(httpx2.Request("GET", BASE_URL)).json())
    assert len(body) > MAX_JSON_BYTES
