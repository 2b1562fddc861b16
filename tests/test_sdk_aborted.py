"""The openai SDK on ``gate.http_client`` reading an answer its server cut off
(``finish_reason: "abort"`` or ``"error"``, vLLM's): the SDK gets the answer as sent — gptgate
does not rewrite what an SDK reads — but it is the backend's failure, as on ``gate.chat``
(gptgate/wire/aborted.py): ``calls_failed`` and ``stats().failures`` count it, its tokens are
booked as waste. Before, it was counted a success (``calls_ok``), its tokens as an answer."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest

import gptgate as gg

BASE_URL = "http://127.0.0.1:9/v1"
PRICE = gg.Price(input_per_mtok=1.0, output_per_mtok=2.0)
USAGE = {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127}
SSE = {"content-type": "text/event-stream"}


def _answer(finish: str, usage: dict[str, int] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": "Once upon a"}}]}
    if usage is not None:
        body["usage"] = usage
    return body


def _stream(finish: str) -> bytes:
    def chunk(delta: dict[str, Any] | None, reason: str | None = None,
              usage: dict[str, int] | None = None) -> str:
        obj: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                               "model": "m", "choices": [] if delta is None else [
                                   {"index": 0, "delta": delta, "finish_reason": reason}]}
        if usage is not None:
            obj["usage"] = usage
        return f"data: {json.dumps(obj)}\n\n"

    return "".join([chunk({"role": "assistant", "content": "Once"}), chunk({"content": " upon"}),
                    chunk({"content": " a"}, finish), chunk(None, usage=USAGE),
                    "data: [DONE]\n\n"]).encode()


def _gate(response: httpx2.Response) -> gg.Gateway:
    backend = gg.Backend(name="b", model="m", base_url=BASE_URL, api_key="sk-test",
                         transport=httpx2.MockTransport(lambda _: response), price=PRICE)
    return gg.Gateway([backend])


def _client(gate: gg.Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=BASE_URL, api_key="sk-test", max_retries=0,
                              http_client=gate.http_client("b"))


@pytest.mark.parametrize("finish", ["abort", "error"])
async def test_an_aborted_answer_reaches_the_sdk_as_sent_and_counts_as_failed(
    finish: str,
) -> None:
    async with _gate(httpx2.Response(200, json=_answer(finish, USAGE))) as gate:
        got = await _client(gate).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
        entry = gate.ledger.entries["b"]
        stats = gate.stats()["b"]
    assert got.choices[0].finish_reason == finish  # not rewritten
    assert got.choices[0].message.content == "Once upon a"
    assert (entry.calls_ok, entry.calls_failed, stats.failures) == (0, 1, 1)
    assert (entry.input_tokens, entry.output_tokens) == (120, 7)
    assert entry.wasted_tokens == 127


async def test_an_aborted_answer_without_usage_is_a_failure_booked_as_waste() -> None:
    """Booked as a cut attempt's guess (elapsed time; the tap counts no characters of a
    whole body), never as an answer."""
    async with _gate(httpx2.Response(200, json=_answer("abort", None))) as gate:
        await _client(gate).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
        entry = gate.ledger.entries["b"]
    assert (entry.calls_ok, entry.calls_failed) == (0, 1)
    assert entry.wasted_tokens == entry.input_tokens + entry.output_tokens


async def test_a_stream_aborted_after_text_is_a_cut_stream() -> None:
    async with _gate(httpx2.Response(200, content=_stream("abort"), headers=SSE)) as gate:
        stream = await _client(gate).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        entry = gate.ledger.entries["b"]
        stats = gate.stats()["b"]
    assert text == "Once upon a"  # the SDK read it all, as sent
    assert (entry.calls_ok, entry.calls_failed, stats.failures) == (0, 1, 1)
    assert entry.interrupted_streams == 1
    assert (entry.input_tokens, entry.output_tokens) == (120, 7)
