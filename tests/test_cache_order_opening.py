"""A job's warm groups served in order from its start where calls queue at the server, given
up at a change of head that misses in a burst (gptgate/cache_order_opening.py, issue 31)."""

from __future__ import annotations

from gptgate.cache_order_opening import (
    BURST_TRIGGER,
    HEAD_RUN,
    OPENING_SETTLE_CALLS,
    WINDOW,
    Opening,
)
from gptgate.cache_order_trial import MEMORY_S, SETTLE_CALLS, OrderTrial
from tests.cache_order_check import assert_gate_against_plain


def run(opening: Opening, key: str, calls: int, *, bursts: int = 0) -> list[str | None]:
    """``calls`` finished calls of group ``key``, the first ``bursts`` missed in a burst."""
    return [opening.add(k >= bursts, key, burst=True) for k in range(calls)]


def verdict(verdicts: list[str | None]) -> str | None:
    return next((v for v in verdicts if v is not None), None)


def test_a_change_of_head_without_burst_misses_keeps_the_order() -> None:
    opening = Opening()
    assert set(run(opening, "a", OPENING_SETTLE_CALLS + 2 * WINDOW)) == {None}  # no change yet
    verdicts = run(opening, "b", HEAD_RUN + WINDOW - 1)  # the next head: hits
    assert set(verdicts) == {None}  # not before a whole window after the change
    assert verdict(run(opening, "b", WINDOW)) == "kept"


def test_a_change_of_head_that_misses_in_a_burst_gives_the_order_up_at_once() -> None:
    """The next prefix's copies aged while it waited and its burst met cold replicas (issue
    31's server): back side by side as soon as a window's burst misses reach the trigger."""
    opening = Opening()
    run(opening, "a", OPENING_SETTLE_CALLS + WINDOW)
    trigger = int(BURST_TRIGGER * WINDOW)
    verdicts = run(opening, "b", trigger, bursts=trigger)
    assert verdicts[-1] == "side" and set(verdicts[:-1]) == {None}


def test_misses_after_a_spacing_or_in_the_job_s_first_calls_do_not_give_it_up() -> None:
    """Expired copies (a miss admitted after a spacing) are what the order is for; the job's
    first calls miss in bursts whatever the order (the ramps reaching their replicas)."""
    opening = Opening()
    assert set(run(opening, "a", OPENING_SETTLE_CALLS, bursts=OPENING_SETTLE_CALLS)) == {None}
    spaced = [opening.add(False, "a", burst=False) for _ in range(WINDOW)]
    assert set(spaced) == {None}
    assert verdict(run(opening, "b", HEAD_RUN + 2 * WINDOW)) == "kept"


def test_a_queue_seen_in_a_job_s_first_calls_starts_the_opening() -> None:
    trial = OrderTrial()
    trial.queue_seen("b", 0.0)
    assert trial.phase("b", 0.0) == "opening" and trial.ordered("b", 0.0)
    late = OrderTrial()  # past the job's first calls side by side: the trial's matter
    for k in range(OPENING_SETTLE_CALLS):
        late.record("b", epoch=late.epoch("b", 1.0), hit=k % 2 == 0, now=1.0, key="ab"[k % 2])
    late.queue_seen("b", 1.0)
    assert late.phase("b", 1.0) == "side" and not late.ordered("b", 1.0)


def test_the_opening_s_verdict_holds_for_a_while_then_the_trial_measures_again() -> None:
    trial = OrderTrial()
    trial.queue_seen("b", 0.0)
    epoch = trial.epoch("b", 0.0)
    for _ in range(OPENING_SETTLE_CALLS + WINDOW):
        trial.record("b", epoch=epoch, hit=True, now=1.0, key="a")
    trial.queue_seen("b", 1.0)  # no second opening within one
    assert trial.phase("b", 1.0) == "opening"
    for _ in range(int(BURST_TRIGGER * WINDOW)):
        trial.record("b", epoch=epoch, hit=False, now=1.0, key="b", burst=True)
    assert trial.phase("b", 1.0) == "side" and not trial.ordered("b", 1.0)
    kept = OrderTrial()
    kept.queue_seen("b", 0.0)
    epoch = kept.epoch("b", 0.0)
    for key, calls in (("a", OPENING_SETTLE_CALLS + WINDOW), ("b", HEAD_RUN + 2 * WINDOW)):
        for _ in range(calls):
            kept.record("b", epoch=epoch, hit=True, now=1.0, key=key)
    assert kept.phase("b", 1.0) == "kept"
    after = 1.0 + MEMORY_S
    assert kept.phase("b", after) == "side"
    kept.queue_seen("b", after)  # the opening is a job's first calls, once
    assert not kept.ordered("b", after)
    assert SETTLE_CALLS > 0


def test_copies_expiring_behind_a_server_queue_from_the_job_s_start() -> None:
    """The server family's draw 1067 (1 replica × 1 slot, a queue of 3 under a cap of 4, a
    copy kept 14 s idle; 400 calls over 4 prefixes). Side by side each prefix's copy aged
    while the other prefixes' calls ran; the one-replica server was marked spreading by
    those misses and the trial of the order came at 1,322 s of a 3,124 s job: 75.2% hits
    against the plain client's 80.7%. Its first warm calls took up to 38× a warm-up's time
    (they queue at the server): served in order from then, 79.2% at 1.01× the plain client's
    time (the rule: −2 points, 1.05×)."""
    assert_gate_against_plain(1067, 4, hits=0.02, time=1.05)
