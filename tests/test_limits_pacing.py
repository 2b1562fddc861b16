"""RateLimitPacer: pace below the x-ratelimit-* budget, reconcile, pause once per storm."""

from __future__ import annotations

import pytest

from gptgate.limits import RateLimitPacer
from gptgate.limits.pacing import MAX_MARGIN


def test_nothing_is_delayed_before_any_header() -> None:
    pacer = RateLimitPacer()
    assert not pacer.known
    assert all(pacer.reserve(0.0, 100_000) == 0.0 for _ in range(1_000))


def test_exhausted_requests_wait_until_the_reset() -> None:
    pacer = RateLimitPacer(margin=0.9)
    pacer.observe(10.0, limit_requests=60, remaining_requests=0, reset_requests_s=1.0)
    # refilling linearly at 0.9·60/60 per s would take 7.8 s to climb back over the 10%
    # headroom; but the server said the budget is full again in 1 s
    assert pacer.reserve(10.0, 1) == pytest.approx(1.0)
    assert pacer.reserve(10.5, 1) == pytest.approx(0.5)


def test_within_budget_no_delay_then_linear_refill() -> None:
    pacer = RateLimitPacer(margin=0.9)
    pacer.observe(0.0, limit_tokens=10_000, remaining_tokens=5_000)
    # level = 5,000 remaining − 1,000 headroom = 4,000
    assert pacer.reserve(0.0, 3_000) == 0.0
    # 1,000 left, refilling at 0.9·10,000/60 = 150 tokens/s: 2,000 more take 13.3 s
    assert pacer.reserve(0.0, 3_000) == pytest.approx(2_000 / 150)
    # the next caller queues behind the reservation (the level is now −2,000)
    assert pacer.reserve(0.0, 150) == pytest.approx(2_150 / 150)
    assert pacer.statistics(0.0).delayed == 2


def test_reconcile_refunds_what_was_not_used() -> None:
    pacer = RateLimitPacer(margin=0.9)
    pacer.observe(0.0, limit_tokens=10_000, remaining_tokens=10_000)
    assert pacer.reserve(0.0, 9_000) == 0.0  # prompt + max_tokens
    assert pacer.reserve(0.0, 1_000) > 0.0
    pacer.reconcile(9_000, 1_200)  # the answer was short
    assert pacer.reserve(0.0, 1_000) == 0.0
    pacer.reconcile(1_000, 3_000)  # and this one longer than reserved: charged
    # 9,000 capacity − 9,000 − 1,000 − 1,000 reserved + 7,800 refunded − 2,000 charged
    assert pacer.statistics(0.0).tokens_available == pytest.approx(3_800)


def test_a_report_does_not_forget_reservations_still_waiting_to_be_sent() -> None:
    pacer = RateLimitPacer(margin=1.0)
    pacer.observe(0.0, limit_requests=60, remaining_requests=1)
    assert pacer.reserve(0.0, 1) == 0.0
    delay = pacer.reserve(0.0, 1)
    assert delay == pytest.approx(1.0)  # one request per second
    # a response reports 1 remaining at t=0.5: the server has not seen the call we hold
    # back until t=1.0, so only 0 are really ours to use
    pacer.observe(0.5, limit_requests=60, remaining_requests=1)
    assert pacer.reserve(0.5, 1) == pytest.approx(1.0)


def test_pause_until_holds_the_backend_once() -> None:
    pacer = RateLimitPacer()
    pacer.pause_until(5.0)  # a 429 with retry-after 5 s at t=0
    pacer.pause_until(4.0)  # the rest of the storm: does not shorten it
    pacer.pause_until(5.0)
    assert pacer.paused_until == 5.0
    assert pacer.reserve(1.0, 10) == pytest.approx(4.0)
    assert pacer.reserve(5.0, 10) == 0.0


def test_margin_paces_below_the_limit() -> None:
    pacer = RateLimitPacer(margin=0.9)
    pacer.observe(0.0, limit_requests=600, remaining_requests=600)
    sent = 0
    t = 0.0
    while t < 60.0:
        t += pacer.reserve(t, 0)
        sent += 1
    # 540 usable at once, then refilling at 9/s: well under 600 + 600 in the first minute
    assert sent <= 540 + 9 * 60 + 1
    assert pacer.statistics(t).reserved == sent


def test_rejects_bad_margin() -> None:
    with pytest.raises(ValueError):
        RateLimitPacer(margin=0.0)


