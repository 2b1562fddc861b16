"""``concurrency="auto"`` short of goodput where a cold start reaches it (issue 31, round 16):
of the 24 family draws short of 95% of the best fixed limit's goodput only, 7 — the worst —
lose it after slow start lands below the plateau's edge on one noisy doubling, and probing's
±8% estimates never climb back in 400 calls (docs/adaptive.md, "Issue 31, round 16: goodput
within reach"). Virtual time, the family's draws, benchmarks/adaptive.py's job."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import adaptive
import pytest

from gptgate.sim import family, run_virtual

DRAW = 1037  # 5 replicas × 1 slot, gpu, an unbounded queue: 0.4-s calls, a 52-s job
BEST = 64  # the best fixed limit (the queue keeps the 5 slots busy); fixed 8 has 95% of it


@pytest.mark.xfail(
    strict=True,
    reason="slow start's 4 → 8 reads e = −0.85 (±0.32) where the grid scales, lands at 4 and "
    "probes 4/5 for the run: 77% of fixed 64's goodput (docs/adaptive.md, 'Issue 31, round 16')",
)
def test_auto_reaches_the_goodput_a_cold_start_can_on_a_five_slot_server() -> None:
    server = family(DRAW)
    best = run_virtual(adaptive.run_row, server, BEST, 400, DRAW, None, None, 3600.0)
    auto = run_virtual(adaptive.run_row, server, None, 400, DRAW, None, None, 3600.0)
    # the oracle ramp to fixed 8 reaches 97.3% of fixed 64's goodput
    assert auto.goodput >= 0.95 * best.goodput
