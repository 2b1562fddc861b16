"""Clock skew between the processes of a fleet. Leases once expired on each process's own
wall clock, so a process ahead of another by more than ``lease_s`` × 2/3 swept the other's
live permits — silently at first, then with a warning. They are judged on Redis's clock now
(tests/test_shared_redis_clock.py); each renewal still measures the process's skew from
Redis's ``TIME`` and warns once beyond ``lease_s / 3``, the bound an earlier release's
processes in a rolling deploy still need."""

from __future__ import annotations

import logging
import time

import pytest

from gptgate.shared.fleet import FleetClient
from tests.fleettools import Wall, admission, namespace
from tests.fleettools import fleet_client as shared_fleet_client


def skew_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "clock is" in r.getMessage()]


async def test_clocks_within_a_third_of_lease_s_keep_the_fleet_limit_without_a_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    ns, now = namespace(), time.time()
    wall_a, wall_b = Wall(now), Wall(now + 1.9)  # b 1.9 s ahead; lease_s 6: within 2 s
    async with shared_fleet_client(redis_url, ns, wall=wall_a, lease_s=6.0) as a, \
            shared_fleet_client(redis_url, ns, wall=wall_b, lease_s=6.0) as b:
        at_a, at_b = admission(a, 2), admission(b, 2)
        held = [await at_a.enter(None), await at_a.enter(None)]
        wall_a.now += 1.9  # just before a's next renewal (every 2 s)
        wall_b.now += 1.9
        assert not await at_b._try(b.new_lease())  # a's permits still count for b
        assert abs(b.clock_skew_s - 1.9) < 0.5
        for lease in held:
            at_a.leave(lease)
    assert skew_warnings(caplog) == []


class AheadWall:
    """A process's own wall clock ``ahead`` s ahead of the machine's, the clock Redis's
    ``TIME`` reads too: a renewal then measures ``ahead`` to within half its round trip, how
    ever loaded the machine. (A wall frozen at the test's start fell behind Redis by as long
    as the client took to start: 2.9 s measured for 3.0 on a loaded machine.)"""

    def __init__(self, ahead: float) -> None:
        self.ahead = ahead

    def __call__(self) -> float:
        return time.time() + self.ahead


async def test_a_process_whose_clock_is_off_by_more_than_a_third_of_lease_s_warns_once(
    redis_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING, logger="gptgate")
    measured: list[tuple[float, float, float]] = []  # every renewal's (sent, answered, TIME)
    skew = FleetClient._skew

    def recorded(client: FleetClient, sent: float, answered: float, redis_s: float) -> None:
        measured.append((sent, answered, redis_s))
        skew(client, sent, answered, redis_s)

    monkeypatch.setattr(FleetClient, "_skew", recorded)
    async with shared_fleet_client(
        redis_url, namespace(), wall=AheadWall(3.0), lease_s=6.0
    ) as a:
        admission(a, 2)
        await a._renew()
        await a._renew()
    (record,) = [r for r in caplog.records if "clock is" in r.getMessage()]
    warning, (reported, *_) = record.getMessage(), record.args or ()
    assert f"{reported:.1f} s ahead of" in warning and "lease_s / 3 (2.0 s)" in warning
    # the first renewal whose round trip leaves no doubt (a late answer is no evidence)
    sent, answered, redis_s = next(
        m for m in measured if (m[0] + m[1]) / 2 - m[2] - (m[1] - m[0]) / 2 > 2.0
    )
    assert reported == (sent + answered) / 2 - redis_s  # the middle of its round trip
    # Redis read its clock within the round trip (TIME in µs: 1 ms of slack)
    assert abs(reported - 3.0) <= (answered - sent) / 2 + 0.001
