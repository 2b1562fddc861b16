"""The warm order tried and measured (gptgate/cache_order_trial.py, issue 31): where a job's
warm calls side by side miss often, the gate serves the backend's warm groups in order for a
trial and keeps the order only if its calls kept more of their hits."""

from __future__ import annotations

import math

from gptgate.cache import CacheGate
from gptgate.cache_order_trial import (
    MARGIN,
    MEMORY_S,
    SETTLE_CALLS,
    SIDE_CALLS,
    SPACED_TRIGGER,
    SWITCH_CALLS,
    TRIAL_CALLS,
    TRIAL_SETTLE_CALLS,
    TRIGGER,
    OrderTrial,
)
from gptgate.scenarios import RampPolicy
from gptgate.sim import LoopClock, run_virtual
from tests.cache_order_check import (
    CACHEABLE,
    assert_gate_against_plain,
    assert_head_served_first,
    group,
)

JOB = RampPolicy(start=5, window=5, turn_wait_s=600.0)


def feed(trial: OrderTrial, calls: int, misses: int, *, now: float, epoch: int | None = None,
         burst: bool = True) -> None:
    """``calls`` finished warm calls of backend ``b``, of groups ``a`` and ``b`` in turn, the
    first ``misses`` of them missed; ``burst``: each admitted in the same instant as its
    group's previous call (a ramp's burst), else at the group's ordinary spacing."""
    for k in range(calls):
        at = trial.epoch("b", now) if epoch is None else epoch
        trial.record("b", epoch=at, hit=k >= misses, now=now, key="ab"[k % 2], burst=burst)


def test_side_by_side_calls_that_miss_often_start_a_trial() -> None:
    """Two windows in a row that miss often start a trial; one alone (a transient: the ramps'
    bursts reaching new replicas) does not."""
    trial = OrderTrial()
    assert trial.phase("b", 0.0) == "side" and not trial.ordered("b", 0.0)
    often = int(TRIGGER * SIDE_CALLS) + 1
    feed(trial, SETTLE_CALLS, SETTLE_CALLS, now=1.0)  # the job's first calls: left out
    feed(trial, SIDE_CALLS, SIDE_CALLS, now=2.0)  # a window that missed every call
    feed(trial, SIDE_CALLS, often - 2, now=2.0)  # then one that missed rarely: no trial
    feed(trial, SIDE_CALLS, often, now=2.0)  # one missing often after it: not yet
    assert trial.phase("b", 2.0) == "side"
    feed(trial, SIDE_CALLS - 1, often, now=3.0)
    assert trial.phase("b", 3.0) == "side"
    feed(trial, 1, 0, now=3.0)  # the second in a row
    assert trial.ordered("b", 3.0) and trial.phase("b", 3.0) == "trial"
    assert not trial.ordered("other", 3.0)


def test_one_window_missing_at_the_groups_spacing_starts_a_trial() -> None:
    """A window whose misses came at their groups' ordinary spacing — copies that expired
    between a prefix's calls side by side, not cold replicas met by a burst — starts a trial
    without waiting for a second window (family draw 1062: the second window cost 8.5 s of
    side-by-side calls; 1021: 19 s). The same misses in bursts (a ramp reaching new replicas
    on a server spreading by calls in flight) do not."""
    spaced = math.ceil(SPACED_TRIGGER * SIDE_CALLS)
    burst = OrderTrial()
    feed(burst, SETTLE_CALLS, SETTLE_CALLS, now=1.0)
    feed(burst, SIDE_CALLS, SIDE_CALLS, now=2.0)  # every call missed, all in bursts
    assert burst.phase("b", 2.0) == "side"

    few = OrderTrial()
    feed(few, SETTLE_CALLS, SETTLE_CALLS, now=1.0)
    feed(few, SIDE_CALLS, spaced - 1, now=2.0, burst=False)
    assert few.phase("b", 2.0) == "side"

    trial = OrderTrial()
    feed(trial, SETTLE_CALLS, SETTLE_CALLS, now=1.0)
    feed(trial, SIDE_CALLS - 1, spaced, now=2.0, burst=False)
    assert trial.phase("b", 2.0) == "side"
    feed(trial, 1, 0, now=2.0)  # the window's last call
    assert trial.phase("b", 2.0) == "trial"


def test_expired_copies_side_by_side_on_a_spilling_server_keep_the_floor() -> None:
    """The server family's draw 1062 (10 replicas × 7 slots, a full home replica sending a
    prefix's calls to the least-loaded ones, copies kept 24 s idle, calls of ~20 s; 400 calls
    over 4 prefixes at 64). Side by side, each prefix visits each replica about every 40 s and
    its copies there expire between visits: the first window after the settle missed 16 of
    24 calls, 8 of them at their group's ordinary spacing, the second 14 of 24, all spaced —
    the trial waited for the second (95 s) and the job kept 48.4% hits against the plain
    client's 55.6% (the floor: −5 points). Now the trial starts after the first (87 s): 51.2%
    at 1.02× the plain client's time."""
    assert_gate_against_plain(1062, 64, hits=0.05, time=1.10)


