"""A 429's retry-after pauses the backend in every process of the fleet (``shared=``), on every
call path: ``gate.chat``, an SDK request on ``gate.http_client``, a ``@gate.guard`` around the
SDK's own client.

Only ``gate.chat`` published the pause: a 429 an SDK on ``gate.http_client`` or a guarded call
saw paused its own process, while the fleet's other processes went on sending into the rate
limit. Two gateways on one real redis-server (each a process of the fleet: its own worker id,
connection and admission), the real openai SDK, loopback HTTP to the simulator, whose
``x-sim-fault: 429`` answers with ``retry-after: 1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import openai
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.sim import SimServer
from tests.fleettools import namespace

USER = [{"role": "user", "content": "hi"}]
REFUSED = {"x-sim-fault": "429"}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with SimServer("gpu") as url:
        yield url


async def _refused_once(gate: gg.Gateway, base_url: str, path: str) -> None:
    """One 429 (retry-after 1 s), seen on ``path``, raised to the caller."""
    if path == "chat":
        with pytest.raises(gg.RateLimitedError):
            await gate.chat(USER, max_tokens=5, extra_headers=REFUSED, max_attempts=1)
    elif path == "sdk":  # its 0.5 s bound leaves no room to send it again after 1 s
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("b"),
            max_retries=0, timeout=0.5,
        )
        with pytest.raises(openai.RateLimitError):
            await client.chat.completions.create(
                model="m", messages=USER, max_tokens=5, extra_headers=REFUSED
            )
    else:
        own = openai.AsyncOpenAI(api_key="sk-test", base_url=base_url, max_retries=0)

        @gate.guard(backend="b", retry=False)
        async def ask() -> object:
            return await own.chat.completions.create(
                model="m", messages=USER, max_tokens=5, extra_headers=REFUSED
            )

        with pytest.raises(openai.RateLimitError):
            await ask()


async def _published(redis_url: str, ns: str) -> None:
    """Until the fleet's pause for the backend is in Redis (the seeing process sends it from
    its background task): the other process's next acquire reads it there."""
    client: Any = redis.asyncio.Redis.from_url(redis_url)
    try:
        with anyio.fail_after(5):  # never published: fails here
            while True:
                for key in await client.keys(f"*{ns}*:pause"):
                    if await client.pttl(key) > 0:
                        return
                await anyio.sleep(0.01)
    finally:
        await client.aclose()


@pytest.mark.parametrize("path", ["chat", "sdk", "guard"])
async def test_a_429_on_any_path_pauses_the_other_processes(
    redis_url: str, base_url: str, path: str
) -> None:
    def backend() -> gg.Backend:
        return gg.Backend(name="b", base_url=base_url, model="m", concurrency=4)

    ns = namespace()
    seeing = gg.Gateway([backend()], shared=gg.Shared(redis_url, namespace=ns))
    other = gg.Gateway([backend()], shared=gg.Shared(redis_url, namespace=ns))
    async with seeing, other:
        await _refused_once(seeing, base_url, path)
        await _published(redis_url, ns)
        paused = await other.chat(USER, max_tokens=5)  # its acquire hears the pause: it waits
    # the rest of the 1 s retry-after (was ~0 on the SDK and guard paths)
    assert paused.queue_s > 0.5
