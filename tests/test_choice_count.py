"""``n`` (choices per request) sizes what a call may cost and what a server counts against its
rate limit: ``n × max_tokens`` of output, as OpenAI counts it at admission (openai-cookbook's
api_request_parallel_processor: ``completion_tokens = n * max_tokens``). gptgate reserved one
choice's ``max_tokens``, so ``n=4`` under a dollar budget could spend four times what was held.
A wrong ``n`` (0, "2", True) is refused before anything is sent, as a wrong ``max_tokens`` is."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

import gptgate as gg

M = [{"role": "user", "content": "hi"}]


def _answer(request: httpx2.Request) -> httpx2.Response:
    n = json.loads(request.content).get("n", 1)
    choices = [{"index": i, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "ok"}} for i in range(n)]
    return httpx2.Response(200, json={
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": choices, "usage": {"prompt_tokens": 1, "completion_tokens": n}})


def _gate(sent: list[dict[str, Any]], budget: gg.Budget | None = None) -> gg.Gateway:
    def answer(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return _answer(request)

    backend = gg.Backend(
        name="b", provider="openai", model="m", base_url="http://127.0.0.1:9/v1",
        api_key="sk-test", transport=httpx2.MockTransport(answer),
        # $1 an output token: a call's most cost is its output bound in dollars
        price=gg.Price(input_per_mtok=0.0, output_per_mtok=1_000_000.0),
    )
    return gg.Gateway([backend], budget=budget, max_attempts=1)


async def test_the_budget_holds_n_times_max_tokens() -> None:
    sent: list[dict[str, Any]] = []
    budget = gg.Budget(usd_per_hour=250.0, on_exceed="raise")
    async with _gate(sent, budget) as gate:
        result = await gate.chat(M, max_tokens=100, n=2)  # $200 at most: fits
        assert len(result.raw["choices"]) == 2 if result.raw else False
    async with _gate(sent, budget) as gate:
        with pytest.raises(gg.BudgetExceededError):
            await gate.chat(M, max_tokens=100, n=3)  # $300 at most: does not fit $250
    assert [body.get("n") for body in sent] == [2]


@pytest.mark.parametrize("n", [0, -1, "2", True, 1.5])
async def test_a_wrong_n_is_refused_before_sending(n: object) -> None:
    sent: list[dict[str, Any]] = []
    async with _gate(sent) as gate:
        with pytest.raises(gg.BadRequestError, match="n must be an int >= 1"):
            await gate.chat(M, n=n)
    assert sent == []
