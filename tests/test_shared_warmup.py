"""Fleet-wide cache warm-up single-flight (``shared=``, gptgate/shared/warmup.py), against a
real redis-server: two gateways (two processes of one fleet, here in one process) calling
one cold prefix send ONE warm-up between them, not one each; a claimant that dies holds the
prefix only until its lease lapses; a failed warm-up hands the prefix on at once; with Redis
away each process warms on its own, as without ``shared=``."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.shared.warmup import FleetWarmup
from tests.conftest import RedisServer
from tests.fleettools import BASE_URL, fleet_client, namespace
from tests.mockbackend import Script, _stream_if_asked, backend, gateway, ok

PREFIX = [{"role": "system", "content": "You are a careful assistant. " * 20}]
#: long enough to be cached (a provider caches from 1,024 tokens): its calls ramp
LONG_PREFIX = [{"role": "system", "content": "Reference text, to be cached. " * 300}]
SCENARIO = gg.Scenario(name="warm", stream=False, ramp=gg.RampPolicy(min_prefix_tokens=0))


def _slow_backend(script_calls: list[bool], delay: float = 0.05) -> Script:
    """A backend that takes ``delay`` per call; records for each request whether it is a
    warm-up (a prefix's warm-up streams on the wire, ordinary calls here do not)."""

    async def handler(request: httpx2.Request) -> httpx2.Response:
        script_calls.append(bool(json.loads(request.content).get("stream")))
        await anyio.sleep(delay)
        return _stream_if_asked(request, ok(prompt=200, cached=150))

    return Script(handler)


async def _two_gateways_call(
    url: str, *, shared: bool, calls_each: int = 8
) -> tuple[list[bool], list[Any]]:
    warmups: list[bool] = []
    script = _slow_backend(warmups)
    options: dict[str, Any] = {}
    if shared:
        options["shared"] = gg.Shared(url, namespace=namespace(), lease_s=5.0, op_budget_s=1.0)
    a, b = (gateway(backend(script, concurrency=16), **options) for _ in range(2))
    results: list[Any] = []

    async def call(gate: gg.Gateway, i: int) -> None:
        messages = [*PREFIX, {"role": "user", "content": f"question {i}"}]
        results.append(await gate.chat(messages, scenario=SCENARIO))

    async with a, b, anyio.create_task_group() as tg:
        for i in range(calls_each):
            tg.start_soon(call, a, i)
            tg.start_soon(call, b, i)
    return warmups, [a, b]


async def test_two_gateways_send_one_warm_up_between_them(redis_url: str) -> None:
    # without shared= each gateway warms the prefix itself: two warm-ups, both cold
    alone, _ = await _two_gateways_call(redis_url, shared=False)
    assert alone.count(True) == 2
    warmups, gates = await _two_gateways_call(redis_url, shared=True)
    assert len(warmups) == 16  # every call went
    assert warmups.count(True) == 1, warmups
    assert warmups[0] is True  # and it went first: the others waited for it
    joined = [g.cache_gate._fleet_warmup.statistics() for g in gates]
    assert sorted((s.claimed, s.joined) for s in joined) == [(0, 1), (1, 0)]


async def test_a_dead_claimant_holds_the_prefix_only_for_its_lease(redis_url: str) -> None:
    ns = namespace()
    async with (
        fleet_client(redis_url, ns, lease_s=0.3) as first,
        fleet_client(redis_url, ns, lease_s=0.3) as second,
        anyio.create_task_group() as tg,
    ):
        key = first._backend_key("b", BASE_URL, "m")
        dying = FleetWarmup(first, keys={"b": key}, task_group=tg, poll_s=0.005)
        waiting = FleetWarmup(second, keys={"b": key}, task_group=tg, poll_s=0.005)
        assert await dying.claim("b", "p:x")  # claimed ... and never marked warm (died)
        began = anyio.current_time()
        with anyio.fail_after(5):
            claim = await waiting.claim("b", "p:x")
        waited = anyio.current_time() - began
        assert claim  # the lease lapsed: this one warms it now
        assert 0.2 <= waited <= 1.5, waited
        assert waiting.statistics().claimed == 1


async def test_a_failed_warm_up_hands_the_prefix_on_at_once(redis_url: str) -> None:
    ns = namespace()
    async with (
        fleet_client(redis_url, ns, lease_s=30.0) as first,
        fleet_client(redis_url, ns, lease_s=30.0) as second,
        anyio.create_task_group() as tg,
    ):
        key = first._backend_key("b", BASE_URL, "m")
        failing = FleetWarmup(first, keys={"b": key}, task_group=tg, poll_s=0.005)
        waiting = FleetWarmup(second, keys={"b": key}, task_group=tg, poll_s=0.005)
        claim = await failing.claim("b", "p:y")
        assert claim
        got: list[str | None] = []

        async def wait() -> None:
            got.append(await waiting.claim("b", "p:y"))

        tg.start_soon(wait)
        await anyio.sleep(0.05)
        assert not got  # held by the claim (30 s lease)
        failing.done("b", "p:y", claim, warm=False)
        with anyio.fail_after(2):  # long before the lease
            while not got:
                await anyio.sleep(0.005)
        assert got[0]  # this one warms it
        waiting.done("b", "p:y", got[0], warm=True)
        with anyio.fail_after(2):
            while await failing.claim("b", "p:y") is not None:
                await anyio.sleep(0.005)
        assert failing.statistics().joined == 1


async def test_a_warm_prefix_is_found_warm_and_renewed(redis_url: str) -> None:
    ns = namespace()
    async with fleet_client(redis_url, ns) as client, anyio.create_task_group() as tg:
        key = client._backend_key("b", BASE_URL, "m")
        warmup = FleetWarmup(client, keys={"b": key}, task_group=tg)
        assert await warmup.claim("b", "p:z")
        warmup.done("b", "p:z", "", warm=True)  # e.g. gate.warm: no claim, still warm
        async with redis.asyncio.Redis.from_url(redis_url) as r:
            with anyio.fail_after(2):
                while not await r.exists(f"{key}:warm:p:z"):
                    await anyio.sleep(0.005)
            await r.pexpire(f"{key}:warm:p:z", 1000)
            assert await warmup.claim("b", "p:z") is None
            assert await r.pttl(f"{key}:warm:p:z") > 1000  # renewed by the finder
        # a backend that is not shared: warmed locally, no claim
        assert await warmup.claim("other", "p:z") == ""


async def test_redis_away_each_process_warms_for_itself(own_redis: RedisServer) -> None:
    own_redis.stop()
    warmups: list[bool] = []
    script = _slow_backend(warmups, delay=0.01)
    shared = gg.Shared(own_redis.url, namespace=namespace(), lease_s=5.0, op_budget_s=0.05)
    a, b = (gateway(backend(script, concurrency=4), shared=shared) for _ in range(2))
    async with a, b, anyio.create_task_group() as tg:
        for gate in (a, b):
            for i in range(3):
                messages = [*PREFIX, {"role": "user", "content": f"q{i}"}]
                tg.start_soon(lambda g=gate, m=messages: g.chat(m, scenario=SCENARIO))
    assert len(warmups) == 6  # no call failed because Redis did
    assert warmups.count(True) == 2  # each gateway warmed on its own



async def test_the_hit_rate_estimate_is_the_fleets(redis_url: str) -> None:
    shared = gg.Shared(redis_url, namespace=namespace(), lease_s=5.0, op_budget_s=1.0)
    hits = Script(lambda r: _stream_if_asked(r, ok(prompt=3000, cached=2048)))
    misses = Script(lambda r: _stream_if_asked(r, ok(prompt=3000, cached=0)))
    a = gateway(backend(hits), shared=shared)  # the same backend seen by two processes:
    b = gateway(backend(misses), shared=shared)  # all hits in one, all misses in the other
    async with a, b:
        for gate in (a, b):
            for i in range(3):
                messages = [*LONG_PREFIX, {"role": "user", "content": f"q{i}"}]
                await gate.chat(messages, scenario=SCENARIO)
        assert a.cache_gate.fleet_hit_rate("mock") is None  # nothing read yet
        for gate in (b, a):  # a reads after b sent: the fleet's sums
            warmup = gate.cache_gate._fleet_warmup
            assert warmup is not None
            await warmup.sync()
        own = a.cache_gate.hit_rate("mock")
        assert own is not None and own > 0.5
        assert a.cache_gate.fleet_hit_rate("mock") == pytest.approx(own / 2)
        assert a.stats()["mock"].fleet_cache_hit_rate == pytest.approx(own / 2)
        (group,) = a.cache_gate.statistics("mock")
        assert group.fleet_hit_rate == pytest.approx(own / 2)
        assert b.cache_gate.hit_rate("mock") == 0.0


async def test_a_prefixs_ramp_window_is_shared_by_the_processes_calling_it(
    redis_url: str,
) -> None:
    # a ramp that never widens (its window of samples never completes): start=5 per prefix
    ramp = gg.Scenario(
        name="ramp", stream=False, ramp=gg.RampPolicy(min_prefix_tokens=0, start=5, window=1000)
    )
    held: list[anyio.Event] = []
    holding = True

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get("stream"):  # the warm-up: answered at once
            return _stream_if_asked(request, ok(prompt=3000, cached=0))
        if holding:
            gate_open = anyio.Event()
            held.append(gate_open)
            await gate_open.wait()
        return ok(prompt=3000, cached=2048)

    script = Script(handler)
    shared = gg.Shared(redis_url, namespace=namespace(), lease_s=5.0, op_budget_s=1.0)
    a, b = (gateway(backend(script, concurrency=32), shared=shared) for _ in range(2))

    def release_all() -> None:
        for event in held:
            event.set()

    async with a, b, anyio.create_task_group() as tg:
        for gate in (a, b):
            for i in range(12):
                messages = [*LONG_PREFIX, {"role": "user", "content": f"q{i}"}]
                tg.start_soon(lambda g=gate, m=messages: g.chat(m, scenario=ramp))
        with anyio.fail_after(5):  # a warms it, b joins: five in flight each
            while script.in_flight < 10:
                await anyio.sleep(0.005)
        warmups = [g.cache_gate._fleet_warmup for g in (a, b)]
        for warmup in (*warmups, warmups[0]):  # each says it calls the prefix, reads both
            assert warmup is not None
            await warmup.sync()
        assert [g.cache_gate.statistics("mock")[0].window for g in (a, b)] == [3, 3]
        release_all()  # the first wave ends: the next goes at the fleet's window
        with anyio.fail_after(5):
            while script.in_flight < 6:
                await anyio.sleep(0.005)
        await anyio.sleep(0.05)
        assert script.in_flight == 6  # 3 + 3, not 5 + 5
        holding = False
        release_all()
