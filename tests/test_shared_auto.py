"""Fleet-wide ``concurrency="auto"``: one leader, elected with a lease, learns one limit from
every process's samples and publishes it; every process follows it. The pure parts (the
sample codec, the leader's dating of samples) with exact values; the rest against a real
redis-server, with an injected wall clock for the leader's lease where the test drives the
rounds itself."""

from __future__ import annotations

import functools
from dataclasses import replace

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.limits import FixedLimit, LLMLimit, Sample
from gptgate.limits.base import SampleKind
from gptgate.shared.auto import FleetAutoAdmission
from gptgate.shared.leader import FleetLeader, FleetSample, decode, encode
from tests.conftest import RedisServer
from tests.fleettools import Wall, auto, fleet_client, namespace
from tests.mockbackend import USER, RecordingLimit, Script, backend, gateway, ok

#: the rounds are the test's to drive (the background task's would race the injected wall)
NO_ROUNDS = 1e6


# -- the pure parts -------------------------------------------------------------------------


def test_a_batch_round_trips_and_a_foreign_record_is_skipped() -> None:
    samples = [
        FleetSample(1000.25, 0.5, 0.4, 7, "ok", ttft_s=0.1, input_tokens=30, output_tokens=9),
        FleetSample(1000.5, 0.2, 0.2, 8, "dropped", congestion=True, rate_limited=True),
        FleetSample(1001.0, 0.3, 0.3, 2, "dropped", congestion=False),
    ]
    blob = encode(samples)
    assert decode(blob) == samples
    assert decode(blob + ";garbage;1,2,3,4,x,,0,0;1,nan,1,1,o,,0,0") == samples
    assert len(blob) < 40 * len(samples)  # compact: about 40 bytes a call


def test_the_leader_dates_each_sample_on_its_own_clock_in_finishing_order() -> None:
    recorded = RecordingLimit()
    # the leader's clock runs 10x real time (a time-scaled simulator run): 1 real s = 10 s
    leader = FleetLeader(recorded, to_real=0.1)
    leader.published(wall=0.0)
    late = FleetSample(granted_wall=99.0, hold_s=0.5, latency_s=0.4, inflight=5, kind="ok")
    early = FleetSample(granted_wall=98.0, hold_s=0.2, latency_s=0.2, inflight=3, kind="ok")
    leader.feed([late, early], now=500.0, wall=100.0)
    first, second = recorded.samples
    # granted 2 real s ago = 20 s of the leader's clock; in the order the calls finished
    assert (first.start, first.latency_s, first.inflight) == (480.0, 2.0, 3)
    assert (second.start, second.latency_s, second.inflight) == (490.0, 4.0, 5)
    assert leader.fed == 2
    # a process whose wall clock runs ahead of the leader's: granted "now", never later
    leader.feed([FleetSample(101.0, 0.1, 0.1, 1, "ok")], now=500.0, wall=100.0)
    assert recorded.samples[-1].start == 500.0


def fleet_on_a_knee(knee: int, rounds: int, *, publish: bool) -> FleetLeader:
    """A leader over a fleet at its limit on a server whose goodput stops growing at
    ``knee``: each round, a limit's worth of calls granted after the last publish."""
    leader = FleetLeader(LLMLimit(initial=2, max_limit=64))
    wall = 0.0
    for _ in range(rounds):
        n = leader.limit
        latency = 0.1 * max(1.0, n / knee)
        leader.feed([FleetSample(wall, latency, latency, n, "ok")] * n, now=wall + latency,
                    wall=wall + latency)
        wall += latency
        if publish:
            leader.published(wall)
    return leader


def test_the_leader_finds_the_fleets_knee_from_published_rounds() -> None:
    leader = fleet_on_a_knee(8, 300, publish=True)
    assert 4 <= leader.limit <= 16


