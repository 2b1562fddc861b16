"""Fleet-wide RPM/TPM pacing (``shared=``, gptgate/shared/pacing.py) against a real
redis-server: the processes of a fleet take from ONE request and token budget per backend,
learned from the ``x-ratelimit-*`` headers any of them sees, instead of each spending the
whole ``remaining`` it is told as its own (N processes: N × the provider's limit, a 429
storm). The budget logic runs on an injected wall clock (exact); one end-to-end run puts four
gateways on one rate-limited simulated server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any

import anyio
import httpx2
import pytest
from redis.asyncio.connection import AbstractConnection

import gptgate as gg
from gptgate.limits.pacing import RateLimitPacer
from gptgate.shared.auto import FleetAutoAdmission
from gptgate.shared.fleet import FleetClient
from gptgate.shared.pacing import FleetPacer
from gptgate.sim import LoopClock, SimEngine
from gptgate.sim.profiles import get_profile
from gptgate.wire.ratelimits import RateLimitInfo
from tests.conftest import RedisServer
from tests.fleettools import (
    BASE_URL,
    admission,
    fleet_client,
    namespace,
    run_fleet_virtual,
    scripts_run,
    sim_fleet,
)
from tests.mockbackend import USER, Script, backend, gateway, ok

#: 60 requests a minute: with the 0.9 margin a full budget is 54 calls, refilled 0.9 a second
BUDGET = RateLimitInfo(limit_requests=60, remaining_requests=60)


class Wall:
    """The fleet's wall clock, moved by hand (lease expiries and budget refills)."""

    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def pacer(client: FleetClient) -> FleetPacer:
    key = client._backend_key("b", BASE_URL, "m")
    return FleetPacer(client, name="b", key=key, local=RateLimitPacer())


@contextlib.asynccontextmanager
async def two_processes(
    url: str, wall: Callable[[], float], **options: Any
) -> AsyncIterator[tuple[FleetClient, FleetClient]]:
    ns = namespace()
    async with (
        fleet_client(url, ns, fleet_clock=wall, **options) as a,
        fleet_client(url, ns, fleet_clock=wall, **options) as b,
    ):
        yield a, b


async def free_takes(pacers: list[FleetPacer], most: int = 500) -> int:
    """Calls the pacers (taking turns) may send at once before one is told to wait."""
    for n in range(most):
        delay, _ = await pacers[n % len(pacers)].reserve(0.0, 10)
        if delay > 0:
            return n
    return most


async def test_two_processes_share_one_budget(redis_url: str) -> None:
    wall = Wall()
    async with two_processes(redis_url, wall) as (a, b):
        pa, pb = pacer(a), pacer(b)
        assert await pa.reserve(0.0, 10) == (0.0, None)  # no budget known: not paced
        pa.observe(0.0, BUDGET, None)  # a's first response: the fleet's budget (b sees none)
        # 60 remaining less the 10% headroom: 54 calls at once for the whole fleet — each
        # process pacing alone believed the 54 were its own (108 sent, 48 of them 429s)
        assert await free_takes([pa, pb]) == 54
        delay, seq = await pb.reserve(0.0, 10)
        assert seq == (56, 0)  # the fleet's 56th take (no token budget reported)
        # it queues behind the 55th: two requests short at 0.9 a second
        assert abs(delay - 2 / 0.9) < 0.01, delay
        wall.t += 10.0  # nine requests refilled (of 54); two already promised
        assert await free_takes([pa, pb]) == 7


async def test_a_report_sets_the_level_from_its_calls_place_in_the_sequence(
    redis_url: str,
) -> None:
    wall = Wall()
    async with two_processes(redis_url, wall) as (a, b):
        pa, pb = pacer(a), pacer(b)
        pa.observe(0.0, BUDGET, None)
        for _ in range(10):
            _, seq = await pa.reserve(0.0, 10)
        assert seq == (10, 0)
        for _ in range(5):
            await pb.reserve(0.0, 10)  # taken after a's 10th: its server had not counted them
        # a's 10th call comes back: the server had 40 left (someone else used 10 more)
        pa.observe(0.0, RateLimitInfo(limit_requests=60, remaining_requests=40), seq)
        # 40 − 6 headroom − the 5 b took since: 29 (a's next take carries the report)
        assert await free_takes([pa, pb]) == 29


async def test_a_report_without_its_place_only_lowers_the_level(redis_url: str) -> None:
    wall = Wall()
    async with two_processes(redis_url, wall) as (a, b):
        pa, pb = pacer(a), pacer(b)
        pa.observe(0.0, BUDGET, None)
        await pa.reserve(0.0, 10)  # carries the first report: level 54, then 53
        pb.observe(0.0, RateLimitInfo(limit_requests=60, remaining_requests=59), None)
        assert await free_takes([pb, pa]) == 53  # 59 − 6 = 53 is no lower: kept
        wall.t += 60.0  # full again
        pb.observe(0.0, RateLimitInfo(limit_requests=60, remaining_requests=16), None)
        assert await free_takes([pb, pa]) == 10  # 16 − 6: lowered


