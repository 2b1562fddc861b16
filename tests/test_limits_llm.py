"""LLMLimit, scripted: every window is fed by hand and the limit checked exactly."""

from __future__ import annotations

import math

import pytest

from gptgate.limits import LatencyNormaliser, Limit, LLMLimit, Sample


class Script:
    """Feeds windows of identical calls; time jumps far ahead between windows so every call
    of a window is admitted after the previous window closed (and after any settling)."""

    def __init__(self, limit: LLMLimit) -> None:
        self.limit = limit
        self.t = 0.0

    def window(
        self,
        latency: float,
        *,
        inflight: int | None = None,
        n: int | None = None,
        tokens: int = 100,
        ttft: float | None = None,
        wait: float = 0.0,
    ) -> int:
        lim = self.limit
        count = n if n is not None else max(lim.window_samples, math.ceil(lim.limit / 2))
        busy = lim.limit if inflight is None else inflight
        start = self.t
        for _ in range(count):
            lim.update(
                Sample(
                    start=start,
                    latency_s=latency,
                    inflight=busy,
                    kind="ok",
                    ttft_s=ttft,
                    output_tokens=tokens,
                ),
                start + wait + latency,
            )
        self.t = start + wait + latency + 1_000.0
        return lim.limit

    def drop(
        self,
        *,
        start: float | None = None,
        congestion: bool = True,
        rate_limited: bool = False,
        inflight: int | None = None,
    ) -> int:
        s = self.t if start is None else start
        self.limit.update(
            Sample(
                start=s,
                latency_s=0.1,
                inflight=self.limit.limit if inflight is None else inflight,
                kind="dropped",
                congestion=congestion,
                rate_limited=rate_limited,
            ),
            self.t,
        )
        self.t += 1.0
        return self.limit.limit


def power(n: float, slope: float) -> float:
    """A latency that grows as ``N**slope`` (goodput elasticity ``1 − slope``) from the
    baseline that :func:`_into_avoidance` leaves (3.0 s at N = 8)."""
    return float(3.0 * (n / 8) ** slope)


def test_is_a_limit() -> None:
    assert isinstance(LLMLimit(), Limit)


def test_slow_start_doubles_per_good_window_up_to_max() -> None:
    s = Script(LLMLimit(initial=4, max_limit=64, window_samples=4))
    seen = [s.limit.limit]
    for _ in range(5):
        seen.append(s.window(2.0))  # latency flat: every doubling doubled goodput
    assert seen == [4, 8, 16, 32, 64, 59]
    # at the ceiling nothing is left to double into: slow start ends and probing starts
    # downwards from the ceiling (64·0.92), so a knee below it can still be found
    assert not s.limit.in_slow_start
    assert s.limit.center == pytest.approx(64.0)
    assert s.limit.events["slow_start_exit"] == 1
    assert [lim for _, lim in s.limit.trace] == [4, 8, 16, 32, 64, 59]


def test_slow_start_exits_at_the_linear_equivalent_of_what_the_last_doubling_bought() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    assert s.window(2.0) == 8
    assert s.window(2.0) == 16
    # 16 in flight but the server saturates at 10: latency ×1.6, goodput ×1.25 for ×2
    s.window(2.0 * 16 / 10)
    assert s.limit.in_slow_start  # e = 0.32: still worth doubling (exit below 0.3)
    assert s.limit.limit == 32
    s.window(2.0 * 32 / 10)  # 32 in flight, still 10 served: e = 0
    lim = s.limit
    assert not lim.in_slow_start
    assert lim.elasticity == pytest.approx(0.0, abs=1e-12)
    # the linear-scaling equivalent of what the doubling bought: 16 · X32/X16 = 16
    assert lim.center == pytest.approx(16.0)
    assert lim.limit == round(16 * 0.92)  # probes low first (probe 8%)
    assert lim.events["slow_start_exit"] == 1


def test_long_answers_at_unchanged_per_token_speed_are_not_congestion() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    # each window the answers are 4x longer and take 4x as long, at the same 20 ms/token;
    # raw latency would read as a queue (e = 1 − ln4/ln2 < 0) and end slow start at once
    tokens = 25
    seen = [s.limit.limit]
    for _ in range(4):
        seen.append(s.window(0.2 + (tokens - 1) * 0.02, ttft=0.2, tokens=tokens))
        tokens *= 4
    assert seen == [4, 8, 16, 32, 64]
    assert s.limit.in_slow_start


def test_long_answers_without_ttft_are_normalised_too() -> None:
    # non-streamed: latency = (n + n0)·tpot with the default n0 = 20 overhead tokens
    s = Script(LLMLimit(initial=4, window_samples=4))
    tokens = 25
    for _ in range(4):
        s.window((tokens + 20) * 0.02, tokens=tokens)
        tokens *= 3
    assert s.limit.limit == 64
    assert s.limit.in_slow_start


def test_app_limited_does_not_grow() -> None:
    s = Script(LLMLimit(initial=8, window_samples=4))
    for _ in range(3):
        assert s.window(2.0, inflight=3) == 8  # 3 < 8/2: the app, not the backend, is idle
    assert s.window(2.0, inflight=4) == 16  # 2·4 ≥ 8: busy enough


