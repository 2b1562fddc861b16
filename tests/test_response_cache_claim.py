"""The fleet-wide single-flight claim of ``ResponseCache(shared=...)`` on a real Redis
(gptgate/response_cache_fleet.py): the leader's claim lives as long as its call, however long
that is; it lapses only when the leader dies; a release drops only the releaser's own claim.

"Processes" are gateways of their own here, each with its own ``ResponseCache`` on one Redis
namespace, as two processes are."""

from __future__ import annotations

import anyio
import httpx2
import redis.asyncio

import gptgate as gg
from gptgate.response_cache_redis import RedisAnswers
from gptgate.sim import SimEngine
from tests.fleettools import namespace
from tests.test_response_cache import ROOMY_S, Counting, M, _backend

#: how long the backend holds each answer (real seconds), against a lease of a third of it:
#: renewed every third of a lease, a claim outlives an event loop stalled ~0.6 s (a loaded
#: CI machine); each Redis operation gets a roomy budget (what is tested is who sends, not
#: how fast Redis answers: tests/test_response_cache_lag.py tests that)
HOLD_S, LEASE_S = 3.0, 1.0


class Held(Counting):
    """The simulator (fast), each answer held ``HOLD_S`` real seconds: a long call."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests += 1
        await anyio.sleep(HOLD_S)
        return await self.inner.handle_async_request(request)


def _fleet(url: str, space: str, held: Held, n: int) -> list[gg.Gateway]:
    return [
        gg.Gateway(
            [_backend(held)], clock=gg.ScaledClock(1.0), max_attempts=1,
            response_cache=gg.ResponseCache(
                ttl_s=60,
                shared=gg.Shared(url, namespace=space, lease_s=LEASE_S, op_budget_s=ROOMY_S),
            ),
        )
        for _ in range(n)
    ]


def test_a_call_longer_than_the_lease_is_still_sent_once_across_the_fleet(
    redis_url: str,
) -> None:
    """Three processes ask the same deterministic request while one call takes three leases:
    one request. Before, the claim lapsed under the live call and each waiting process
    claimed and sent it again (3 requests)."""
    space = namespace()

    async def main() -> tuple[int, list[bool], list[bytes]]:
        held = Held(SimEngine("gpu", clock=gg.ScaledClock(1000.0), seed=3))
        one, two, three = _fleet(redis_url, space, held, 3)
        results: list[gg.ChatResult] = []

        async def ask(gate: gg.Gateway) -> None:
            results.append(await gate.chat(M, temperature=0, max_tokens=20))

        async with one, two, three, anyio.create_task_group() as group:
            for gate in (one, two, three):
                group.start_soon(ask, gate)
                await anyio.sleep(0.05)
        client = redis.asyncio.Redis.from_url(redis_url)
        left = await client.keys(f"{space}:rcf:*")
        await client.aclose()
        return held.requests, [r.from_cache for r in results], left

    requests, from_cache, claims_left = anyio.run(main)
    assert requests == 1
    assert sorted(from_cache) == [False, True, True]
    assert claims_left == []  # released once answered


def test_a_leader_that_died_lets_its_claim_lapse_and_another_sends(redis_url: str) -> None:
    """A claim nobody renews (its process was killed) keeps the others waiting ``lease_s``,
    no longer: one of them claims and sends."""
    space = namespace()

    async def main() -> tuple[int, bool, float]:
        dead = RedisAnswers(
            gg.Shared(redis_url, namespace=space, lease_s=LEASE_S, op_budget_s=ROOMY_S), ttl_s=60
        )
        held = Held(SimEngine("gpu", clock=gg.ScaledClock(1000.0), seed=3))
        (gate,) = _fleet(redis_url, space, held, 1)
        async with gate:
            key = next(iter(_keys(gate)))
            assert await dead.claim(key)  # ... and its process dies here, never renewing
            started = anyio.current_time()
            result = await gate.chat(M, temperature=0, max_tokens=20)
            took = anyio.current_time() - started
        await dead.aclose()
        return held.requests, result.from_cache, took

    requests, from_cache, took = anyio.run(main)
    assert requests == 1 and not from_cache
    assert LEASE_S <= took < LEASE_S + HOLD_S + 1.0


def test_a_release_drops_only_the_releasers_own_claim(redis_url: str) -> None:
    """A leader whose lease lapsed (a process paused for longer than ``lease_s``) and was
    claimed by another must not delete that one's claim when it finishes: a third process
    would then claim and send the same call once more."""
    space = namespace()

    async def main() -> tuple[bool, bool, bool]:
        shared = gg.Shared(redis_url, namespace=space, lease_s=LEASE_S, op_budget_s=ROOMY_S)
        first, second = RedisAnswers(shared, ttl_s=60), RedisAnswers(shared, ttl_s=60)
        assert await first.claim("k")
        await anyio.sleep(LEASE_S + 0.2)  # first's lease lapses (paused, not renewing)
        taken = await second.claim("k")
        await first.release("k")  # first finishes late
        third_claims = await RedisAnswers(shared, ttl_s=60).claim("k")
        await second.release("k")
        free = await RedisAnswers(shared, ttl_s=60).claim("k")
        for answers in (first, second):
            await answers.aclose()
        return taken, third_claims, free

    taken, third_claims, free = anyio.run(main)
    assert taken and not third_claims and free


def _keys(gate: gg.Gateway) -> set[str]:
    """The cache key of ``M`` at temperature 0 on this gateway (as ``gate.chat`` makes it)."""
    from gptgate.response_cache import request_key

    return {request_key(gate.config.backends, M, {"temperature": 0, "max_tokens": 20},
                        tier="auto", backend=None, private=False)}