async def test_a_call_past_its_deadline_takes_nothing(redis_url: str) -> None:
    wall = Wall()
    async with two_processes(redis_url, wall) as (a, b):
        pa, pb = pacer(a), pacer(b)
        pa.observe(0.0, BUDGET, None)
        assert await free_takes([pa, pb]) == 54  # the 55th took (and waits 1/0.9 s)
        for _ in range(20):  # calls that would fail at once: they do not queue the budget
            delay, seq = await pb.reserve(0.0, 10, deadline=0.5)
            assert seq is None and abs(delay - 2 / 0.9) < 0.01
        delay, seq = await pa.reserve(0.0, 10)
        assert seq is not None and abs(delay - 2 / 0.9) < 0.01  # not 22 requests later


async def test_tokens_are_paced_and_given_back(redis_url: str) -> None:
    wall = Wall()
    budget = RateLimitInfo(limit_tokens=10_000, remaining_tokens=10_000)
    async with two_processes(redis_url, wall) as (a, b):
        pa, pb = pacer(a), pacer(b)
        pa.observe(0.0, budget, None)
        seqs = []
        for p in (pa, pb, pa):  # 3 × 3,000 of the 9,000 usable
            delay, seq = await p.reserve(0.0, 3000)
            assert delay == 0.0
            seqs.append(seq)
        delay, _ = await pb.reserve(0.0, 3000)
        assert abs(delay - 3000 / 150) < 0.01  # 9,000 a minute: 150 a second
        # the first three used 1,000 each: 6,000 back, carried by the next take
        for seq in seqs:
            pa.reconcile(seq, 3000, 1000)
        delay, _ = await pa.reserve(0.0, 3000)
        assert delay == 0.0


async def test_redis_away_paces_locally_on_this_process_share(own_redis: RedisServer) -> None:
    wall = Wall()
    async with two_processes(own_redis.url, wall, op_budget_s=0.2) as (_, b):
        assert b.live_workers == 2
        pb = pacer(b)
        pb.observe(0.0, BUDGET, None)
        own_redis.stop()
        # half of 60 a minute, less its headroom: 27 at once; no call fails because Redis did
        now = 0.0
        sent = 0
        while True:
            delay, seq = await pb.reserve(now, 10)
            assert seq is None
            if delay > 0:
                break
            sent += 1
        assert b.state == "down"
        assert sent == 27
        assert abs(delay - 1 / 0.45) < 0.01  # 27 a minute: 0.45 a second
        assert pb.statistics().local_reserved == 28


async def test_the_outage_share_counts_the_workers_its_calls_saw_on_the_backend(
    redis_url: str,
) -> None:
    """A process that started before the others learns of them from its acquires, not at
    its next renewal (every ``lease_s / 3``): its outage budget is its share, not the whole."""
    ns = namespace()
    async with fleet_client(redis_url, ns) as a:
        at_a = admission(a, 4)
        async with fleet_client(redis_url, ns) as b:
            at_b = admission(b, 4)
            at_b.leave(await at_b.enter(None))
            at_a.leave(await at_a.enter(None))
            assert a.live_workers == 1  # no renewal since b started
            assert pacer(a).share == 0.5


def _rate_limited_ok(request: httpx2.Request) -> httpx2.Response:
    response = ok()
    response.headers.update(
        {"x-ratelimit-limit-requests": "100000", "x-ratelimit-remaining-requests": "99000"}
    )
    return response