def _into_avoidance() -> Script:
    """Slow start 4 → 8 → 16, saturating at 8: centre 8, probing 7 then 9, baseline 3 s."""
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    s.window(4.0)
    assert s.limit.center == pytest.approx(8.0)
    assert s.limit._base is not None
    assert math.exp(s.limit._ln_r(*s.limit._base)) == pytest.approx(3.0)
    return s


def test_probing_alternates_around_the_centre() -> None:
    s = _into_avoidance()
    lim = s.limit
    assert lim.limit == 7  # round(8·0.92)
    s.window(power(7, 0.5))
    assert lim.limit == 9  # round(8·1.08)
    s.window(power(9, 0.5))
    assert lim.limit == 7  # two windows: no estimate yet, centre unchanged
    assert lim.center == pytest.approx(8.0)


@pytest.mark.parametrize(
    ("slope", "expected_err"),
    [
        (0.5, 0.5 - 0.15),  # e = 0.5: well below the knee → grow
        (0.85, 0.0),  # e = 0.15: at the knee → stay
        (1.0, 0.0 - 0.15),  # e = 0: a pure queue → shrink
        (1.2, -0.2 - 0.15),  # e < 0: goodput falling (USL retrograde) → shrink more
        (0.0, 0.5),  # e = 1 → error clipped at +0.5
    ],
)
def test_extremum_seeking_step_is_gain_times_elasticity_error(
    slope: float, expected_err: float
) -> None:
    s = _into_avoidance()
    lim = s.limit
    for _ in range(3):  # lo, hi, lo: the first centred estimate
        s.window(power(lim.limit, slope))
    assert lim.elasticity == pytest.approx(1.0 - slope)
    assert lim.center == pytest.approx(8.0 * math.exp(0.3 * expected_err))


def test_failures_count_against_goodput() -> None:
    s = _into_avoidance()
    lim = s.limit
    s.window(power(7, 0.5))
    s.window(power(9, 0.5))
    # the third window (back at 7) loses one call in five: goodput × 4/5 there, so the high
    # probe looks better by that much. Centred: e = 0.5 + ½·ln(5/4)/ln(9/7)
    s.limit.update(Sample(start=s.t, latency_s=1.0, inflight=7, kind="dropped"), s.t + 1.0)
    assert lim.events["loss"] == 0  # one stray failure does not cut
    s.window(power(7, 0.5), n=4)
    d_ln_n = math.log(9) - math.log(7)
    assert lim.elasticity == pytest.approx(0.5 + 0.5 * math.log(5 / 4) / d_ln_n)


def test_a_step_change_is_read_cautiously() -> None:
    s = _into_avoidance()
    lim = s.limit
    s.window(power(7, 0.5))  # lo
    s.window(power(9, 0.5))  # hi
    # capacity falls during the third window: latency +30% at the low probe. Read across
    # the step, lowering N "raised" latency: e_after > 1 and the centred estimate > 1 too.
    # The one-sided halves disagree by more than 1, so the cautious one (e_before) is used.
    s.window(power(7, 0.5) * 1.3)
    e_after = 1 - (math.log(power(7, 0.5) * 1.3) - math.log(power(9, 0.5))) / math.log(7 / 9)
    assert e_after > 1.5
    assert lim.elasticity == pytest.approx(0.5)  # e_before: the true slope
    assert lim.center == pytest.approx(8.0 * math.exp(0.3 * 0.35))


def test_loss_cuts_once_per_overload_event_and_not_for_a_stray_failure() -> None:
    s = _into_avoidance()
    lim = s.limit
    s.window(power(7, 0.85))
    assert lim.limit == 9
    admitted = s.t - 0.5  # the whole burst was admitted before the first 429 came back
    assert s.drop(start=admitted) == 9  # one failure: could be anything
    assert s.drop(start=admitted) == round(9 * 0.8 * 0.92)  # two, and dense: overload
    assert lim.center == pytest.approx(9 * 0.8)
    cut = lim.limit
    for _ in range(20):  # the rest of the burst: the same overload event
        assert s.drop(start=admitted) == cut
    assert lim.events["loss"] == 1
    s.t += 5_000  # the window settles; then two more failures admitted after the cut
    s.drop()
    s.drop()
    assert lim.events["loss"] == 2
    assert lim.center == pytest.approx(cut * 0.8)


def test_server_failures_lower_goodput_but_never_cut_by_themselves() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    assert s.limit.limit == 16
    # at 16, half the calls fail with a 500: dense, but no loss cut …
    for _ in range(8):
        assert s.drop(congestion=False) == 16
    assert s.limit.events["loss"] == 0
    # … yet they count against goodput: the window's 8 successes of 16 calls at 16 in flight
    # are the goodput of 8 (e = 0), so slow start ends there instead of doubling on
    s.window(2.0)
    lim = s.limit
    assert not lim.in_slow_start
    assert lim.elasticity == pytest.approx(0.0, abs=1e-12)
    assert lim.center == pytest.approx(8.0)
    assert lim.events == {"slow_start_exit": 1, "loss": 0, "queue": 0, "delay": 0}


