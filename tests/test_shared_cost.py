"""The cost of ``shared=`` on the hot path: at most two Redis round trips per call (one
acquire script, one pipelined release), and under load about one — an acquire carries the
releases its process has queued for the backend. Counted by the real redis-server itself
(``INFO commandstats``), after the gateway has closed and sent everything."""

from __future__ import annotations

import uuid

import anyio

import gptgate as gg
from tests.fleettools import scripts_run
from tests.mockbackend import USER, Script, backend, gateway, ok


async def _run_calls(
    url: str, calls: int, callers: int, concurrency: int | str = 4
) -> float:
    """Fleet operations per call of ``calls`` made by ``callers`` tasks at once (limit 4, or
    ``"auto"``), less the two a gateway makes once (register this worker; publish the limit,
    or with ``"auto"`` hand the lead over when it closes) and the leadership rounds (a
    background task's, every ``lead_s``, whatever the calls)."""
    # a generous op budget: this counts operations; a loaded machine must not make an outage
    namespace = f"t{uuid.uuid4().hex[:12]}"
    shared = gg.Shared(url, namespace=namespace, lease_s=60.0, op_budget_s=5.0)
    gate = gateway(backend(Script(ok()), concurrency=concurrency), shared=shared)
    before = await scripts_run(url)
    async with gate:
        fleet = gate._fleet
        assert fleet is not None
        todo = iter(range(calls))

        async def caller() -> None:
            for _ in todo:
                await gate.chat(USER)

        async with anyio.create_task_group() as group:
            for _ in range(callers):
                group.start_soon(caller)
        assert gate.stats()["mock"].fleet.state == "up"  # type: ignore[union-attr]
    per_call = (await scripts_run(url) - before - 2 - fleet.lead_rounds) / calls
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


async def test_auto_costs_the_same_its_samples_ride_the_same_round_trips(redis_url: str) -> None:
    # concurrency="auto" shared: each call's sample goes to the leader with the acquire or
    # the release it makes anyway — no round trip of its own
    assert await _run_calls(redis_url, calls=20, callers=1, concurrency="auto") <= 2.0
    assert await _run_calls(redis_url, calls=200, callers=8, concurrency="auto") <= 1.3
