"""The cost of ``shared=`` on the hot path: at most two Redis round trips per call (one
acquire script, one pipelined release), and under load about one — an acquire carries the
releases its process has queued for the backend. Counted by the real redis-server itself
(``INFO commandstats``), after the gateway has closed and sent everything."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import redis.asyncio

import gptgate as gg
from tests.mockbackend import USER, Script, backend, gateway, ok


async def _scripts_run(url: str) -> int:
    """Fleet operations the server has run so far (every one is a script by its SHA)."""
    client: Any = redis.asyncio.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def _run_calls(url: str, calls: int, callers: int) -> float:
    """Fleet operations per call of ``calls`` made by ``callers`` tasks at once (limit 4),
    less the two a gateway makes once (register this worker, publish the limit)."""
    # a generous op budget: this counts operations; a loaded machine must not make an outage
    namespace = f"t{uuid.uuid4().hex[:12]}"
    shared = gg.Shared(url, namespace=namespace, lease_s=60.0, op_budget_s=5.0)
    gate = gateway(backend(Script(ok()), concurrency=4), shared=shared)
    before = await _scripts_run(url)
    async with gate:
        todo = iter(range(calls))

        async def caller() -> None:
            for _ in todo:
                await gate.chat(USER)

        async with anyio.create_task_group() as group:
            for _ in range(callers):
                group.start_soon(caller)
        assert gate.stats()["mock"].fleet.state == "up"  # type: ignore[union-attr]
    per_call = (await _scripts_run(url) - before - 2) / calls
    print(f"{callers} callers: {per_call:.2f} fleet operations per call")
    return per_call


async def test_at_most_two_round_trips_per_call(redis_url: str) -> None:
    # one call at a time: each release is sent on its own, nothing carries it
    assert await _run_calls(redis_url, calls=20, callers=1) <= 2.0


async def test_a_busy_process_sends_its_releases_with_its_acquires(redis_url: str) -> None:
    # eight callers on a limit of four: every call's acquire carries the releases before it
    # (it was 2.0 per call, an acquire and a release each, and the acquires that ran before
    # the release were refused and asked again)
    assert await _run_calls(redis_url, calls=200, callers=8) <= 1.3