def test_sustained_rate_is_the_tighter_budget_in_calls_per_second() -> None:
    pacer = RateLimitPacer(margin=0.9)
    assert pacer.sustained_rate() is None  # no budget known yet
    pacer.observe(0.0, limit_requests=300, remaining_requests=300)
    assert pacer.sustained_rate() == pytest.approx(0.9 * 300 / 60)  # 4.5 calls/s
    # tokens: 0.9·60,000/60 = 900 tokens/s over calls reserving 2,000 then 1,000 (mean 1,500)
    pacer.observe(0.0, limit_tokens=60_000, remaining_tokens=60_000)
    pacer.reserve(0.0, 2_000)
    pacer.reserve(0.0, 1_000)
    assert pacer.sustained_rate() == pytest.approx(900 / 1_500)


def test_funded_calls_are_what_the_budgets_send_without_waiting() -> None:
    pacer = RateLimitPacer(margin=0.9)
    assert pacer.funded_calls(0.0) is None  # no budget known
    pacer.observe(0.0, limit_requests=600, remaining_requests=600,
                  limit_tokens=100_000, remaining_tokens=100_000)
    assert pacer.funded_calls(0.0) == pytest.approx(540.0)  # 600 − the 10% headroom
    assert pacer.reserve(0.0, 10_000) == 0.0
    # the token bucket (90,000 − 10,000 left) over the mean reservation (10,000) binds
    assert pacer.funded_calls(0.0) == pytest.approx(8.0)
    for _ in range(9):
        pacer.reserve(0.0, 10_000)
    assert pacer.funded_calls(0.0) == 0.0  # spent (the level is below zero: never negative)
    # refilled at 1,500 tokens/s: 20 s later 30,000 − the 10,000 owed fund two calls
    assert pacer.funded_calls(20.0) == pytest.approx(2.0)


def test_a_stale_report_counts_what_was_sent_after_its_call() -> None:
    """Issue 31, draw 83: a response's ``remaining`` is the server's count when it admitted the
    call; by the time the answer arrives the calls sent meanwhile were counted too. Taken as of
    now, a stale report over-stated the budget and the pacer ran into 429s."""
    pacer = RateLimitPacer(margin=1.0)
    pacer.observe(0.0, limit_requests=60, remaining_requests=60)
    assert pacer.reserve(0.0, 1) == 0.0
    first = pacer.sequence()
    for _ in range(9):  # nine more sent while the first is answered
        assert pacer.reserve(0.0, 1) == 0.0
    # the first call's answer: the server had 59 left when it admitted it; 9 more since
    pacer.observe(0.0, limit_requests=60, remaining_requests=59, seq=first)
    assert pacer.statistics(0.0).requests_available == pytest.approx(50.0)


def test_an_old_report_is_refilled_since_its_call_was_counted() -> None:
    """A long call's report is as old as the call: the budget refilled since it was counted
    (without that, a stale low ``remaining`` held the pace down: draw 61, 14 s delays)."""
    pacer = RateLimitPacer(margin=1.0)
    pacer.observe(0.0, limit_requests=60, remaining_requests=1)
    assert pacer.reserve(0.0, 1) == 0.0
    sent = pacer.sequence()
    # answered 10 s later: 0 left then, refilled at 1/s since
    pacer.observe(10.0, limit_requests=60, remaining_requests=0, seq=sent)
    assert pacer.statistics(10.0).requests_available == pytest.approx(10.0)


def test_the_headroom_narrows_without_429s_and_comes_back_with_one() -> None:
    """Issue 31, draws 61 and 83: a fixed 10% headroom is time lost where no other client
    shares the key (the job paced 1.3× slower than a client at the limit). Successes narrow
    it (to 1%); a 429 restores the configured margin, held for a minute."""
    pacer = RateLimitPacer(margin=0.9)
    assert pacer.learned_margin == 0.9
    for _ in range(200):
        pacer.relax(0.0)
    assert pacer.learned_margin == pytest.approx(MAX_MARGIN)
    pacer.observe(0.0, limit_requests=600, remaining_requests=600)
    assert pacer.statistics(0.0).requests_available == pytest.approx(594.0)
    pacer.pause_until(1.0)  # a 429 with retry-after 1 s
    assert pacer.learned_margin == 0.9
    pacer.relax(30.0)  # within the minute after it: held
    assert pacer.learned_margin == 0.9
    pacer.relax(61.5)
    assert pacer.learned_margin > 0.9
    # a full queue's 503 says nothing about the budget
    learned = pacer.learned_margin
    pacer.pause_until(70.0, rate_limited=False)
    assert pacer.learned_margin == learned


