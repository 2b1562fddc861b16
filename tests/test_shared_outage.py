"""Redis misbehaving (down, slow, restarted empty): calls flow on local limits, one warning per
outage, and the fleet is rejoined without counting a permit twice. Against a real
redis-server that the tests stop, freeze (SIGSTOP: a slow Redis) and restart empty."""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest
import redis.asyncio

import gptgate as gg
from gptgate.clock import SystemClock
from gptgate.shared import fleet as fleet_module
from gptgate.shared.fleet import FleetAdmission, FleetClient
from tests.conftest import RedisServer
from tests.fleettools import admission, fleet_pair, namespace
from tests.fleettools import fleet_client as shared_fleet_client
from tests.mockbackend import USER, Script, backend, gateway, ok, wait_until

#: what these tests run on: a short op budget, a fast outage probe
fleet_client = functools.partial(shared_fleet_client, op_budget_s=0.05, probe_s=0.01)


async def counted(url: str, at: FleetAdmission) -> int:
    """Leases Redis counts for this backend (read with a connection of the test's own)."""
    async with redis.asyncio.Redis.from_url(url) as r:
        return int(await r.zcard(at.permits_key))


def outage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]


async def test_down_then_restarted_empty_local_share_then_rejoin_counting_each_permit_once(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    ns = namespace()
    caplog.set_level(logging.WARNING, logger="gptgate")
    # renewals by hand or as probes only (every 20 min, not lease_s / 3 = 1.7 s): one that came
    # after `other` left, on a host slow between two lines, counted 1 live worker, not 2
    async with fleet_client(own_redis.url, ns, lease_s=3600.0) as a:
        at_a = admission(a, 5)
        async with fleet_client(own_redis.url, ns) as other:
            await a._renew()  # a learns that another worker is alive: 2 live workers
            at_other = admission(other, 5)  # ... which calls the same backend
            at_other.leave(await at_other.enter(None))
            before = await at_a.enter(None)  # granted by Redis
        assert a.live_workers == 2 and at_a.local_share == 2

        own_redis.stop()
        during = await at_a.enter(None)  # Redis fails: the local share (5 // 2) admits
        assert a.state == "down" and not during.registered
        with pytest.raises(gg.OverloadedError):  # the share is full (2): no third here
            await at_a.enter(SystemClock().now() + 0.05)
        stats = at_a.statistics()
        assert (stats.state, stats.outages, stats.held, stats.local_share) == ("down", 1, 2, 2)
        assert len(outage_warnings(caplog)) == 1  # once per outage, not once per call

        own_redis.start()  # empty, as after a crash
        with anyio.fail_after(5):
            while a.state != "up":
                await anyio.sleep(0.005)
        # both leases in flight are counted again, each exactly once
        assert await counted(own_redis.url, at_a) == 2
        at_a.leave(during)
        at_a.leave(before)
        await wait_until(lambda: not a._pending)
        assert await counted(own_redis.url, at_a) == 0
        assert at_a.statistics().outages == 1
        assert len(outage_warnings(caplog)) == 1


async def test_a_process_that_started_first_learns_the_later_workers_from_its_calls(
    own_redis: RedisServer,
) -> None:
    """The share of an outage is limit ÷ the workers live on the backend as the last acquire
    counted them. Counted at renewals only (every ``lease_s / 3``), a process that started
    before the others still thought itself alone when Redis went away, and admitted the whole
    limit on top of the others' shares (6 in flight on a limit of 4 with two gateways)."""
    ns = namespace()
    async with fleet_client(own_redis.url, ns) as a:
        at_a = admission(a, 6)
        first = await at_a.enter(None)
        async with fleet_client(own_redis.url, ns) as b, fleet_client(own_redis.url, ns) as c:
            at_b, at_c = admission(b, 6), admission(c, 6)
            others = [await at_b.enter(None), await at_c.enter(None)]
            assert a.live_workers == 1  # no renewal since b and c started
            second = await at_a.enter(None)  # ... but its calls tell it
            assert at_a.statistics().live_workers == 3
            own_redis.stop()
            held = [first, second]
            while len(held) < 6:
                try:
                    held.append(await at_a.enter(SystemClock().now() + 0.05))
                except gg.OverloadedError:
                    break
            assert a.state == "down" and len(held) == at_a.local_share == 2
            for lease in held:
                at_a.leave(lease)
            at_b.leave(others[0])
            at_c.leave(others[1])
            own_redis.start()


#: Processes whose probe never comes within a test (an hour): one found down stays down until
#: the test renews it by hand (``_renew``), and one back keeps to its share (two probe periods)
#: to the end. A probe of 0.5 s let b find Redis back before the test looked on a loaded
#: machine, and ended a's rejoin a second after it came back.
by_hand = functools.partial(shared_fleet_client, op_budget_s=0.05, probe_s=3600.0)


def probes_while_down(client: FleetClient) -> list[int]:
    """A count of the renewals ``client`` tries and fails while Redis is down (its probes): an
    outage starts one at once, which the test waits for, or it could land after Redis is back."""
    probes = [0]
    renew = client._renew

    async def counted(*, lost: bool = False) -> None:
        down = client.state == "down"
        await renew(lost=lost)
        probes[0] += down and client.state == "down"

    client._renew = counted  # type: ignore[method-assign]
    return probes


async def test_a_rejoined_process_keeps_to_its_share_while_the_others_may_still_be_away(
    own_redis: RedisServer,
) -> None:
    """Redis restarted empty: the first process back registers its own permits, but another
    still on its local share (its probe comes later) holds permits Redis cannot count. Taking
    the whole limit back at once put 6 calls on a limit of 4 (two gateways in one process on
    llama-server, Redis frozen for 1 s)."""
    ns = namespace()
    async with by_hand(own_redis.url, ns) as a, by_hand(own_redis.url, ns) as b:
        b_probes = probes_while_down(b)
        at_a, at_b = admission(a, 4), admission(b, 4)
        held_a = [await at_a.enter(None)]
        held_b = [await at_b.enter(None)]
        held_a.append(await at_a.enter(None))
        assert at_a.local_share == at_b.local_share == 2  # two workers on the backend
        own_redis.stop()
        held_b.append(await at_b.enter(None))  # the outage: b on its share of 2
        await wait_until(lambda: b_probes[0] >= 1)  # the probe it starts at once has failed
        with pytest.raises(gg.OverloadedError):  # a holds its 2 already
            await at_a.enter(SystemClock().now() + 0.05)
        assert a.state == b.state == "down"
        own_redis.start()  # empty, as after a crash
        await a._renew()  # a finds it first; b is still down until its next probe
        assert a.state == "up" and b.state == "down"
        with pytest.raises(gg.OverloadedError):
            held_a.append(await at_a.enter(SystemClock().now() + 0.05))
        assert len(held_a) + len(held_b) <= 4
        for lease in held_a:
            at_a.leave(lease)
        for lease in held_b:
            at_b.leave(lease)


async def test_a_rejoined_process_counts_the_workers_it_knew_not_the_restarted_redis(
    own_redis: RedisServer,
) -> None:
    """A Redis restarted empty counts only the workers back so far: the first acquire of the
    first process back was told "1 live worker", which made its share the whole limit while
    the others were still on theirs (benchmarks/fleet.py --restart-redis on the RPM server:
    one worker held 9 permits on a fleet limit of 11, the fleet 14)."""
    ns = namespace()
    async with by_hand(own_redis.url, ns) as a, by_hand(own_redis.url, ns) as b:
        b_probes = probes_while_down(b)
        at_a, at_b = admission(a, 4), admission(b, 4)
        first = await at_a.enter(None)
        held_b = [await at_b.enter(None)]
        held_a = [await at_a.enter(None)]  # a learns of b
        at_a.leave(first)
        assert at_a.local_share == at_b.local_share == 2  # two workers on the backend
        await anyio.sleep(0.05)  # the release is sent
        own_redis.stop()
        held_b.append(await at_b.enter(None))  # the outage: b on its share of 2
        await wait_until(lambda: b_probes[0] >= 1)  # the probe it starts at once has failed
        at_a.leave(await at_a.enter(None))  # a finds Redis gone: a local permit, ended
        own_redis.start()  # empty, as after a crash
        await a._renew()  # a finds it first; b is still down until its next probe
        assert a.state == "up" and b.state == "down"
        held_a.append(await at_a.enter(None))  # within its share: from Redis, "1 live worker"
        assert at_a.local_share == 2
        with pytest.raises(gg.OverloadedError):
            held_a.append(await at_a.enter(SystemClock().now() + 0.05))
        at_a.leave(held_a.pop())  # one ended: room for one more call in its share
        await wait_until(lambda: not a._pending)  # released in Redis: not for a call to reuse
        async with anyio.create_task_group() as tg:  # a burst of calls, all at once

            async def call() -> None:
                with contextlib.suppress(gg.OverloadedError):
                    held_a.append(await at_a.enter(SystemClock().now() + 0.05))

            for _ in range(6):
                tg.start_soon(call)
        assert len(held_a) == 2  # each asked Redis: the share is counted with the asks
        assert len(held_a) + len(held_b) <= 4
        for lease in held_a:
            at_a.leave(lease)
        for lease in held_b:
            at_b.leave(lease)


async def test_unreachable_at_start_is_an_outage_not_a_failed_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    caplog.set_level(logging.WARNING, logger="gptgate")
    script = Script(ok())
    gate = gateway(backend(script, concurrency=3), shared=f"redis://127.0.0.1:{port}/0")
    async with gate:
        results = [await gate.chat(USER) for _ in range(3)]
        fleet = gate.stats()["mock"].fleet
    assert len(results) == 3
    assert fleet is not None and fleet.state == "down" and fleet.outages == 1
    # never seen the fleet: others may be admitting alone (tests/test_shared_start.py)
    assert fleet.local_share == 1 and not fleet.seen
    assert len(outage_warnings(caplog)) == 1


async def test_one_late_answer_is_asked_again_not_an_outage(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis late once (starved of CPU for a moment: 4 workers, the server and Redis on 2
    cores) flipped the process to local shares on top of the fleet's permits (peak 27 on a
    limit of 16). Only a Redis slower than the budget for another budget is an outage."""
    caplog.set_level(logging.WARNING, logger="gptgate")
    async with shared_fleet_client(own_redis.url, namespace(), op_budget_s=0.2) as a:
        at = admission(a, 2)

        async def thaw_later() -> None:
            await anyio.sleep(0.3)
            own_redis.thaw()

        own_redis.freeze()  # for 1.5 budgets: the first try times out, the second is answered
        async with anyio.create_task_group() as tg:
            tg.start_soon(thaw_later)
            lease = await at.enter(None)
        assert a.state == "up" and lease.registered and not outage_warnings(caplog)
        assert at.statistics().slow_ops == 1
        assert await counted(own_redis.url, at) == 1  # the first try's grant taken back
        at.leave(lease)


async def test_a_slow_redis_is_an_outage_and_its_late_grant_is_taken_back(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis slower than ``op_budget_s`` counts as down; the acquire it ran late (after the
    caller gave up on it) must not leave a ghost permit counted in the fleet."""
    caplog.set_level(logging.WARNING, logger="gptgate")
    async with fleet_client(own_redis.url, namespace()) as a:
        at = admission(a, 2)
        own_redis.freeze()
        try:
            with anyio.fail_after(1.0):  # the op budget, not the frozen server, bounds it
                lease = await at.enter(None)
            assert a.state == "down" and len(outage_warnings(caplog)) == 1
        finally:
            own_redis.thaw()
        with anyio.fail_after(5):
            while a.state != "up":
                await anyio.sleep(0.005)
        await wait_until(lambda: not a._pending)
        assert await counted(own_redis.url, at) == 1  # the lease in flight, once
        at.leave(lease)
        await wait_until(lambda: not a._pending)
        assert await counted(own_redis.url, at) == 0


async def test_an_acquire_that_ran_after_its_budget_leaves_no_ghost_permit(
    own_redis: RedisServer,
) -> None:
    """A busy Redis (clients' commands held, as behind a long script) runs our acquire after
    we gave up on it: the lease it added must be taken back, else the fleet counts a call
    that is not there. Held from before the acquire is sent until the outage is seen (CLIENT
    PAUSE ... UNPAUSE): a busy script started 0.1 s ahead reached a loaded host's Redis after
    the acquire, which was answered in time ('up' == 'down')."""
    async with fleet_client(own_redis.url, namespace()) as a:
        at = admission(a, 2)
        async with redis.asyncio.Redis.from_url(own_redis.url) as other:
            await other.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
            try:
                lease = await at.enter(None)  # our acquire waits behind it past the budget
                assert a.state == "down"
            finally:
                await other.execute_command("CLIENT", "UNPAUSE")
        with anyio.fail_after(5):
            while a.state != "up":
                await anyio.sleep(0.005)
        await wait_until(lambda: not a._pending)
        assert await counted(own_redis.url, at) == 1  # the lease in flight, not a ghost too
        at.leave(lease)
        await wait_until(lambda: not a._pending)
        assert await counted(own_redis.url, at) == 0


def held_until(release: anyio.Event) -> Callable[[httpx2.Request], Any]:
    async def handler(request: httpx2.Request) -> httpx2.Response:
        await release.wait()
        return ok()

    return handler


async def test_no_call_fails_because_redis_stopped_and_restarted(
    own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every call asks Redis (none reuses the permit its gateway's last call ended)
    monkeypatch.setattr(fleet_module, "REUSE_FRESH_S", -1.0)
    release = anyio.Event()
    script = Script(held_until(release))
    shared = gg.Shared(own_redis.url, namespace=namespace(), lease_s=5.0)
    gates = fleet_pair(script, shared)
    results: list[gg.ChatResult] = []

    async def one(gate: gg.Gateway) -> None:
        results.append(await gate.chat(USER))

    async with gates[0], gates[1]:
        for gate in gates:
            assert gate._fleet is not None
            await gate._fleet._renew()  # both know of 2 live workers
        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, gates[i % 2])
            await wait_until(lambda: script.in_flight == 4)
            own_redis.stop()
            for i in range(8):
                tg.start_soon(one, gates[i % 2])
            release.set()
            await wait_until(lambda: len(results) >= 12)
            own_redis.start()
        for gate in gates:
            with anyio.fail_after(5):
                while gate.stats()["mock"].fleet.state != "up":  # type: ignore[union-attr]
                    await anyio.sleep(0.005)
        more = [await gates[0].chat(USER), await gates[1].chat(USER)]
    assert len(results) == 16 and len(more) == 2  # none failed
    assert script.max_in_flight <= 4
    assert all(g.stats()["mock"].fleet.outages == 1 for g in gates)  # type: ignore[union-attr]


async def test_a_renewal_answered_before_the_outage_does_not_end_it(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A renewal Redis answered just before it died, read after another operation declared
    # the outage (a busy loop reads the buffered reply late): it says nothing of Redis now.
    # Taken as "up", the next operation failed again and the same outage warned twice (and
    # counted twice) — seen under load in test_down_then_restarted_empty_...
    ns = namespace()
    caplog.set_level(logging.WARNING, logger="gptgate")
    async with fleet_client(own_redis.url, ns) as a:
        at_a = admission(a, 5)
        await a._renew()
        got, answered = anyio.Event(), anyio.Event()
        real_op = a._op

        async def late_op(name: str, keys: list[str], args: list[Any]) -> Any:
            answer = await real_op(name, keys, args)  # Redis answered ...
            got.set()
            await answered.wait()  # ... but the reply is read only later
            return answer

        monkeypatch.setattr(a, "_op", late_op)
        async with anyio.create_task_group() as tg:
            tg.start_soon(a._renew)
            await got.wait()
            own_redis.stop()  # ... and then Redis died
            await at_a.enter(None)  # an operation fails: the outage, admitted locally
            assert a.state == "down"
            answered.set()
        assert a.state == "down" and a.outages == 1
        assert len(outage_warnings(caplog)) == 1


async def test_a_permit_taken_while_a_probe_is_on_its_way_is_counted_at_the_rejoin(
    own_redis: RedisServer,
) -> None:
    """A probe's renewal lists the leases held when it is built; one taken on the share while
    it waited to be sent (a busy loop, a Redis restarting) was counted nowhere once the
    renewal's answer declared the fleet back — until the next renewal, ``lease_s / 3`` later."""
    async with fleet_client(own_redis.url, namespace()) as a:
        at = admission(a, 4)
        async with fleet_client(own_redis.url, a.shared.namespace) as other:
            await a._renew()  # the fleet seen, with 2 live workers: a share of 2
            at_other = admission(other, 4)
            at_other.leave(await at_other.enter(None))
        own_redis.stop()
        first = await at.enter(None)  # the outage: on the share
        assert a.state == "down"
        op, built, back = a._op, anyio.Event(), anyio.Event()

        async def late(name: str, keys: list[str], args: list[Any]) -> Any:
            if name == "RENEW" and not back.is_set():
                built.set()
                await back.wait()  # built now, sent once Redis is back
            return await op(name, keys, args)

        a._op = late  # type: ignore[method-assign]
        with anyio.fail_after(5):
            await built.wait()
        second = await at.enter(None)  # taken while that renewal waits
        own_redis.start()
        back.set()
        with anyio.fail_after(5):
            while a.state != "up":
                await anyio.sleep(0.005)
        assert await counted(own_redis.url, at) == 2  # both in flight, each once
        at.leave(first)
        at.leave(second)
        await wait_until(lambda: not a._pending)
        assert await counted(own_redis.url, at) == 0
