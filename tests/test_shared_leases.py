"""Fleet-wide fixed concurrency with leased permits, against a real redis-server."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest

import gptgate as gg
from tests.fleettools import Wall, admission, fleet_client, namespace
from tests.mockbackend import USER, Script, backend, gateway, ok


async def test_acquire_up_to_the_limit_then_wait_for_a_release(redis_url: str) -> None:
    ns = namespace()
    async with fleet_client(redis_url, ns) as a, fleet_client(redis_url, ns) as b:
        at_a, at_b = admission(a, 3), admission(b, 3)
        leases = [await at_a.enter(None), await at_b.enter(None), await at_b.enter(None)]
        assert at_b.statistics().fleet_in_flight == 3
        with pytest.raises(gg.OverloadedError, match="fleet permit"):
            await at_a.enter(time.monotonic() + 0.05)
        at_b.leave(leases[2])  # sent by b's background task; a's waiter polls Redis
        with anyio.fail_after(2.0):
            await at_a.enter(None)
        assert at_a.statistics().held == 2


async def test_a_dead_holders_permits_return_after_lease_s(redis_url: str) -> None:
    ns, wall = namespace(), Wall()
    async with fleet_client(redis_url, ns, fleet_clock=wall, lease_s=5.0) as dead:
        for _ in range(2):
            await admission(dead, 2).enter(None)
        dead._admissions.clear()  # it "dies": it neither renews nor releases
    async with fleet_client(redis_url, ns, fleet_clock=wall, lease_s=5.0) as alive:
        at = admission(alive, 2)
        wall.now += 4.9
        assert not await at._try(alive.new_lease())
        wall.now += 0.2  # past lease_s since they were granted
        assert await at._try(alive.new_lease())
        assert await at._try(alive.new_lease())
        assert not await at._try(alive.new_lease())


async def test_held_leases_are_renewed(redis_url: str) -> None:
    ns, wall = namespace(), Wall()
    async with fleet_client(redis_url, ns, fleet_clock=wall, lease_s=5.0) as holder:
        at = admission(holder, 2)
        await at.enter(None)
        await at.enter(None)
        wall.now += 4.0
        await holder._renew()  # what its background task does every lease_s / 3
        async with fleet_client(redis_url, ns, fleet_clock=wall, lease_s=5.0) as other:
            wall.now += 3.0  # 7 s after the grant, 3 s after the renewal
            assert not await admission(other, 2)._try(other.new_lease())
            assert other.live_workers == 2


def pair(script: Script, url: str, ns: str, limit: int) -> list[gg.Gateway]:
    shared = gg.Shared(url, namespace=ns, lease_s=5.0, op_budget_s=1.0)
    gates = [gateway(backend(script, concurrency=limit), shared=shared) for _ in range(2)]
    for gate in gates:
        gate._fleet_options = {"poll_s": 0.002}
    return gates


def slow(delay: float) -> Callable[[httpx2.Request], Any]:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        await anyio.sleep(delay)
        return ok()

    return handler


async def run_calls(gates: list[gg.Gateway], calls: int) -> list[gg.ChatResult]:
    results: list[gg.ChatResult] = []

    async def one(gate: gg.Gateway) -> None:
        results.append(await gate.chat(USER))

    async with anyio.create_task_group() as tg:
        for i in range(calls):
            tg.start_soon(one, gates[i % len(gates)])
    return results


async def test_two_gateways_one_backend_never_exceed_the_fleet_limit(redis_url: str) -> None:
    script = Script(slow(0.01))
    gates = pair(script, redis_url, namespace(), limit=3)
    async with gates[0], gates[1]:
        results = await run_calls(gates, 24)
        stats = [g.stats()["mock"].fleet for g in gates]
    assert len(results) == 24
    assert script.max_in_flight == 3  # 3 in flight across both processes, not 3 each
    assert all(s is not None and s.state == "up" and s.held == 0 for s in stats)


async def test_without_shared_each_gateway_has_its_own_limit() -> None:
    """The baseline the test above guards against: N per process."""
    script = Script(slow(0.01))
    gates = [gateway(backend(script, concurrency=3)) for _ in range(2)]
    async with gates[0], gates[1]:
        await run_calls(gates, 24)
    assert script.max_in_flight == 6


async def test_auto_concurrency_takes_fleet_permits_too(redis_url: str) -> None:
    """(It stayed per process before fleet-wide auto: tests/test_shared_auto.py.) A long
    lease: a renewal between the call and the read would recount the fleet (0 in flight)."""
    script = Script(ok())
    shared = gg.Shared(redis_url, namespace=namespace(), lease_s=60.0)
    gate = gateway(backend(script, concurrency="auto"), shared=shared)
    async with gate:
        await gate.chat(USER)
        fleet = gate.stats()["mock"].fleet
        assert fleet is not None and fleet.leader is True and fleet.fleet_in_flight == 1


CHILD = textwrap.dedent(
    """
    import sys, anyio
    import gptgate as gg
    from gptgate.clock import SystemClock
    from gptgate.shared.fleet import FleetClient

    async def main():
        shared = gg.Shared(sys.argv[1], namespace=sys.argv[2], lease_s=float(sys.argv[3]))
        client = FleetClient(shared, clock=SystemClock())
        async with anyio.create_task_group() as tg:
            await client.start(tg)
            at = client.admission(name="b", base_url="http://127.0.0.1:9/v1", model="m", limit=2)
            await at.enter(None)
            await at.enter(None)
            print("held", flush=True)
            await anyio.sleep(3600)
    anyio.run(main)
    """
)


async def test_permits_of_a_process_killed_with_sigkill_come_back(redis_url: str) -> None:
    ns, lease_s = namespace(), 2.0
    child = await anyio.open_process(
        [sys.executable, "-c", CHILD, redis_url, ns, str(lease_s)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        assert child.stdout is not None
        with anyio.fail_after(20):
            line = await child.stdout.receive()
        assert line.strip() == b"held"
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL
    killed_at = time.time()
    wall = Wall(killed_at)
    async with fleet_client(redis_url, ns, fleet_clock=wall, lease_s=lease_s) as alive:
        at = admission(alive, 2)
        assert not await at._try(alive.new_lease())  # still counted: the child held both
        wall.now = killed_at + lease_s + 0.01  # within lease_s of its death, they are back
        assert await at._try(alive.new_lease())
        assert await at._try(alive.new_lease())


async def test_different_limits_for_one_backend_warn_naming_both_and_the_fleet_uses_the_lower(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    ns = namespace()
    caplog.set_level("WARNING", logger="gptgate")
    async with fleet_client(redis_url, ns) as high:
        at_high = admission(high, 32)
        await high._publish_limit(at_high)
        async with fleet_client(redis_url, ns) as low:
            at_low = admission(low, 12)
            await low._publish_limit(at_low)
            assert at_low.fleet_limit == 12
            leases = [await at_high.enter(None) for _ in range(12)]  # high learns 12 here
            assert at_high.fleet_limit == 12 and at_high.statistics().limit == 12
            assert not await at_high._try(high.new_lease())  # 12 across the fleet, not 32
            assert not await at_low._try(low.new_lease())
            for lease in leases:
                at_high.leave(lease)
    warnings = [r.getMessage() for r in caplog.records if "by another process" in r.getMessage()]
    assert len(warnings) == 2  # one in each process, each naming both values
    assert all("12" in w and "32" in w for w in warnings)


async def test_a_closed_worker_no_longer_counts_as_live(redis_url: str) -> None:
    """Else the local share in an outage (limit ÷ live workers) shrinks with every restart."""
    ns = namespace()
    async with fleet_client(redis_url, ns) as a:
        async with fleet_client(redis_url, ns):
            await a._renew()
            assert a.live_workers == 2
        await a._renew()
        assert a.live_workers == 1