def _refusals(pacer: RateLimitPacer, calls: int, duplicate_every: int) -> int:
    """A job at the limit of a 96 RPM server (a token bucket full at the start), every
    ``duplicate_every``-th call followed by a duplicate sent ahead (a hedge); each answer
    reports the server's count as of its send. → the requests the server refused."""
    limit, level, t, refused = 96.0, 96.0, 0.0, 0
    sends: list[tuple[float, tuple[int, int]]] = []
    for n in range(calls):
        sends.append((t + pacer.reserve(t, 1), pacer.sequence()))
        if n % duplicate_every == duplicate_every - 1:
            sends.append((t + pacer.reserve_ahead(t, 1), pacer.sequence()))
        sends.sort()
        while sends and sends[0][0] <= t + 0.5:  # sent by the next step, answered at once
            at, seq = sends.pop(0)
            level = min(limit, level + (at - t) * limit / 60.0)
            t = max(t, at)
            if level >= 1.0:
                level -= 1.0
                pacer.observe(t, limit_requests=limit, remaining_requests=int(level), seq=seq)
                pacer.relax(t)
            else:
                refused += 1
        level = min(limit, level + 0.5 * limit / 60.0)
        t += 0.5
    return refused


def test_a_hedges_duplicate_finds_room_in_the_learned_headroom() -> None:
    """Issue 31, draw 1060 (96 RPM): a duplicate goes ahead of the queue, into the headroom.
    Narrowed to 1% of 96 RPM (under one request), the headroom had no room for it: at the
    bucket's floor the duplicate overdrew the server, the 429 paused the backend and widened
    the headroom for a minute — and the hedges the budget had left went to the pause (p99
    0.69× → 0.82×). The headroom keeps room for the last minute's duplicates and one more."""
    # duplicates at 10% of the calls: the hedge budget's 5% and the replaced allowance's 5%
    assert _refusals(RateLimitPacer(margin=0.9), 400, duplicate_every=10) == 0


def test_the_headroom_for_duplicates_lasts_a_minute() -> None:
    pacer = RateLimitPacer(margin=0.9)
    for _ in range(200):
        pacer.relax(0.0)
    pacer.observe(0.0, limit_requests=96, remaining_requests=96)
    assert pacer.statistics(0.0).requests_available == pytest.approx(96 * MAX_MARGIN)
    pacer.reserve_ahead(0.0, 1)
    seq = pacer.sequence()
    pacer.observe(0.0, limit_requests=96, remaining_requests=95, seq=seq)
    assert pacer.statistics(0.0).requests_available == pytest.approx(93.0)  # room for 2
    pacer.observe(61.0, limit_requests=96, remaining_requests=96)
    assert pacer.statistics(61.0).requests_available == pytest.approx(96 * MAX_MARGIN)


def test_the_sustained_rate_counts_what_a_call_costs_once_reconciled() -> None:
    """Issue 31, draw 1050 (490k TPM): a call reserves ``prompt + max_tokens`` (2,250) but
    costs its usage, the rest refunded. Over the reservation, the sustained rate read 3.6
    calls/s where the budget sustained 7.8, and the adaptive limit's rate ceiling held
    ``auto`` at 5 (93% of a fixed 8's goodput, never once waiting for the pacer)."""
    pacer = RateLimitPacer(margin=1.0)
    pacer.observe(0.0, limit_tokens=60_000, remaining_tokens=60_000)
    for _ in range(10):
        pacer.reserve(0.0, 2_000)
    assert pacer.sustained_rate() == pytest.approx(0.5)  # nothing answered yet: reservations
    for _ in range(10):
        pacer.reconcile(2_000, 500)
    assert pacer.sustained_rate() == pytest.approx(2.0)


def test_spilled_calls_are_the_refill_a_full_budget_loses() -> None:
    """Issue 31, draw 1079 (117 RPM): a bucket at capacity drops its refill; what it would
    drop over the next latency is what the adaptive limit's rate ceiling may add without
    sending a call the budget does not fund."""
    pacer = RateLimitPacer(margin=1.0)
    assert pacer.spilled_calls(0.0, 2.0) == 0.0  # no budget known
    pacer.observe(0.0, limit_requests=60, remaining_requests=60)  # 1 call/s, full
    assert pacer.spilled_calls(0.0, 2.0) == pytest.approx(2.0)  # the whole refill
    pacer.reserve(0.0, 100)
    assert pacer.spilled_calls(0.0, 2.0) == pytest.approx(1.0)  # one call of room to refill
    for _ in range(4):
        pacer.reserve(0.0, 100)
    assert pacer.spilled_calls(0.0, 2.0) == 0.0  # sends above the refill: nothing lost
    # a token budget: in calls of the mean reservation, the least of the two buckets binds
    pacer = RateLimitPacer(margin=1.0)
    pacer.observe(0.0, limit_requests=600, remaining_requests=600,
                  limit_tokens=60_000, remaining_tokens=60_000)
    pacer.reserve(0.0, 1_000)
    # tokens: 59,000 + 1,000/s × 2 s − 60,000 = 1,000 (one call); requests: 19 calls
    assert pacer.spilled_calls(0.0, 2.0) == pytest.approx(1.0)