def test_dense_server_failures_end_slow_start_though_the_doubling_paid() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    assert s.limit.limit == 16
    # at 16: 2 of 10 calls fail with a 500 (20%, beyond the 10% loss tolerance). The doubling
    # still bought goodput (8 ok at 16 against 8 at 8: e = 0.68) — but it bought failures too,
    # and the next one would buy more: slow start ends, at the linear-scaling equivalent
    s.drop(congestion=False)
    s.drop(congestion=False)
    s.window(2.0)
    lim = s.limit
    assert not lim.in_slow_start
    assert lim.elasticity == pytest.approx(math.log2(2 * 0.8))
    assert lim.center == pytest.approx(8 * 2 * 0.8)
    assert lim.events == {"slow_start_exit": 1, "loss": 0, "queue": 0, "delay": 0}


def test_a_backend_failing_as_often_at_any_load_stays_in_slow_start() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    for limit in (4, 8, 16):
        successes = max(4, limit // 2)  # a window's calls at this limit
        for _ in range(successes // 4):  # a fifth of the calls fail, at every level
            s.drop(congestion=False)
        assert s.window(2.0, n=successes) == 2 * limit
    assert s.limit.in_slow_start and s.limit.events["slow_start_exit"] == 0


def test_the_same_failures_as_congestion_cut_at_once() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    s.drop(inflight=9)
    s.drop(inflight=9)  # two 429s, dense: overload (refused past the level before, 8)
    assert s.limit.events["loss"] == 1 and s.limit.center == 8.0


def test_loss_in_slow_start_restores_the_level_before_the_last_doubling() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    assert s.limit.limit == 16
    # refused from the 9th call on: the level before was the server's edge (where the
    # refusals put it: tests/test_adaptive_refusal.py)
    s.drop(inflight=9)
    s.drop(inflight=9)
    assert not s.limit.in_slow_start
    assert s.limit.center == 8.0
    assert s.limit.limit == round(8 * 0.92)


def test_429s_from_calls_that_did_not_fill_the_limit_do_not_cut() -> None:
    """Sequential calls retrying into 429s (one in flight at a limit of 16): the rate budget
    is spent, nothing is known of the concurrency the backend serves."""
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    for _ in range(6):
        assert s.drop(rate_limited=True, inflight=1) == 16
    assert s.limit.events["loss"] == 0 and s.limit.in_slow_start


def test_a_429_storm_at_full_load_still_cuts_once() -> None:
    """With the limit full, dense 429s are overload as before (a hosted API also answers 429
    when its engines are busy): one cut per event."""
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    assert s.limit.limit == 16
    admitted = s.t - 0.5
    for _ in range(10):
        s.drop(rate_limited=True, start=admitted, inflight=9)
    assert s.limit.events["loss"] == 1
    assert s.limit.center == 8.0


def test_timeout_counts_as_a_drop() -> None:
    s = Script(LLMLimit(initial=8, window_samples=4, timeout_s=10.0))
    s.window(2.0)
    assert s.limit.limit == 16
    for _ in range(2):
        s.limit.update(Sample(start=s.t, latency_s=11.0, inflight=16, kind="ok"), s.t + 11.0)
    assert s.limit.events["loss"] == 1
    assert s.limit.center == 8.0


@pytest.mark.parametrize(("ratio", "factor"), [(1.8, 1 / 1.8), (3.0, 0.5)])
def test_delay_guard_goes_to_goodput_times_baseline_latency(ratio: float, factor: float) -> None:
    s = _into_avoidance()
    lim = s.limit
    s.window(3.0)  # lo (7)
    s.window(3.0)  # hi (9): the baseline is 3 s
    # the backend slows down: latency jumps at the low probe
    s.window(3.0 * ratio)
    assert lim.events["delay"] == 1
    # N · R_base/R, at most halving per event
    assert lim.center == pytest.approx(7 * factor)


def test_server_queue_in_ttft_cuts_to_the_calls_being_served() -> None:
    s = _into_avoidance()
    lim = s.limit
    # streamed windows: ttft 0.2 s at the floor
    s.window(3.0, ttft=0.2)
    assert lim.limit == 9
    s.window(3.0, ttft=0.2)
    assert lim.limit == 7
    # now calls wait 0.6 s at the server before their first token (latency 3.6 s): by
    # Little, 7 · 0.6/3.6 of the 7 in flight are queued there
    s.window(3.6, ttft=0.8)
    queued = 7 * 0.6 / 3.6
    assert lim.events["queue"] == 1
    assert lim.events["delay"] == 0
    assert lim.center == pytest.approx((7 - queued) * 1.1)


def test_window_bounds_clamp_and_clear() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.limit.set_window(20, 30)
    assert s.limit.limit == 20
    assert s.limit.window == (20, 30)
    assert s.window(2.0) == 30  # doubling capped by the window
    # at the window's ceiling slow start ends: probing from the ceiling down, round(30·0.92)
    assert s.window(2.0) == 28
    assert not s.limit.in_slow_start
    s.limit.set_window(None)
    assert s.limit.window == (1, 64)
    assert s.window(2.0) == 32  # the high probe, no longer clamped: round(30·1.08)
    s.limit.set_window(5, 10)
    assert s.limit.limit == 10
    with pytest.raises(ValueError):
        s.limit.set_window(10, 5)


def test_min_and_max_bound_every_path() -> None:
    s = Script(LLMLimit(initial=3, min_limit=2, max_limit=5, window_samples=4))
    assert s.window(2.0) == 5
    for _ in range(10):
        s.t += 1
        s.drop()
    assert s.limit.limit >= 2
    assert s.limit.center >= 2.0


def test_ignored_samples_change_nothing() -> None:
    lim = LLMLimit()
    for i in range(100):
        lim.update(Sample(start=i, latency_s=0.0, inflight=4, kind="ignored"), i)
    assert lim.limit == 4
    assert not lim.trace


def test_calls_admitted_before_a_window_opened_are_not_measured() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    assert s.limit.limit == 8
    for _ in range(50):  # stragglers from the old limit, very slow: not this window's
        s.limit.update(Sample(start=-1.0, latency_s=30.0, inflight=4, kind="ok"), s.t)
    assert s.window(2.0) == 16


def test_throughput_is_successes_per_second_over_the_window() -> None:
    lim = LLMLimit(initial=4, window_samples=5)
    for i in range(5):
        lim.update(Sample(start=0.0, latency_s=1.0 + i, inflight=4, kind="ok"), 1.0 + i)
    assert lim.throughput == pytest.approx(4 / 4.0)


def test_normaliser_maps_calls_to_a_reference_size() -> None:
    norm = LatencyNormaliser(overhead_tokens=20)
    # streamed: ttft + (n_ref − 1)·tpot, n_ref = mean answer length so far
    assert norm(Sample(0, 0.2 + 99 * 0.02, 1, "ok", ttft_s=0.2, output_tokens=100)) == (
        pytest.approx(0.2 + 99 * 0.02)
    )
    r = norm(Sample(0, 0.2 + 299 * 0.02, 1, "ok", ttft_s=0.2, output_tokens=300))
    assert norm.reference_tokens == 200
    assert r == pytest.approx(0.2 + 199 * 0.02)
    # the overhead is learned from streams: ttft/tpot − 1 = 9 tokens
    assert norm.overhead_tokens == pytest.approx(9.0)
    # non-streamed: latency · (n_ref + n0)/(n + n0)
    r = norm(Sample(0, 4.0, 1, "ok", output_tokens=100))
    n_ref = norm.reference_tokens
    assert r == pytest.approx(4.0 * (n_ref + 9.0) / (100 + 9.0))


def test_step_halves_when_the_error_changes_sign() -> None:
    s = _into_avoidance()
    lim = s.limit
    for _ in range(3):  # e = 0.5: above the knee, full step
        s.window(power(lim.limit, 0.5))
    assert lim._step == 0.3
    centre = lim.center
    s.window(power(lim.limit, 1.6))  # latency now climbs faster than N: e < knee
    err = max(-1.0, min(0.5, lim.elasticity - 0.15))
    assert err < 0
    assert lim._step == 0.15  # straddling the knee: half the step
    assert lim.center == pytest.approx(centre * math.exp(0.15 * err))


def test_time_held_before_the_send_is_a_queue() -> None:
    s = _into_avoidance()
    lim = s.limit
    s.window(3.0)
    s.window(3.0)
    assert lim.limit == 7
    # the calls now hold their permit 1 s before being sent (the rate-limit pacer): by
    # Little, 7 · 1/4 of the 7 in flight wait instead of being served
    s.window(3.0, wait=1.0)
    assert lim.events["queue"] == 1
    assert lim.center == pytest.approx((7 - 7 * 1.0 / 4.0) * 1.1)


def test_a_queue_ends_slow_start() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    assert s.window(2.0) == 8
    assert s.window(2.0, wait=2.0) == round(8 * 0.5 * 1.1 * 0.92)  # half of them waited
    assert not s.limit.in_slow_start
    assert s.limit.events["queue"] == 1


def _noisy_probes(delta: float, deadband: float, slope: float) -> LLMLimit:
    """Into avoidance at centre 8 (as :func:`_into_avoidance`), then three probing windows
    (7, 9, 7 in flight) whose calls alternate ``latency·exp(±delta)``: per-call variance of
    ln R ``4·delta²/3`` over four calls, the same mean in every window (so ``e`` is exact)."""
    lim = LLMLimit(
        initial=4, window_samples=4, window_fraction=0.4, window_error=0.0, deadband=deadband
    )
    s = Script(lim)
    s.window(2.0)
    s.window(2.0)
    s.window(4.0)
    assert lim.center == pytest.approx(8.0)
    for _ in range(3):
        latency = power(lim.limit, slope)
        assert lim._window_size() == 4
        for sign in (1, -1, 1, -1):
            s.window(latency * math.exp(sign * delta), n=1)
    assert lim.elasticity == pytest.approx(1.0 - slope)
    return lim


def _centred_se(lim: LLMLimit) -> float:
    """Standard error of the last centred elasticity estimate of :func:`_noisy_probes`: from
    the per-call variance of ln R (an EWMA over windows of about ``4·delta²/3``), four calls
    per window, and the probe's ``ln(9/7)``."""
    assert lim._log_var > 0.0
    return math.sqrt(1.5 * lim._log_var / 4) / math.log(9 / 7)


def test_an_elasticity_error_within_the_noise_does_not_move_the_centre() -> None:
    # e = 0.5: 0.35 above the knee, but 1.5 standard errors of this noisy estimate are more
    lim = _noisy_probes(0.2, 1.5, 0.5)
    assert 1.5 * _centred_se(lim) > 0.35
    assert lim.center == pytest.approx(8.0)
    # without the dead band the same noise moves it by the whole error
    moved = _noisy_probes(0.2, 0.0, 0.5).center
    assert moved == pytest.approx(8.0 * math.exp(0.3 * 0.35))


def test_only_the_error_beyond_the_noise_moves_the_centre() -> None:
    lim = _noisy_probes(0.05, 1.5, 0.5)
    se = _centred_se(lim)
    assert 0.0 < 1.5 * se < 0.35
    assert lim.center == pytest.approx(8.0 * math.exp(0.3 * (0.35 - 1.5 * se)))
    # a large error is still clipped after the dead band: e = 1 → min(0.5, 0.85 − 1.5·se)
    lim = _noisy_probes(0.05, 1.5, 0.0)
    se = _centred_se(lim)
    assert lim.center == pytest.approx(8.0 * math.exp(0.3 * min(0.5, 0.85 - 1.5 * se)))


def _centres_on_noisy_probes(delta: float) -> tuple[LLMLimit, list[int], list[float]]:
    """Into avoidance at centre 8 (as :func:`_noisy_probes`, dead band 1.5), then five probing
    windows of four calls alternating ``latency·exp(±delta)``, on a latency that falls as
    ``N**-1`` (e = 2, far above the knee, in every estimate: each window's mean carries the
    same ``cosh(delta)``). Returns the limit during each window and the centre after it."""
    lim = LLMLimit(
        initial=4, window_samples=4, window_fraction=0.25, window_error=0.0, deadband=1.5
    )
    s = Script(lim)
    s.window(2.0)
    s.window(2.0)
    s.window(4.0)
    assert lim.center == pytest.approx(8.0)
    limits, centres = [], []
    for _ in range(5):
        limits.append(lim.limit)
        latency = power(lim.limit, -1.0)
        for sign in (1, -1, 1, -1):
            s.window(latency * math.exp(sign * delta), n=1)
        centres.append(lim.center)
    return lim, limits, centres


def test_a_move_on_an_estimate_too_noisy_to_resolve_the_knee_needs_fresh_windows() -> None:
    # per-call noise δ = 0.3: the dead band, 1.5 standard errors of the centred difference,
    # is wider than 1 − 0.15 — one estimate cannot tell the knee from linear scaling
    lim, limits, centres = _centres_on_noisy_probes(0.3)
    assert lim._log_var == pytest.approx(4 * 0.3**2 / 3)
    assert 1.5 * math.sqrt(1.5 * lim._log_var / 4) / math.log(9 / 7) > 0.85
    # e = 2: the error beyond the dead band (0.58) is clipped at 0.5, a move of exp(0.3·0.5)
    up = math.exp(0.3 * 0.5)
    # the move on the third window (7, the low probe around 8) keeps only that window: the
    # fourth (10, the high probe around 9.29), which would share two windows with the
    # estimate that moved the centre, estimates nothing; the fifth (9) moves it again, on
    # 7, 10, 9: a span of ln 10 − (ln 7 + ln 9)/2, so a wider dead band — 1.85 less it is
    # below 0.5 (the errors agree: the step stays at its ceiling, 0.3)
    assert limits == [7, 9, 7, 10, 9]
    span = math.log(10) - 0.5 * (math.log(7) + math.log(9))
    err = 1.85 - 1.5 * math.sqrt(1.5 * lim._log_var / 4) / span
    assert 0.0 < err < 0.5
    assert centres == pytest.approx([8.0, 8.0, 8.0 * up, 8.0 * up, 8.0 * up * math.exp(0.3 * err)])
    # a clean estimate (δ = 0.05) moves the centre on every window, as before
    lim, limits, centres = _centres_on_noisy_probes(0.05)
    assert 1.5 * math.sqrt(1.5 * lim._log_var / 4) / math.log(9 / 7) < 0.85
    assert limits == [7, 9, 7, 10, 10]
    assert centres == pytest.approx([8.0, 8.0, 8.0 * up, 8.0 * up**2, 8.0 * up**3])


def test_a_rate_limit_caps_the_limit_at_headroom_times_rate_times_latency() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    lim = s.limit
    lim.set_rate_ceiling(2.0)  # 2 calls/s sustained (e.g. 133 RPM at a 90% margin)
    assert s.window(2.0) == 8  # latency 2 s: 2 × 2/s × 2 s = 8 in flight is the ceiling
    assert lim.ceiling == 8
    # at the ceiling slow start ends, probing below it: round(8·0.92)
    assert s.window(2.0) == 7
    assert not lim.in_slow_start
    assert lim.center == pytest.approx(8.0)
    lim.set_rate_ceiling(None)
    assert lim.ceiling == 64


def test_with_a_known_rate_limit_pacer_wait_is_not_a_queue() -> None:
    # as test_time_held_before_the_send_is_a_queue, but the rate limit is known: its ceiling
    # (2 × 10/s × 3 s = 60, far above) bounds the limit, and the wait is not read as a queue
    s = _into_avoidance()
    lim = s.limit
    lim.set_rate_ceiling(10.0)
    s.window(3.0)
    s.window(3.0)
    assert lim.limit == 7
    s.window(3.0, wait=1.0)
    assert lim.events["queue"] == 0
    assert lim.events["delay"] == 0


def test_a_jump_in_the_latest_calls_is_caught_before_it_moves_a_long_window() -> None:
    lim = LLMLimit(initial=4, window_samples=4, window_fraction=2.0)
    s = Script(lim)
    s.window(2.0, n=8)  # slow start windows of 2·L calls: 4 → 8 → 16, saturating at 8
    s.window(2.0, n=16)
    s.window(4.0, n=32)
    assert lim.center == pytest.approx(8.0)
    assert lim.limit == 7 and lim._window_size() == 14
    s.window(3.0, n=8)  # the baseline latency: two quiet groups of four calls
    assert lim.events["delay"] == 0
    # the server halves: the next four calls take 6 s. The window's mean, (8·3 + 4·6)/12 =
    # 4 s, is within 1.5× the 3 s baseline; its last four calls alone are 2× above it
    s.window(6.0, n=4)
    assert lim.events["delay"] == 1
    assert lim.center == pytest.approx(7 * 0.5)  # at most halving per event


def _latency_jump_at_rate(rate: float | None) -> LLMLimit:
    """Into avoidance (centre 8, baseline 3 s, probing at 7), then a window whose calls
    complete every 0.5 s (2 calls/s) but take 6 s: twice the baseline."""
    s = _into_avoidance()
    lim = s.limit
    lim.set_rate_ceiling(rate)
    assert lim.limit == 7
    t0 = s.t
    for i in range(4):
        start = t0 + 0.5 * i
        lim.update(Sample(start=start, latency_s=6.0, inflight=7, kind="ok"), start + 6.0)
    assert lim.events["delay"] + lim.rebases == 1  # a cut, or a rebase only
    return lim


def test_a_latency_jump_cuts_to_goodput_times_baseline_latency_at_most_halving() -> None:
    assert _latency_jump_at_rate(None).center == pytest.approx(7 * 0.5)


def test_at_the_rate_limit_a_latency_jump_does_not_cut() -> None:
    # goodput (2 calls/s) is at the rate limit (1.5 calls/s, less than measured: the burst
    # allowance): the pacer bounds the load on the server, so the jump is the server slowing
    # at a load it sustains; a cut would only leave the budget unused. The baseline is rebased
    lim = _latency_jump_at_rate(1.5)
    assert lim.throughput == pytest.approx(2.0)
    assert lim.center == pytest.approx(8.0)
    assert lim._base is not None and lim._ln_r(*lim._base) > math.log(3.0)
    # below the rate limit the server does not sustain it: the usual cut
    assert _latency_jump_at_rate(3.0).center == pytest.approx(7 * 0.5)


def test_a_centre_held_at_the_rate_ceiling_follows_it_up() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    lim = s.limit
    lim.set_rate_ceiling(2.0)
    s.window(2.0)
    s.window(2.0)  # slow start ends at the ceiling (2 × 2/s × 2 s = 8), probing below it
    assert lim.center == pytest.approx(8.0)
    lim.set_rate_ceiling(3.0)  # the ceiling rises to 12: the centre held at 8 follows it
    s.window(2.0)
    assert lim.ceiling == 12
    assert lim.center == pytest.approx(12.0)
    # a centre below the ceiling (after a cut) is not carried up
    s.drop()
    s.drop()
    assert lim.center < 12.0
    center = lim.center
    lim.set_rate_ceiling(4.0)
    s.window(2.0)
    assert lim.center == pytest.approx(center)


def test_a_fixed_bound_does_not_carry_the_centre_up_when_lifted() -> None:
    s = Script(LLMLimit(initial=4, window_samples=4))
    lim = s.limit
    lim.set_window(None, 8)
    s.window(2.0)
    s.window(2.0)  # slow start ends at the window's bound: probing below it
    assert lim.center == pytest.approx(8.0) and not lim.in_slow_start
    lim.set_window(None)
    s.window(2.0)
    assert lim.center == pytest.approx(8.0)


def test_after_a_step_down_the_guards_watch_the_calls_still_draining() -> None:
    s = _into_avoidance()
    lim = s.limit
    s.window(3.0)  # lo (7)
    s.window(3.0)  # hi (9), the baseline 3 s; now back to 7: the window opens one latency on
    assert lim.limit == 7
    closed = s.t - 1_000.0
    assert lim._window_start > closed
    # calls admitted at the step, before the window opens, take twice the baseline: they
    # are not measured, but the guards see them — the server slowed down, not the probe
    for _ in range(4):
        lim.update(Sample(start=closed, latency_s=6.0, inflight=9, kind="ok"), closed + 6.0)
    assert lim._w.n == 0
    assert lim.events["delay"] == 1
    assert lim.center == pytest.approx(9 * 0.5)


def test_a_baseline_only_delay_event_does_not_restart_probing() -> None:
    # issue 14, settling: at the rate limit a latency jump only rebases the baseline (the
    # pacer bounds the server's load). It used to restart probing too — windows forgotten,
    # the step reset, a step down to the low probe and a latency's wait — so on tier1 each
    # such event set back the climb to the rate ceiling (settle 388 calls, pooled, at 3,000)
    s = _into_avoidance()
    lim = s.limit
    lim.rate_headroom = 4.0  # a ceiling (4 × 1.5/s × ~2 s) above the probes
    lim.set_rate_ceiling(1.5)
    t0 = s.t
    for i in range(4):  # the low probe (7), completing 2 calls/s: at the rate limit
        lim.update(
            Sample(start=t0, latency_s=3.0, inflight=7, kind="ok", output_tokens=100),
            t0 + 3.0 + 0.5 * i,
        )
    s.t = t0 + 1_000.0
    assert lim.throughput == pytest.approx(2.0)
    assert lim.limit == 9 and len(lim._hist) == 1  # one window measured, on the high probe
    step = lim._step
    window_start = lim._window_start
    t0 = s.t
    for i in range(4):
        start = t0 + 0.5 * i
        lim.update(
            Sample(start=start, latency_s=6.0, inflight=9, kind="ok", output_tokens=100),
            start + 6.0,
        )
    assert lim.rebases == 1 and lim.events["delay"] == 0
    assert lim._base is not None and lim._ln_r(*lim._base) > math.log(3.0)
    assert lim.center == pytest.approx(8.0)
    # still on the high probe, no wait for a drain; only the window measured on the old
    # server is forgotten (beside the next it would read the slowdown as e < 0, and cut)
    assert lim.limit == 9
    assert lim._window_start == window_start
    assert len(lim._hist) == 0
    assert lim._step == step


def test_a_latency_jump_with_the_centre_held_at_the_rate_ceiling_does_not_cut() -> None:
    # the centre follows the rate ceiling (pinned); the server halves its speed, so the calls
    # take twice as long and the goodput last measured falls below the rate — but the pacer
    # still bounds the load. Cutting there (as when goodput is below the rate) left tier1's
    # limit at 14 while the ceiling rose to ~37 with the latency: ~400 calls to climb back
    s = Script(LLMLimit(initial=4, window_samples=4))
    lim = s.limit
    lim.set_rate_ceiling(2.0)
    s.window(2.0)
    s.window(2.0)  # slow start ends at the ceiling (2 × 2/s × 2 s = 8), probing below it
    assert lim.center == pytest.approx(8.0) and lim._pinned
    t0 = s.t
    for i in range(4):  # completing 1 call/s, half the rate: the calls take twice as long
        start = t0 + 1.0 * i
        lim.update(
            Sample(start=start, latency_s=4.0, inflight=7, kind="ok", output_tokens=100),
            start + 4.0,
        )
    assert lim.throughput == pytest.approx(1.0)
    assert lim.events["delay"] == 0 and lim.rebases == 1
    assert lim.center >= 8.0 and lim._pinned


def _plateau(n: float) -> float:
    """Latency on a server whose throughput is flat from 8 calls on: the rest queue (e = 0)."""
    return 3.0 * max(1.0, n / 8)


def test_on_a_flat_plateau_the_centre_leaves_the_middle_for_its_edge() -> None:
    # issue 14: a server with throughput flat from 8 to 32 calls; slow start from 16 ends at
    # 16 (a doubling to 32 bought nothing). Probing 15/17 measures e = 0, only 0.15 below the
    # knee, and with per-call noise δ = 0.03 one estimate's dead band (0.30) swallows that:
    # the centre used to stay at 16 for ever, twice the queueing of 8 for no goodput. The
    # mean of the last estimates has a narrower band: the centre walks down to the edge
    lim = LLMLimit(initial=16, window_samples=4, window_fraction=0.1, window_error=0.0)
    s = Script(lim)
    s.window(_plateau(16))
    s.window(_plateau(32))
    assert lim.center == pytest.approx(16.0) and not lim.in_slow_start
    centres = []
    for _ in range(80):
        latency = _plateau(lim.limit)
        for sign in (1, -1, 1, -1):  # one window of four calls, its mean the same each time
            s.window(latency * math.exp(sign * 0.03), n=1)
        centres.append(lim.center)
    span = math.log(17 / 15)
    assert 1.75 * math.sqrt(1.5 * lim._log_var / 4) / span > 0.15  # one estimate: no move
    assert centres[9] == pytest.approx(16.0)  # the first ten estimates: inside the band
    assert min(centres[40:]) >= 7.5 and max(centres[40:]) <= 9.0  # at the plateau's edge


def test_refusals_admitted_at_the_instant_of_a_cut_belong_to_its_overload_event() -> None:
    """A doubling into a bounded queue: the server refuses the extra calls at once (503), so
    they are admitted and answered at the same instant as the cut they cause. They are the
    same overload event: one cut, not one per pair of refusals (family draw 3, 13×3 slots with
    one queued call each, went 64 → 29 → 21 → 15 → 11 → 8 → 6 → 4 at one instant and spent
    the rest of the run climbing back: 22.6% of the best fixed limit's goodput)."""
    s = Script(LLMLimit(initial=4, window_samples=4))
    s.window(2.0)
    s.window(2.0)
    s.window(2.0)
    assert s.limit.limit == 32
    burst = s.t
    for rank in range(21, 33):  # the doubling's last twelve calls refused at one instant
        s.limit.update(
            Sample(start=burst, latency_s=0.0, inflight=rank, kind="dropped"), burst
        )
    assert s.limit.events["loss"] == 1
    # the server held 20: the centre's high probe is the 20th call (not the level before, 16)
    assert s.limit.center == pytest.approx(20 / 1.08)


def test_the_rate_ceiling_holds_only_once_the_budget_is_spent() -> None:
    """A rate budget starts full (a minute's worth): while it funds more calls than the
    sustained ceiling, the pacer sends them at once, and a limit capped at rate × latency
    only left the server idle (a 400-call job on 10×20 slots under 2.7M TPM: 27% of a fixed
    limit of 128's goodput, the whole job inside the first minute's budget)."""
    s = Script(LLMLimit(initial=4, window_samples=4))
    lim = s.limit
    lim.set_rate_ceiling(2.0)  # sustained: 2 × 2/s × 2 s = 8
    lim.set_rate_budget(1_000.0)  # but the bucket funds 1,000 calls now
    assert s.window(2.0) == 8
    assert lim.ceiling == 64  # the limit's own bound
    assert s.window(2.0) == 16  # slow start goes on past the sustained ceiling
    assert s.window(2.0) == 32
    lim.set_rate_budget(20.0)  # the budget runs down: it, then the sustained rate, binds
    assert lim.ceiling == 20
    assert lim.limit == 20  # at once: calls past the budget would wait for the pacer
    lim.set_rate_budget(0.0)
    assert (lim.ceiling, lim.limit) == (8, 8)
    lim.set_rate_budget(None)  # not reported: the sustained ceiling, as before
    assert lim.ceiling == 8
    lim.set_rate_budget(1_000.0, demand=400)  # it covers the work waiting: lifted again
    assert lim.ceiling == 64
    # a budget short of twice the work waiting is not what the ceiling is: covering 3/4 of
    # it, the pace is the refill plus the bucket over a window, at most twice the refill
    # (gptgate/limits/rate_ceiling.py: 2 × (2 + 2)/s × 2 s) ...
    lim.set_rate_budget(700.0, demand=400)
    assert (lim.ceiling, lim.limit) == (16, 8)
    # ... and short of that, the job ends at the sustained rate whatever the limit, and a
    # burst above it would only queue at the server
    lim.set_rate_budget(250.0, demand=400)
    assert (lim.ceiling, lim.limit) == (8, 8)


def test_a_budget_spilling_its_refill_lifts_the_ceiling_by_the_spill() -> None:
    """Issue 31, draws 77 and 1079: a bucket sitting full while the limit sends below its
    refill loses that refill, and the sustained ceiling (2 × rate × latency, the latency a
    slow average of the first, unloaded calls) ended slow start at 4 with the bucket full
    for the first ~110 calls of a 400-call job. The ceiling is lifted by what the budget
    would lose over the next latency — no further: lifted whole, slow start's burst spent the
    bucket (draw 83) — and follows the budget down as the lift spends it."""
    s = Script(LLMLimit(initial=4, window_samples=4))
    lim = s.limit
    lim.set_rate_ceiling(1.0)  # sustained: 2 × 1/s × 2 s = 4
    lim.set_rate_budget(100.0, demand=256)  # far from twice the work in sight: not lifted
    assert s.window(2.0) == 4 and lim.ceiling == 4
    # the bucket is full: 2 calls' worth of refill would spill over the next latency
    lim.set_rate_budget(100.0, demand=256, spilled=2.0)
    assert lim.ceiling == 6  # the limit plus the spill
    assert s.window(2.0) == 6
    lim.set_rate_budget(98.0, demand=256, spilled=2.0)  # still spilling: lifted again
    assert lim.ceiling == 8
    s.window(2.0)
    assert lim.center == 8.0  # pinned at the ceiling: it follows the lift up
    # the lifted limit spends the bucket: the ceiling follows what it funds over a latency
    lim.set_rate_budget(3.0, demand=256)
    assert (lim.ceiling, lim.limit) == (5, 5)
    lim.set_rate_budget(0.0, demand=256)  # spent: the sustained ceiling
    assert (lim.ceiling, lim.limit) == (4, 4)
    lim.set_rate_budget(100.0, demand=256)  # full again, not spilling: not lifted again
    assert lim.ceiling == 4
