"""A backend paused by a 429's retry-after is paused for every call path: an SDK request on
``gate.http_client`` and a ``@gate.guard``ed call wait the pause out as ``gate.chat`` does,
whichever path saw the 429 — in this process, or (``shared=``) in another of the fleet.

Only ``gate.chat`` waited: the SDK's requests and guarded calls went straight back into the
rate limit while the backend was paused (sent 0.0 s into a 1 s retry-after, each to eat its
own 429), and the fleet's pause, heard with their permits, paused nothing of theirs. The real
openai SDK, loopback HTTP to the simulator (``x-sim-fault: 429`` answers ``retry-after: 1``),
a real redis-server for the fleet.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

import gptgate as gg
from gptgate.sim import SimEngine, SimServer
from gptgate.sim.profiles import get_profile
from tests.fleettools import namespace
from tests.test_shared_pause_paths import _published as published

USER = [{"role": "user", "content": "hi"}]
RETRY_AFTER_S = 1.0


@pytest.fixture
def server() -> Iterator[tuple[str, SimEngine]]:
    engine = SimEngine(get_profile("gpu"), seed=1)
    with SimServer(engine) as url:
        yield url, engine


def _backend(base_url: str) -> gg.Backend:
    return gg.Backend(name="b", base_url=base_url, model="m", concurrency=4)


async def _ask(gate: gg.Gateway, base_url: str, path: str) -> float:
    """One call on ``path``; when it was sent, on the gateway's clock."""
    if path == "sdk":
        client = openai.AsyncOpenAI(
            api_key="sk-test", base_url=base_url, http_client=gate.http_client("b"),
            max_retries=0,
        )
        await client.chat.completions.create(model="m", messages=USER, max_tokens=5)
    else:
        own = openai.AsyncOpenAI(api_key="sk-test", base_url=base_url, max_retries=0)

        @gate.guard(backend="b")
        async def ask() -> object:
            return await own.chat.completions.create(model="m", messages=USER, max_tokens=5)

        await ask()
    return gate.clock.now()


async def _refused(gate: gg.Gateway) -> float:
    """A 429 seen by ``gate.chat``; when, on the gateway's clock."""
    with pytest.raises(gg.RateLimitedError):
        await gate.chat(USER, max_tokens=5, extra_headers={"x-sim-fault": "429"}, max_attempts=1)
    return gate.clock.now()


@pytest.mark.parametrize("path", ["sdk", "guard"])
async def test_a_paused_backend_is_paused_for_sdk_requests_and_guards(
    server: tuple[str, SimEngine], path: str
) -> None:
    base_url, engine = server
    async with gg.Gateway([_backend(base_url)]) as gate:
        refused_at = await _refused(gate)
        answered_at = await _ask(gate, base_url, path)
    assert engine.ledger.snapshot().rate_limited == 1  # no second 429 eaten
    assert answered_at - refused_at > 0.8 * RETRY_AFTER_S  # was ~0.1: sent at once


@pytest.mark.parametrize("path", ["sdk", "guard"])
async def test_the_fleets_pause_holds_another_processes_sdk_requests_and_guards(
    redis_url: str, server: tuple[str, SimEngine], path: str
) -> None:
    base_url, engine = server
    ns = namespace()
    seeing = gg.Gateway([_backend(base_url)], shared=gg.Shared(redis_url, namespace=ns))
    other = gg.Gateway([_backend(base_url)], shared=gg.Shared(redis_url, namespace=ns))
    async with seeing, other:
        refused_at = await _refused(seeing)
        await published(redis_url, ns)  # in Redis: the other's acquire hears it there
        answered_at = await _ask(other, base_url, path)
    assert engine.ledger.snapshot().rate_limited == 1
    assert answered_at - refused_at > 0.5 * RETRY_AFTER_S  # heard with its permit, waited

