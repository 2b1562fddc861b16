"""With ``shared=``, SDK requests on ``gate.http_client`` take their request and tokens from
the fleet's RPM/TPM budget (gptgate/shared/pacing.py), as ``gate.chat``'s calls do: the
processes of a fleet sending SDK requests together stay under the backend's limits. Before,
the SDK path skipped pacing with a fleet pacer (and read no rate-limit header), so each
process sent as fast as its permits allowed — a 429 storm. Against a real redis-server."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import httpx2
import openai
import pytest
from redis.asyncio.connection import AbstractConnection

import gptgate as gg
from gptgate.sim import LoopClock, SimEngine
from gptgate.sim.profiles import get_profile
from tests.fleettools import namespace, run_fleet_virtual, sim_fleet
from tests.mockbackend import Script, backend, gateway, ok

#: ~500 prompt tokens, 100 more of max_tokens: 600 a request
PROMPT = "lorem ipsum " * 165


def _two_gateways_of_sdk_requests(
    url: str | None, limits: dict[str, int | None], seed: int = 1, *, chat: bool = False
) -> tuple[int, int]:
    """Two gateways (a fleet's processes with ``shared=``, 6 SDK callers each, concurrency 32
    fleet-wide: concurrency alone does not hold the rate) calling one server limited by
    ``limits`` as fast as they may for two minutes of virtual time (the fleet's Redis round
    trips take none: ``run_fleet_virtual``): (its 429s, its requests). ``chat``: the same job
    by ``gate.chat`` (to compare)."""
    return run_fleet_virtual(partial(_sdk_fleet, url, limits, seed, chat=chat))


async def _sdk_fleet(
    url: str | None, limits: dict[str, int | None], seed: int, *, chat: bool
) -> tuple[int, int]:
    clock = LoopClock()
    profile = get_profile("tier1").model_copy(update=limits)
    engine = SimEngine(profile, clock=clock, seed=seed)
    base_url = "http://127.0.0.1:2/v1"
    async with sim_fleet(engine, clock, url, 2, seed=seed, base_url=base_url) as gates:
        end = clock.now() + 120.0

        async def worker(gate: gg.Gateway) -> None:
            client = openai.AsyncOpenAI(
                base_url="http://127.0.0.1:2/v1", api_key="k", max_retries=0,
                timeout=30.0, http_client=gate.http_client("tier1"),
            )
            while clock.now() < end:
                try:
                    if chat:
                        await gate.chat([{"role": "user", "content": PROMPT}], max_tokens=100,
                                        timeout=30.0)
                        continue
                    await client.chat.completions.create(
                        model=profile.model, max_tokens=100,
                        messages=[{"role": "user", "content": PROMPT}],
                    )
                except (openai.APIError, gg.GateError):  # a 429, no budget in time: back off
                    await clock.sleep(1.0)

        async with anyio.create_task_group() as tg:
            for gate in gates:
                for _ in range(6):
                    tg.start_soon(worker, gate)
    ledger = engine.ledger.snapshot()
    return ledger.rate_limited, ledger.requests


def test_two_gateways_sdk_requests_stay_under_the_servers_rpm(redis_url: str) -> None:
    rejected, sent = _two_gateways_of_sdk_requests(redis_url, {"rpm": 120, "tpm": None})
    print(f"RPM 120, shared: {rejected} 429s of {sent} requests")
    assert rejected <= 0.02 * sent, (rejected, sent)
    # the budget was used: 120 at once, then 2 a second (352 sent on virtual time, as
    # gate.chat's; 58-88 on a ScaledClock(60) beside four busy loops)
    assert sent >= 320


def test_two_gateways_sdk_requests_stay_under_the_servers_tpm(redis_url: str) -> None:
    rejected, sent = _two_gateways_of_sdk_requests(
        redis_url, {"rpm": None, "tpm": 60_000}
    )
    print(f"TPM 60k, shared: {rejected} 429s of {sent} requests")
    assert rejected <= 0.02 * sent, (rejected, sent)
    # 100 requests' budget at once, then ~0.9 × 100 a minute (297 sent on virtual time)
    assert sent >= 270


def _rate_limited_ok(request: httpx2.Request) -> httpx2.Response:
    response = ok()
    response.headers.update(
        {"x-ratelimit-limit-requests": "100000", "x-ratelimit-remaining-requests": "99000"}
    )
    return response


@pytest.mark.parametrize(("callers", "calls", "most"), [(1, 20, 1.3), (8, 200, 1.0)])
async def test_an_sdk_requests_take_costs_about_one_round_trip(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, callers: int, calls: int, most: float
) -> None:
    """What the fleet's budget costs an SDK request: its take is one PACE script, sent in the
    client's shared pipeline; its permit's lease is mostly reused without a round trip.
    Measured 1.05 round trips a request for one caller (``gate.chat``: 1.05) and 0.81 for
    eight (``gate.chat``: 0.51, its take riding in its permit's acquire). Round trips are
    counted where redis-py writes to the socket (tests/test_shared_pacing.py)."""
    writes = 0
    send = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
        nonlocal writes
        writes += 1
        await send(self, *args, **kwargs)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    shared = gg.Shared(redis_url, namespace=namespace(), lease_s=60.0, op_budget_s=5.0)
    gate = gateway(backend(Script(_rate_limited_ok), concurrency=4), shared=shared)
    async with gate:
        client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0,
            http_client=gate.http_client("mock"),
        )
        writes_before = writes
        todo = iter(range(calls))

        async def caller() -> None:
            for _ in todo:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hello"}]
                )

        async with anyio.create_task_group() as group:
            for _ in range(callers):
                group.start_soon(caller)
        round_trips = (writes - writes_before) / calls
        pacing = gate.stats()["mock"].fleet_pacing
    print(f"{callers} callers: {round_trips:.2f} round trips per SDK request")
    assert pacing is not None and pacing.active
    assert pacing.fleet_reserved >= calls - 4  # all but the first wave, before any report
    assert round_trips <= most, round_trips