async def test_pacing_rides_in_the_permits_round_trip(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a call's take is pipelined with its permit's acquire (and runs only if the permit was
    # granted), and carries the releases queued for the backend and the latest report: with a
    # rate-limited backend a call costs two fleet operations (acquire, take) but about one
    # round trip. Round trips are counted where redis-py writes to the socket.
    writes = 0
    send = AbstractConnection.send_packed_command

    async def counted(self: AbstractConnection, *args: Any, **kwargs: Any) -> None:
        nonlocal writes
        writes += 1
        await send(self, *args, **kwargs)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    for callers, calls in ((1, 20), (8, 200)):
        shared = gg.Shared(redis_url, namespace=namespace(), lease_s=60.0, op_budget_s=5.0)
        gate = gateway(backend(Script(_rate_limited_ok), concurrency=4), shared=shared)
        scripts_before = await scripts_run(redis_url)
        async with gate:
            writes_before = writes
            todo = iter(range(calls))

            async def caller(gate: gg.Gateway, todo: Any) -> None:
                for _ in todo:
                    await gate.chat(USER)

            async with anyio.create_task_group() as group:
                for _ in range(callers):
                    group.start_soon(caller, gate, todo)
            round_trips = (writes - writes_before) / calls
            pacing = gate.stats()["mock"].fleet_pacing
            assert pacing is not None and pacing.active
            # all but the first wave (the limit, 4): admitted together, in one round trip,
            # before any response told the budget
            assert pacing.fleet_reserved >= calls - 4
        per_call = (await scripts_run(redis_url) - scripts_before - 2) / calls
        print(f"{callers} callers: {per_call:.2f} fleet operations, {round_trips:.2f} round "
              "trips per call")
        # an operation per report or per release on its own would make it three
        assert per_call <= (2.5 if callers == 1 else 2.3), (callers, per_call)
        # without the ride-along: two (acquire, then take), plus releases on their own
        assert round_trips <= (1.5 if callers == 1 else 1.3), (callers, round_trips)


def _four_gateways_on_one_rate_limit(url: str | None, seed: int = 1) -> tuple[int, int]:
    """Four gateways (a fleet's processes, 8 callers each, concurrency 32 — fleet-wide with
    ``shared=``, so concurrency alone does not hold the rate) calling one server of 120
    requests a minute as fast as they may for two minutes of virtual time (the fleet's Redis
    round trips take none: ``run_fleet_virtual``): (its 429s, its requests)."""
    return run_fleet_virtual(partial(_four_gateways, url, seed))


async def _four_gateways(url: str | None, seed: int) -> tuple[int, int]:
    clock = LoopClock()
    profile = get_profile("tier1").model_copy(update={"rpm": 120})
    engine = SimEngine(profile, clock=clock, seed=seed)
    async with sim_fleet(engine, clock, url, 4, seed=seed, base_url="http://sim/v1") as gates:
        end = clock.now() + 120.0

        async def worker(gate: gg.Gateway) -> None:
            while clock.now() < end:
                try:
                    await gate.chat(USER, max_tokens=50, timeout=20.0)
                except gg.GateError:  # e.g. no budget before its deadline: back off
                    await clock.sleep(1.0)

        async with anyio.create_task_group() as tg:
            for gate in gates:
                for _ in range(8):
                    tg.start_soon(worker, gate)
    ledger = engine.ledger.snapshot()
    return ledger.rate_limited, ledger.requests


def test_four_gateways_stay_under_the_servers_rpm(redis_url: str) -> None:
    alone, sent_alone = _four_gateways_on_one_rate_limit(None)
    assert alone > 0.05 * sent_alone  # each process pacing alone: a 429 storm
    rejected, sent = _four_gateways_on_one_rate_limit(redis_url)
    assert rejected <= 0.01 * sent, (rejected, sent, alone, sent_alone)
    assert sent >= 340  # the budget was used: 120 at once, then 2 a second (373 sent)


async def test_a_redis_restarted_empty_gets_the_budget_back_from_the_kept_report(
    own_redis: RedisServer,
) -> None:
    wall = Wall()
    async with fleet_client(own_redis.url, namespace(), fleet_clock=wall, op_budget_s=0.2,
                            probe_s=0.02) as client:
        p = pacer(client)
        p.observe(0.0, BUDGET, None)
        own_redis.stop()
        delay, seq = await p.reserve(0.0, 10)  # the report could not go: kept
        assert (delay, seq) == (0.0, None) and client.state == "down"
        own_redis.start()  # empty, as after a crash
        with anyio.fail_after(5):
            while client.state != "up":
                await anyio.sleep(0.01)
        # the first take after the rejoin carries the kept report: the budget is back
        assert await free_takes([p]) == 54
        assert p.statistics().fleet_reserved == 55


async def test_the_fleets_auto_limit_is_bounded_by_the_whole_rate_not_one_share(
    redis_url: str,
) -> None:
    """``shared=`` with ``concurrency="auto"``: the leader's one limit is the fleet's, so its
    rate ceiling (rate × latency) is the whole RPM/TPM budget. Given one process's share, 4
    workers on a 300-RPM server held the fleet at 2-3 in flight (0.44x of a fixed limit)."""

    def headers(request: httpx2.Request) -> httpx2.Response:
        response = ok()
        response.headers.update(
            {"x-ratelimit-limit-requests": "600", "x-ratelimit-remaining-requests": "590"}
        )
        return response

    shared = gg.Shared(redis_url, namespace=namespace(), lease_s=60.0, op_budget_s=5.0)
    gates = [
        gateway(backend(Script(headers), concurrency="auto"), shared=shared) for _ in range(2)
    ]
    async with gates[0], gates[1]:
        for gate in gates:  # two workers on the backend, each with a share of one half
            for _ in range(3):
                await gate.chat(USER)
        pacers = [g._states["mock"].fleet_pacer for g in gates]
        assert all(p is not None and p.share == 0.5 for p in pacers)
        leaders = [
            a.leader for g in gates
            if isinstance(a := g._states["mock"].limiter.admission, FleetAutoAdmission)
            and a.leader is not None
        ]
        assert len(leaders) == 1
        whole = pacers[0].local.sustained_rate()  # type: ignore[union-attr]
        assert whole is not None and whole > 0
        assert leaders[0].algorithm._rate == pytest.approx(whole)  # type: ignore[attr-defined]
