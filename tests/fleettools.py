"""What the shared= (Redis) tests build alike: a fresh namespace, a started FleetClient, one
backend's admission."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import redis.asyncio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.limits import Limit
from gptgate.shared.auto import FleetAutoAdmission
from gptgate.shared.fleet import FleetAdmission, FleetClient, Lease
from gptgate.sim import SimTransport
from tests.mockbackend import Script, backend, gateway

BASE_URL = "http://127.0.0.1:9/v1"


class Wall:
    """An injected clock moved by hand: as ``fleet_clock=``, the one the scripts judge leases,
    leads and budgets by (Redis's otherwise); as ``wall=``, a process's own wall clock, which
    judges nothing (tests/test_shared_redis_clock.py)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def namespace() -> str:
    """A namespace of its own per test, so tests sharing one redis-server do not meet."""
    return f"t{uuid.uuid4().hex[:12]}"


@asynccontextmanager
async def fleet_client(
    url: str,
    ns: str,
    *,
    wall: Callable[[], float] = time.time,
    fleet_clock: Callable[[], float] | None = None,
    lease_s: float = 5.0,
    op_budget_s: float = 1.0,
    probe_s: float | None = None,
    lead_s: float | None = None,
    poll_s: float = 0.002,
    autos: Sequence[Limit] = (),
    factory: Callable[[int], Limit] | None = None,
) -> AsyncIterator[FleetClient]:
    """A started client; ``autos``: one ``concurrency="auto"`` backend ("b"), led with the
    first of these limits (and the others after it, for each take-over; or ``factory``'s, a
    fresh limit starting at the limit it is given). ``fleet_clock``: the scripts' clock, for
    a test that moves leases by hand; ``wall``: the process's own."""
    shared = gg.Shared(url, namespace=ns, lease_s=lease_s, op_budget_s=op_budget_s)
    client = FleetClient(
        shared, clock=SystemClock(), wall=wall, fleet_clock=fleet_clock, poll_s=poll_s,
        probe_s=probe_s, lead_s=lead_s,
    )
    if autos:
        limits = iter(autos[1:])
        client.auto_admission(
            name="b", base_url=BASE_URL, model="m", own=autos[0],
            factory=factory if factory is not None else lambda _: next(limits),
        )
    async with anyio.create_task_group() as tg:
        await client.start(tg)
        try:
            yield client
        finally:
            await client.aclose()
            tg.cancel_scope.cancel()


def admission(client: FleetClient, limit: int) -> FleetAdmission:
    return client.admission(name="b", base_url=BASE_URL, model="m", limit=limit)


def leave_all(at: FleetAdmission, leases: Iterable[Lease]) -> None:
    """End every one of ``leases`` (the test's calls are done)."""
    for lease in leases:
        at.leave(lease)


def auto(client: FleetClient) -> FleetAutoAdmission:
    """The client's ``concurrency="auto"`` backend (see ``fleet_client(autos=...)``)."""
    (admission,) = client._autos
    return admission


async def scripts_run(url: str) -> int:
    """Fleet operations the server has run so far (every one is a script by its SHA)."""
    client: Any = redis.asyncio.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def published(url: str) -> int:
    """Messages the server has published so far (the fleet's wake-ups: gptgate/shared/wake.py)."""
    client: Any = redis.asyncio.Redis.from_url(url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_publish", {}).get("calls", 0))


@asynccontextmanager
async def sim_fleet(
    engine: Any, clock: Any, url: str | None, count: int, *, seed: int, base_url: str
) -> AsyncIterator[list[gg.Gateway]]:
    """``count`` started gateways — a fleet's processes with ``shared=`` at ``url`` (None:
    each alone) — on one backend ``tier1`` of the simulator ``engine``, concurrency 32 each
    (fleet-wide with ``shared=``: concurrency alone does not hold a rate limit)."""
    profile = engine.profile
    transport = SimTransport(engine)
    shared = None if url is None else gg.Shared(url, namespace=namespace())
    gates = [
        gg.Gateway(
            [gg.Backend(name="tier1", base_url=base_url, model=profile.model,
                        hardware=profile.hardware, transport=transport, concurrency=32)],
            clock=clock, seed=seed + i, shared=shared,
        )
        for i in range(count)
    ]
    async with contextlib.AsyncExitStack() as stack:
        for gate in gates:
            await stack.enter_async_context(gate)
        yield gates


def fleet_pair(script: Script, shared: gg.Shared, limit: int = 4) -> list[gg.Gateway]:
    """Two gateways of one fleet on ``script``'s backend at ``limit``, polling Redis fast (a
    waiting acquire retries every 2 ms): the fleet's outage and restart tests."""
    gates = [gateway(backend(script, concurrency=limit), shared=shared) for _ in range(2)]
    for gate in gates:
        gate._fleet_options = {"poll_s": 0.002, "probe_s": 0.01}
    return gates
