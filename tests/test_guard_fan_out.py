"""A guarded function whose body sends several requests at once through ``gate.http_client``
(``asyncio.gather`` of SDK calls: a RAG step asking three sub-questions) holds one permit for
the guard, not one per request: the guard's permit covers one request at a time, and a request
sent while it covers another takes a permit of its own — or the guard's, whichever is free
first (so a body on ``concurrency=1`` never waits on its own permit).

Every request of the body used to run under the guard's one permit: on ``concurrency=1``
with ``shared=`` — one call at a time for the whole fleet — three reached the server at once.
Real redis-server, the real openai SDK, loopback HTTP to the simulator.
"""

from __future__ import annotations

import anyio
import openai
import pytest

import gptgate as gg
from gptgate.sim import SimEngine, SimServer
from gptgate.sim.profiles import get_profile
from tests.fleettools import namespace

USER = [{"role": "user", "content": "Tell me about connection pools."}]


async def _fan_out(redis_url: str, limit: int, parts: int, stream: bool) -> tuple[int, int, int]:
    """Two guarded calls, each asking ``parts`` questions at once; the server's peak in
    flight, the requests it served and the gateway's in flight after."""
    engine = SimEngine(get_profile("gpu"), seed=1)
    with SimServer(engine) as base_url:
        backend = gg.Backend(name="b", base_url=base_url, model="m", concurrency=limit)
        shared = gg.Shared(redis_url, namespace=namespace(), op_budget_s=1.0)
        async with gg.Gateway([backend], shared=shared) as gate:
            client = openai.AsyncOpenAI(
                api_key="sk-test", base_url=base_url, http_client=gate.http_client("b"),
                max_retries=0,
            )

            async def one(i: int) -> str:
                if stream:
                    chunks = await client.chat.completions.create(
                        model="m", messages=USER, max_tokens=30, stream=True
                    )
                    return "".join(
                        [c.choices[0].delta.content or "" async for c in chunks if c.choices]
                    )
                answer = await client.chat.completions.create(
                    model="m", messages=USER, max_tokens=30
                )
                return answer.choices[0].message.content or ""

            @gate.guard(backend="b")
            async def ask() -> list[str]:
                answers: list[str] = [""] * parts

                async def part(i: int) -> None:
                    answers[i] = await one(i)

                async with anyio.create_task_group() as tg:
                    for i in range(parts):
                        tg.start_soon(part, i)
                return answers

            with anyio.fail_after(30):  # a body waiting on its own permit hangs: fails here
                async with anyio.create_task_group() as tg:
                    for _ in range(2):
                        tg.start_soon(ask)
            in_flight = gate.stats()["b"].in_flight
        bill = engine.ledger.snapshot()
    return bill.peak_in_flight, bill.requests, in_flight


@pytest.mark.parametrize("stream", [False, True])
async def test_a_guarded_body_sending_three_at_once_keeps_the_fleet_limit_of_one(
    redis_url: str, stream: bool
) -> None:
    peak, requests, in_flight = await _fan_out(redis_url, limit=1, parts=3, stream=stream)
    assert requests == 6
    assert peak == 1  # was 3: every request of the body rode the guard's one permit
    assert in_flight == 0


async def test_a_guarded_body_fanning_out_uses_the_room_the_limit_has(redis_url: str) -> None:
    peak, requests, in_flight = await _fan_out(redis_url, limit=4, parts=3, stream=False)
    assert requests == 6
    assert peak <= 4
    assert in_flight == 0
