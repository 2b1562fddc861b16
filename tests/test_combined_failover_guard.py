"""A guard around an SDK on a fallback client (``http_client("a", fallback=["b"])``) while the
primary dies (its server refusing connections): every guarded call is answered by ``b``, the
guard's permit taken where its requests really run (gptgate/guard_site.py), ``a``'s circuit
opened by the refused connections and nothing sent there once open. Real ``openai`` package,
mock transports.
"""

from __future__ import annotations

import httpx2
import openai

import gptgate as gg

URL = "http://127.0.0.1:9/v1"
USER = [{"role": "user", "content": "hi"}]
THRESHOLD = 2
CALLS = 6
ANSWER = {
    "id": "c", "object": "chat.completion", "created": 1, "model": "served",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


async def test_a_guarded_sdk_on_a_fallback_client_is_answered_while_the_primary_dies() -> None:
    tried = {"a": 0, "b": 0}

    def dead(request: httpx2.Request) -> httpx2.Response:
        tried["a"] += 1
        raise httpx2.ConnectError("connection refused", request=request)

    def alive(_: httpx2.Request) -> httpx2.Response:
        tried["b"] += 1
        return httpx2.Response(200, json=ANSWER)

    gate = gg.Gateway([
        gg.Backend(name="a", base_url=URL, model="m", api_key="sk-a-primary-0123",
                   transport=httpx2.MockTransport(dead)),
        gg.Backend(name="b", base_url=URL, model="m", api_key="sk-b-second-0123",
                   transport=httpx2.MockTransport(alive)),
    ], breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0, max_breaker_wait_s=0.0)
    async with gate:
        client = openai.AsyncOpenAI(base_url=URL, api_key="sk-a-primary-0123", max_retries=0,
                                    http_client=gate.http_client("a", fallback=["b"]))

        @gate.guard()
        async def ask() -> str:
            answer = await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
            return answer.choices[0].message.content or ""

        answers = [await ask() for _ in range(CALLS)]
        stats = gate.stats()
        booked = gate.ledger.entries["b"].calls_ok
    assert answers == ["ok"] * CALLS
    assert (tried["b"], booked) == (CALLS, CALLS)
    assert tried["a"] == THRESHOLD and stats["a"].circuit == "open"
    assert stats["a"].in_flight == stats["b"].in_flight == 0
