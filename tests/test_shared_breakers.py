"""Fleet-wide circuit breakers (gptgate/shared/health.py): a backend one gateway finds down is
open for another gateway of the fleet, and when the cool-down ends only one of them probes it;
the probe's success closes the circuit for both. Two Gateways in one process, a real
redis-server."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from tests.mockbackend import USER, Script, backend, error, gateway, ok


def _pair(url: str, script: Script, **options: Any) -> tuple[gg.Gateway, gg.Gateway]:
    shared = gg.Shared(url, namespace=f"t{uuid.uuid4().hex[:12]}", lease_s=5.0, op_budget_s=2.0)
    options = {"breaker_threshold": 2, "max_attempts": 1, **options}
    return tuple(  # type: ignore[return-value]
        gateway(backend(script, concurrency=4, timeout=1.0), shared=shared, **options)
        for _ in range(2)
    )


async def _circuit(url: str, gate: gg.Gateway) -> str | None:
    health = gate.backend_state("mock").fleet_health
    assert health is not None
    async with redis.asyncio.Redis.from_url(url) as r:
        value = await r.get(health.circuit_key)
    return None if value is None else value.decode()


async def _until(predicate: Any, timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not await predicate():
            await anyio.sleep(0.01)


async def test_a_backend_one_gateway_finds_down_is_open_for_the_other(redis_url: str) -> None:
    script = Script(error(500, "down"))
    a, b = _pair(redis_url, script, breaker_cooldown_s=30.0, max_breaker_wait_s=0.0)
    async with a, b:
        for _ in range(2):
            with pytest.raises(gg.BackendError):
                await a.chat(USER)
        assert a.backend_state("mock").breaker.state(a.clock.now()) == "open"

        async def b_sees_it_open() -> bool:
            return b.backend_state("mock").breaker.state(b.clock.now()) == "open"

        await _until(b_sees_it_open)  # published by a, read by b's poll
        sent = len(script.requests)
        with pytest.raises(gg.BackendError, match="circuit is open"):
            await b.chat(USER)  # b never met a failure itself
        assert len(script.requests) == sent  # and sent nothing to the dead backend


async def test_one_probe_for_the_fleet_and_its_success_closes_every_circuit(
    redis_url: str,
) -> None:
    down = True
    probes: list[float] = []

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if down:
            return error(500, "down")
        probes.append(time.monotonic())
        await anyio.sleep(0.3)  # a probe takes a while
        return ok()

    script = Script(handler)
    a, b = _pair(redis_url, script, breaker_cooldown_s=1.5, max_breaker_wait_s=5.0)
    async with a, b:
        for _ in range(2):
            with pytest.raises(gg.BackendError):
                await a.chat(USER)

        async def b_sees_it_open() -> bool:
            return b.backend_state("mock").breaker.state(b.clock.now()) == "open"

        await _until(b_sees_it_open)  # within the cool-down: b polls every 0.5 s
        down = False

        async def cooled_down() -> bool:
            return await _circuit(redis_url, a) is None

        await _until(cooled_down)  # the cool-down is over: both are half-open
        results: list[gg.ChatResult] = []

        async def call(gate: gg.Gateway) -> None:
            results.append(await gate.chat(USER))

        async with anyio.create_task_group() as group:
            group.start_soon(call, a)
            group.start_soon(call, b)
        assert len(results) == 2
        # one probe; the other call waited for its verdict instead of probing too
        assert len(probes) == 2 and probes[1] - probes[0] >= 0.25
        assert await _circuit(redis_url, a) == "closed"
        for gate in (a, b):
            assert gate.backend_state("mock").breaker.state(gate.clock.now()) == "closed"
