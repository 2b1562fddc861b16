"""What the shared= (Redis) tests build alike: a fresh namespace, a started FleetClient, one
backend's admission."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import redis.asyncio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.limits import Limit
from gptgate.shared.auto import FleetAutoAdmission
from gptgate.shared.coalesce import Coalescer
from gptgate.shared.fleet import FleetAdmission, FleetClient, Lease
from gptgate.sim import LoopClock, SimTransport, run_virtual
from gptgate.sim.virtual import VirtualTimeLoop
from tests.mockbackend import Script, backend, gateway

BASE_URL = "http://127.0.0.1:9/v1"

T = TypeVar("T")


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
    (fleet-wide with ``shared=``: concurrency alone does not hold a rate limit).

    With a :class:`~gptgate.sim.LoopClock` (under :func:`run_fleet_virtual`) the fleet's
    scripts judge budgets and leases by the loop's virtual time too (``fleet_clock``), so the
    server, the gateways and Redis's budgets share one clock that no machine load moves."""
    profile = engine.profile
    options: dict[str, Any] = {}
    if isinstance(clock, LoopClock):
        loop = asyncio.get_running_loop()
        options["fleet_clock"] = lambda: 1_000_000.0 + loop.time()
    transport = SimTransport(engine)
    # on virtual time no lease may lapse in a run: FleetClient renews on the real clock (its
    # _run), which falls behind virtual time the faster the run is
    lease: dict[str, Any] = {"lease_s": 3600.0} if isinstance(clock, LoopClock) else {}
    shared = None if url is None else gg.Shared(url, namespace=namespace(), **lease)
    gates = [
        gg.Gateway(
            [gg.Backend(name="tier1", base_url=base_url, model=profile.model,
                        hardware=profile.hardware, transport=transport, concurrency=32)],
            clock=clock, seed=seed + i, shared=shared,
        )
        for i in range(count)
    ]
    for gate in gates:
        gate._fleet_options = dict(options)
    async with contextlib.AsyncExitStack() as stack:
        for gate in gates:
            await stack.enter_async_context(gate)
        yield gates


async def _held(loop: VirtualTimeLoop, work: Awaitable[T]) -> T:
    """``work`` with the virtual clock stopped: a Redis round trip takes real time, in which
    a :class:`VirtualTimeLoop` would otherwise jump to its next timers (a budget refilled,
    a back-off over) — as much more the slower the machine."""
    loop.threads_busy += 1  # what the loop waits for in real time (sim/virtual.py)
    try:
        return await work
    finally:
        loop.threads_busy -= 1


def run_fleet_virtual(func: Callable[[], Awaitable[T]]) -> T:
    """``func()`` under :func:`~gptgate.sim.run_virtual` with every fleet round trip to Redis
    (``Coalescer``'s pipelines: the scripts of permits, budgets, reports) taking no virtual
    time: a simulated fleet on a real redis-server whose results do not depend on how loaded
    the machine is (a ``ScaledClock`` of 60 turned each real millisecond of a starved process
    into 60 ms of its two simulated minutes)."""
    pipeline, load = Coalescer._pipeline, Coalescer.load

    async def held_pipeline(self: Coalescer, commands: list[Any]) -> list[Any]:
        return await _held(_virtual_loop(), pipeline(self, commands))

    async def held_load(self: Coalescer, names: set[str] | None = None) -> None:
        await _held(_virtual_loop(), load(self, names))

    Coalescer._pipeline = held_pipeline  # type: ignore[method-assign]
    Coalescer.load = held_load  # type: ignore[method-assign]
    try:
        return run_virtual(func)
    finally:
        Coalescer._pipeline, Coalescer.load = pipeline, load  # type: ignore[method-assign]


def _virtual_loop() -> VirtualTimeLoop:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop), "run_fleet_virtual's Redis hold needs its loop"
    return loop


def fleet_pair(script: Script, shared: gg.Shared, limit: int = 4) -> list[gg.Gateway]:
    """Two gateways of one fleet on ``script``'s backend at ``limit``, polling Redis fast (a
    waiting acquire retries every 2 ms): the fleet's outage and restart tests."""
    gates = [gateway(backend(script, concurrency=limit), shared=shared) for _ in range(2)]
    for gate in gates:
        gate._fleet_options = {"poll_s": 0.002, "probe_s": 0.01}
    return gates