def test_calls_granted_before_a_limit_was_published_are_left_out() -> None:
    """A limit the fleet has not been told yet governs no call: the samples granted before
    it was published are not measured as if it did (all of them, here: it never was)."""
    leader = fleet_on_a_knee(8, 10, publish=False)
    assert leader.fed == 0 and leader.stale > 0 and leader.limit == 2


def test_a_sample_carries_the_cap_its_grant_applied() -> None:
    """A record of an older version (8 fields, no cap) still reads."""
    sample = FleetSample(1000.25, 0.5, 0.4, 7, "ok", cap=29)
    assert decode(encode([sample])) == [sample]
    assert decode("1000250,500,400,7,o,,0,0") == [FleetSample(1000.25, 0.5, 0.4, 7, "ok")]


def test_a_call_granted_under_an_older_cap_is_left_out_whenever_it_was_granted() -> None:
    """The publish is dated when the leader's round was built; on a loaded box another
    process's acquire may run before that round does, dated later, under the old cap. Its
    cap says which limit it ran under (a second loss cut, 29 to 21, on the 8-worker cap
    server came from calls granted "after" a cut from 64, at 63 in flight)."""
    recorded = RecordingLimit(29)
    leader = FleetLeader(recorded)
    leader.published(wall=10.0)
    new = FleetSample(granted_wall=10.5, hold_s=0.1, latency_s=0.1, inflight=3, kind="ok", cap=29)
    old = replace(new, cap=64, inflight=63)
    unknown = replace(new, cap=0)  # an older version's record: by its time only
    leader.feed([new, old, unknown], now=20.0, wall=11.0)
    assert (leader.fed, leader.stale) == (2, 1)
    assert [s.inflight for s in recorded.samples] == [3, 3]


# -- leadership, against the real server ------------------------------------------------------


async def test_one_leader_then_hand_over_when_it_closes(redis_url: str) -> None:
    ns, wall = namespace(), Wall()
    lead = functools.partial(fleet_client, redis_url, ns, fleet_clock=wall, lead_s=NO_ROUNDS)
    async with lead(autos=[FixedLimit(6)]) as b:
        async with lead(autos=[FixedLimit(5)]) as a:
            await a._lead()
            await b._lead()
            # b started first: it leads, publishes its limit, and a follows it
            assert auto(b).leading and not auto(a).leading
            assert auto(a).fleet_limit == 6 and auto(b).fleet_limit == 6
            assert (auto(b).statistics().leader, auto(a).statistics().leader) == (True, False)
        async with lead(autos=[FixedLimit(5), FixedLimit(5)]) as c:
            await b.aclose()  # the leader closes: it resigns
            assert not auto(b).leading
            await c._lead()  # at the next round, not after the lease
            assert auto(c).leading


async def test_hand_over_when_the_leaders_lease_lapses_warm_from_its_state(
    redis_url: str,
) -> None:
    ns, wall = namespace(), Wall()
    lead = functools.partial(
        fleet_client, redis_url, ns, fleet_clock=wall, lead_s=NO_ROUNDS, lease_s=5.0
    )
    learned = LLMLimit(initial=4)
    learned.restore(
        {"limit": 18.0, "knee": 20.0, "baseline_a": 0.5, "baseline_b": 0.01,
         "reference_tokens": 100.0, "overhead_tokens": 20.0, "log_var": 0.01, "rtt_s": 1.0,
         "latency_s": 1.0, "r_mean_s": 1.5}
    )
    successor = LLMLimit(initial=4)
    async with lead(autos=[learned]) as old, lead(autos=[LLMLimit(initial=4), successor]) as new:
        await old._lead()  # publishes its limit (18: the low probe around 20), keeps its state
        await new._lead()
        assert auto(old).leading and auto(new).fleet_limit == learned.limit == 18
        # the old leader stops answering (no more rounds): its lead runs out after 3.75 s
        # (lease_s × 3/4: a follower's round, every lease_s / 4, then takes it within lease_s)
        wall.now += 3.7
        await new._lead()
        assert not auto(new).leading
        wall.now += 0.1
        await new._lead()
        assert auto(new).leading
        assert auto(new).leader is not None and auto(new).leader.algorithm is successor
        # warm: probing around the last leader's knee, not slow start from 4
        assert not successor.in_slow_start and successor.center == 20.0
        # and the old one, back, follows
        await old._lead()
        assert not auto(old).leading and auto(old).fleet_limit == successor.limit


