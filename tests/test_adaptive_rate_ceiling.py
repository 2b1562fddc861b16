"""``concurrency="auto"`` under an RPM limit whose bucket covers most of the job (issue 31,
round 11: "the rate ceiling's first window"). The limit's rate ceiling is ``2 × pace ×
latency`` calls in flight; with the pace at the refill alone and the latency a slow average
led by the first, unloaded calls, slow start ended at 3 on servers with 8-72 slots and goodput
stayed capped near twice the refill while the bucket sat at 220-250 calls: the job ended with
~100 calls of budget unspent. Virtual time, one draw of the server family,
benchmarks/adaptive.py's job (~1-2 s of CPU per run)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive
import pytest

from gptgate.limits import LLMLimit
from gptgate.limits.base import Sample
from gptgate.limits.rate_ceiling import COVERED_SHARE, WINDOW_S, ceiling_pace
from gptgate.sim import family, run_virtual


def test_the_pace_spreads_a_bucket_covering_the_work_in_sight_over_a_window() -> None:
    # a full bucket (a minute's refill) doubles the pace; the refill alone once it is spent
    assert ceiling_pace(4.0, 240.0, 256) == pytest.approx(4.0 + 240.0 / WINDOW_S)
    assert ceiling_pace(4.0, 120.0, 100) == pytest.approx(4.0 + 120.0 / WINDOW_S)
    assert ceiling_pace(4.0, 1_000.0, 256) == 8.0  # never more than a window's refill
    assert ceiling_pace(4.0, 0.0, 256) == 4.0
    # a bucket short of COVERED_SHARE of the calls waiting or in flight: the work in sight
    # outlasts it whatever the pace, so a faster start only adds latency at the server
    assert ceiling_pace(4.0, COVERED_SHARE * 256 - 1.0, 256) == 4.0


def _window(limit: LLMLimit, start: float, latency: float, n: int) -> float:
    for _ in range(n):
        limit.update(Sample(start, latency, limit.limit, "ok", output_tokens=100), start + latency)
    return start + latency + 100.0


def test_slow_start_sizes_the_rate_ceiling_by_each_levels_latency() -> None:
    # 4 calls/s, a bucket of 100 calls for 100 calls in sight: pace 4 + 100/60 calls/s. The
    # first calls answer in 0.5 s (ceiling 2 × 5.67 × 0.5 = 6), the next level's in 0.6 s: the
    # ceiling follows that level's latency at once (7) and slow start doubles on. Sized by a
    # slow average led by the first calls' latency it stayed at 6, and slow start ended there
    limit = LLMLimit(initial=4, window_samples=4, max_limit=128)
    limit.set_rate_ceiling(4.0)
    limit.set_rate_budget(100.0, demand=100)
    t = _window(limit, 0.0, 0.5, 4)
    assert limit.ceiling == 6
    assert limit.in_slow_start and limit.limit == 6  # the doubling, clamped to the ceiling
    _window(limit, t, 0.6, 4)
    assert limit.ceiling == 7
    assert limit.in_slow_start and limit.limit == 7
    # the same with a bucket short of 3/4 of the work in sight: the refill alone (2 × 4 × 0.6)
    limit.set_rate_budget(70.0, demand=100)
    assert limit.ceiling == 5


@pytest.mark.parametrize(
    ("draw", "fixed_limit"),
    [
        # 2 × 4 slots, 281 RPM (a 250-call bucket for 400 calls): main 74% of fixed 64's
        # goodput (10.94/s; fixed 16 10.91/s), dominated by fixed 8 (p99 0.61×)
        (83, 16),
        # 9 × 8 slots, 248 RPM: main 85% of fixed 72's 10.61/s (fixed 8 10.55/s)
        (1022, 8),
    ],
)
def test_auto_spends_a_bucket_that_covers_most_of_the_job(draw: int, fixed_limit: int) -> None:
    server = family(draw)
    assert server.rpm is not None
    fixed = run_virtual(adaptive.run_row, server, fixed_limit, 400, draw, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, draw, None, None, 3600.0)
    assert auto.failed == 0 and auto.rate_limited == 0
    assert auto.goodput >= 0.95 * fixed.goodput, (auto.goodput, fixed.goodput)
    assert fixed.p99_s > 0.8 * auto.p99_s, (fixed.p99_s, auto.p99_s)  # not dominated by it


def test_a_rate_bound_job_keeps_the_sustained_ceiling() -> None:
    # family draw 1018: 2 × 12 slots, 367k TPM, a 147-call bucket for 400 calls (under 3/4 of
    # the 256 in sight): every fixed limit from 8 on ends at the same time, so the lowest p99
    # wins. Spread over the window regardless, the bucket lifted auto to 13-16 in flight and
    # its p99 to 5.7 s (fixed 8: 3.62 s, dominated)
    server = family(1018)
    fixed = run_virtual(adaptive.run_row, server, 8, 400, 1018, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, 1018, None, None, 3600.0)
    assert auto.goodput >= 0.95 * fixed.goodput, (auto.goodput, fixed.goodput)
    assert fixed.p99_s > 0.8 * auto.p99_s, (fixed.p99_s, auto.p99_s)


def test_with_the_jobs_length_known_the_bucket_is_spread_while_it_funds_half_of_it() -> None:
    # 4 calls/s refill: a 233-call bucket for the 400 calls left of a job funds more than half
    # of them, so it is spread at twice the refill whatever the share of the job in sight
    # (here under 3/4 of the 256 calls gate.map keeps waiting or in flight)
    assert ceiling_pace(4.0, 180.0, 256) == 4.0  # the job's length unknown: the share rules
    assert ceiling_pace(4.0, 180.0, 256, job=300) == 8.0
    # funding half the job or less: the sustained ceiling's headroom (2x the refill) already
    # spends it by the job's end: as without the length (draw 1018, a rate-bound job)
    assert ceiling_pace(4.0, 147.0, 256, job=400) == 4.0
    assert ceiling_pace(4.0, 240.0, 256, job=480) == pytest.approx(4.0 + 240.0 / WINDOW_S)
    # funding all of it: the budget's own ceiling and spill rules, as without the length
    assert ceiling_pace(4.0, 120.0, 100, job=100) == pytest.approx(4.0 + 120.0 / WINDOW_S)


def test_auto_spends_the_bucket_before_a_short_job_ends() -> None:
    # family draw 1029: 16 × 32 slots, 261 RPM, a 233-call bucket: fixed 16 spends it all and
    # ends at 34 s; auto ended at 45 s with ~50 calls of it left (76% of fixed 16's goodput):
    # its bucket covered 3/4 of the work in sight only part of the time, and the pace fell to
    # the refill whenever it did not. gate.map over a list tells the limit the job's length
    # (gptgate/map_demand.py), so the bucket is spread while it funds over half of what is left
    server = family(1029)
    fixed = run_virtual(adaptive.run_row, server, 16, 400, 1029, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, 1029, None, None, 3600.0)
    assert auto.goodput >= 0.95 * fixed.goodput, (auto.goodput, fixed.goodput)
