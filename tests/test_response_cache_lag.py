"""A loaded machine is not a Redis outage for ``ResponseCache(shared=)``.

Under CPU load (CI's ``pytest -n auto`` on 2 cores) one Redis reply read later than the
50 ms ``op_budget_s`` — the event loop busy, or redis-server not scheduled for a moment —
put the response cache into a 5 s outage: two gateways on one Redis each sent the same
request, a forked child's answer never reached its parent. One late reply is asked again
(the fleet's rule: gptgate/shared/fleet.py); a Redis that stays slow is still an outage."""

from __future__ import annotations

import time
from typing import Any

import anyio

import gptgate as gg
from gptgate.response_cache_redis import RedisAnswers
from tests.fleettools import namespace

BUDGET_S = 0.05


class Lagging:
    """The real Redis client, with its first ``times`` commands late: the event loop blocked
    past the budget (``busy``) or the reply slow to come (not ``busy``)."""

    def __init__(self, inner: Any, times: int, *, busy: bool) -> None:
        self.inner, self.times, self.busy = inner, times, busy

    def __getattr__(self, name: str) -> Any:
        command = getattr(self.inner, name)
        if name not in {"get", "set", "delete", "ping"}:
            return command

        async def late(*args: Any, **kwargs: Any) -> Any:
            if self.times > 0:
                self.times -= 1
                if self.busy:
                    time.sleep(3 * BUDGET_S)  # noqa: ASYNC251 -- the loop blocked on purpose
                else:
                    await anyio.sleep(3 * BUDGET_S)
            return await command(*args, **kwargs)

        return late


def _answers(redis_url: str, times: int, *, busy: bool) -> RedisAnswers:
    answers = RedisAnswers(
        gg.Shared(redis_url, namespace=namespace(), op_budget_s=BUDGET_S), ttl_s=60
    )
    answers._redis = Lagging(answers._client(), times, busy=busy)
    return answers


def _round_trip(answers: RedisAnswers) -> tuple[bytes | None, bool, bool, bool]:
    async def main() -> tuple[bytes | None, bool, bool, bool]:
        await answers.put("k", b"answer")
        got = await answers.get("k")
        first = await answers.claim("f")
        second = await answers.claim("f")  # held: by this process, once
        await answers.aclose()
        return got, first, second, answers.up

    return anyio.run(main)


def test_one_late_reply_is_asked_again_not_an_outage(redis_url: str) -> None:
    answers = _answers(redis_url, 1, busy=False)
    assert _round_trip(answers) == (b"answer", True, False, True)
    assert answers.errors == 0


def test_a_busy_event_loop_is_not_a_redis_outage(redis_url: str) -> None:
    answers = _answers(redis_url, 2, busy=True)
    assert _round_trip(answers) == (b"answer", True, False, True)
    assert answers.errors == 0


def test_a_claim_whose_reply_came_late_is_still_this_processes(redis_url: str) -> None:
    """The late SET NX may have run: asked again, it finds its own claim, not another's."""

    async def main() -> tuple[bool, bool]:
        answers = _answers(redis_url, 0, busy=False)
        client = answers._redis
        inner_set = client.inner.set

        async def set_then_late(*args: Any, **kwargs: Any) -> Any:
            client.inner.set = inner_set  # once: the command runs, its reply comes late
            done = await inner_set(*args, **kwargs)
            await anyio.sleep(3 * BUDGET_S)
            return done

        client.inner.set = set_then_late
        mine = await answers.claim("f")
        other = RedisAnswers(answers.shared, ttl_s=60)
        theirs = await other.claim("f")
        await answers.aclose()
        await other.aclose()
        return mine, theirs

    assert anyio.run(main) == (True, False)


def test_a_redis_that_stays_slow_is_still_an_outage(redis_url: str) -> None:
    answers = _answers(redis_url, 10, busy=False)

    async def main() -> bytes | None:
        got = await answers.get("k")
        await answers.aclose()
        return got

    assert anyio.run(main) is None
    assert answers.errors == 1 and not answers.up
