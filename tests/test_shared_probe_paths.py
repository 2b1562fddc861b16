"""With ``shared=``, a recovering backend gets one half-open probe from the whole fleet on
every call path — ``gate.chat``, an SDK on ``gate.http_client`` and a ``@gate.guard`` call —
and a probe that ends without a verdict hands the fleet's probe lease back at once.

Before, SDK requests and guarded calls took the probe locally without asking the fleet: with
two gateways each sent its own probe to the recovering backend at the same moment. And a probe
cancelled by its caller kept the lease for the backend's whole timeout (30 s here): every
other process was refused the probe that long. Two Gateways in one process, a real
redis-server, real time.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from tests.mockbackend import USER, Script, backend, error, gateway, ok

BODY = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 5}
URL = "http://127.0.0.1:9/v1/chat/completions"


class Recovering:
    """A backend answering 500 while ``down``, then each request after ``take_s``."""

    def __init__(self, take_s: float) -> None:
        self.down = True
        self.take_s = take_s
        self.probes: list[float] = []  # when each request reached the recovered backend

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if self.down:
            return error(500, "down")
        self.probes.append(time.monotonic())
        await anyio.sleep(self.take_s)
        return ok()


def _pair(url: str, server: Recovering, timeout: float) -> tuple[gg.Gateway, gg.Gateway]:
    shared = gg.Shared(url, namespace=f"t{uuid.uuid4().hex[:12]}", lease_s=5.0, op_budget_s=2.0)
    return tuple(  # type: ignore[return-value]
        gateway(
            backend(Script(server), concurrency=4, timeout=timeout), shared=shared,
            breaker_threshold=2, max_attempts=1, breaker_cooldown_s=1.5,
            max_breaker_wait_s=5.0,
        )
        for _ in range(2)
    )


async def _until(predicate: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not await predicate():
            await anyio.sleep(0.01)


async def _open_then_cooled(url: str, a: gg.Gateway, b: gg.Gateway, server: Recovering) -> None:
    """a finds the backend down, b hears it; it recovers; both wait out the cool-down."""
    for _ in range(2):
        with pytest.raises(gg.BackendError):
            await a.chat(USER)

    async def b_sees_it_open() -> bool:
        return b.backend_state("mock").breaker.state(b.clock.now()) == "open"

    await _until(b_sees_it_open)
    server.down = False
    health = a.backend_state("mock").fleet_health
    assert health is not None

    async def cooled_down() -> bool:
        async with redis.asyncio.Redis.from_url(url) as r:
            return await r.get(health.circuit_key) is None

    await _until(cooled_down)


def _by_sdk(gate: gg.Gateway) -> Callable[[], Awaitable[Any]]:
    client = gate.http_client("mock")

    async def call() -> Any:
        response = await client.post(URL, json=BODY)
        assert response.status_code == 200, response.text
        return response.json()

    return call


def _by_guard(gate: gg.Gateway) -> Callable[[], Awaitable[Any]]:
    client = gate.http_client("mock")

    @gate.guard(backend="mock")
    async def call() -> Any:
        response = await client.post(URL, json=BODY)
        response.raise_for_status()
        return response.json()

    return call


def _by_chat(gate: gg.Gateway) -> Callable[[], Awaitable[Any]]:
    async def call() -> Any:
        return await gate.chat(USER)

    return call


PATHS = {"sdk": _by_sdk, "guard": _by_guard, "chat": _by_chat}


@pytest.mark.parametrize("path", list(PATHS))
async def test_one_probe_for_the_fleet_on_every_path(redis_url: str, path: str) -> None:
    server = Recovering(take_s=0.3)
    a, b = _pair(redis_url, server, timeout=5.0)
    async with a, b:
        await _open_then_cooled(redis_url, a, b, server)
        calls = [PATHS[path](a), PATHS[path](b)]
        async with anyio.create_task_group() as group:
            for call in calls:
                group.start_soon(call)
        # one probe; the other gateway's call waited for its verdict instead of probing too
        assert len(server.probes) == 2
        assert server.probes[1] - server.probes[0] >= 0.25, "both gateways probed at once"
        for gate in (a, b):
            assert gate.backend_state("mock").breaker.state(gate.clock.now()) == "closed"


@pytest.mark.parametrize("path", list(PATHS))
async def test_a_probe_left_without_a_verdict_hands_the_fleets_lease_back(
    redis_url: str, path: str
) -> None:
    server = Recovering(take_s=10.0)  # the probe hangs: its caller gives up
    a, b = _pair(redis_url, server, timeout=30.0)  # a probe's lease: the backend's timeout
    async with a, b:
        await _open_then_cooled(redis_url, a, b, server)
        with anyio.move_on_after(0.3):
            await PATHS[path](a)()
        assert len(server.probes) == 1
        left = time.monotonic()
        server.take_s = 0.05
        with anyio.fail_after(4.0):  # before: refused the probe for the lease's 30 s
            await PATHS[path](b)()
        assert len(server.probes) == 2
        assert server.probes[1] - left < 1.5
        assert b.backend_state("mock").breaker.state(b.clock.now()) == "closed"