async def test_a_follower_that_takes_the_lead_with_no_state_kept_starts_near_the_fleets_limit(
    redis_url: str,
) -> None:
    """No state kept (a Redis restarted empty, or a leader that had learned none): the new
    leader started from its own initial limit, never used — the fleet's limit fell from 10-11
    to 4 and slow-started again (benchmarks/fleet.py --restart-redis). It starts at half the
    fleet's limit: slow start's first doubling comes back to it."""
    ns, wall = namespace(), Wall()
    made: list[int] = []

    def fresh(limit: int) -> FixedLimit:
        made.append(limit)
        return FixedLimit(limit)

    lead = functools.partial(
        fleet_client, redis_url, ns, fleet_clock=wall, lead_s=NO_ROUNDS, lease_s=5.0
    )
    async with (
        lead(autos=[FixedLimit(11)]) as old,
        lead(autos=[FixedLimit(4)], factory=fresh) as new,
    ):
        await old._lead()  # leads, publishes 11; a FixedLimit keeps no state
        await new._lead()
        assert auto(old).leading and auto(new).fleet_limit == 11
        wall.now += 3.8  # the old leader stops answering: its lead lapses (lease_s × 3/4)
        await new._lead()
        assert auto(new).leading and made == [5] and auto(new).fleet_limit == 5


async def test_the_fleets_first_limit_starts_at_initial_times_the_live_workers(
    redis_url: str,
) -> None:
    """Per-process limits start at ``initial`` each; the fleet's one limit started at
    ``initial`` for the whole fleet, and its slow start took a tenth of a 4 s job on the
    cache server (benchmarks/fleet.py: 0.90-0.95x of the best fixed limit, 0.93-1.10x
    after). Until its first sample the first leader's start follows the live workers."""
    ns, wall = namespace(), Wall()
    made: list[int] = []

    def fresh(limit: int) -> LLMLimit:
        made.append(limit)
        return LLMLimit(initial=limit, max_limit=64)

    lead = functools.partial(
        fleet_client, redis_url, ns, fleet_clock=wall, lead_s=NO_ROUNDS, factory=fresh
    )
    async with lead(autos=[LLMLimit(initial=4, max_limit=64)]) as first:
        await first._lead()
        assert auto(first).leading and auto(first).fleet_limit == 4  # alone: its own start
        async with lead(autos=[LLMLimit(initial=4)]) as second:
            await first._renew()  # hears of the second worker
            await first._lead()
            await second._lead()
            assert made == [8] and auto(second).fleet_limit == 8
            # a sample has come: the algorithm leads from here, whoever joins
            leader = auto(first).leader
            assert leader is not None
            leader.fed = 1
            async with lead(autos=[LLMLimit(initial=4)]):
                await first._renew()
                await first._lead()
                assert made == [8] and auto(first).fleet_limit == 8
    # a fixed limit does not slow-start: it is never scaled
    lead = functools.partial(
        fleet_client, redis_url, namespace(), fleet_clock=wall, lead_s=NO_ROUNDS, factory=fresh
    )
    async with lead(autos=[FixedLimit(4)]) as alone, lead(autos=[FixedLimit(4)]):
        await alone._renew()
        await alone._lead()
        await alone._lead()
        assert auto(alone).fleet_limit == 4 and made == [8]


# -- the fleet's limit from the fleet's samples --------------------------------------------------


