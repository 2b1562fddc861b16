"""A burst of calls on a fleet's shared response cache (``ResponseCache(shared=)``).

Every concurrent lookup took a connection of its own from redis-py's pool, whose limit (100
in redis-py 8) raised ``MaxConnectionsError`` past it: an outage, so the process read and
wrote its own memory only for the next 5 s. A ``gate.map`` job of two worker processes over
50 distinct prompts sent 102 requests to the backend instead of about 50 — each process paid
for every answer itself."""

from __future__ import annotations

import logging

import anyio
import pytest

import gptgate as gg
from gptgate.response_cache_redis import RedisAnswers
from tests.fleettools import namespace
from tests.mockbackend import Script, backend, gateway, ok

CALLS = 150


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"question {i}"}]


async def test_a_burst_of_lookups_reads_the_fleets_answers_without_an_outage(
    redis_url: str,
) -> None:
    script = Script(ok())
    space = namespace()

    def gate() -> gg.Gateway:
        shared = gg.Shared(redis_url, namespace=space, op_budget_s=5.0)
        return gateway(
            backend(script, concurrency=CALLS),
            response_cache=gg.ResponseCache(ttl_s=60, shared=shared),
        )

    one, two = gate(), gate()
    async with one, two:
        for i in range(CALLS):  # one pays for every answer ...
            await one.chat(messages(i), temperature=0)
        assert len(script.requests) == CALLS
        hits: list[bool] = []

        async def ask(i: int) -> None:
            hits.append((await two.chat(messages(i), temperature=0)).from_cache)

        async with anyio.create_task_group() as tg:  # ... the other asks for all at once
            for i in range(CALLS):
                tg.start_soon(ask, i)
        stats = two.stats()["mock"].response_cache
    assert stats is not None and stats.shared_errors == 0
    assert len(script.requests) == CALLS and all(hits)


def test_an_outage_warning_names_an_error_without_text_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis that does not answer raises a bare TimeoutError: the warning said
    "(TimeoutError: )"."""
    caplog.set_level(logging.WARNING, logger="gptgate")
    answers = RedisAnswers(gg.Shared("redis://:pw@127.0.0.1:9/0"), ttl_s=60)
    answers._down(TimeoutError())
    (message,) = [r.getMessage() for r in caplog.records]
    assert "(TimeoutError);" in message and "pw" not in message.replace("://:****", "")
