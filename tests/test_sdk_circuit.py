"""The official SDK on ``gate.http_client`` meets its backend's circuit breaker as
``gate.chat`` does: a sick backend is not hammered by SDK traffic the gateway governs.

Before, the transport sent whatever the SDK asked: 16 SDK workers bound to a backend answering
500 after 2 s put 464 requests on it in 60 s (240 in 30 s), where ``gate.chat`` put 19 (18).
"""

from __future__ import annotations

import collections

import anyio
import httpx2
import openai
import pytest

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual

ANSWER = {
    "id": "r", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
ASK = [{"role": "user", "content": "x"}]


async def _sick_for_30s(path: str) -> tuple[int, collections.Counter[str]]:
    clock = LoopClock()
    reached = 0

    async def sick(request: httpx2.Request) -> httpx2.Response:
        nonlocal reached
        reached += 1
        await clock.sleep(2.0)
        return httpx2.Response(500, json={"error": {"message": "sick"}})

    backend = gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m", concurrency=16,
                         transport=httpx2.MockTransport(sick))
    seen: collections.Counter[str] = collections.Counter()
    async with gg.Gateway([backend], clock=clock, seed=1) as gate:
        sdk = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:1/v1",
                                 http_client=gate.http_client("a"), max_retries=0)

        async def worker() -> None:
            end = clock.now() + 30.0  # 30 s: the verdict of 60, at half the CPU
            while clock.now() < end:
                try:
                    if path == "chat":
                        await gate.chat(ASK, max_tokens=5)
                    else:
                        await sdk.chat.completions.create(model="m", messages=ASK, max_tokens=5)
                except gg.GateError as error:
                    seen[type(error).__name__] += 1
                except openai.APIStatusError as error:
                    kind = error.body.get("type") if isinstance(error.body, dict) else None
                    seen[f"{error.status_code} {kind}"] += 1
                await clock.sleep(0.1)

        async with anyio.create_task_group() as tg:
            for _ in range(16):
                tg.start_soon(worker)
    return reached, seen


def test_an_sdk_on_the_gateways_client_puts_no_more_on_a_sick_backend_than_chat() -> None:
    by_chat, _ = run_virtual(_sick_for_30s, "chat")
    by_sdk, seen = run_virtual(_sick_for_30s, "sdk")
    assert by_sdk <= by_chat < 100  # 240 before (a plain client's, seeds 1-3: 18 <= 18 now)
    # the rest were answered without being sent: a 503 the SDK does not retry, saying why
    assert seen["503 gptgate_circuit_open"] > 1000  # 2,254 (5,933 in 60 s)
    assert seen["500 None"] <= by_sdk


async def _recovers() -> tuple[str, str, int]:
    clock = LoopClock()
    healthy = False
    reached = 0

    async def recovering(request: httpx2.Request) -> httpx2.Response:
        nonlocal reached
        reached += 1
        if not healthy:
            return httpx2.Response(500, json={"error": {"message": "down"}})
        return httpx2.Response(200, json=ANSWER)

    backend = gg.Backend(name="a", base_url="http://127.0.0.1:1/v1", model="m", concurrency=4,
                         transport=httpx2.MockTransport(recovering))
    async with gg.Gateway([backend], clock=clock, seed=1, max_breaker_wait_s=0.0) as gate:
        sdk = openai.AsyncOpenAI(api_key="sk-test", base_url="http://127.0.0.1:1/v1",
                                 http_client=gate.http_client("a"), max_retries=0)
        for _ in range(5):
            with pytest.raises(openai.InternalServerError):
                await sdk.chat.completions.create(model="m", messages=ASK, max_tokens=5)
        opened = gate.stats()["a"].circuit
        sent = reached
        with pytest.raises(openai.APIStatusError) as refused:
            await sdk.chat.completions.create(model="m", messages=ASK, max_tokens=5)
        assert reached == sent  # refused without being sent
        assert refused.value.response.headers["x-should-retry"] == "false"
        assert "circuit is open" in str(refused.value)
        healthy = True
        await clock.sleep(10.0)  # past the cool-down: the next request is the probe
        answer = await sdk.chat.completions.create(model="m", messages=ASK, max_tokens=5)
        assert answer.choices[0].message.content == "hi"
        return opened, gate.stats()["a"].circuit, reached - sent


def test_an_open_circuit_refuses_sdk_requests_until_a_probe_closes_it() -> None:
    opened, closed, sent_after = run_virtual(_recovers)
    assert (opened, closed, sent_after) == ("open", "closed", 1)