class Knee:
    """A backend of hidden capacity ``knee``: up to it every call takes ``base_s``, beyond it
    calls share it (processor sharing), so goodput stops growing while latency grows."""

    def __init__(self, knee: int, base_s: float) -> None:
        self.knee = knee
        self.base_s = base_s
        self.in_flight = 0
        self.max_in_flight = 0
        self.arrivals = 0

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.in_flight += 1
        self.arrivals += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.base_s * max(1.0, self.in_flight / self.knee))
            return ok()
        finally:
            self.in_flight -= 1


async def run_fleet(server: Knee, shared: gg.Shared | None, calls: int) -> list[gg.Gateway]:
    """Two gateways, each with 24 callers, over one server; the gateways returned closed."""
    gates = [
        gateway(backend(Script(server), concurrency="auto", max_concurrency=64), shared=shared)
        for _ in range(2)
    ]
    for gate in gates:
        gate._fleet_options = {"poll_s": 0.002, "lead_s": 0.02}
    async with gates[0], gates[1]:
        todo = iter(range(calls))

        async def caller(gate: gg.Gateway) -> None:
            for _ in todo:
                await gate.chat(USER)

        async with anyio.create_task_group() as group:
            for i in range(48):
                group.start_soon(caller, gates[i % 2])
    return gates


async def test_two_gateways_learn_one_limit_for_the_fleet_not_two(redis_url: str) -> None:
    # Without shared=, each process learns the knee for itself and the server gets the sum.
    # A per-process baseline run on the wall clock is no yardstick, though: on a loaded
    # machine its two limits summed anywhere from 13 to 63, and the fleet's own limit ranged
    # from 10 to 30 (loop lag reads as latency). So the run is judged by what does not move
    # with load: one leader's limit, which both processes follow, and a server that never
    # holds more than that one limit
    calls = 1200
    shared = gg.Shared(redis_url, namespace=namespace(), lease_s=5.0, op_budget_s=1.0)
    server = Knee(8, base_s=0.02)
    gates = await run_fleet(server, shared, calls=calls)
    autos = [g._states["mock"].limiter.admission for g in gates]
    assert all(isinstance(x, FleetAutoAdmission) for x in autos)
    highest = max(x.highest for x in autos)  # type: ignore[union-attr]
    final = max(x.fleet_limit for x in autos)  # type: ignore[union-attr]
    assert sum(x.terms for x in autos) >= 1  # type: ignore[union-attr]
    assert server.max_in_flight <= highest, (server.max_in_flight, highest)
    assert final <= highest and server.arrivals == calls


async def test_a_call_granted_before_the_publish_ran_is_stale_though_dated_after_it(
    redis_url: str,
) -> None:
    """The leader's round was built (and dated) before a follower's acquire but ran after
    it: the acquire applied the old cap. Dated by time alone, its sample was fed as one
    under the new limit."""
    ns, wall = namespace(), Wall()
    recorded = RecordingLimit(6)
    lead = functools.partial(fleet_client, redis_url, ns, fleet_clock=wall, lead_s=NO_ROUNDS)
    async with lead(autos=[recorded]) as b, lead(autos=[FixedLimit(6)]) as a:
        await b._lead()
        await a._lead()
        at, leader = auto(a), auto(b).leader
        assert leader is not None and not at.leading and at.fleet_limit == 6
        recorded._limit = 3
        wall.now += 2.0
        old = await at.enter(None)  # granted under 6, at wall +2
        wall.now -= 1.0
        await b._lead()  # publishes 3, dated +1: built before the acquire, run after it
        wall.now += 2.0
        at.leave(old)
        at.record(_sample())
        await a._flush()
        await b._lead()
        assert (leader.fed, leader.stale) == (0, 1)
        new = await at.enter(None)  # granted under 3
        at.leave(new)
        at.record(_sample())
        await a._flush()
        await b._lead()
        assert (leader.fed, leader.stale) == (1, 1) and len(recorded.samples) == 1


