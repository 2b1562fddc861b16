"""SDK failover with ``shared=`` (a real redis-server): ``a``'s circuit opened by one process
is the fleet's, and another process's SDK requests on ``http_client("a", fallback=["b"])``
go to ``b`` without one reaching ``a`` (two gateways on one Redis namespace stand for two
processes).
"""

from __future__ import annotations

import contextlib

import anyio
import httpx2
import openai

import gptgate as gg
from gptgate.shared.health import HEALTH_POLL_S
from tests.fleettools import namespace

URL = "http://127.0.0.1:9/v1"
USER = [{"role": "user", "content": "hi"}]
THRESHOLD = 2
ANSWER = {
    "id": "c", "object": "chat.completion", "created": 1, "model": "served",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


class Counted:
    def __init__(self, status: int) -> None:
        self.status = status
        self.seen = 0

    def transport(self) -> httpx2.MockTransport:
        def handle(_: httpx2.Request) -> httpx2.Response:
            self.seen += 1
            if self.status != 200:
                return httpx2.Response(self.status, json={"error": {"message": "down"}})
            return httpx2.Response(200, json=ANSWER)

        return httpx2.MockTransport(handle)


def _gate(shared: gg.Shared, a: Counted, b: Counted) -> gg.Gateway:
    return gg.Gateway([
        gg.Backend(name="a", base_url=URL, model="m", api_key="sk-a-primary-0123",
                   transport=a.transport()),
        gg.Backend(name="b", base_url=URL, model="m", api_key="sk-b-second-0123",
                   transport=b.transport()),
    ], shared=shared, breaker_threshold=THRESHOLD, breaker_cooldown_s=600.0,
        max_breaker_wait_s=0.0, max_attempts=1)


async def test_a_circuit_the_fleet_opened_moves_another_process_sdk_requests_to_b(
    redis_url: str,
) -> None:
    shared = gg.Shared(redis_url, namespace=namespace())
    a_one, a_two, b = Counted(500), Counted(500), Counted(200)
    one, two = _gate(shared, a_one, b), _gate(shared, a_two, b)
    async with one, two:
        for _ in range(THRESHOLD):  # process 1 finds a down
            with contextlib.suppress(gg.GateError):
                await one.chat(USER, backend="a")
        await anyio.sleep(4 * HEALTH_POLL_S)  # process 2 reads the fleet's open circuit
        client = openai.AsyncOpenAI(base_url=URL, api_key="sk-a-primary-0123", max_retries=0,
                                    http_client=two.http_client("a", fallback=["b"]))
        answers = [
            (await client.chat.completions.create(model="m", messages=USER)  # type: ignore[arg-type]
             ).choices[0].message.content
            for _ in range(3)
        ]
        circuit = two.stats()["a"].circuit
        served = two.ledger.entries["b"].calls_ok
    assert a_one.seen == THRESHOLD
    assert (answers, a_two.seen, b.seen, served) == (["ok"] * 3, 0, 3, 3)
    assert circuit == "open"
