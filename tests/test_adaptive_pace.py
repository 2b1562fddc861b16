"""``concurrency="auto"``'s slow start on a batched decoder with a plateau (issue 31, round 12):
where the goodput a cold start loses goes — the pace of its doublings, or where it stops.
Family draw 53 (1 × 60 slots, unbounded queue, a 400-call job): the best fixed limit is 32,
and ``auto`` doubles to 128 and lands at 64 (77.9% of fixed 32's goodput). Ramps that double
after ``k`` answers of their level's calls and stop at 32 separate the two
(benchmarks/slow_start_pace.py; docs/adaptive.md, "Issue 31, round 12"). Virtual time, ~1 s of
CPU a run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive
import pytest
from slow_start_pace import PACES, PacedRamp

from gptgate.sim import family, run_virtual

DRAW = 53
BEST_FIXED = 32


def _goodput(limit: int | None, ramp: PacedRamp | None = None) -> float:
    server = family(DRAW)
    return run_virtual(
        adaptive.run_row, server, limit, 400, DRAW, None, None, 3600.0, ramp
    ).goodput


def test_a_ramp_stopped_at_the_best_level_needs_a_pace_of_its_bursts_median() -> None:
    # The bound the xfail below is judged against, split in two: stopped exactly at 32, a ramp
    # doubling when half of each doubling's burst has answered (a quarter of the level) reaches
    # 96.8% of fixed 32's goodput; at slow start's own window pace (min(16, L) or L/2 answers)
    # 93.2%; and stopped at 64, where `auto`'s landing is, ~82% at either pace
    fixed = _goodput(BEST_FIXED)
    median = _goodput(BEST_FIXED, PacedRamp(BEST_FIXED, PACES["burst's median"]))
    window = _goodput(BEST_FIXED, PacedRamp(BEST_FIXED, PACES["slow start's window"]))
    past = _goodput(64, PacedRamp(64, PACES["burst's median"]))
    assert median >= 0.95 * fixed > window, (median, window, fixed)
    assert past < 0.9 * fixed, (past, fixed)


@pytest.mark.xfail(
    strict=True,
    reason="the pace needs a doubling per burst median, where the doubling's e reads ±0.5, and "
    "the stop at 32 has no first-latency signal: 32 -> 64 reads e = 0.83 (window), 0.55 (burst "
    "median) where the fixed grid gives -0.23 (docs/adaptive.md, Issue 31, round 12)",
)
def test_auto_reaches_the_plateau_in_time_on_a_batched_decoder() -> None:
    # slow start's windows last 0.96-1.68 of their own calls' median latency (4.3, 3.8, 6.5,
    # 6.4, 8.4 s for 4 ... 64) and reach 32 after 14.6 s (the oracle ramp: 4.8 s); 32 -> 64
    # reads 0.83, so it doubles on to 128 and lands at 64
    assert _goodput(None) >= 0.95 * _goodput(BEST_FIXED)