# -- outage ----------------------------------------------------------------------------------


async def counted(url: str, key: str) -> int:
    async with redis.asyncio.Redis.from_url(url) as r:
        return int(await r.zcard(key))


async def test_outage_local_share_of_the_fleet_limit_then_rejoin_each_permit_once(
    own_redis: RedisServer,
) -> None:
    ns, wall = namespace(), Wall()
    lead = functools.partial(
        fleet_client, own_redis.url, ns, fleet_clock=wall, lead_s=NO_ROUNDS, op_budget_s=0.05,
        probe_s=0.01,
    )
    async with (
        lead(autos=[FixedLimit(6), FixedLimit(6)]) as a,
        lead(autos=[FixedLimit(2), FixedLimit(6)]) as b,
    ):
        await b._renew()  # two live workers
        await b._lead()  # a leads (it started first): b follows its 6
        at = auto(b)
        assert not at.leading and at.fleet_limit == 6 and at.local_share == 3
        before = await at.enter(None)
        at.leave(before)
        at.record(_sample())  # a fleet-granted permit's sample: queued for the leader
        assert at.has_samples
        before = await at.enter(None)  # (carried the sample to Redis)

        own_redis.stop()
        during = [await at.enter(None), await at.enter(None)]  # the local share: 3
        assert b.state == "down" and not any(lease.registered for lease in during)
        with pytest.raises(gg.OverloadedError):
            await at.enter(SystemClock().now() + 0.05)
        at.leave(during[0])
        at.record(_sample())  # granted locally: no fleet in-flight count, not published
        assert not at.has_samples
        during[0] = await at.enter(None)

        own_redis.start()  # empty: no leader, no published limit, no permits
        with anyio.fail_after(5):
            while b.state != "up":
                await anyio.sleep(0.005)
        assert await counted(own_redis.url, at.permits_key) == 3  # each once
        await a._lead()  # a leads again, and publishes 6 again
        await b._lead()
        assert auto(a).leading and at.fleet_limit == 6
        for lease in (before, *during):
            at.leave(lease)
        with anyio.fail_after(5):
            while b._pending or await counted(own_redis.url, at.permits_key):
                await anyio.sleep(0.005)
        stats = at.statistics()
        assert (stats.outages, stats.leader, stats.limit) == (1, False, 6)


def _sample(kind: SampleKind = "ok") -> Sample:
    return Sample(start=0.0, latency_s=0.1, inflight=1, kind=kind)


async def test_during_an_outage_a_process_learns_alone_below_its_share(
    own_redis: RedisServer,
) -> None:
    """Its share of the last fleet limit may be too many (the limit was still high, or the
    backend changed): the process's own limit, fed its own calls, cuts it as without
    ``shared=`` — the share of a fleet limit of 8 met a hard connection cap with 503s and
    nothing lowered it (227 failed calls in benchmarks/fleet.py --restart-redis)."""
    lead = functools.partial(
        fleet_client, own_redis.url, namespace(), lead_s=NO_ROUNDS, op_budget_s=0.05,
        probe_s=0.01,
    )
    async with lead(autos=[FixedLimit(8), LLMLimit(initial=8)]) as alone:
        at = auto(alone)
        assert at.leading and at.fleet_limit == 8
        own_redis.stop()
        leases = [await at.enter(None) for _ in range(8)]  # its share: all 8 (one worker)
        assert alone.state == "down" and at.local_share == 8 and at.local.limit == 8
        for lease in leases[:3]:  # the backend refuses them: congestion
            at.leave(lease)
            at.record(_sample("dropped"))
        assert at.local_share == at.local.limit == 4  # halved, as slow start does alone
        own_redis.start()
        with anyio.fail_after(5):
            while alone.state != "up":
                await anyio.sleep(0.005)
        await at.enter(None)  # back in the fleet: the fleet's limit again
        assert at.local.limit == 8