def test_the_order_is_kept_only_when_its_calls_keep_more_hits() -> None:
    often = int(TRIGGER * SIDE_CALLS) + 1

    def tried(trial_misses: int) -> OrderTrial:
        trial = OrderTrial()
        feed(trial, SETTLE_CALLS + 2 * SIDE_CALLS, SETTLE_CALLS, now=0.0)
        for _ in range(2):
            feed(trial, SIDE_CALLS, often, now=0.0)
        assert trial.phase("b", 0.0) == "trial"
        side = trial.epoch("b", 0.0) - 1
        feed(trial, 40, 40, now=1.0, epoch=side)  # admitted side by side: not the trial's
        feed(trial, TRIAL_SETTLE_CALLS, TRIAL_SETTLE_CALLS, now=1.0)  # the first: left out
        feed(trial, TRIAL_CALLS, trial_misses, now=2.0)
        return trial

    better = int(often - MARGIN * TRIAL_CALLS) - 1
    head_only = OrderTrial()  # the trial's calls all of its first head: no verdict yet
    feed(head_only, SETTLE_CALLS, SETTLE_CALLS, now=0.0)
    for _ in range(2):
        feed(head_only, SIDE_CALLS, often, now=0.0)
    for _ in range(TRIAL_SETTLE_CALLS + 2 * TRIAL_CALLS):
        head_only.record("b", epoch=head_only.epoch("b", 1.0), hit=True, now=1.0, key="a")
    assert head_only.phase("b", 1.0) == "trial"
    for k in range(SWITCH_CALLS):  # the next head's calls: measured too, then the verdict
        head_only.record("b", epoch=head_only.epoch("b", 1.0), hit=False, now=1.0, key="b")
        assert head_only.phase("b", 1.0) == ("trial" if k < SWITCH_CALLS - 1 else "kept")
    kept = tried(better)
    assert kept.phase("b", 2.0) == "kept" and kept.ordered("b", 2.0)
    assert kept.ordered("b", 2.0 + MEMORY_S - 1.0)
    assert kept.phase("b", 2.0 + MEMORY_S) == "side"  # measured again
    refused = tried(often)  # as many misses in order as side by side
    assert refused.phase("b", 2.0) == "refused" and not refused.ordered("b", 2.0)
    assert refused.phase("b", 2.0 + MEMORY_S) == "side"


def test_a_backend_whose_trial_runs_serves_its_warm_groups_in_order() -> None:
    """Two warm groups, their calls side by side missing half their hits: the gate tries the
    order — the group warm first takes the backend past its share, up to the limit, and the
    other waits while the limit is taken. Before, each had its share (5) to the end."""

    async def main() -> None:
        clock = LoopClock()
        gate = CacheGate(clock=clock)
        limit = 10

        async def one(key: str, cached: int) -> None:
            ticket = await gate.enter("b", group(key), JOB, limit=limit)
            ticket.prefilled()
            ticket.observe(cached_tokens=cached, input_tokens=CACHEABLE + 100)
            ticket.release()

        await one("a", 0)  # the warm-ups: a warm first
        await one("b", 0)
        # both groups keep a call in flight (both warm at once: the order's samples)
        anchors = [await gate.enter("b", group(key), JOB, limit=limit) for key in "ab"]
        # hits and misses alternate, the calls 0 s apart (behind a server queue): no expiry
        # the learner could see (the backend is marked spreading by the misses instead)
        for k in range(SETTLE_CALLS + 2 * SIDE_CALLS):
            await one("ab"[k % 2], CACHEABLE if k % 4 < 2 else 0)
        for t in anchors:
            t.release()
        await assert_head_served_first(gate, clock, group("a"), group("b"), JOB)

    run_virtual(main)


def test_copies_expiring_behind_a_server_queue_keep_the_plain_client_s_hits() -> None:
    """The server family's draw 1001 (1 replica × 26 slots, a queue of 20 under a cap of 46,
    a copy kept 0.87 s idle; 400 calls over 4 prefixes). The plain client's prompt order
    runs one prefix densely after the other; the gate ran the four side by side, and every
    extra miss was an expired copy (284 against the plain client's 161, traced per call) —
    each admitted 0 s after its group's previous call, having aged in the server's queue, so
    read as a spill: 22.7% hits against 41.4%. Now the order is tried once side-by-side
    windows missed often, and kept: three engine seeds pooled (the judge's default), 39.7%
    against the plain client's 39.6% at 1.03× its time (the rule: −2 points, 1.05×). On the
    first seed alone the trial starting a window earlier (its first window missed 20 of 24
    at the groups' spacing) ends the job at 1.07× (552 s against 517 s; 1.03× before): which
    calls start last moves with the order, and one seed's time with it."""
    assert_gate_against_plain(1001, 46, hits=0.02, time=1.05, repeats=3)
