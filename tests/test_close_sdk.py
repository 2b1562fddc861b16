"""``aclose(grace_s)`` with SDK requests in flight on ``gate.http_client``: the same
grace-then-cancel contract as ``gate.chat`` and guarded calls (docs/guide/closing.md).

It used to return at once while the SDK's requests ran on at the server (and completed
after the close); with ``shared=`` their fleet permits stayed in Redis until ``lease_s`` and a
false "shared state unreachable" warning was logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.testing import LoopClock, run_virtual
from tests.fleettools import namespace
from tests.streamserver import BASE_URL, USER, GeneratingServer, raised_by, sdk_on


def _backend(server: GeneratingServer) -> gg.Backend:
    return gg.Backend(
        name="b", base_url=BASE_URL, model="m", concurrency=3, timeout=10,
        transport=httpx2.MockTransport(server),
    )


async def _close_with_requests_in_flight() -> tuple[float, int, list[BaseException | None], int]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, answer_s=3.0)
        gate = gg.Gateway([_backend(server)], clock=clock, seed=1)
        await gate.start()
        client = sdk_on(gate)
        outcomes: list[BaseException | None] = []

        async def one() -> None:
            try:
                await client.chat.completions.create(model="m", messages=USER)
            except BaseException as exc:
                outcomes.append(exc)
            else:
                outcomes.append(None)

        for _ in range(5):  # 3 sent, 2 waiting for a permit
            tg.start_soon(one)
        await clock.sleep(0.3)
        began = clock.now()
        await gate.aclose(grace_s=0.5)
        took = clock.now() - began
        running = server.running
        await clock.sleep(0.01)  # the callers see their outcomes
        tg.cancel_scope.cancel()
    return took, running, outcomes, server.generated


def test_aclose_gives_sdk_requests_the_grace_then_cancels_them() -> None:
    took, running, outcomes, generated = run_virtual(_close_with_requests_in_flight)
    # the grace, then the backend's abandon_grace_s for the requests it hung up on
    assert took == pytest.approx(0.6, abs=0.01)
    assert running == 0  # nothing runs on at the server after aclose returned
    assert len(outcomes) == 5
    assert all(isinstance(o, gg.GatewayClosedError) for o in outcomes)
    assert generated == 0  # none completed after the close


async def _close_with_streams_open() -> tuple[int, int, BaseException | None]:
    clock = LoopClock()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=10_000, per_token_s=0.01)
        gate = gg.Gateway([_backend(server)], clock=clock, seed=1)
        await gate.start()
        client = sdk_on(gate)
        stream = await client.chat.completions.create(model="m", messages=USER, stream=True)
        await stream.__anext__()
        await gate.aclose(grace_s=0.5)  # the caller is not reading: the shutdown closes it
        in_flight, running = gate.backend_state("b").limiter.in_flight, server.running
        error = await raised_by(stream.__anext__())
        tg.cancel_scope.cancel()
    return in_flight, running, error


def test_aclose_closes_an_sdk_stream_nobody_reads() -> None:
    in_flight, running, error = run_virtual(_close_with_streams_open)
    assert in_flight == 0 and running == 0
    assert isinstance(error, gg.GatewayClosedError)


async def test_aclose_hands_back_the_fleet_permits_of_sdk_requests_and_streams(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    ns = namespace()
    async with anyio.create_task_group() as tg:
        server = GeneratingServer(tg, tokens=10_000, per_token_s=0.01, answer_s=3.0)
        gate = gg.Gateway(
            [_backend(server)], shared=gg.Shared(redis_url, namespace=ns, lease_s=30), seed=1
        )
        await gate.start()
        client = sdk_on(gate)
        streams = [
            await client.chat.completions.create(model="m", messages=USER, stream=True)
            for _ in range(2)
        ]
        tg.start_soon(_ignore_errors, client.chat.completions.create(model="m", messages=USER))
        await anyio.sleep(0.1)
        async with redis.asyncio.Redis.from_url(redis_url) as r:
            keys = [k async for k in r.scan_iter(f"*{ns}*:permits")]
            held = sum([int(await r.zcard(k)) for k in keys])
            await gate.aclose(grace_s=0.2)
            left = sum([int(await r.zcard(k)) for k in keys])
        tg.cancel_scope.cancel()
    assert held == 3 and left == 0
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(streams) == 2


async def _ignore_errors(call: Awaitable[object]) -> None:
    with contextlib.suppress(Exception):
        await call
